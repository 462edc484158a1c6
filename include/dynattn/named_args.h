// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Binding tensors to an op by the spec's input and output names, for callers that hold their
// tensors in a name -> tensor map (the CLI's .npy folders, framework bindings, test harnesses).

#ifndef DYNATTN_NAMED_ARGS_H_
#define DYNATTN_NAMED_ARGS_H_

#include <functional>
#include <string>

#include "dynattn/export.h"
#include "dynattn/ops.h"
#include "dynattn/unified.h"

namespace dynattn {

/// Returns the tensor called `name`, or an absent view (`TensorView{}`) when there is none.
using TensorLookup = std::function<TensorView(const std::string& name)>;

/// KeyValueCache: inputs current_key, current_value, seqstarts, kvstarts, cachestarts,
/// start_pos, max_seqlen, max_kvlen, cache, scale, k_scale, v_scale; outputs key, value.
DYNATTN_EXPORT KeyValueCacheArgs KeyValueCacheArgsByName(const TensorLookup& tensor);

/// MultiHeadAttention: inputs query, key, value, seqstarts, kvstarts, decoding_batches,
/// max_seqlen, max_kvlen, attn_mask, sinks; output attn_output.
DYNATTN_EXPORT MultiHeadAttentionArgs MultiHeadAttentionArgsByName(const TensorLookup& tensor);

/// MultiHeadCacheAttention: inputs query, current_key, current_value, seqstarts, kvstarts,
/// cachestarts, start_pos, decoding_batches, max_seqlen, max_kvlen, cache, scale, k_scale,
/// v_scale, attn_mask, sinks; output attn_output.
DYNATTN_EXPORT MultiHeadCacheAttentionArgs
MultiHeadCacheAttentionArgsByName(const TensorLookup& tensor);

/// UnifiedAttention: inputs query, current_key, current_value, query_start_loc, context_lens,
/// block_table, k_scale, v_scale, sinks (optional); outputs attn_output, lse (optional). The cache
/// is not a named tensor: pass its BlockCache (e.g. from MakePmxBlockCache).
DYNATTN_EXPORT UnifiedAttentionArgs UnifiedAttentionArgsByName(const TensorLookup& tensor,
                                                               const BlockCache* cache);

}  // namespace dynattn

#endif  // DYNATTN_NAMED_ARGS_H_
