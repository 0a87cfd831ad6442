// Second formulation of op 4 for the golden matrix's oracle check.
#pragma once

#include "goldens/common/tensor.hpp"

namespace mlakit::oracle {

// Dense formulation: per query row, the valid cache rows are gathered into a dense f64 matrix
// K [n, qk_depth]; S = scale · Q·Kᵀ for all heads as one matrix product; the sink (if any) is an
// extra logit column of S whose softmax weight is dropped; O = P·V with V = K[:, :v_depth]; lse is
// the log-sum-exp of S's valid columns, max_logits their maximum. Fills out.output (and out.lse,
// out.max_logits when asked) of b.
void sparse_mla_prefill(goldens::Bundle& b, bool with_lse, bool with_max_logits);

}  // namespace mlakit::oracle
