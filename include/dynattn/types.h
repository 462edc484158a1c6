// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Element types and the borrowed tensor view that every public entry point takes.

#ifndef DYNATTN_TYPES_H_
#define DYNATTN_TYPES_H_

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "dynattn/export.h"

namespace dynattn {

/// Element type of a tensor. Packed int4 caches are passed as `kI8` tensors whose last dimension
/// is `head_dim / 2` bytes (two two's-complement nibbles per byte, element 2k in the low nibble).
/// The fp8 types are cache formats only (one byte per element, read with a per-tensor scale).
enum class DType : uint8_t {
  kF32,     ///< IEEE binary32.
  kF16,     ///< IEEE binary16, stored as its 16-bit pattern.
  kI8,      ///< int8 (quantized caches; packed int4 caches).
  kI64,     ///< int64 (index tensors and scalars).
  kI32,     ///< int32 (engines' index tensors: every op and adapter accepts them for indices).
  kBF16,    ///< bfloat16, stored as its 16-bit pattern (activations and plain caches).
  kF8E4M3,  ///< OCP float8_e4m3fn (max 448, no infinities, NaN 0x7F/0xFF): fp8 caches.
  kF8E5M2,  ///< OCP float8_e5m2 (IEEE-like, max 57344, infinities): fp8 caches.
};

/// Bytes per element of `dtype`.
DYNATTN_EXPORT size_t DTypeSize(DType dtype);
/// "float32", "float16", "int8", "int64", "int32", "bfloat16", "float8_e4m3fn" or "float8_e5m2".
DYNATTN_EXPORT const char* DTypeName(DType dtype);

/// The numerics an attention call may use (docs/numerics.md, "Precision tiers").
enum class Precision : uint8_t {
  /// fp32 products and sums: the library's numerics contract and its bits (the default).
  kExact,
  /// Opt-in: Q.K and P.V may take bf16 products with fp32 sums, and int8/int4 keys integer dot
  /// products against a query quantized per (token, head), where a fast kernel serves the call
  /// (today: decode over int8 and int4 caches in groups of 32, 64, ..., on every CPU target, and
  /// over fp16 and bf16 caches on CPUs with AVX512_BF16);
  /// every other call runs the exact kernels (`Plan::precision()` says which). Within the fast
  /// tolerance of the float64 reference, and as deterministic as the exact tier.
  kFast,
};
/// "exact" or "fast".
DYNATTN_EXPORT const char* PrecisionName(Precision precision);

/// Where a tensor's memory lives; the backend of a call follows its tensors.
enum class Device : uint8_t { kCpu, kCuda };
/// "CPU" or "CUDA".
DYNATTN_EXPORT const char* DeviceName(Device device);

/// Largest rank a `TensorView` holds (PMX caches are rank 5).
inline constexpr int kMaxRank = 6;

/// A borrowed, typed view of memory: pointer, element type, shape and strides in elements.
///
/// Never owns its memory. A default-constructed view is *absent* (`rank == -1`), which is how an
/// optional input is left out. A present view may have zero elements (and a null `data`).
/// Op tensors are dense row-major (`strides` as `Dense` makes them), except that the activations
/// `query`, `current_key`, `current_value`, `key`, `value` and `attn_output` may be row-strided
/// (`IsRowStrided`): each token's heads dense, tokens any distance apart, as column slices of a
/// fused QKV projection are. The validator names a tensor whose strides it refuses.
struct DYNATTN_EXPORT TensorView {
  void* data = nullptr;            ///< First element; may be null when `NumElements() == 0`.
  DType dtype = DType::kF32;       ///< Element type.
  int rank = -1;                   ///< Number of dimensions; -1 = absent, 0 = scalar.
  int64_t shape[kMaxRank] = {};    ///< Extent of each dimension, outermost first.
  int64_t strides[kMaxRank] = {};  ///< Distance in elements between neighbours in each dimension.
  Device device = Device::kCpu;    ///< Memory space of `data`.

  /// A dense row-major view of `data` with the given shape.
  static TensorView Dense(const void* data, DType dtype, std::initializer_list<int64_t> shape,
                          Device device = Device::kCpu);
  /// A dense row-major view from a shape array of `rank` entries.
  static TensorView Dense(const void* data, DType dtype, int rank, const int64_t* shape,
                          Device device = Device::kCpu);

  /// True unless this view was left absent.
  bool present() const { return rank >= 0; }
  /// Product of the extents: 1 for a scalar; 0 when absent, when an extent is <= 0 or when the
  /// rank exceeds kMaxRank; INT64_MAX when the product does not fit.
  int64_t NumElements() const;
  /// True when the strides are those of a dense row-major array of this shape.
  bool IsDense() const;
  /// True when every dimension but the first is dense row-major and rows (the first dimension)
  /// lie at least a dense row apart: `strides[0] >= shape[1] * ... * shape[rank - 1]`. Dense
  /// views are row-strided.
  bool IsRowStrided() const;
  /// Size in bytes of the dense array (`NumElements() * DTypeSize(dtype)`).
  size_t NumBytes() const {
    const size_t elements = static_cast<size_t>(NumElements());
    return elements > SIZE_MAX / 8 ? SIZE_MAX : elements * DTypeSize(dtype);
  }
  /// Typed pointer to the first element.
  template <typename T>
  T* As() const {
    return static_cast<T*>(data);
  }
};

}  // namespace dynattn

#endif  // DYNATTN_TYPES_H_
