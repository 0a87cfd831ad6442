// src/cuda/runtime.cu compiled as C++ against the CPU emulation (cuda_runtime.h in this folder).
#include "cuda/runtime.cu"
