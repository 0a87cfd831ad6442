// A second formulation of the MSA block indexer for the golden matrix.
#pragma once

#include "goldens/common/tensor.hpp"

namespace mlakit::testing {

// Fills out.out_idxs of `b` from its inputs and params: per sequence and head a dense masked
// score matrix (q and K dequantized to f64 matrices, one matmul), block maxima by folding the
// key axis into [blocks, block_size], forced values, then a full stable sort of every row.
void msa_block_indexer_oracle(goldens::Bundle& b);

}  // namespace mlakit::testing
