// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The one place that knows which spec name goes to which field of each op's arguments.

#include "dynattn/named_args.h"

namespace dynattn {

KeyValueCacheArgs KeyValueCacheArgsByName(const TensorLookup& tensor) {
  KeyValueCacheArgs a;
  a.current_key = tensor("current_key");
  a.current_value = tensor("current_value");
  a.seqstarts = tensor("seqstarts");
  a.kvstarts = tensor("kvstarts");
  a.cachestarts = tensor("cachestarts");
  a.start_pos = tensor("start_pos");
  a.max_seqlen = tensor("max_seqlen");
  a.max_kvlen = tensor("max_kvlen");
  a.cache = tensor("cache");
  a.scale = tensor("scale");
  a.k_scale = tensor("k_scale");
  a.v_scale = tensor("v_scale");
  a.key = tensor("key");
  a.value = tensor("value");
  return a;
}

MultiHeadAttentionArgs MultiHeadAttentionArgsByName(const TensorLookup& tensor) {
  MultiHeadAttentionArgs a;
  a.query = tensor("query");
  a.key = tensor("key");
  a.value = tensor("value");
  a.seqstarts = tensor("seqstarts");
  a.kvstarts = tensor("kvstarts");
  a.decoding_batches = tensor("decoding_batches");
  a.max_seqlen = tensor("max_seqlen");
  a.max_kvlen = tensor("max_kvlen");
  a.attn_mask = tensor("attn_mask");
  a.sinks = tensor("sinks");
  a.attn_output = tensor("attn_output");
  return a;
}

MultiHeadCacheAttentionArgs MultiHeadCacheAttentionArgsByName(const TensorLookup& tensor) {
  MultiHeadCacheAttentionArgs a;
  a.query = tensor("query");
  a.current_key = tensor("current_key");
  a.current_value = tensor("current_value");
  a.seqstarts = tensor("seqstarts");
  a.kvstarts = tensor("kvstarts");
  a.cachestarts = tensor("cachestarts");
  a.start_pos = tensor("start_pos");
  a.decoding_batches = tensor("decoding_batches");
  a.max_seqlen = tensor("max_seqlen");
  a.max_kvlen = tensor("max_kvlen");
  a.cache = tensor("cache");
  a.scale = tensor("scale");
  a.k_scale = tensor("k_scale");
  a.v_scale = tensor("v_scale");
  a.attn_mask = tensor("attn_mask");
  a.sinks = tensor("sinks");
  a.attn_output = tensor("attn_output");
  return a;
}

UnifiedAttentionArgs UnifiedAttentionArgsByName(const TensorLookup& tensor,
                                                const BlockCache* cache) {
  UnifiedAttentionArgs a;
  a.query = tensor("query");
  a.current_key = tensor("current_key");
  a.current_value = tensor("current_value");
  a.query_start_loc = tensor("query_start_loc");
  a.context_lens = tensor("context_lens");
  a.block_table = tensor("block_table");
  a.cache = cache;
  a.k_scale = tensor("k_scale");
  a.v_scale = tensor("v_scale");
  a.sinks = tensor("sinks");
  a.attn_output = tensor("attn_output");
  a.lse = tensor("lse");
  return a;
}

}  // namespace dynattn
