// Reference back-end of op 4 (sparse MLA prefill): the oracle of the golden matrix.
#pragma once

#include <cstdint>

#include "mlakit/ops/sparse_mla_prefill.hpp"

namespace mlakit::reference {

// Exact decode, f64 scores / softmax / P·V, one rounding to bf16 (output) and f32 (lse).
// Called only after validation.
void sparse_mla_prefill(const SparseMlaPrefillDesc& desc, const SparseMlaPrefillArgs& args);

// f64 -> bf16 rounded once (nearest, ties to even; NaN stays NaN).
std::uint16_t bf16_from_f64(double x);

}  // namespace mlakit::reference
