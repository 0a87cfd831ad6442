// cpu back-end of mla_prefill_fp8 (spec 03). Arguments are validated by the caller.
#pragma once

#include "mlakit/ops/mla_prefill_fp8.hpp"

namespace mlakit::cpu {

// Returns StatusCode::unsupported, before writing anything, for calls it has no kernel for.
Status mla_prefill_fp8(const MlaPrefillFp8Desc& desc, const MlaPrefillFp8Args& args);

}  // namespace mlakit::cpu
