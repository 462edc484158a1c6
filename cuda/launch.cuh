// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The two CUDA constructs that plain C++ cannot spell, as macros: nvcc sees CUDA syntax, an
// emulated build (testing/cuda_emulator/cuda_runtime.h, which defines DYNATTN_CUDA_EMULATOR)
// sees the emulator's calls. Everything else in cuda/ is the same source in both builds.

#ifndef DYNATTN_CUDA_LAUNCH_CUH_
#define DYNATTN_CUDA_LAUNCH_CUH_

#include <cuda_runtime.h>

#ifdef DYNATTN_CUDA_EMULATOR
/// kernel<<<grid, block, shared_bytes, stream>>>, to be followed by the argument list. The
/// emulator runs every launch to completion in issue order, as one in-order stream would, so
/// the stream changes nothing there.
#define DYNATTN_LAUNCH(kernel, grid, block, shared_bytes, stream) \
  (static_cast<void>(stream), CUDA_EMU_LAUNCH(kernel, grid, block, shared_bytes))
/// The block's dynamic shared memory as `type name[]`, 16-byte aligned.
#define DYNATTN_DYNAMIC_SHARED(type, name) CUDA_EMU_DYNAMIC_SHARED(type, name)
#else
#define DYNATTN_LAUNCH(kernel, grid, block, shared_bytes, stream) \
  kernel<<<grid, block, shared_bytes, stream>>>
#define DYNATTN_DYNAMIC_SHARED(type, name) extern __shared__ __align__(16) type name[]
#endif

#endif  // DYNATTN_CUDA_LAUNCH_CUH_
