// cpu back-end of op 4 (sparse MLA prefill). Called only after validation.
#pragma once

#include "mlakit/ops/sparse_mla_prefill.hpp"

namespace mlakit::cpu {

Status sparse_mla_prefill(const SparseMlaPrefillDesc& desc, const SparseMlaPrefillArgs& args);

}  // namespace mlakit::cpu
