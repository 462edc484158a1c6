// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The KV-cache descriptor: what the kernels see of any cache, whatever its layout.
//
// A cache stores, per token slot and KV head, `head_dim` keys and `head_dim_v` values (by default
// `head_dim` too), each either
// plain (fp32, fp16) or quantized (int8, int4) with one scale per group of `quant_group`
// consecutive elements. Every layout (PMX `cache_layout` 0-3, per-layer block pools, engines'
// paged caches) reduces to a base pointer and two strides (slot, head) per plane; the element
// index inside a row is always contiguous. Build one from PMX attributes with `MakePmxCacheDesc`,
// or fill the struct directly for any other layout.

#ifndef DYNATTN_CACHE_H_
#define DYNATTN_CACHE_H_

#include <cstdint>

#include "dynattn/cache_formats.h"
#include "dynattn/export.h"
#include "dynattn/status.h"
#include "dynattn/types.h"

namespace dynattn {

/// How cached elements are stored: one enumerator per row of DYNATTN_CACHE_FORMATS
/// (dynattn/cache_formats.h, which says what each holds): kF32, kF16, kInt8, kInt4, kBF16,
/// kF8E4M3, kF8E5M2.
enum class CacheElem : uint8_t {
#define DYNATTN_CACHE_ELEM_ENUMERATOR(elem, tag, name, row, c_suffix) elem,
  DYNATTN_CACHE_FORMATS(DYNATTN_CACHE_ELEM_ENUMERATOR)
#undef DYNATTN_CACHE_ELEM_ENUMERATOR
};

/// How many cache formats there are.
inline constexpr int kNumCacheElems = 0
#define DYNATTN_CACHE_ELEM_COUNT(elem, tag, name, row, c_suffix) +1
    DYNATTN_CACHE_FORMATS(DYNATTN_CACHE_ELEM_COUNT);
#undef DYNATTN_CACHE_ELEM_COUNT

/// "float32", "float16", "int8", "int4", "bfloat16", "float8_e4m3fn" or "float8_e5m2".
DYNATTN_EXPORT const char* CacheElemName(CacheElem elem);

/// Element type of the group scales (ignored for unquantized caches).
enum class ScaleType : uint8_t { kF16, kF32 };

/// One plane (keys or values) of a cache, already offset to the layer in use.
///
/// Element `d` of (slot `s`, KV head `h`) lives at element offset
/// `SlotOffset(s) + h * head_stride + d * dim_stride` from `data`, where `SlotOffset(s)` is
/// `s * slot_stride`, or with tiles `(s / slots_per_tile) * tile_stride + (s % slots_per_tile) *
/// slot_stride`; its scale at `s * scale_slot_stride + h * scale_head_stride + d / quant_group`
/// from `scale`. Offsets count elements of the storage type; for int4 they count nibbles
/// (byte = offset / 2), so both int4 strides must be even.
///
/// Rows are usually token-major (`dim_stride` 1: a row's D elements are contiguous). A
/// dimension-major block stores one dimension of the block's tokens contiguously instead: vLLM's
/// CPU backend keeps its keys as [D, block_size] per (block, head), which is `dim_stride =
/// block_size`, `slot_stride = 1`, and tiles of the block cache's slots (MakeVllmCpuBlockCache).
/// Dimension-major and tiled planes must be unquantized (fp32, fp16, bf16, fp8).
struct CachePlane {
  void* data = nullptr;           ///< Element (0,0,0) of this plane.
  int64_t slot_stride = 0;        ///< Elements (nibbles for int4) between consecutive slots.
  int64_t head_stride = 0;        ///< Elements (nibbles for int4) between consecutive KV heads.
  void* scale = nullptr;          ///< Scale of group 0 of (0,0); null when unquantized.
  int64_t scale_slot_stride = 0;  ///< Scales between consecutive slots.
  int64_t scale_head_stride = 0;  ///< Scales between consecutive KV heads.
  /// fp8 planes only: the per-tensor scale (finite, > 0). A byte b stands for `fp8(b) *
  /// tensor_scale`; a value x is stored as `fp8_satfinite_rne(x / tensor_scale)`. The ops' optional
  /// `k_scale` / `v_scale` inputs replace it for the call. Ignored by every other format.
  float tensor_scale = 1.0f;
  /// Elements between elements d and d + 1 of a row; 0 or 1: contiguous rows.
  int64_t dim_stride = 1;
  /// > 0: slots come in tiles of this many, `tile_stride` elements apart (see above); 0: none.
  int64_t slots_per_tile = 0;
  int64_t tile_stride = 0;  ///< Elements between consecutive tiles of slots (with tiles).
};

/// Everything the kernels need to read and write one layer of a KV cache.
///
/// Trusted by design: the library checks a descriptor's fields for consistency, but it cannot
/// know how much memory lies behind its pointers, so it neither bounds-checks them nor checks
/// them against the call's other tensors for overlap. Describe memory you own, and keep it
/// apart from the call's inputs and outputs.
struct CacheDesc {
  CacheElem elem = CacheElem::kF16;        ///< Storage of cached elements.
  ScaleType scale_type = ScaleType::kF16;  ///< Storage of group scales (quantized caches only).
  int quant_group = 8;                     ///< Elements per scale group (quantized caches only).
  int num_kv_heads = 0;                    ///< KV heads per slot.
  int head_dim = 0;                        ///< Elements per (slot, head) key row.
  int64_t num_slots = 0;         ///< Token capacity `MaxT`; valid slots are [0, num_slots).
  CachePlane key;                ///< Key plane.
  CachePlane value;              ///< Value plane.
  Device device = Device::kCpu;  ///< Memory space of all four buffers.
  /// Elements per (slot, head) value row; 0 (the default): head_dim. A value row of a quantized
  /// plane has head_dim_v / quant_group group scales.
  int head_dim_v = 0;
};

/// PMX cache attributes (spec: `num_layer`, `layer_idx`, `quant_bit`, `quant_group`,
/// `cache_mode`, `cache_layout`, `page_size`), with the PPLNN parser's defaults.
struct CacheAttrs {
  int num_layer = 1;     ///< Layers sharing the cache tensor (L).
  int layer_idx = 0;     ///< Layer this call reads and writes, in [0, num_layer).
  int quant_bit = 0;     ///< 0 (plain: the cache tensor's dtype, fp32/fp16/bf16/fp8), 8 or 4.
  int quant_group = 8;   ///< Elements per scale group; divides head_dim (even for int4).
  int cache_mode = 0;    ///< 0: slot = cachestarts[b] + p. 1: paged, see `page_size`.
  int cache_layout = 0;  ///< 0-3, the current PMX layouts (spec pmx-ops §3.2).
  int page_size = 128;   ///< Mode 1: slot = cachestarts[b][p / page_size] + p % page_size.
};

/// Builds the descriptor of layer `attrs.layer_idx` of a PMX cache tensor (rank 5, shape as
/// `attrs.cache_layout` says, last dim `head_dim`, or `head_dim / 2` bytes for int4) and its
/// optional scale tensor (same shape, last dim `head_dim / quant_group`). Checks every shape
/// rule and names the offending input on failure.
DYNATTN_EXPORT Status MakePmxCacheDesc(const TensorView& cache, const TensorView& scale,
                                       const CacheAttrs& attrs, int num_kv_heads, int head_dim,
                                       CacheDesc* desc);

}  // namespace dynattn

#endif  // DYNATTN_CACHE_H_
