// cpu back-end of mla_prefill_fp8 (docs/mla_prefill_fp8.md). Arguments are validated by the caller.
#pragma once

#include "cpu/common/parallel.hpp"
#include "mlakit/ops/mla_prefill_fp8.hpp"

namespace mlakit::cpu {

Status mla_prefill_fp8(const MlaPrefillFp8Desc& desc, const MlaPrefillFp8Args& args);
// What mla_prefill_fp8() takes from call_buffer() for this call (a validated host call).
CallBufferSizes mla_prefill_fp8_call_buffers(const MlaPrefillFp8Desc& desc, const MlaPrefillFp8Args& args);

}  // namespace mlakit::cpu
