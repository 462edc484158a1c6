// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Random valid cases for the three PMX ops across the whole attribute matrix of the PMX ops spec
// (docs/numerics.md), so that libdynattn can be compared with the reference on inputs nobody wrote
// by hand. Every case is valid per §7.3/§12, and every byte a correct implementation must not read
// (unwritten cache slots, other layers, mask padding and off-block entries) is garbage, NaN and
// Inf included.

#ifndef DYNATTN_REFERENCE_CASE_GEN_H_
#define DYNATTN_REFERENCE_CASE_GEN_H_

#include <cstdint>
#include <string>

#include "reference/reference.h"

namespace dynattn_ref {

struct Case {
  std::string op;  // "key_value_cache" | "multi_head_attention" | "multi_head_cache_attention"
  Attrs attrs;
  Tensors inputs;           // named as the spec's inputs; optional ones absent when unused
  std::string description;  // one line summarising the attributes, for failure messages
};

// Attributes fixed instead of drawn (the golden matrix, reference/golden_matrix.h). Each
// is applied after the value it replaces was drawn, so a case drawn without pins is exactly the
// case it always was. The caller keeps pins consistent (int4 needs an even head_dim).
struct Pins {
  int head_dim = 0;       // > 0: D
  int gqa_ratio = 0;      // > 0: Hq / Hkv
  int cache_elem = -1;    // 0 fp32, 1 fp16, 2 int8, 3 int4 (quant_bit 0, 0, 8, 4), 4 bf16,
                          // 5 fp8_e4m3, 6 fp8_e5m2 (quant_bit 0)
  int cache_layout = -1;  // 0..3
  int cache_mode = -1;    // 0 offsets, 1 pages (not unified attention, which is always paged)
  int alibi = -1;         // 0 or 1; 2: ALiBi with drawn slopes given as alibi_slopes (is_alibi 0)
  int mask_rank = -1;     // 0 (none), 2 or 3 (attention ops)
  int step = 0;           // 0 drawn, 1 decode (every request one new token), 2 prefill (no decode)
  // The serving features (drawn only when GenOptions::serving_features is set, else off unless
  // pinned).
  int t1 = -1;              // 0 fp32, 1 fp16, 2 bf16 activations
  int window = -2;          // -2 drawn, -1 off, >= 0: window_left
  int soft_cap = -1;        // -1 drawn, 0 off, 1 on (a drawn cap)
  int softmax_scale = -1;   // -1 drawn, 0 default 1/sqrt(D), 1 a drawn scale
  int sinks = -1;           // -1 drawn, 0 absent, 1 present
  int fp8_scales = -1;      // fp8 caches: -1 drawn, 0 k_scale/v_scale absent, 1 present
  int head_dim_v = -1;      // multi_head_attention: -1 drawn (GenOptions::value_head_dims), 0 D,
                            // > 0: Dv
  int value_from_key = -1;  // multi_head_attention: -1 drawn with head_dim_v, 0 off, 1 on (no
                            // value input: the keys' first Dv elements)
  int precision = 0;        // attention ops: 0 exact, 1 fast (precision=fast)
  int quant_group = 0;      // > 0: G of an int8/int4 cache (a divisor of D, even for int4)
};

struct GenOptions {
  int max_batch = 6;            // requests per step (a step is occasionally empty, B = 0)
  int max_seqlen = 40;          // new tokens of one request
  int max_context = 200;        // kvlen of one request
  bool small = false;           // caps B <= 3, seqlen <= 8, context <= 24, D <= 16, Hq <= 4, L <= 2
  bool lane_head_dims = false;  // D only among the multiples of 16 (the fused decode kernel's)
  Pins pins;                    // attributes fixed instead of drawn
  // Also draw the serving features: bf16 activations, bf16 and fp8 caches (with k_scale/v_scale),
  // sliding windows, logit soft-caps, softmax scales and sinks. They come from a random stream of
  // their own, so turning them off gives the cases drawn before they existed.
  bool serving_features = true;
  // multi_head_attention: also draw value rows of another size Dv than D (head_dim_v), and
  // values that are the keys' first Dv elements (value_from_key), from a stream of their own
  // (off: the cases drawn before it existed).
  bool value_head_dims = false;
};

// A random valid case of `op`; identical for identical (op, seed, options).
//   * T1 fp32/fp16; D in {1..256} (small D more likely); GQA ratio 1..8 with Hq <= 16.
//   * Requests: decoding ones first (seqlen 1, `decoding_batches` of them), then prefill
//     (start_pos 0), chunked prefill (start_pos > 0), empty (seqlen 0, kvlen 0) and idle
//     (seqlen 0, kvlen > 0) ones. max_seqlen/max_kvlen are >= the true maxima.
//   * Cache ops: quant_bit 0 (fp32/fp16 cache), 8, 4; scale fp16/fp32; G any (even for int4)
//     divisor of D; cache_mode 0 (random non-overlapping cachestarts) or 1 (pages at random
//     non-overlapping token offsets, unused entries -1), page_size in {1,2,3,5,16,128}, layouts
//     0-3, num_layer 1-3. Past-context slots hold properly quantized data, the rest is garbage.
//     For key_value_cache the GQA ratio is num_repeat and Hkv is current_key's head count.
//   * Attention ops: is_causal, is_alibi, attn_mask absent / rank 2 / rank 3 with 0..17 padding
//     columns, -inf entries and some fully -inf rows.
//   * Serving features (GenOptions::serving_features): T1 bf16 in a third of the cases; a plain
//     cache is bf16 or fp8 (e4m3fn / e5m2, k_scale / v_scale absent or drawn, non-powers of two
//     included) in half of them; window_left (0, 1, small, or beyond the context),
//     logits_soft_cap (0.5 .. 50), softmax_scale and sinks (f32 (Hq), some large enough to
//     dominate) each in about a third.
Case RandomCase(const std::string& op, uint64_t seed, const GenOptions& options = {});

// A random valid unified-attention step (unified-and-ksana §1, §6): prompts, prompt chunks,
// decodes, multi-token decodes and idle requests mixed; groups of requests sharing prefix blocks;
// block ids permuted among up to a few hundred blocks; block sizes 1-32; every cache format,
// layout and layer of RandomCase (bf16 and fp8 included); ALiBi, windows, soft-caps, scales and
// sinks sometimes. Cached context is written by a reference
// KeyValueCache history step, every other cache byte (and unused table entry) is garbage.
// Inputs as dynattn_ref::UnifiedAttention names them; attrs.block_size is set.
Case RandomUnifiedCase(uint64_t seed, const GenOptions& options = {});

}  // namespace dynattn_ref

#endif  // DYNATTN_REFERENCE_CASE_GEN_H_
