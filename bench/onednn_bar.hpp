// oneDNN's bf16 matmul as the second library bar of the operator rows (`pct_of_onednn`), on the
// GEMMs of bench/library_bar.hpp: bf16 activations and weights, f32 output, the weights reordered
// once into oneDNN's own layout outside the timing (as a persistent pack would keep them), so the
// bar is the library at its best on the CPU at hand (AMX tiles, avx512_bf16 or below). On a CPU
// for which oneDNN has no bf16 matmul (AVX2 only, in 2.x) the bar is its f32 matmul of the same
// shapes, and the context line says so. Built in where CMake finds oneDNN (libdnnl-dev); elsewhere
// nothing is reported.
#pragma once

#include <optional>
#include <string>

#include "bench/library_bar.hpp"
#include "goldens/common/tensor.hpp"

namespace mlakit::bench {

// oneDNN's bf16 matmuls of bundle b's call on `threads` threads, made ready, or nothing.
std::optional<BarRound> onednn_bar(const std::string& op, const goldens::Bundle& b, int threads);
// "oneDNN 2.6.3 (OpenMP)", or why there is none.
std::string onednn_description();

}  // namespace mlakit::bench
