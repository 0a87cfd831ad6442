# The CUDA back-end is built when nvcc is found (and MLAKIT_ENABLE_CUDA is on).
# Without a GPU at run time the back-end reports itself unavailable.
set(MLAKIT_HAVE_CUDA OFF)
if(MLAKIT_ENABLE_CUDA)
  include(CheckLanguage)
  check_language(CUDA)
  file(GLOB MLAKIT_CUDA_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/src/cuda/*.cu)
  if(CMAKE_CUDA_COMPILER AND MLAKIT_CUDA_SOURCES)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90a)
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    # CMake 3.25 does not know C++20 for nvcc 13; the shared headers are C++17-clean.
    set(CMAKE_CUDA_STANDARD 17)
    add_library(mlakit_cuda OBJECT ${MLAKIT_CUDA_SOURCES})
    target_include_directories(mlakit_cuda PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/include ${CMAKE_CURRENT_SOURCE_DIR}/src)
    target_compile_options(mlakit_cuda PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -Xcompiler=-Wall>)
    if(MLAKIT_WERROR)
      # Local memory (spills, or a register array indexed at run time) is an error: the kernels keep
      # their accumulators in registers, and a path that loses that runs far slower on a GPU while
      # every test without one still passes.
      target_compile_options(mlakit_cuda PRIVATE
        $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wextra,-Werror --Werror=all-warnings -Xptxas=-warn-lmem-usage,-warn-spills>)
    endif()
    # The warpgroup (wgmma) kernels exist only in sm_90a code: the host may take them only then.
    if("90a" IN_LIST CMAKE_CUDA_ARCHITECTURES)
      target_compile_definitions(mlakit_cuda PRIVATE MLAKIT_CUDA_SM90A=1)
    endif()
    target_link_libraries(mlakit_cuda PRIVATE CUDA::cudart_static)
    set(MLAKIT_HAVE_CUDA ON)
  endif()
endif()
message(STATUS "mlakit: CUDA back-end ${MLAKIT_HAVE_CUDA}")
