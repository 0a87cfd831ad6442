#include "cpu/mla_prefill_fp8.hpp"

namespace mlakit::cpu {

Status mla_prefill_fp8(const MlaPrefillFp8Desc&, const MlaPrefillFp8Args&) {
  return Status::error(StatusCode::unsupported, "mla_prefill_fp8", "backend",
                       "mla_prefill_fp8: the cpu back-end has no kernel for this operator yet");
}

}  // namespace mlakit::cpu
