// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Each op's tensors, listed once: the name map (dynattn/named_args.h), the C API's translation,
// the aliasing rule, what a plan records and each Run checks, and the Python bindings' outputs
// are generated from these lists, so an input is added to an op by adding its member to the op's
// Args struct and one row here (then the rule that validates it and the code that consumes it).
//
//   X(member, Role): the Args member, also the tensor's name everywhere (spec, C, Python, CLI)
//     Read     a data tensor the call reads; a Run must pass one like the plan's
//     Mask     the attention mask: read like a Read tensor, but optional (absent: no mask)
//     Index    an index tensor (int64 or int32, widened once), read and copied when planned
//     Offsets  an optional index tensor, read like Index (absent: its documented default)
//     Host     a small fp32 input in host memory (sinks, fp8 scales), read when planned
//     Written  an output
//     Cache    the PMX cache tensor, updated in place (ignored when a raw CacheDesc is passed)
//     Scale    the PMX cache's group scales, updated in place when the cache is quantized
//
// The order is the documented order of each op's tensors.

#ifndef DYNATTN_OP_SIGNATURES_H_
#define DYNATTN_OP_SIGNATURES_H_

// clang-format off
#define DYNATTN_KEY_VALUE_CACHE_TENSORS(X) \
  X(current_key, Read)                     \
  X(current_value, Read)                   \
  X(seqstarts, Index)                      \
  X(kvstarts, Index)                       \
  X(cachestarts, Index)                    \
  X(start_pos, Index)                      \
  X(max_seqlen, Index)                     \
  X(max_kvlen, Index)                      \
  X(cache, Cache)                          \
  X(scale, Scale)                          \
  X(k_scale, Host)                        \
  X(v_scale, Host)                        \
  X(key, Written)                          \
  X(value, Written)

#define DYNATTN_MULTI_HEAD_ATTENTION_TENSORS(X) \
  X(query, Read)                                \
  X(key, Read)                                  \
  X(value, Read)                                \
  X(seqstarts, Index)                           \
  X(kvstarts, Index)                            \
  X(decoding_batches, Index)                    \
  X(max_seqlen, Index)                          \
  X(max_kvlen, Index)                           \
  X(attn_mask, Mask)                            \
  X(sinks, Host)                                \
  X(alibi_slopes, Host)                         \
  X(attn_output, Written)                       \
  X(lse, Written)

#define DYNATTN_MULTI_HEAD_CACHE_ATTENTION_TENSORS(X) \
  X(query, Read)                                      \
  X(current_key, Read)                                \
  X(current_value, Read)                              \
  X(seqstarts, Index)                                 \
  X(kvstarts, Index)                                  \
  X(cachestarts, Index)                               \
  X(start_pos, Index)                                 \
  X(key_offsets, Offsets)                             \
  X(decoding_batches, Index)                          \
  X(max_seqlen, Index)                                \
  X(max_kvlen, Index)                                 \
  X(cache, Cache)                                     \
  X(scale, Scale)                                     \
  X(k_scale, Host)                                   \
  X(v_scale, Host)                                   \
  X(attn_mask, Mask)                                  \
  X(sinks, Host)                                      \
  X(alibi_slopes, Host)                               \
  X(attn_output, Written)                             \
  X(lse, Written)

#define DYNATTN_UNIFIED_ATTENTION_TENSORS(X) \
  X(query, Read)                             \
  X(current_key, Read)                       \
  X(current_value, Read)                     \
  X(query_start_loc, Index)                  \
  X(context_lens, Index)                     \
  X(block_table, Index)                      \
  X(key_offsets, Offsets)                    \
  X(key_counts, Offsets)                     \
  X(k_scale, Host)                          \
  X(v_scale, Host)                          \
  X(sinks, Host)                             \
  X(alibi_slopes, Host)                      \
  X(attn_output, Written)                    \
  X(lse, Written)
// Each attribute struct's fields, listed once (the C API's structs name them alike), but
// `precision`, an enum the C API converts and checks on its own (dynattn_precision_t).
#define DYNATTN_ATTENTION_ATTRS(X)                                                              \
  X(num_heads) X(num_kv_heads) X(head_dim) X(is_causal) X(is_alibi) X(window_left)             \
  X(logits_soft_cap) X(softmax_scale) X(head_dim_v) X(value_from_key)

#define DYNATTN_UNIFIED_ATTENTION_ATTRS(X)                                                      \
  X(num_heads) X(num_kv_heads) X(head_dim) X(is_alibi) X(window_left) X(logits_soft_cap)       \
  X(softmax_scale) X(head_dim_v) X(value_from_key)

#define DYNATTN_CACHE_ATTRS(X)                                                                  \
  X(num_layer) X(layer_idx) X(quant_bit) X(quant_group) X(cache_mode) X(cache_layout)          \
  X(page_size)
// clang-format on

#endif  // DYNATTN_OP_SIGNATURES_H_
