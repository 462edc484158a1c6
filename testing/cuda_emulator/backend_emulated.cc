// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// cuda/backend.cu compiled as C++ for the CUDA emulator (the source is used unchanged). nvcc
// includes <cuda_runtime.h> before any .cu; so does this file, the emulator's.

#include <cuda_runtime.h>

#include "cuda/backend.cu"
