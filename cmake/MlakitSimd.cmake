# One object library per ISA level. Only these files get -m flags; the code that
# calls into them picks a level at run time from CPUID (src/core/common/cpu_features.cpp).
set(MLAKIT_SIMD_FLAGS_generic "")
set(MLAKIT_SIMD_FLAGS_avx2 -mavx2 -mfma -mf16c -mbmi2)
set(MLAKIT_SIMD_FLAGS_avx512 -mavx2 -mfma -mf16c -mbmi2 -mavx512f -mavx512bw -mavx512vl -mavx512dq)
set(MLAKIT_SIMD_FLAGS_avx512bf16 ${MLAKIT_SIMD_FLAGS_avx512} -mavx512bf16 -mavx512vbmi -mavx512vnni)
set(MLAKIT_SIMD_FLAGS_amx ${MLAKIT_SIMD_FLAGS_avx512bf16} -mamx-tile -mamx-bf16 -mamx-int8)

# Extra options for the kernel objects only. scripts/sanitize.sh --ci compiles them without the
# sanitizers (-fno-sanitize=all): its part of CI is about input handling, and instrumenting the
# kernel templates costs more build time than the rest of its build (the full scripts/sanitize.sh
# instruments them).
set(MLAKIT_SIMD_EXTRA_OPTIONS "" CACHE STRING "extra compile options of the simd/ kernel objects")

set(MLAKIT_SIMD_LIBS "")
foreach(level generic avx2 avx512 avx512bf16 amx)
  file(GLOB simd_sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/simd/${level}/*.cpp)
  if(simd_sources)
    add_library(mlakit_simd_${level} OBJECT ${simd_sources})
    target_include_directories(mlakit_simd_${level} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/include ${CMAKE_CURRENT_SOURCE_DIR})
    target_compile_options(mlakit_simd_${level} PRIVATE ${MLAKIT_WARNINGS} ${MLAKIT_SIMD_FLAGS_${level}}
                           ${MLAKIT_SIMD_EXTRA_OPTIONS})
    target_compile_definitions(mlakit_simd_${level} PRIVATE MLAKIT_SIMD_LEVEL_${level}=1)
    list(APPEND MLAKIT_SIMD_LIBS mlakit_simd_${level})
  endif()
endforeach()
