// src/cuda/sparse_mla_ring.cu compiled as C++ against the CPU emulation (cuda_runtime.h in this folder).
#include "cuda/sparse_mla_ring.cu"
