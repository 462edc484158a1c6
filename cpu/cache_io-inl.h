// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Kernel family: the two KeyValueCache steps: quantize and store new tokens, and gather context
// rows back into activations (repeated num_repeat times per KV head).
//
// Why it looks like this: both are per-row codec calls (codec-inl.h), so the cache format has one
// definition; parallelism comes from src/cpu_backend.cc handing out chunks of rows.

#if defined(DYNATTN_CPU_CACHE_IO_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef DYNATTN_CPU_CACHE_IO_INL_H_
#undef DYNATTN_CPU_CACHE_IO_INL_H_
#else
#define DYNATTN_CPU_CACHE_IO_INL_H_
#endif

#include <algorithm>
#include <vector>

#include "cpu/codec-inl.h"
#include "cpu/kernel_table.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace dynattn {
namespace HWY_NAMESPACE {

/// The write kernel's scratch: a row's values, its group scales and its codes.
HWY_INLINE std::array<size_t, 3> WriteScratch(int dim) {
  const size_t floats = static_cast<size_t>(dim);
  return {floats, floats, (floats + 3) / 4};
}

/// The gather kernel's scratch: a decoded row and its group scales (plus one slack float).
HWY_INLINE size_t GatherScratchFloats(int dim) { return 2 * static_cast<size_t>(dim) + 1; }

/// Scratch floats write_tokens and gather_rows need for rows of `dim`.
HWY_INLINE size_t IoScratchFloats(int dim) {
  return std::max(internal::Scratch::CarvedFloats(WriteScratch(dim)), GatherScratchFloats(dim));
}

template <CacheElem kElem>
void WriteTokens(const internal::WriteProblem& p, int64_t token_begin, int64_t token_end,
                 internal::Scratch* scratch) {
  const CacheDesc& cache = p.kv.cache;
  const CacheDesc value_rows = internal::ValueView(cache);  // head_dim: the value rows' size
  const size_t size = p.io_type == DType::kF32 ? 4 : 2;
  const auto [values, scales, code_space] =
      scratch->Carve(WriteScratch(std::max(cache.head_dim, value_rows.head_dim)));
  int8_t* codes = reinterpret_cast<int8_t*>(code_space);
  for (int64_t t = token_begin; t < token_end; ++t) {
    const int64_t b = internal::OwnerOfRow(p.batch.seqstarts, p.batch.size, t);
    const int64_t position = p.batch.WriteKeyNumber(b, t - p.batch.seqstarts[b]);
    if (position < 0) continue;  // another context shard holds this new token
    const int64_t slot = p.kv.slots.Slot(b, position);
    for (int h = 0; h < cache.num_kv_heads; ++h) {
      LoadActivations(static_cast<const char*>(p.current_key) + p.SourceOffset(0, t, h) * size,
                      p.io_type, cache.head_dim, values);
      EncodeRow<kElem>(cache, p.io_type == DType::kF16, cache.key, slot, h, values, codes, scales);
      if (p.current_value == nullptr) continue;  // values read from the keys (value_from_key)
      LoadActivations(static_cast<const char*>(p.current_value) + p.SourceOffset(1, t, h) * size,
                      p.io_type, value_rows.head_dim, values);
      EncodeRow<kElem>(value_rows, p.io_type == DType::kF16, cache.value, slot, h, values, codes,
                       scales);
    }
  }
}

template <CacheElem kElem>
void GatherRows(const internal::GatherProblem& p, int64_t b, int64_t pos_begin, int64_t pos_end,
                internal::Scratch* scratch) {
  const CacheDesc rows_of[2] = {p.kv.cache, internal::ValueView(p.kv.cache)};
  const int longer = std::max(rows_of[0].head_dim, rows_of[1].head_dim);
  const RowCodec codecs[2] = {RowCodec::For(rows_of[0], p.io_type),
                              RowCodec::For(rows_of[1], p.io_type)};
  float* row = scratch->Reserve(GatherScratchFloats(longer));
  float* scales = row + longer;
  const size_t size = p.io_type == DType::kF32 ? 4 : 2;
  for (int64_t pos = pos_begin; pos < pos_end; ++pos) {
    const int64_t slot = p.kv.slots.Slot(b, pos);
    const int64_t out_row = p.batch.kvstarts[b] + pos;
    for (int plane = 0; plane < 2; ++plane) {
      const CacheDesc& cache = rows_of[plane];
      const int dim = cache.head_dim;
      const CachePlane& source = plane == 0 ? cache.key : cache.value;
      char* out = static_cast<char*>(plane == 0 ? p.key : p.value);
      for (int h = 0; h < cache.num_kv_heads; ++h) {
        DecodeRow<kElem>(cache, codecs[plane], source, slot, h, row, scales);
        for (int r = 0; r < p.num_repeat; ++r) {
          const int64_t offset = p.OutputOffset(plane, out_row, h * p.num_repeat + r);
          StoreActivations(row, p.io_type, dim, out + offset * size);
        }
      }
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace dynattn
HWY_AFTER_NAMESPACE();

#endif  // DYNATTN_CPU_CACHE_IO_INL_H_
