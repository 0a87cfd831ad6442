// Second formulation of op 1 for the golden matrix: dense score matrices and a full stable sort.
#pragma once

#include "goldens/common/tensor.hpp"

namespace mlakit::oracle {

// Fills out.output_indices of a lightning_indexer bundle from its inputs and params.
void lightning_indexer(goldens::Bundle& b);

}  // namespace mlakit::oracle
