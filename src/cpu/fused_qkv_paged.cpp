#include "cpu/fused_qkv_paged.hpp"

namespace mlakit::cpu {

Status fused_qkv_paged(const FusedQkvPagedDesc&, const FusedQkvPagedArgs&) {
  return Status::error(StatusCode::unsupported, "fused_qkv_paged", "backend",
                       "fused_qkv_paged: the cpu back-end has no kernel for this operator yet");
}

}  // namespace mlakit::cpu
