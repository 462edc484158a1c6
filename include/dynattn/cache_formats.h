// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The cache formats, listed once. `CacheElem`, its names, the dispatch table's rows (CPU and
// CUDA) and the CPU kernel getters are all generated from this list, so adding a format is one
// row here, its codec (core/codec.h) and its kernel translation unit (cpu/kernels_<tag>.cc).
//
//   X(Elem, Tag, name, row, CSuffix)
//     Elem     the CacheElem enumerator
//     Tag      the suffix of the format's identifiers (CpuKernels<Tag>, KernelTable<Tag>)
//     name     CacheElemName(): the dtype's name as PyTorch and NumPy spell it
//     row      the dispatch row's suffix ("cpu/<row>", "cuda/<row>")
//     CSuffix  the C enumerator's suffix (DYNATTN_CACHE_ELEM_<CSuffix>, dynattn/c_api.h)
//
//   kF32     fp32 values (quant_bit 0)
//   kF16     fp16 values (quant_bit 0)
//   kInt8    int8 in [-127, 127], one scale per group (quant_bit 8)
//   kInt4    two's-complement nibbles, element 2k in the low nibble (quant_bit 4)
//   kBF16    bfloat16 values (quant_bit 0)
//   kF8E4M3  float8_e4m3fn bytes times the plane's `tensor_scale` (quant_bit 0)
//   kF8E5M2  float8_e5m2 bytes times the plane's `tensor_scale` (quant_bit 0)

#ifndef DYNATTN_CACHE_FORMATS_H_
#define DYNATTN_CACHE_FORMATS_H_

#define DYNATTN_CACHE_FORMATS(X)                          \
  X(kF32, F32, "float32", "f32", F32)                     \
  X(kF16, F16, "float16", "f16", F16)                     \
  X(kInt8, Int8, "int8", "int8", I8)                      \
  X(kInt4, Int4, "int4", "int4", I4)                      \
  X(kBF16, BF16, "bfloat16", "bf16", BF16)                \
  X(kF8E4M3, F8E4M3, "float8_e4m3fn", "fp8_e4m3", F8E4M3) \
  X(kF8E5M2, F8E5M2, "float8_e5m2", "fp8_e5m2", F8E5M2)

#endif  // DYNATTN_CACHE_FORMATS_H_
