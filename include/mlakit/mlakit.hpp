// Umbrella header: the whole public API.
#pragma once

#include "mlakit/backend.hpp"
#include "mlakit/dtype.hpp"
#include "mlakit/ops/fused_qkv_paged.hpp"
#include "mlakit/ops/lightning_indexer.hpp"
#include "mlakit/ops/mla_prefill_fp8.hpp"
#include "mlakit/ops/msa_block_indexer.hpp"
#include "mlakit/ops/sparse_mla_prefill.hpp"
#include "mlakit/paged_kv_cache.hpp"
#include "mlakit/status.hpp"
#include "mlakit/tensor_view.hpp"
#include "mlakit/version.hpp"
