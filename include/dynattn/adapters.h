// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Zero-copy adapters from serving engines' KV caches and step metadata to UnifiedAttention
// (spec: the Unified Attention spec §2.1, §3, §4; docs/api.md, "Engines' caches and metadata").
//
// Why: engines own their cache memory and must not copy it per step. Every cache below is used in
// place: its layout becomes a BlockCache (plane pointers plus slot, head and block strides), so
// the engine's own block ids address it. Only the small per-step metadata (block tables, start
// offsets) is converted, into an owning `UnifiedMetadata`.
//
// Covered: KsanaLLM block pools (both intra-block orders) and the Ascend ATB kcache/vcache views
// of such a pool (§4.3, §4.8); vLLM's metadata and caches (NHD, and the CPU backend's head-major
// layout); FlashInfer's paged metadata and caches (NHD or HND, separate or combined K/V).
// Every function validates its inputs and names the offending input on failure.

#ifndef DYNATTN_ADAPTERS_H_
#define DYNATTN_ADAPTERS_H_

#include <cstdint>
#include <vector>

#include "dynattn/cache.h"
#include "dynattn/export.h"
#include "dynattn/status.h"
#include "dynattn/types.h"
#include "dynattn/unified.h"

namespace dynattn {

// ---------------------------------------------------------------------------------------------
// Element format shared by every engine cache.

/// Element format of an engine's cache tensors. Data tensors are fp32/fp16/bf16 or fp8 (e4m3fn,
/// e5m2: vLLM's fp8 KV cache; its k_scale / v_scale go to the call) when `quant_bit` is 0 and
/// int8 otherwise (int4: two nibbles per byte, last dim D / 2); scale tensors have the data
/// tensor's layout with last dim D / quant_group, fp16 or fp32.
struct CacheFormat {
  int quant_bit = 0;    ///< 0 (plain), 8 (int8) or 4 (packed int4).
  int quant_group = 8;  ///< Elements per scale group; divides D (even for int4).
};

// ---------------------------------------------------------------------------------------------
// Plain paged caches (vLLM, FlashInfer, ATB views).

/// Order of the token and head dimensions inside one page.
enum class PageLayout : uint8_t {
  kNHD,  ///< [page_size, Hkv, D]: token-major (vLLM GPU caches, FlashInfer NHD, ATB views).
  kHND,  ///< [Hkv, page_size, D]: head-major (FlashInfer HND).
};

/// Block cache over separate key and value tensors of shape [num_pages, page_size, Hkv, D] (NHD)
/// or [num_pages, Hkv, page_size, D] (HND), with optional scale tensors of the same layout.
/// Serves vLLM K/V caches, FlashInfer caches and the ATB views of a Ksana pool; page ids are
/// used as they are. Both scales are required iff `format.quant_bit != 0`. The value tensor's
/// last dim may differ from the key's: its rows hold Dv values (CacheDesc::head_dim_v), as
/// engines keep MLA's non-absorbed K and V.
DYNATTN_EXPORT Status MakePagedBlockCache(const TensorView& key, const TensorView& value,
                                          const TensorView& key_scale,
                                          const TensorView& value_scale, PageLayout layout,
                                          const CacheFormat& format, BlockCache* out);

/// Block cache over one combined FlashInfer tensor [num_pages, 2, page_size, Hkv, D] (NHD) or
/// [num_pages, 2, Hkv, page_size, D] (HND), K at index 0 of dim 1, and its optional scale tensor.
DYNATTN_EXPORT Status MakeCombinedBlockCache(const TensorView& kv, const TensorView& kv_scale,
                                             PageLayout layout, const CacheFormat& format,
                                             BlockCache* out);

/// Block cache over vLLM's CPU-backend cache, the tensor [2, num_blocks, Hkv, block_size, D] of
/// its `cpu_attn` backend (csrc/cpu/cpu_attn_vec.hpp, cpu_attn_vec16.hpp; vLLM main as of late
/// 2025): inside each (block, head), values are token-major [block_size, D] and keys are
/// dimension-major [D, block_size] (key element d of token t at d * block_size + t), as its
/// `reshape_and_cache` writes them. Unquantized formats only (`format.quant_bit` 0, no
/// `kv_scale`); the library's writes of new tokens follow the same layout.
DYNATTN_EXPORT Status MakeVllmCpuBlockCache(const TensorView& kv, const TensorView& kv_scale,
                                            const CacheFormat& format, BlockCache* out);

// ---------------------------------------------------------------------------------------------
// Step metadata.

/// Unified-attention metadata converted from an engine's; owns its memory.
struct UnifiedMetadata {
  std::vector<int64_t> query_start_loc;  ///< (B+1).
  std::vector<int64_t> context_lens;     ///< (B): tokens already cached per request.
  std::vector<int64_t> block_table;      ///< (B, max_blocks), row-major.
  int64_t max_blocks = 0;                ///< Columns of `block_table`.

  /// Number of requests B.
  int64_t num_requests() const { return static_cast<int64_t>(context_lens.size()); }
  /// Points `args->query_start_loc`, `context_lens` and `block_table` at this struct's vectors
  /// (valid while it lives unchanged).
  void BindTo(UnifiedAttentionArgs* args) const;
};

/// vLLM attention metadata (§2.1). Index tensors are int32 or int64.
struct VllmMetadata {
  TensorView query_start_loc;  ///< (B+1): request b owns tokens [qsl[b], qsl[b+1]).
  TensorView seq_lens;         ///< (B): context + new tokens of each request.
  TensorView block_table;      ///< (B, max_blocks): physical block ids.
  TensorView slot_mapping;     ///< Optional (T): slot of each new token, checked against the table.
};

/// Converts vLLM metadata for a cache of `num_blocks` blocks of `block_size` tokens. Only the
/// blocks a request uses (ceil(seq_len / block_size)) are checked; other entries are copied.
DYNATTN_EXPORT Status FromVllm(const VllmMetadata& in, int block_size, int64_t num_blocks,
                               UnifiedMetadata* out);

/// FlashInfer paged-KV metadata (§3). Index tensors are int32 or int64.
struct FlashInferMetadata {
  TensorView qo_indptr;         ///< (B+1): request b owns query tokens [qo[b], qo[b+1]).
  TensorView kv_indptr;         ///< (B+1): request b owns kv_indices[kv[b], kv[b+1]).
  TensorView kv_indices;        ///< (>= kv_indptr[B]): page ids.
  TensorView kv_last_page_len;  ///< (B): tokens in each request's last page, in [1, page_size]
                                ///< (0 for a request without pages).
};

/// Converts FlashInfer metadata for a cache of `num_pages` pages of `page_size` tokens: kv length
/// = (pages - 1) * page_size + last_page_len, context = kv length - query tokens, table = each
/// request's pages padded with 0 to the largest page count.
DYNATTN_EXPORT Status FromFlashInfer(const FlashInferMetadata& in, int page_size, int64_t num_pages,
                                     UnifiedMetadata* out);

// ---------------------------------------------------------------------------------------------
// KsanaLLM block pools and their Ascend ATB views (§4).

/// Order of the {K, V} x layer sub-blocks inside one Ksana block.
enum class KsanaBlockOrder : uint8_t {
  kKvLayer,  ///< [2][L][T][Hkv][D]: all K layers, then all V layers (Ascend/ATB build).
  kLayerKv,  ///< [L][2][T][Hkv][D]: per layer K then V (CUDA build).
};

/// Geometry of a Ksana block pool: one allocation of N (+1 slack) blocks, each holding L layers x
/// {K, V} sub-blocks of S = T * Hkv * D elements. The pool tensor is (N [+1], 2 * L * S) elements
/// (bytes for int4: 2 * L * S / 2); the scale pool is (N [+1], 2 * L * T * Hkv * D / G).
struct KsanaPoolAttrs {
  KsanaBlockOrder order = KsanaBlockOrder::kKvLayer;  ///< Intra-block order.
  int num_layer = 1;        ///< L: layers on this node (pipeline stage plus MTP layers).
  int64_t num_blocks = 0;   ///< N: usable blocks; Ksana ids are [0, N).
  bool slack_block = true;  ///< The allocation holds one more block (Ksana under ACL).
  int block_size = 0;       ///< T: tokens per block (Ksana's block_token_num).
  int num_kv_heads = 0;     ///< Hkv: KV heads per rank.
  int head_dim = 0;         ///< D.
  CacheFormat format;       ///< Element format of the pool.

  /// Sub-blocks between layers l and l + 1 inside a block (sigma_l).
  int64_t LayerStride() const { return order == KsanaBlockOrder::kKvLayer ? 1 : 2; }
  /// Sub-blocks between the K and V sub-blocks of a layer (sigma_kv).
  int64_t KvStride() const { return order == KsanaBlockOrder::kKvLayer ? num_layer : 1; }
  /// ATB block id of (Ksana block `block`, layer `layer`): 2L * block + sigma_l * layer.
  /// In int64: CheckKsanaPool and every ATB function refuse geometries whose ids or slots
  /// (2L(N + 1) T) do not fit.
  int64_t AtbBlockId(int64_t block, int layer) const {
    return 2 * int64_t{num_layer} * block + LayerStride() * layer;
  }
  /// ATB blocks each view declares: 2LN, or 2LN - sigma_kv without the slack block.
  int64_t AtbViewBlocks() const {
    return 2 * int64_t{num_layer} * num_blocks - (slack_block ? 0 : KvStride());
  }
};

/// Checks `attrs` and the pool (and, iff quantized, scale pool) tensors against it.
DYNATTN_EXPORT Status CheckKsanaPool(const TensorView& pool, const TensorView& scale_pool,
                                     const KsanaPoolAttrs& attrs);

/// Block cache of layer `layer` of a Ksana pool, addressed by Ksana block ids as they are
/// (block_stride = 2L * T slots).
DYNATTN_EXPORT Status MakeKsanaBlockCache(const TensorView& pool, const TensorView& scale_pool,
                                          const KsanaPoolAttrs& attrs, int layer, BlockCache* out);

/// The Ascend ATB kcache/vcache views of a Ksana pool (§4.3), both [AtbViewBlocks(), T, Hkv, D]
/// (D / 2 bytes for int4): kcache at the pool base, vcache sigma_kv sub-blocks further. The scale
/// views are present iff the pool is quantized.
struct AtbViews {
  TensorView kcache;  ///< K view.
  TensorView vcache;  ///< V view.
  TensorView kscale;  ///< K scale view [AtbViewBlocks(), T, Hkv, D / G], or absent.
  TensorView vscale;  ///< V scale view, or absent.
};

/// Builds the ATB views of a Ksana pool. Pass them to `MakePagedBlockCache` (kNHD) for a block
/// cache addressed by ATB ids.
DYNATTN_EXPORT Status MakeAtbViews(const TensorView& pool, const TensorView& scale_pool,
                                   const KsanaPoolAttrs& attrs, AtbViews* out);

/// Converts a Ksana block table (B, max_blocks), int32 or int64, into ATB ids of layer `layer`
/// (row-major, same shape). Entries -1 are padding and stay -1; the rest must be in [0, N).
DYNATTN_EXPORT Status KsanaToAtbBlockTable(const TensorView& ksana_table,
                                           const KsanaPoolAttrs& attrs, int layer,
                                           std::vector<int64_t>* atb_table);

/// ATB slot of each (request, position) pair for layer `layer` (the slot mapping Ksana never
/// wrote down, §4.5.6): (AtbBlockId(table[r][p / T], layer)) * T + p % T. `requests` and
/// `positions` are int32 or int64 vectors of equal length.
DYNATTN_EXPORT Status AtbSlotMapping(const TensorView& ksana_table, const TensorView& requests,
                                     const TensorView& positions, const KsanaPoolAttrs& attrs,
                                     int layer, std::vector<int64_t>* slots);

}  // namespace dynattn

#endif  // DYNATTN_ADAPTERS_H_
