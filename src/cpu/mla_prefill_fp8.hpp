// cpu back-end of mla_prefill_fp8 (spec 03). Arguments are validated by the caller.
#pragma once

#include "mlakit/ops/mla_prefill_fp8.hpp"

namespace mlakit::cpu {

Status mla_prefill_fp8(const MlaPrefillFp8Desc& desc, const MlaPrefillFp8Args& args);

}  // namespace mlakit::cpu
