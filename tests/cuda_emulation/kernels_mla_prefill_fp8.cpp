// src/cuda/mla_prefill_fp8.cu compiled as C++ against the CPU emulation (cuda_runtime.h in this folder).
#include "cuda/mla_prefill_fp8.cu"
