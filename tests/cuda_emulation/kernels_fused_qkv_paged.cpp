// src/cuda/fused_qkv_paged.cu compiled as C++ against the CPU emulation (cuda_runtime.h in this folder).
#include "cuda/fused_qkv_paged.cu"
