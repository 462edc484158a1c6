// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// DYNATTN_HD marks the functions of core/ that the CPU library and the CUDA kernels both call:
// `__host__ __device__` under nvcc, plain `inline` for every other compiler (the CPU build, and
// the CUDA emulator, which compiles cuda/ as ordinary C++). core/ is plain data and arithmetic:
// no std:: algorithms or containers in these functions, since nvcc compiles them for the device.

#ifndef DYNATTN_CORE_HOST_DEVICE_H_
#define DYNATTN_CORE_HOST_DEVICE_H_

#ifdef __CUDACC__
#define DYNATTN_HD __host__ __device__ __forceinline__
#else
#define DYNATTN_HD inline
#endif

#endif  // DYNATTN_CORE_HOST_DEVICE_H_
