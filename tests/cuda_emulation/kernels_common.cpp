// src/cuda/common.cu compiled as C++ against the CPU emulation (cuda_runtime.h in this folder).
#include "cuda/common.cu"
