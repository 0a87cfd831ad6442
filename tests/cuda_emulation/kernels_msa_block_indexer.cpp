// src/cuda/msa_block_indexer.cu compiled as C++ against the CPU emulation (cuda_runtime.h in this folder).
#include "cuda/msa_block_indexer.cu"
