// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Reader and writer for NumPy .npy files, the exchange format of the `dynattn` tool: every test
// harness and notebook can produce and check them without a custom decoder. Only the dtypes the
// ops take are accepted, so a file in any other dtype fails loudly instead of being reinterpreted.

#ifndef DYNATTN_TOOLS_NPY_H_
#define DYNATTN_TOOLS_NPY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "dynattn/status.h"
#include "dynattn/types.h"

namespace dynattn::cli {

/// The DType a uint8 ('|u1') file is read as until its fp8 format is known (see
/// NpyArray::fp8_bytes).
inline constexpr DType kFp8BytesDType = DType::kF8E4M3;

/// A dense, C-ordered array held in memory, as read from (or to be written to) a .npy file.
struct NpyArray {
  DType dtype = DType::kF32;
  /// Read from a uint8 file: fp8 bytes whose format the file cannot say. `dtype` is then
  /// kFp8BytesDType until the reader names the format (the `run` command's --cache_dtype).
  bool fp8_bytes = false;
  std::vector<int64_t> shape;  ///< Rank 0..kMaxRank; empty for a 0-d scalar.
  std::vector<uint8_t> bytes;  ///< NumElements() * DTypeSize(dtype) bytes, little-endian.

  /// Product of the extents (1 for a 0-d array).
  int64_t NumElements() const;
  /// A dense row-major view of `bytes`; the library may write through it.
  TensorView View();
};

/// `a * b` for extents >= 0, or INT64_MAX when it does not fit: a size that is too large is
/// refused as such, never wrapped into a small one.
inline int64_t SaturatingMul(int64_t a, int64_t b) {
  int64_t product = 0;
  return __builtin_mul_overflow(a, b, &product) ? INT64_MAX : product;
}

/// The element count of `shape` (1 for a 0-d array), or -1 when an extent is negative or the
/// count does not fit in int64. A zero extent gives 0 whatever the others are.
int64_t ElementCount(const std::vector<int64_t>& shape);

/// A zero-filled array of the given dtype and shape.
NpyArray MakeZeroArray(DType dtype, const std::vector<int64_t>& shape);

/// Reads a .npy file (format 1.0, 2.0 or 3.0; C order; rank 0..6; dtypes '<f4', '<f2', '|i1',
/// '<i8', '<u2' read as bfloat16 bit patterns, and '|u1' read as fp8 bytes with `fp8_bytes` set).
/// On failure the message reads "<path>: <problem>".
Status ReadNpy(const std::string& path, NpyArray* out);

/// Writes `data` (dense, C order, NumElements * DTypeSize bytes) as a format 1.0 .npy file with
/// the header NumPy itself writes; bfloat16 as '<u2' (bit patterns), fp8 as '|u1' (bytes). On
/// failure the message reads "<path>: <problem>".
Status WriteNpy(const std::string& path, DType dtype, const std::vector<int64_t>& shape,
                const void* data);

/// Writes `array` to `path` (see the overload above).
Status WriteNpy(const std::string& path, const NpyArray& array);

}  // namespace dynattn::cli

#endif  // DYNATTN_TOOLS_NPY_H_
