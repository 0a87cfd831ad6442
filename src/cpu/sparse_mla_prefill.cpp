#include "cpu/sparse_mla_prefill.hpp"

namespace mlakit::cpu {

Status sparse_mla_prefill(const SparseMlaPrefillDesc&, const SparseMlaPrefillArgs&) {
  return Status::error(StatusCode::unsupported, "sparse_mla_prefill", "backend",
                       "sparse_mla_prefill: the cpu back-end has no kernel for this operator yet");
}

}  // namespace mlakit::cpu
