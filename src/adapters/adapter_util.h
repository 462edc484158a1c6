// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Shared pieces of the cache and metadata adapters (dynattn/adapters.h). Why a separate file:
// every engine layout reduces to the same two things, checked the same way: int32/int64 index
// tensors read as int64, and a "row layout" (where each (block, token, head) row of D elements
// sits) turned into a BlockCache.

#ifndef DYNATTN_SRC_ADAPTERS_ADAPTER_UTIL_H_
#define DYNATTN_SRC_ADAPTERS_ADAPTER_UTIL_H_

#include <cstdint>
#include <string>

#include "dynattn/adapters.h"
#include "src/validate.h"

namespace dynattn {
namespace adapters_internal {

using internal::CheckOffsets;
using internal::IndexAt;
using internal::ShapeString;

/// Decimal text of `v`.
std::string Str(int64_t v);

/// An int32/int64, dense, CPU tensor of rank `rank` (each `shape` entry -1 = any extent).
Status CheckIndexTensor(const char* name, const TensorView& t, int rank, const int64_t* shape);

/// Checks quant_bit / quant_group against `head_dim` (internal::CheckQuantization).
Status CheckFormat(const CacheFormat& f, int64_t head_dim);
/// A present, dense cache data tensor of `rank` whose dtype fits `f`.
Status CheckDataTensor(const char* name, const TensorView& t, const CacheFormat& f, int rank);
/// Head dim of a checked data tensor (twice its last dim for int4).
int64_t HeadDimOf(const TensorView& data, const CacheFormat& f);
/// The scale tensor of `data`: absent iff unquantized, else fp16/fp32 with data's shape but last
/// dim head_dim / quant_group.
Status CheckScaleTensor(const char* name, const TensorView& scale, const TensorView& data,
                        const CacheFormat& f, int64_t head_dim);

/// Where rows of one (block, token, head) live, in rows (of D elements, or D / G scales) from the
/// base of each plane's tensor.
struct RowLayout {
  int64_t key_offset = 0;    ///< Rows from the key tensor base to row (0, 0, 0).
  int64_t value_offset = 0;  ///< Rows from the value tensor base to row (0, 0, 0).
  int64_t block = 0;         ///< Rows between consecutive blocks.
  int64_t token = 0;         ///< Rows between consecutive tokens of a block.
  int64_t head = 0;          ///< Rows between consecutive KV heads.
};

/// The tensors a block cache points into (scales null when unquantized).
struct PlaneTensors {
  const TensorView* key = nullptr;
  const TensorView* value = nullptr;
  const TensorView* key_scale = nullptr;
  const TensorView* value_scale = nullptr;
};

/// Fills `out` from a checked layout; block_stride = layout.block / layout.token slots and
/// num_slots = (num_blocks - 1) * block_stride + block_size, so every valid (slot, head) stays
/// inside the tensors.
void FillBlockCache(const RowLayout& layout, const PlaneTensors& t, const CacheFormat& f,
                    int num_kv_heads, int64_t head_dim, int64_t head_dim_v, int block_size,
                    int64_t num_blocks, BlockCache* out);

}  // namespace adapters_internal
}  // namespace dynattn

#endif  // DYNATTN_SRC_ADAPTERS_ADAPTER_UTIL_H_
