/* Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
 *
 * The C API of libdynattn (C11; also compiles as C++). A thin translation of the C++ API
 * (dynattn/ops.h, plan.h, unified.h, merge.h, cache.h, adapters.h): the same validation, the same
 * kernels, the same bits.
 *
 * Conventions:
 * - Every function that can fail returns a dynattn_status_t. On failure,
 *   dynattn_last_error_message() gives "<input>: <rule it broke>" for the calling thread (valid
 *   until that thread's next call into this API; "" after a success). Nothing is written on
 *   failure: outputs, caches and out-parameters keep their bytes.
 * - No C++ exception crosses this boundary: out of memory is DYNATTN_STATUS_OUT_OF_MEMORY, any
 *   other exception DYNATTN_STATUS_INTERNAL.
 * - Structs with defaults (attrs, args, options) are filled by their *_init function first: it
 *   sets the C++ API's defaults and marks every tensor absent (rank -1). A zeroed tensor is NOT
 *   absent: it is a present scalar.
 * - New fields are appended at the end of their struct; enum values keep their numbers.
 * - Tensors, caches and index arrays are borrowed: the library keeps no pointer after a call
 *   returns, except that a plan keeps its own copy of the index tensors.
 */

#ifndef DYNATTN_C_API_H_
#define DYNATTN_C_API_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dynattn/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------------ */
/* Status, version, machine.                                                                  */

/** Outcome of a call; mirrors dynattn::StatusCode, plus DYNATTN_STATUS_OUT_OF_MEMORY. */
typedef enum dynattn_status_t {
  DYNATTN_STATUS_OK = 0,                 /**< Success. */
  DYNATTN_STATUS_INVALID_ARGUMENT = 1,   /**< An input broke a rule; nothing was written. */
  DYNATTN_STATUS_UNSUPPORTED = 2,        /**< Valid but not available here (e.g. no GPU). */
  DYNATTN_STATUS_INTERNAL = 3,           /**< A bug in libdynattn (or an unexpected exception). */
  DYNATTN_STATUS_DEVICE_ERROR = 4,       /**< The CUDA runtime reported an error. */
  DYNATTN_STATUS_OUT_OF_MEMORY = 5,      /**< An allocation failed (std::bad_alloc). */
  DYNATTN_STATUS_FAILED_PRECONDITION = 6 /**< Refused by an object's state (a busy context). */
} dynattn_status_t;

/** Message of the calling thread's last failed call ("" after a success); never null. Valid
 *  until the thread's next call into this API. */
DYNATTN_EXPORT const char* dynattn_last_error_message(void);
/** "OK", "INVALID_ARGUMENT", "UNSUPPORTED", "INTERNAL", "DEVICE_ERROR", "OUT_OF_MEMORY",
 *  "FAILED_PRECONDITION", or "UNKNOWN" for any other value. */
DYNATTN_EXPORT const char* dynattn_status_name(dynattn_status_t status);
/** The library's version, e.g. "0.1.0" (that of the loaded library, not of the headers). */
DYNATTN_EXPORT const char* dynattn_version(void);
/** Name of the SIMD target the CPU kernels dispatch to on this machine, e.g. "AVX3". */
DYNATTN_EXPORT const char* dynattn_cpu_target_name(void);

/** float -> IEEE binary16 bits, the library's own rounding (round to nearest even). */
DYNATTN_EXPORT uint16_t dynattn_float_to_half(float value);
/** IEEE binary16 bits -> float (exact). */
DYNATTN_EXPORT float dynattn_half_to_float(uint16_t half);

/* ------------------------------------------------------------------------------------------ */
/* Tensors.                                                                                   */

/** Element type of a tensor (dynattn::DType). Packed int4 caches are DYNATTN_DTYPE_I8 tensors
 *  whose last dimension is head_dim / 2 bytes. */
typedef enum dynattn_dtype_t {
  DYNATTN_DTYPE_F32 = 0,    /**< IEEE binary32. */
  DYNATTN_DTYPE_F16 = 1,    /**< IEEE binary16, stored as its 16-bit pattern. */
  DYNATTN_DTYPE_I8 = 2,     /**< int8 (quantized caches; packed int4 caches). */
  DYNATTN_DTYPE_I64 = 3,    /**< int64 (index tensors and scalars). */
  DYNATTN_DTYPE_I32 = 4,    /**< int32 (index tensors). */
  DYNATTN_DTYPE_BF16 = 5,   /**< bfloat16, stored as its 16-bit pattern (activations, caches). */
  DYNATTN_DTYPE_F8E4M3 = 6, /**< float8_e4m3fn bytes (fp8 caches; max 448, no infinities). */
  DYNATTN_DTYPE_F8E5M2 = 7  /**< float8_e5m2 bytes (fp8 caches; IEEE-like, infinities). */
} dynattn_dtype_t;

/** Where a tensor's memory lives (dynattn::Device). */
typedef enum dynattn_device_t {
  DYNATTN_DEVICE_CPU = 0, /**< Host memory. */
  DYNATTN_DEVICE_CUDA = 1 /**< CUDA device memory. */
} dynattn_device_t;

/** Largest rank a tensor holds (dynattn::kMaxRank). */
#define DYNATTN_MAX_RANK 6

/** A borrowed, typed view of memory (dynattn::TensorView): strides count elements. rank -1 means
 *  absent (an optional input left out); rank 0 is a scalar. Inputs must be dense row-major. */
typedef struct dynattn_tensor_t {
  void* data;                        /**< First element; may be null when it has no elements. */
  dynattn_dtype_t dtype;             /**< Element type. */
  int rank;                          /**< Dimensions: -1 absent, 0 scalar, up to 6. */
  int64_t shape[DYNATTN_MAX_RANK];   /**< Extents, outermost first (first `rank` entries). */
  int64_t strides[DYNATTN_MAX_RANK]; /**< Element distance per dimension (first `rank`). */
  dynattn_device_t device;           /**< Memory space of `data`. */
} dynattn_tensor_t;

/** Fills `*out` with a dense row-major view of `data` of `rank` extents `shape` (shape may be null
 *  when rank is 0). Fails on a null `out`, a rank outside [0, 6], a null `shape` with rank > 0 or
 *  an unknown dtype or device. */
DYNATTN_EXPORT dynattn_status_t dynattn_tensor_dense(const void* data, dynattn_dtype_t dtype,
                                                     int rank, const int64_t* shape,
                                                     dynattn_device_t device,
                                                     dynattn_tensor_t* out);
/** Marks `*tensor` absent (rank -1, everything else zero). Fails on a null `tensor`. */
DYNATTN_EXPORT dynattn_status_t dynattn_tensor_absent(dynattn_tensor_t* tensor);

/* ------------------------------------------------------------------------------------------ */
/* Caches.                                                                                    */

/** How cached elements are stored (dynattn::CacheElem). */
typedef enum dynattn_cache_elem_t {
  DYNATTN_CACHE_ELEM_F32 = 0,    /**< fp32 values. */
  DYNATTN_CACHE_ELEM_F16 = 1,    /**< fp16 values. */
  DYNATTN_CACHE_ELEM_I8 = 2,     /**< int8 codes, one scale per group. */
  DYNATTN_CACHE_ELEM_I4 = 3,     /**< Packed two's-complement nibbles, one scale per group. */
  DYNATTN_CACHE_ELEM_BF16 = 4,   /**< bfloat16 values. */
  DYNATTN_CACHE_ELEM_F8E4M3 = 5, /**< float8_e4m3fn bytes times the plane's tensor_scale. */
  DYNATTN_CACHE_ELEM_F8E5M2 = 6  /**< float8_e5m2 bytes times the plane's tensor_scale. */
} dynattn_cache_elem_t;

/** Element type of group scales (dynattn::ScaleType). */
typedef enum dynattn_scale_type_t {
  DYNATTN_SCALE_TYPE_F16 = 0, /**< fp16 scales. */
  DYNATTN_SCALE_TYPE_F32 = 1  /**< fp32 scales. */
} dynattn_scale_type_t;

/** Order of token and head dimensions inside a page (dynattn::PageLayout). */
typedef enum dynattn_page_layout_t {
  DYNATTN_PAGE_LAYOUT_NHD = 0, /**< [page_size, Hkv, D]: token-major. */
  DYNATTN_PAGE_LAYOUT_HND = 1  /**< [Hkv, page_size, D]: head-major. */
} dynattn_page_layout_t;

/** The numerics tier of an attention call (dynattn::Precision). */
typedef enum dynattn_precision_t {
  DYNATTN_PRECISION_EXACT = 0, /**< fp32 products and sums, the exact contract (default). */
  DYNATTN_PRECISION_FAST = 1   /**< Opt-in bf16 / int8 dot products where a fast kernel runs. */
} dynattn_precision_t;

/** PMX cache attributes (dynattn::CacheAttrs); dynattn_cache_attrs_init sets PPLNN's defaults. */
typedef struct dynattn_cache_attrs_t {
  int num_layer;    /**< Layers sharing the cache tensor (default 1). */
  int layer_idx;    /**< Layer read and written, in [0, num_layer) (default 0). */
  int quant_bit;    /**< 0 (plain), 8 (int8) or 4 (packed int4) (default 0). */
  int quant_group;  /**< Elements per scale group (default 8). */
  int cache_mode;   /**< 0: offset slots; 1: paged (default 0). */
  int cache_layout; /**< PMX layout 0-3 (default 0). */
  int page_size;    /**< Mode 1: tokens per page (default 128). */
} dynattn_cache_attrs_t;

/** One plane (keys or values) of a cache (dynattn::CachePlane). Strides count elements (nibbles
 *  for int4). */
typedef struct dynattn_cache_plane_t {
  void* data;                /**< Element (0, 0, 0). */
  int64_t slot_stride;       /**< Between consecutive slots. */
  int64_t head_stride;       /**< Between consecutive KV heads. */
  void* scale;               /**< Scale of group 0 of (0, 0); null when unquantized. */
  int64_t scale_slot_stride; /**< Scales between consecutive slots. */
  int64_t scale_head_stride; /**< Scales between consecutive KV heads. */
  /** fp8 planes: the per-tensor scale (finite, > 0; a byte b stands for fp8(b) * tensor_scale).
   *  Ignored by every other format. Filled by dynattn_make_pmx_cache_desc and the block-cache
   *  makers (1.0); the ops' k_scale / v_scale inputs replace it for a call. */
  float tensor_scale;
  /** Elements between elements d and d + 1 of a row: 0 or 1 for contiguous (token-major) rows,
   *  more for a dimension-major block (vLLM's CPU keys, [D, block_size]: block_size). */
  int64_t dim_stride;
  /** > 0: slots in tiles of this many, tile_stride elements apart; slot s sits at
   *  (s / slots_per_tile) * tile_stride + (s % slots_per_tile) * slot_stride. 0: at
   *  s * slot_stride. Dimension-major and tiled planes are unquantized only. */
  int64_t slots_per_tile;
  int64_t tile_stride; /**< Elements between tiles of slots (with slots_per_tile). */
} dynattn_cache_plane_t;

/** One layer of a KV cache (dynattn::CacheDesc): a plain value that borrows the cache memory.
 *  Fill it directly, or with dynattn_make_pmx_cache_desc. */
typedef struct dynattn_cache_desc_t {
  dynattn_cache_elem_t elem;       /**< Storage of cached elements. */
  dynattn_scale_type_t scale_type; /**< Storage of scales (quantized caches only). */
  int quant_group;                 /**< Elements per scale group (quantized caches only). */
  int num_kv_heads;                /**< KV heads per slot. */
  int head_dim;                    /**< Elements per (slot, head) key row. */
  int64_t num_slots;               /**< Valid slots are [0, num_slots). */
  dynattn_cache_plane_t key;       /**< Key plane. */
  dynattn_cache_plane_t value;     /**< Value plane. */
  dynattn_device_t device;         /**< Memory space of all four buffers. */
  int head_dim_v;                  /**< Elements per value row; 0: head_dim. */
} dynattn_cache_desc_t;

/** A cache addressed through block tables (dynattn::BlockCache): a plain value borrowing the
 *  cache memory, valid as long as that memory is. Position p of a request with table row `ids`
 *  lives in slot ids[p / block_size] * block_stride + p % block_size. */
typedef struct dynattn_block_cache_t {
  dynattn_cache_desc_t cache; /**< Element format and planes. */
  int block_size;             /**< Tokens per block, >= 1. */
  int64_t block_stride;       /**< Slots between block ids i and i + 1; 0 means block_size. */
  int64_t num_blocks;         /**< Valid block ids are [0, num_blocks). */
} dynattn_block_cache_t;

/** Element format of an engine's paged cache (dynattn::CacheFormat). */
typedef struct dynattn_cache_format_t {
  int quant_bit;   /**< 0 (plain), 8 (int8) or 4 (packed int4). */
  int quant_group; /**< Elements per scale group. */
} dynattn_cache_format_t;

/** Sets the defaults of dynattn::CacheAttrs. Fails on a null `attrs`. */
DYNATTN_EXPORT dynattn_status_t dynattn_cache_attrs_init(dynattn_cache_attrs_t* attrs);

/** Descriptor of layer attrs->layer_idx of a PMX cache tensor and its optional scale tensor
 *  (dynattn::MakePmxCacheDesc). */
DYNATTN_EXPORT dynattn_status_t dynattn_make_pmx_cache_desc(const dynattn_tensor_t* cache,
                                                            const dynattn_tensor_t* scale,
                                                            const dynattn_cache_attrs_t* attrs,
                                                            int num_kv_heads, int head_dim,
                                                            dynattn_cache_desc_t* out);

/** Block cache of a PMX cache tensor (dynattn::MakePmxBlockCache); cache_mode and page_size of
 *  `attrs` are ignored. `scale` may be null or absent for unquantized caches. */
DYNATTN_EXPORT dynattn_status_t dynattn_make_pmx_block_cache(const dynattn_tensor_t* cache,
                                                             const dynattn_tensor_t* scale,
                                                             const dynattn_cache_attrs_t* attrs,
                                                             int num_kv_heads, int head_dim,
                                                             int block_size,
                                                             dynattn_block_cache_t* out);

/** Block cache over separate key and value page tensors (dynattn::MakePagedBlockCache): vLLM,
 *  FlashInfer. The scales may be null or absent for unquantized caches. */
DYNATTN_EXPORT dynattn_status_t dynattn_make_paged_block_cache(
    const dynattn_tensor_t* key, const dynattn_tensor_t* value, const dynattn_tensor_t* key_scale,
    const dynattn_tensor_t* value_scale, dynattn_page_layout_t layout,
    const dynattn_cache_format_t* format, dynattn_block_cache_t* out);

/* ------------------------------------------------------------------------------------------ */
/* Attributes and arguments of the ops.                                                       */

/** Execution options of a one-shot call (dynattn::RunOptions). Results never depend on them. */
typedef struct dynattn_run_options_t {
  int num_threads;  /**< Worker threads; 0 = all cores. */
  bool pin_threads; /**< Pin threads to CPUs while the call runs (default false). */
} dynattn_run_options_t;

/** Attention attributes (dynattn::AttentionAttrs). */
typedef struct dynattn_attention_attrs_t {
  int num_heads;         /**< Query heads Hq. */
  int num_kv_heads;      /**< Hkv; 0 means Hq. */
  int head_dim;          /**< Dk >= 1: queries and keys. */
  bool is_causal;        /**< Bottom-right causal mask (default true). */
  bool is_alibi;         /**< ALiBi bias, standard slopes (default false; or pass alibi_slopes). */
  int window_left;       /**< Sliding window: -1 off (default); W >= 0: keys i - W <= j <= i. */
  float logits_soft_cap; /**< 0 off (default); cap > 0: s = cap * tanh(s0 / cap). */
  float softmax_scale;   /**< 0: 1 / sqrt(head_dim) (default); else finite > 0. */
  int head_dim_v;        /**< Dv: values and outputs; 0 (default) = head_dim. */
  bool value_from_key;   /**< Values are the keys' first Dv elements (default false). */
  dynattn_precision_t precision; /**< Numerics tier (default DYNATTN_PRECISION_EXACT). */
} dynattn_attention_attrs_t;

/** KeyValueCache attributes (dynattn::KeyValueCacheAttrs). */
typedef struct dynattn_key_value_cache_attrs_t {
  dynattn_cache_attrs_t cache; /**< Cache format, addressing and layout. */
  int num_repeat;              /**< GQA expansion of the gathered heads (default 1). */
} dynattn_key_value_cache_attrs_t;

/** MultiHeadCacheAttention attributes (dynattn::MultiHeadCacheAttentionAttrs). */
typedef struct dynattn_multi_head_cache_attention_attrs_t {
  dynattn_attention_attrs_t attention; /**< Heads, causal, ALiBi. */
  dynattn_cache_attrs_t cache;         /**< Cache format, addressing and layout. */
} dynattn_multi_head_cache_attention_attrs_t;

/** Unified attention attributes (dynattn::UnifiedAttentionAttrs; always causal). */
typedef struct dynattn_unified_attention_attrs_t {
  int num_heads;         /**< Query heads Hq. */
  int num_kv_heads;      /**< Hkv; 0 means Hq. */
  int head_dim;          /**< Dk >= 1: queries and keys. */
  bool is_alibi;         /**< ALiBi bias. */
  int window_left;       /**< Sliding window, as in dynattn_attention_attrs_t (default -1). */
  float logits_soft_cap; /**< Logit soft-cap (default 0, off). */
  float softmax_scale;   /**< Score scale (default 0: 1 / sqrt(head_dim)). */
  int head_dim_v;        /**< Dv: values and outputs; 0 (default) = head_dim. */
  bool value_from_key;   /**< Values are the keys' first Dv elements (default false). */
  dynattn_precision_t precision; /**< Numerics tier (default DYNATTN_PRECISION_EXACT). */
} dynattn_unified_attention_attrs_t;

/** KeyValueCache tensors (dynattn::KeyValueCacheArgs; shapes documented there). */
typedef struct dynattn_key_value_cache_args_t {
  dynattn_tensor_t current_key;           /**< (Tq, Hkv, D), fp32 or fp16. */
  dynattn_tensor_t current_value;         /**< (Tq, Hkv, D). */
  dynattn_tensor_t seqstarts;             /**< (B+1). */
  dynattn_tensor_t kvstarts;              /**< (B+1). */
  dynattn_tensor_t cachestarts;           /**< Mode 0: (B). Mode 1: (B, MaxP). */
  dynattn_tensor_t start_pos;             /**< (B). */
  dynattn_tensor_t max_seqlen;            /**< Scalar hint. */
  dynattn_tensor_t max_kvlen;             /**< Scalar hint. */
  dynattn_tensor_t cache;                 /**< In/out PMX cache (rank 5). */
  dynattn_tensor_t scale;                 /**< In/out scales; required iff quant_bit != 0. */
  const dynattn_cache_desc_t* cache_desc; /**< Optional; replaces cache/scale when non-null. */
  dynattn_tensor_t key;                   /**< Out (kvstarts[B], Hkv * num_repeat, D). */
  dynattn_tensor_t value;                 /**< Out, same shape and dtype. */
  dynattn_tensor_t k_scale;               /**< fp8 caches: optional 0-d fp32 key scale. */
  dynattn_tensor_t v_scale;               /**< fp8 caches: optional 0-d fp32 value scale. */
} dynattn_key_value_cache_args_t;

/** MultiHeadAttention tensors (dynattn::MultiHeadAttentionArgs). */
typedef struct dynattn_multi_head_attention_args_t {
  dynattn_tensor_t query;            /**< (Tq, Hq, D), fp32 or fp16. */
  dynattn_tensor_t key;              /**< (kvstarts[B], Hkv, D). */
  dynattn_tensor_t value;            /**< (kvstarts[B], Hkv, D). */
  dynattn_tensor_t seqstarts;        /**< (B+1). */
  dynattn_tensor_t kvstarts;         /**< (B+1). */
  dynattn_tensor_t decoding_batches; /**< Scalar. */
  dynattn_tensor_t max_seqlen;       /**< Scalar hint. */
  dynattn_tensor_t max_kvlen;        /**< Scalar hint. */
  dynattn_tensor_t attn_mask;        /**< Optional additive mask. */
  dynattn_tensor_t attn_output;      /**< Out (Tq, Hq, D). */
  dynattn_tensor_t sinks;            /**< Optional fp32 (Hq) attention sinks, host memory. */
  dynattn_tensor_t alibi_slopes;     /**< Optional fp32 (Hq) ALiBi slopes, host memory. */
  dynattn_tensor_t lse;              /**< Optional out (Tq, Hq) fp32 log-sum-exp. */
} dynattn_multi_head_attention_args_t;

/** MultiHeadCacheAttention tensors (dynattn::MultiHeadCacheAttentionArgs). */
typedef struct dynattn_multi_head_cache_attention_args_t {
  dynattn_tensor_t query;                 /**< (Tq, Hq, D), fp32 or fp16. */
  dynattn_tensor_t current_key;           /**< (Tq, Hkv, D). */
  dynattn_tensor_t current_value;         /**< (Tq, Hkv, D). */
  dynattn_tensor_t seqstarts;             /**< (B+1). */
  dynattn_tensor_t kvstarts;              /**< (B+1). */
  dynattn_tensor_t cachestarts;           /**< Mode 0: (B). Mode 1: (B, MaxP). */
  dynattn_tensor_t start_pos;             /**< (B). */
  dynattn_tensor_t decoding_batches;      /**< Scalar. */
  dynattn_tensor_t max_seqlen;            /**< Scalar hint. */
  dynattn_tensor_t max_kvlen;             /**< Scalar hint. */
  dynattn_tensor_t cache;                 /**< In/out PMX cache. */
  dynattn_tensor_t scale;                 /**< In/out scales; required iff quant_bit != 0. */
  dynattn_tensor_t attn_mask;             /**< Optional additive mask. */
  const dynattn_cache_desc_t* cache_desc; /**< Optional; replaces cache/scale when non-null. */
  dynattn_tensor_t attn_output;           /**< Out (Tq, Hq, D). */
  dynattn_tensor_t sinks;                 /**< Optional fp32 (Hq) attention sinks, host memory. */
  dynattn_tensor_t k_scale;               /**< fp8 caches: optional 0-d fp32 key scale. */
  dynattn_tensor_t v_scale;               /**< fp8 caches: optional 0-d fp32 value scale. */
  dynattn_tensor_t key_offsets;           /**< Optional (B): a context shard's key offsets. */
  dynattn_tensor_t alibi_slopes;          /**< Optional fp32 (Hq) ALiBi slopes, host memory. */
  dynattn_tensor_t lse;                   /**< Optional out (Tq, Hq) fp32 log-sum-exp. */
} dynattn_multi_head_cache_attention_args_t;

/** Unified attention tensors (dynattn::UnifiedAttentionArgs). */
typedef struct dynattn_unified_attention_args_t {
  dynattn_tensor_t query;             /**< (T, Hq, D), fp32 or fp16. */
  dynattn_tensor_t current_key;       /**< (T, Hkv, D). */
  dynattn_tensor_t current_value;     /**< (T, Hkv, D). */
  dynattn_tensor_t query_start_loc;   /**< (B+1). */
  dynattn_tensor_t context_lens;      /**< (B). */
  dynattn_tensor_t block_table;       /**< (B, max_blocks). */
  const dynattn_block_cache_t* cache; /**< In/out block cache (required). */
  dynattn_tensor_t attn_output;       /**< Out (T, Hq, D). */
  dynattn_tensor_t lse;               /**< Optional out (T, Hq) fp32. */
  dynattn_tensor_t k_scale;           /**< fp8 caches: optional 0-d fp32, replaces the key
                                           plane's tensor_scale for the call. */
  dynattn_tensor_t v_scale;           /**< fp8 caches: optional 0-d fp32 value scale. */
  dynattn_tensor_t sinks;             /**< Optional fp32 (Hq) attention sinks, host memory. */
  dynattn_tensor_t alibi_slopes;      /**< Optional fp32 (Hq) ALiBi slopes, host memory. */
  dynattn_tensor_t key_offsets;       /**< Optional (B), with key_counts: a context shard. */
  dynattn_tensor_t key_counts;        /**< Optional (B): the keys the shard holds. */
} dynattn_unified_attention_args_t;

/** MergeStates tensors (dynattn::MergeStatesArgs): either out + lse, or acc + max + sum. */
typedef struct dynattn_merge_states_args_t {
  dynattn_tensor_t out;        /**< (K, T, H, D) normalised part outputs. */
  dynattn_tensor_t lse;        /**< (K, T, H) natural-log log-sum-exp. */
  dynattn_tensor_t acc;        /**< (K, T, H, D) unnormalised accumulators. */
  dynattn_tensor_t max;        /**< (K, T, H) running maxima. */
  dynattn_tensor_t sum;        /**< (K, T, H) sums. */
  dynattn_tensor_t merged_out; /**< Out (T, H, D) fp32. */
  dynattn_tensor_t merged_lse; /**< Optional out (T, H) fp32. */
} dynattn_merge_states_args_t;

/** What the planner made of a unified step (dynattn::UnifiedStepSummary). */
typedef struct dynattn_unified_step_summary_t {
  char phase[8];             /**< "csu", "c-u", ...: NUL-terminated. */
  int64_t query_len;         /**< T. */
  int64_t num_shared_blocks; /**< Cached blocks read by more than one query token. */
  int64_t num_unique_blocks; /**< Cached blocks read by exactly one query token. */
  int64_t num_logits;        /**< Requests with at least one query token. */
  int64_t num_work_items;    /**< Parallel work items of the plan. */
  int64_t cache_bytes_read;  /**< K, V and scale bytes loaded from the cache. */
} dynattn_unified_step_summary_t;

/** Sets num_threads = 0, pin_threads = false. Fails on a null pointer (as does every *_init). */
DYNATTN_EXPORT dynattn_status_t dynattn_run_options_init(dynattn_run_options_t* options);
/** Sets the defaults of dynattn::AttentionAttrs (is_causal true, window_left -1, the rest
 *  0/false). */
DYNATTN_EXPORT dynattn_status_t dynattn_attention_attrs_init(dynattn_attention_attrs_t* attrs);
/** Sets the defaults of dynattn::KeyValueCacheAttrs. */
DYNATTN_EXPORT dynattn_status_t
dynattn_key_value_cache_attrs_init(dynattn_key_value_cache_attrs_t* attrs);
/** Sets the defaults of dynattn::MultiHeadCacheAttentionAttrs. */
DYNATTN_EXPORT dynattn_status_t
dynattn_multi_head_cache_attention_attrs_init(dynattn_multi_head_cache_attention_attrs_t* attrs);
/** Sets the defaults of dynattn::UnifiedAttentionAttrs. */
DYNATTN_EXPORT dynattn_status_t
dynattn_unified_attention_attrs_init(dynattn_unified_attention_attrs_t* attrs);
/** Marks every tensor absent and cache_desc null. */
DYNATTN_EXPORT dynattn_status_t
dynattn_key_value_cache_args_init(dynattn_key_value_cache_args_t* args);
/** Marks every tensor absent. */
DYNATTN_EXPORT dynattn_status_t
dynattn_multi_head_attention_args_init(dynattn_multi_head_attention_args_t* args);
/** Marks every tensor absent and cache_desc null. */
DYNATTN_EXPORT dynattn_status_t
dynattn_multi_head_cache_attention_args_init(dynattn_multi_head_cache_attention_args_t* args);
/** Marks every tensor absent and cache null. */
DYNATTN_EXPORT dynattn_status_t
dynattn_unified_attention_args_init(dynattn_unified_attention_args_t* args);
/** Marks every tensor absent. */
DYNATTN_EXPORT dynattn_status_t dynattn_merge_states_args_init(dynattn_merge_states_args_t* args);

/* ------------------------------------------------------------------------------------------ */
/* One-shot ops. `options` may be null (defaults).                                            */

/** dynattn::KeyValueCache: writes the new tokens, gathers every context into key and value. */
DYNATTN_EXPORT dynattn_status_t dynattn_key_value_cache(
    const dynattn_key_value_cache_attrs_t* attrs, const dynattn_key_value_cache_args_t* args,
    const dynattn_run_options_t* options);
/** dynattn::MultiHeadAttention: attention of packed queries over packed keys and values. */
DYNATTN_EXPORT dynattn_status_t dynattn_multi_head_attention(
    const dynattn_attention_attrs_t* attrs, const dynattn_multi_head_attention_args_t* args,
    const dynattn_run_options_t* options);
/** dynattn::MultiHeadCacheAttention: writes the new tokens, attends over the cached contexts. */
DYNATTN_EXPORT dynattn_status_t dynattn_multi_head_cache_attention(
    const dynattn_multi_head_cache_attention_attrs_t* attrs,
    const dynattn_multi_head_cache_attention_args_t* args, const dynattn_run_options_t* options);
/** dynattn::UnifiedAttention: one mixed serving step over a block cache. */
DYNATTN_EXPORT dynattn_status_t dynattn_unified_attention(
    const dynattn_unified_attention_attrs_t* attrs, const dynattn_unified_attention_args_t* args,
    const dynattn_run_options_t* options);
/** dynattn::DescribeUnifiedStep: validates a step and describes its plan, writing nothing else. */
DYNATTN_EXPORT dynattn_status_t dynattn_describe_unified_step(
    const dynattn_unified_attention_attrs_t* attrs, const dynattn_unified_attention_args_t* args,
    dynattn_unified_step_summary_t* summary);
/** dynattn::MergeStates: exact merge of partial attention states. */
DYNATTN_EXPORT dynattn_status_t dynattn_merge_states(const dynattn_merge_states_args_t* args,
                                                     const dynattn_run_options_t* options);

/* ------------------------------------------------------------------------------------------ */
/* Contexts and plans (dynattn/plan.h): plan once per step, run once per layer.               */

/** Opaque dynattn::Context: threads, scratch, workspace. Used by one thread at a time. */
typedef struct dynattn_context_t dynattn_context_t;
/** Opaque dynattn::Plan: a validated, planned step of one op; empty until a plan_* call. */
typedef struct dynattn_plan_t dynattn_plan_t;

/** Context options (dynattn::ContextOptions). */
typedef struct dynattn_context_options_t {
  int num_threads;   /**< CPU worker threads, the caller's included; 0 = all cores. */
  void* cuda_stream; /**< CUDA backend: the cudaStream_t to use; null = the default stream. */
  bool pin_threads;  /**< Pin the arena's threads to CPUs while a call runs (default false). */
} dynattn_context_options_t;

/** Sets the defaults (0 threads = all cores, default stream). */
DYNATTN_EXPORT dynattn_status_t dynattn_context_options_init(dynattn_context_options_t* options);
/** Creates a context (`options` may be null: defaults) into `*out`; free it with
 *  dynattn_context_destroy. `*out` is untouched on failure. */
DYNATTN_EXPORT dynattn_status_t dynattn_context_create(const dynattn_context_options_t* options,
                                                       dynattn_context_t** out);
/** Destroys a context; null is a no-op. Cannot fail. */
DYNATTN_EXPORT void dynattn_context_destroy(dynattn_context_t* context);
/** Worker threads of the context (0 resolved to the core count). */
DYNATTN_EXPORT dynattn_status_t dynattn_context_num_threads(const dynattn_context_t* context,
                                                            int* out);
/** Host bytes the context holds for partial states and scratch. */
DYNATTN_EXPORT dynattn_status_t dynattn_context_workspace_bytes(const dynattn_context_t* context,
                                                                size_t* out);

/** Creates an empty plan into `*out`; free it with dynattn_plan_destroy. A plan may be planned
 *  again (any op); that replaces what it held. */
DYNATTN_EXPORT dynattn_status_t dynattn_plan_create(dynattn_plan_t** out);
/** Destroys a plan; null is a no-op. Cannot fail. */
DYNATTN_EXPORT void dynattn_plan_destroy(dynattn_plan_t* plan);
/** The op planned ("KeyValueCache", ...), or null when the plan is empty. The string is static. */
DYNATTN_EXPORT dynattn_status_t dynattn_plan_op(const dynattn_plan_t* plan, const char** out);
/** The dispatch-table row that runs it ("cpu/int8", ...), or null when empty. Static string. */
DYNATTN_EXPORT dynattn_status_t dynattn_plan_backend(const dynattn_plan_t* plan, const char** out);
/** The numerics tier its kernels run (dynattn::Plan::precision): FAST only where the call asked
 *  for it and a fast kernel serves it on this machine; EXACT for an empty plan. */
DYNATTN_EXPORT dynattn_status_t dynattn_plan_precision(const dynattn_plan_t* plan,
                                                       dynattn_precision_t* out);
/** Partial-state bytes a context needs to run it. */
DYNATTN_EXPORT dynattn_status_t dynattn_plan_workspace_bytes(const dynattn_plan_t* plan,
                                                             size_t* out);
/** The unified plan's step summary; INVALID_ARGUMENT when the plan is not a unified one. */
DYNATTN_EXPORT dynattn_status_t dynattn_plan_unified_summary(const dynattn_plan_t* plan,
                                                             dynattn_unified_step_summary_t* out);

/** Score attributes that may change from layer to layer of one plan (dynattn::LayerAttrs): a
 *  run_*_layer call uses all four instead of the plan's. Start from dynattn_plan_layer_attrs. */
typedef struct dynattn_layer_attrs_t {
  int window_left;        /**< Sliding window: -1 off; W >= 0: keys i - W <= j <= i. */
  float logits_soft_cap;  /**< 0 off; cap > 0: s = cap * tanh(s0 / cap). */
  float softmax_scale;    /**< 0: 1 / sqrt(head_dim); else finite > 0. */
  dynattn_tensor_t sinks; /**< Optional fp32 (Hq) sinks in host memory (rank -1: none). */
} dynattn_layer_attrs_t;

/** The attributes `plan` was made with (its sinks view the plan's copy, valid while it lives). */
DYNATTN_EXPORT dynattn_status_t dynattn_plan_layer_attrs(const dynattn_plan_t* plan,
                                                         dynattn_layer_attrs_t* out);

/** dynattn::PlanKeyValueCache: validates and plans (writes nothing). */
DYNATTN_EXPORT dynattn_status_t
dynattn_plan_key_value_cache(const dynattn_key_value_cache_attrs_t* attrs,
                             const dynattn_key_value_cache_args_t* args, dynattn_plan_t* plan);
/** dynattn::RunKeyValueCache: runs the plan on `args`' data tensors in `context`. */
DYNATTN_EXPORT dynattn_status_t
dynattn_run_key_value_cache(const dynattn_plan_t* plan, const dynattn_key_value_cache_args_t* args,
                            dynattn_context_t* context);
/** dynattn::PlanMultiHeadAttention. */
DYNATTN_EXPORT dynattn_status_t dynattn_plan_multi_head_attention(
    const dynattn_attention_attrs_t* attrs, const dynattn_multi_head_attention_args_t* args,
    dynattn_plan_t* plan);
/** dynattn::RunMultiHeadAttention. */
DYNATTN_EXPORT dynattn_status_t dynattn_run_multi_head_attention(
    const dynattn_plan_t* plan, const dynattn_multi_head_attention_args_t* args,
    dynattn_context_t* context);
/** dynattn_run_multi_head_attention with `layer`'s attributes (null: the plan's). */
DYNATTN_EXPORT dynattn_status_t dynattn_run_multi_head_attention_layer(
    const dynattn_plan_t* plan, const dynattn_multi_head_attention_args_t* args,
    const dynattn_layer_attrs_t* layer, dynattn_context_t* context);
/** dynattn::PlanMultiHeadCacheAttention. */
DYNATTN_EXPORT dynattn_status_t dynattn_plan_multi_head_cache_attention(
    const dynattn_multi_head_cache_attention_attrs_t* attrs,
    const dynattn_multi_head_cache_attention_args_t* args, dynattn_plan_t* plan);
/** dynattn::RunMultiHeadCacheAttention. */
DYNATTN_EXPORT dynattn_status_t dynattn_run_multi_head_cache_attention(
    const dynattn_plan_t* plan, const dynattn_multi_head_cache_attention_args_t* args,
    dynattn_context_t* context);
/** dynattn_run_multi_head_cache_attention with `layer`'s attributes (null: the plan's). */
DYNATTN_EXPORT dynattn_status_t dynattn_run_multi_head_cache_attention_layer(
    const dynattn_plan_t* plan, const dynattn_multi_head_cache_attention_args_t* args,
    const dynattn_layer_attrs_t* layer, dynattn_context_t* context);
/** dynattn::PlanUnifiedAttention. */
DYNATTN_EXPORT dynattn_status_t
dynattn_plan_unified_attention(const dynattn_unified_attention_attrs_t* attrs,
                               const dynattn_unified_attention_args_t* args, dynattn_plan_t* plan);
/** dynattn::RunUnifiedAttention. */
DYNATTN_EXPORT dynattn_status_t dynattn_run_unified_attention(
    const dynattn_plan_t* plan, const dynattn_unified_attention_args_t* args,
    dynattn_context_t* context);
/** dynattn_run_unified_attention with `layer`'s attributes (null: the plan's). */
DYNATTN_EXPORT dynattn_status_t dynattn_run_unified_attention_layer(
    const dynattn_plan_t* plan, const dynattn_unified_attention_args_t* args,
    const dynattn_layer_attrs_t* layer, dynattn_context_t* context);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* DYNATTN_C_API_H_ */
