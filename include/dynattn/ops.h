// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The three OpenPPL PMX dynamic-batching ops (spec: the PMX ops spec (docs/numerics.md)).
//
// Inputs are packed: request b owns query rows [seqstarts[b], seqstarts[b+1]) and context rows
// [kvstarts[b], kvstarts[b+1]). Every call validates all of its inputs before it writes anything;
// on error it returns a Status naming the input and the rule, and leaves the cache, the scales and
// every output byte-for-byte untouched.
//
// Aliasing rule: no buffer a call writes (the cache and its scales, every output) may share memory
// with any other tensor of the call, read or written; the cache's in-place update of itself is
// the one exception. A violation is an InvalidArgument naming both tensors. The memory behind a
// raw `CacheDesc` (or `BlockCache`) is trusted by design: its extent is unknown to the library,
// so it is not checked against the other tensors.

#ifndef DYNATTN_OPS_H_
#define DYNATTN_OPS_H_

#include "dynattn/cache.h"
#include "dynattn/export.h"
#include "dynattn/status.h"
#include "dynattn/types.h"

namespace dynattn {

/// Execution options shared by every op. Results never depend on them.
struct RunOptions {
  int num_threads = 0;       ///< Worker threads; 0 = all the machine's cores.
  bool pin_threads = false;  ///< Pin threads to CPUs while the call runs (ContextOptions).
};

/// Attention attributes (spec §5, §6), with the PPLNN parser's defaults. Fields shared with
/// UnifiedAttentionAttrs come in the same order: heads, KV heads, head size, then the flags.
struct AttentionAttrs {
  int num_heads = 0;      ///< Query heads Hq.
  int num_kv_heads = 0;   ///< Hkv; 0 means Hq. Hq must be a multiple of Hkv (GQA).
  int head_dim = 0;       ///< Dk: queries and keys, any value >= 1.
  bool is_causal = true;  ///< Bottom-right causal mask for requests b >= decoding_batches.
  /// ALiBi bias with its built-in causal -inf (spec §5.5 [REC]), with the standard slopes of a
  /// model of num_heads heads; an `alibi_slopes` input turns it on with its own slopes instead.
  bool is_alibi = false;
  /// Sliding window: -1 = off; W >= 0 lets the query at position i see keys
  /// max(0, i - W) <= j <= i only (a Mistral window of N tokens is N - 1).
  int window_left = -1;
  /// Logit soft-cap: 0 = off; cap > 0 turns a score s0 into cap * tanh(s0 / cap) (Gemma 2),
  /// before ALiBi and the mask.
  float logits_soft_cap = 0.0f;
  /// Score scale: 0 = 1 / sqrt(head_dim); else any finite value > 0 (Gemma's query_pre_attn).
  float softmax_scale = 0.0f;
  /// Dv: elements of a value and an output row; 0 (the default) = head_dim. Last, so that
  /// positional initialisers written before it keep their meaning.
  int head_dim_v = 0;
  /// The values are the first head_dim_v elements of each key, read from the same bytes
  /// (multi-head latent attention's absorbed form: one latent head of kv_lora_rank + rope_dim
  /// elements, its first kv_lora_rank the values). MultiHeadAttention then takes no `value`, the
  /// cache ops no `current_value`, and a cache's value plane is its key plane: only keys are
  /// written. Needs head_dim_v <= head_dim and a cache_desc (a PMX cache tensor has a value half).
  bool value_from_key = false;
  /// The numerics tier the call may use: kExact (default) or the opt-in kFast (Precision).
  Precision precision = Precision::kExact;
};

/// `KeyValueCache` attributes (spec §4).
struct KeyValueCacheAttrs {
  CacheAttrs cache;    ///< Cache format, addressing and layout.
  int num_repeat = 1;  ///< GQA expansion of the gathered heads: output head o = kv head o / R.
};

/// `MultiHeadCacheAttention` attributes (spec §6).
struct MultiHeadCacheAttentionAttrs {
  AttentionAttrs attention;  ///< Heads, causal, ALiBi.
  CacheAttrs cache;          ///< Cache format, addressing and layout.
};

/// `KeyValueCache` tensors. Index tensors (offsets, tables, scalars) are int64 or int32 (as engines
/// pass them; an int32 tensor is widened once, when the call is planned); scalars are 0-d (or
/// one-element).
struct KeyValueCacheArgs {
  TensorView current_key;    ///< (Tq, Hkv, D), fp32, fp16 or bf16: the new tokens' keys.
  TensorView current_value;  ///< (Tq, Hkv, D), same dtype.
  TensorView seqstarts;      ///< (B+1): query-row offsets.
  TensorView kvstarts;       ///< (B+1): context-row offsets; kvlen_b = start_pos_b + seqlen_b.
  TensorView cachestarts;    ///< Mode 0: (B) slot of p = 0. Mode 1: (B, MaxP) page starts.
  TensorView start_pos;      ///< (B): logical position of each request's first new token.
  TensorView max_seqlen;     ///< Scalar hint (checked >= the true maximum).
  TensorView max_kvlen;      ///< Scalar hint (checked >= the true maximum).
  TensorView cache;          ///< In/out PMX cache (rank 5); ignored when `cache_desc` is set.
  TensorView scale;          ///< In/out group scales; required iff quant_bit != 0.
  TensorView k_scale;        ///< fp8 caches: optional 0-d fp32 key scale (default: the desc's).
  TensorView v_scale;        ///< fp8 caches: optional 0-d fp32 value scale.
  const CacheDesc* cache_desc = nullptr;  ///< Optional raw descriptor replacing cache/scale.
  TensorView key;    ///< Out (kvstarts[B], Hkv * num_repeat, D), dtype of current_key.
  TensorView value;  ///< Out, same shape and dtype.
};

/// `MultiHeadAttention` tensors.
struct MultiHeadAttentionArgs {
  TensorView query;             ///< (Tq, Hq, D), fp32, fp16 or bf16.
  TensorView key;               ///< (kvstarts[B], Hkv, D), dtype of query.
  TensorView value;             ///< (kvstarts[B], Hkv, D), dtype of query.
  TensorView seqstarts;         ///< (B+1).
  TensorView kvstarts;          ///< (B+1); kvlen_b >= seqlen_b.
  TensorView decoding_batches;  ///< Scalar: the first requests, never causally masked.
  TensorView max_seqlen;        ///< Scalar hint.
  TensorView max_kvlen;         ///< Scalar hint.
  TensorView attn_mask;         ///< Optional additive mask (Tq, >=kvstarts[B]) or (Hq, Tq, ...).
  TensorView sinks;             ///< Optional fp32 (Hq): per-head attention sinks (CPU memory).
  TensorView alibi_slopes;      ///< Optional fp32 (Hq) ALiBi slopes (CPU memory); turns ALiBi on.
  TensorView attn_output;       ///< Out (Tq, Hq, D), dtype of query.
  TensorView lse;  ///< Optional out (Tq, Hq) fp32: natural-log log-sum-exp of each row's scores.
};

/// `MultiHeadCacheAttention` tensors: KeyValueCache, then attention over the dequantized cache.
struct MultiHeadCacheAttentionArgs {
  TensorView query;          ///< (Tq, Hq, D), fp32, fp16 or bf16.
  TensorView current_key;    ///< (Tq, Hkv, D), dtype of query.
  TensorView current_value;  ///< (Tq, Hkv, D), dtype of query.
  TensorView seqstarts;      ///< (B+1).
  TensorView kvstarts;       ///< (B+1); kvlen_b = start_pos_b + seqlen_b.
  TensorView cachestarts;    ///< Mode 0: (B). Mode 1: (B, MaxP).
  TensorView start_pos;      ///< (B).
  /// Optional (B): a context shard's offsets. Request b's context (kvlen_b keys) holds positions
  /// [key_offsets[b], key_offsets[b] + kvlen_b) of the whole request, start_pos[b] is its new
  /// tokens' first position in the whole request, and only the new tokens inside the context are
  /// written (docs/numerics.md, "Context shards").
  TensorView key_offsets;
  TensorView decoding_batches;            ///< Scalar.
  TensorView max_seqlen;                  ///< Scalar hint.
  TensorView max_kvlen;                   ///< Scalar hint.
  TensorView cache;                       ///< In/out PMX cache; ignored when `cache_desc` is set.
  TensorView scale;                       ///< In/out scales; required iff quant_bit != 0.
  TensorView attn_mask;                   ///< Optional additive mask.
  TensorView sinks;                       ///< Optional fp32 (Hq) attention sinks (CPU memory).
  TensorView k_scale;                     ///< fp8 caches: optional 0-d fp32 key scale.
  TensorView v_scale;                     ///< fp8 caches: optional 0-d fp32 value scale.
  TensorView alibi_slopes;                ///< Optional fp32 (Hq) ALiBi slopes (CPU memory).
  const CacheDesc* cache_desc = nullptr;  ///< Optional raw descriptor replacing cache/scale.
  TensorView attn_output;                 ///< Out (Tq, Hq, D), dtype of query.
  TensorView lse;  ///< Optional out (Tq, Hq) fp32: natural-log log-sum-exp of each row's scores.
};

/// Writes the new tokens into the cache (quantizing them), then gathers every request's whole
/// context, dequantized, into `key` and `value`.
DYNATTN_EXPORT Status KeyValueCache(const KeyValueCacheAttrs& attrs, const KeyValueCacheArgs& args,
                                    const RunOptions& options = {});

/// Attention of packed queries over packed keys and values.
DYNATTN_EXPORT Status MultiHeadAttention(const AttentionAttrs& attrs,
                                         const MultiHeadAttentionArgs& args,
                                         const RunOptions& options = {});

/// KeyValueCache and MultiHeadAttention fused: writes the new tokens, then attends over each
/// request's dequantized context read straight from the cache.
DYNATTN_EXPORT Status MultiHeadCacheAttention(const MultiHeadCacheAttentionAttrs& attrs,
                                              const MultiHeadCacheAttentionArgs& args,
                                              const RunOptions& options = {});

}  // namespace dynattn

#endif  // DYNATTN_OPS_H_
