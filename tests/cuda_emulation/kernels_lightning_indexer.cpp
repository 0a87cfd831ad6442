// src/cuda/lightning_indexer.cu compiled as C++ against the CPU emulation (cuda_runtime.h in this folder).
#include "cuda/lightning_indexer.cu"
