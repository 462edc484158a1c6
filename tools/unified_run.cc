// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// `dynattn run unified_attention` (see the header). As for the other ops, the tool only shapes
// the outputs and leaves every rule to the library, so that a file-driven run rejects exactly
// what a direct call rejects, with the library's message naming the input.

#include "tools/unified_run.h"

#include <vector>

#include "dynattn/plan.h"
#include "dynattn/unified.h"

namespace dynattn::cli {
namespace {

using run_support::Arrays;
using run_support::Attributes;

UnifiedAttentionAttrs MakeUnifiedAttrs(const Attributes& attributes) {
  UnifiedAttentionAttrs attrs;
  attrs.num_heads = attributes.at("num_heads");
  attrs.head_dim = attributes.at("head_dim");
  attrs.num_kv_heads = attributes.at("num_kv_heads");
  attrs.is_alibi = attributes.at("is_alibi") != 0;
  run_support::SetScoreAttrs(attributes, &attrs);
  return attrs;
}

// The block cache of the `cache` tensor and the optional `scale` tensor.
Status MakeBlockCache(const Attributes& attributes, const UnifiedAttentionAttrs& attrs,
                      const TensorLookup& tensor, BlockCache* cache) {
  const int num_kv_heads = attrs.num_kv_heads > 0 ? attrs.num_kv_heads : attrs.num_heads;
  return MakePmxBlockCache(tensor("cache"), tensor("scale"),
                           run_support::MakeCacheAttrs(attributes), num_kv_heads, attrs.head_dim,
                           attributes.at("block_size"), cache);
}

}  // namespace

Status CallUnifiedAttention(const Attributes& attributes, const RunOptions& options, Arrays& inputs,
                            run_support::PendingOutputs* pending, Arrays* outputs) {
  const NpyArray& query = inputs.at("query");
  pending->Add("attn_output", query.dtype, run_support::AttentionOutputShape(query));
  run_support::AddLseIfAsked(attributes, query, pending);
  const UnifiedAttentionAttrs attrs = MakeUnifiedAttrs(attributes);
  BlockCache cache;
  DYNATTN_RETURN_IF_ERROR(MakeBlockCache(attributes, attrs, pending->Lookup(inputs), &cache));
  return run_support::PlanAllocateRun(
      options, inputs, pending, outputs,
      [&](const TensorLookup& t, Plan* plan) {
        return PlanUnifiedAttention(attrs, UnifiedAttentionArgsByName(t, &cache), plan);
      },
      [&](const Plan& plan, const TensorLookup& t, Context* context) {
        return RunUnifiedAttention(plan, UnifiedAttentionArgsByName(t, &cache), context);
      });
}

}  // namespace dynattn::cli
