// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The rules, in the order a caller would fix them: attributes; query and fresh K/V; the request
// offsets and context lengths; the block cache; every block id a request reads or writes; the
// slots the fresh tokens write (distinct, and not another request's context); the outputs.

#include "src/unified/unified_call.h"

#include <algorithm>
#include <string>
#include <utility>

#include "core/alibi.h"
#include "src/validate.h"

namespace dynattn::internal {
namespace {

using std::to_string;

Status CheckContextLens(const TensorView& t, int64_t requests) {
  DYNATTN_RETURN_IF_ERROR(CheckInt64Vector("context_lens", t, requests));
  const int64_t* c = t.As<const int64_t>();
  for (int64_t b = 0; b < requests; ++b) {
    if (c[b] < 0 || c[b] > (int64_t{1} << 40)) {
      return Status::Invalid("context_lens", "entry " + to_string(b) + " = " + to_string(c[b]) +
                                                 " must be in [0, 2^40]");
    }
  }
  return Status::Ok();
}

Status CheckBlockCache(const BlockCache* c, int kv_heads, int head_dim, int head_dim_v,
                       bool values_from_keys) {
  if (c == nullptr) return Status::Invalid("cache", "is required (a BlockCache)");
  if (c->block_size < 1) {
    return Status::Invalid("block_size", "must be >= 1, got " + to_string(c->block_size));
  }
  if (c->block_stride < 0 || c->num_blocks < 0) {
    return Status::Invalid("cache", "block_stride and num_blocks must be >= 0");
  }
  if (c->block_stride != 0 && c->block_stride < c->block_size) {
    return Status::Invalid("cache", "block_stride " + to_string(c->block_stride) +
                                        " must be 0 or >= block_size " + to_string(c->block_size) +
                                        " (blocks may not overlap)");
  }
  CacheAttrs attrs;
  attrs.quant_bit = c->cache.elem == CacheElem::kInt8   ? 8
                    : c->cache.elem == CacheElem::kInt4 ? 4
                                                        : 0;
  const CacheDesc desc = values_from_keys ? ValuesFromKeys(c->cache, head_dim_v) : c->cache;
  DYNATTN_RETURN_IF_ERROR(CheckRawDesc(desc, attrs, kv_heads, head_dim, head_dim_v));
  if (c->num_blocks > 0 &&
      (c->num_blocks - 1 > (c->cache.num_slots - c->block_size) / c->Stride() ||
       c->cache.num_slots < c->block_size)) {
    return Status::Invalid("cache", to_string(c->num_blocks) + " blocks of " +
                                        to_string(c->block_size) + " slots, " +
                                        to_string(c->Stride()) + " apart, need more than the " +
                                        to_string(c->cache.num_slots) + " slots of the cache");
  }
  return Status::Ok();
}

/// A request's keys in the call: `count` block positions, the first `cached` of them already in
/// the cache, then fresh tokens first_fresh, first_fresh + 1, ... of its query tokens (written).
/// Without a context shard: all context_lens[b] + q_len positions, fresh tokens from 0.
struct HeldKeys {
  int64_t count = 0, cached = 0, first_fresh = 0;
};

/// key_offsets and key_counts: both or neither, (B) each; the shard holds positions [o, o + n)
/// with 0 <= o, 0 <= n, o + n <= context_lens + q_len (no key after the newest token), all below
/// 2^46. Fills `held` (the whole request when there is no shard).
Status ReadHeldKeys(const UnifiedAttentionArgs& args, const UnifiedStep& s,
                    std::vector<HeldKeys>* held) {
  const bool shard = args.key_offsets.present() || args.key_counts.present();
  if (shard && !args.key_counts.present()) {
    return Status::Invalid("key_counts", "is required with key_offsets (a shard gives both)");
  }
  if (shard && !args.key_offsets.present()) {
    return Status::Invalid("key_offsets", "is required with key_counts (a shard gives both)");
  }
  if (shard) {
    DYNATTN_RETURN_IF_ERROR(CheckInt64Vector("key_offsets", args.key_offsets, s.num_requests));
    DYNATTN_RETURN_IF_ERROR(CheckInt64Vector("key_counts", args.key_counts, s.num_requests));
  }
  held->assign(static_cast<size_t>(s.num_requests), HeldKeys{});
  for (int64_t b = 0; b < s.num_requests; ++b) {
    const int64_t context = s.context_lens[b], end = context + s.QueryLen(b);
    if (!shard) {
      (*held)[b] = HeldKeys{end, context, 0};
      continue;
    }
    const int64_t offset = args.key_offsets.As<const int64_t>()[b];
    const int64_t count = args.key_counts.As<const int64_t>()[b];
    if (offset < 0 || offset >= kMaxPosition || count < 0 || count >= kMaxPosition) {
      return Status::Invalid("key_offsets", "request " + to_string(b) + ": offset " +
                                                to_string(offset) + " and count " +
                                                to_string(count) + " must lie in [0, 2^46)");
    }
    if (offset + count > end) {
      return Status::Invalid(
          "key_counts", "request " + to_string(b) + " holds positions [" + to_string(offset) +
                            ", " + to_string(offset + count) + ") past its last query token " +
                            to_string(end - 1) +
                            " (rule: key_offsets_b + key_counts_b <= context_lens_b + q_len_b)");
    }
    const int64_t cached = std::clamp<int64_t>(context - offset, 0, count);
    (*held)[b] = HeldKeys{count, cached, std::max<int64_t>(0, offset - context)};
  }
  return Status::Ok();
}

/// Every block a request reads or writes: in range, and not used twice by the request.
Status CheckBlockTable(const TensorView& table, const UnifiedStep& s,
                       const std::vector<HeldKeys>& held, int64_t num_blocks) {
  for (int64_t b = 0; b < s.num_requests; ++b) {
    const int64_t tokens = held[b].count;
    const int64_t blocks = s.QueryLen(b) == 0 ? 0 : (tokens + s.block_size - 1) / s.block_size;
    if (blocks > s.table_stride) {
      return Status::Invalid("block_table", "request " + to_string(b) + " needs " +
                                                to_string(blocks) + " blocks for " +
                                                to_string(tokens) + " tokens, the table has " +
                                                to_string(table.shape[1]) + " columns");
    }
    std::vector<int64_t> ids;
    for (int64_t j = 0; j < blocks; ++j) {
      const int64_t id = s.Block(b, j);
      if (id < 0 || id >= num_blocks) {
        return Status::Invalid("block_table", "entry [" + to_string(b) + ", " + to_string(j) +
                                                  "] = " + to_string(id) + " is outside [0, " +
                                                  to_string(num_blocks) + ")");
      }
      ids.push_back(id);
    }
    std::sort(ids.begin(), ids.end());
    const auto dup = std::adjacent_find(ids.begin(), ids.end());
    if (dup != ids.end()) {
      return Status::Invalid(
          "block_table", "request " + to_string(b) + " uses block " + to_string(*dup) + " twice");
    }
  }
  return Status::Ok();
}

/// Fresh tokens write distinct slots, and none writes a slot another request reads as context.
Status CheckWrites(const UnifiedStep& s, const std::vector<HeldKeys>& held) {
  // Slots numbered block * block_size + offset: equal exactly when (block, offset) are.
  std::vector<SlotWrite> writes;
  writes.reserve(static_cast<size_t>(s.Tokens()));
  for (int64_t b = 0; b < s.num_requests; ++b) {
    const HeldKeys& h = held[b];
    if (s.QueryLen(b) == 0) continue;
    for (int64_t pos = h.cached; pos < h.count; ++pos) {
      writes.push_back({s.Block(b, pos / s.block_size) * s.block_size + pos % s.block_size,
                        s.query_start_loc[b] + h.first_fresh + pos - h.cached});
    }
  }
  const auto where = [&](int64_t slot) {
    return "slot " + to_string(slot % s.block_size) + " of block " + to_string(slot / s.block_size);
  };
  DYNATTN_RETURN_IF_ERROR(CheckDistinctSlots("block_table", &writes, where));
  for (int64_t b = 0; b < s.num_requests; ++b) {
    const int64_t cached = held[b].cached;
    const int64_t context_blocks =
        s.QueryLen(b) == 0 ? 0 : (cached + s.block_size - 1) / s.block_size;
    for (int64_t j = 0; j < context_blocks; ++j) {
      const int64_t used = std::min(s.block_size, cached - j * s.block_size);
      const int64_t first_slot = s.Block(b, j) * s.block_size;
      const auto first =
          std::lower_bound(writes.begin(), writes.end(), first_slot,
                           [](const SlotWrite& w, int64_t slot) { return w.slot < slot; });
      if (first != writes.end() && first->slot < first_slot + used) {
        return Status::Invalid("block_table", "token " + to_string(first->row) + " writes " +
                                                  where(first->slot) + ", which request " +
                                                  to_string(b) + " reads as context");
      }
    }
  }
  return Status::Ok();
}

Status CheckInputs(const UnifiedAttentionAttrs& a, const UnifiedAttentionArgs& args,
                   int* kv_heads) {
  const AttentionAttrs heads{.num_heads = a.num_heads,
                             .num_kv_heads = a.num_kv_heads,
                             .head_dim = a.head_dim,
                             .is_causal = true,
                             .is_alibi = a.is_alibi,
                             .window_left = a.window_left,
                             .logits_soft_cap = a.logits_soft_cap,
                             .softmax_scale = a.softmax_scale,
                             .head_dim_v = a.head_dim_v,
                             .value_from_key = a.value_from_key,
                             .precision = a.precision};
  QueryShape q;
  DYNATTN_RETURN_IF_ERROR(
      CheckQueryAndNewTokens(heads, args.query, &args.current_key, &args.current_value, "T", &q));
  *kv_heads = q.kv_heads;
  const int64_t t = q.tokens;
  DYNATTN_RETURN_IF_ERROR(CheckStarts("query_start_loc", args.query_start_loc, -1));
  const int64_t* qsl = args.query_start_loc.As<const int64_t>();
  const int64_t requests = args.query_start_loc.shape[0] - 1;
  if (qsl[requests] != t) {
    return Status::Invalid("query_start_loc",
                           "last entry " + to_string(qsl[requests]) +
                               " must equal the query tokens T = " + to_string(t));
  }
  DYNATTN_RETURN_IF_ERROR(CheckContextLens(args.context_lens, requests));
  DYNATTN_RETURN_IF_ERROR(CheckStorage("block_table", args.block_table));
  if (args.block_table.present())
    DYNATTN_RETURN_IF_ERROR(CheckOnHost("block_table", args.block_table));
  if (!args.block_table.present() || args.block_table.dtype != DType::kI64 ||
      args.block_table.rank != 2 || args.block_table.shape[0] != requests) {
    return Status::Invalid(
        "block_table",
        "must be int64 or int32 of shape (B = " + to_string(requests) + ", max_blocks), got " +
            (args.block_table.present() ? std::string(DTypeName(args.block_table.dtype)) + " " +
                                              ShapeString(args.block_table)
                                        : std::string("nothing")));
  }
  return CheckBlockCache(args.cache, *kv_heads, a.head_dim, ValueDimOf(a), a.value_from_key);
}

Status CheckOutputs(const UnifiedAttentionAttrs& a, const UnifiedAttentionArgs& args) {
  const int64_t t = args.query.shape[0];
  DYNATTN_RETURN_IF_ERROR(CheckExact("attn_output", args.attn_output, args.query.dtype, t,
                                     a.num_heads, ValueDimOf(a), "(T, num_heads, head_dim_v)",
                                     PlanData::kMayBeNull));
  return CheckLse(args.lse, t, a.num_heads, "T");
}

void FillStep(const UnifiedAttentionArgs& args, int kv_heads, int num_heads, UnifiedStep* s) {
  s->num_requests = args.query_start_loc.shape[0] - 1;
  s->query_start_loc = args.query_start_loc.As<const int64_t>();
  s->context_lens = args.context_lens.As<const int64_t>();
  s->block_table = args.block_table.As<const int64_t>();
  s->table_stride = args.block_table.shape[1];
  s->block_size = args.cache->block_size;
  s->block_stride = args.cache->Stride();
  s->num_kv_heads = kv_heads;
  s->group_size = num_heads / kv_heads;
}

/// The kernels' view: request b has kvlen = context + query tokens, its new tokens last, causal;
/// on a context shard kvlen = key_counts[b] and the batch carries the key offsets.
void FillProblems(const UnifiedAttentionAttrs& a, const UnifiedAttentionArgs& args, int kv_heads,
                  const std::vector<HeldKeys>& held, UnifiedCall* call) {
  const UnifiedStep& s = call->step;
  call->kvstarts.assign(1, 0);
  for (int64_t b = 0; b < s.num_requests; ++b) {
    call->kvstarts.push_back(call->kvstarts.back() + held[b].count);
  }
  Batch batch;
  batch.size = s.num_requests;
  batch.seqstarts = s.query_start_loc;
  batch.kvstarts = call->kvstarts.data();
  batch.start_pos = s.context_lens;
  if (call->sharded) batch.key_offsets = args.key_offsets.As<const int64_t>();
  KvSource source;
  source.cache = call->cache;
  source.slots =
      SlotMap{SlotMap::Mode::kBlocks, s.block_table, s.table_stride, s.block_size, s.block_stride};
  const DType io = args.query.dtype;
  call->write = WriteOf(batch, io, args.current_key, args.current_value, source);
  AttentionProblem& p = call->attention;
  FillAttention(AttentionAttrs{.num_heads = a.num_heads,
                               .num_kv_heads = kv_heads,
                               .head_dim = a.head_dim,
                               .is_causal = true,
                               .is_alibi = a.is_alibi,
                               .window_left = a.window_left,
                               .logits_soft_cap = a.logits_soft_cap,
                               .softmax_scale = a.softmax_scale,
                               .head_dim_v = a.head_dim_v,
                               .value_from_key = a.value_from_key,
                               .precision = a.precision},
                kv_heads, io, &p);
  p.batch = batch;
  SetActivations(args.query, args.attn_output, &p);
  p.lse = args.lse.present() ? args.lse.As<float>() : nullptr;
  p.kv = source;
  p.alibi_slopes = call->alibi_slopes.empty() ? nullptr : call->alibi_slopes.data();
  p.sinks = call->sinks.empty() ? nullptr : call->sinks.data();
}

}  // namespace

Status ValidateUnifiedAttention(const UnifiedAttentionAttrs& attrs,
                                const UnifiedAttentionArgs& args, UnifiedCall* call) {
  int kv_heads = 0;
  DYNATTN_RETURN_IF_ERROR(CheckInputs(attrs, args, &kv_heads));
  FillStep(args, kv_heads, attrs.num_heads, &call->step);
  call->step.window_left = attrs.window_left;  // the planner skips blocks outside every window
  std::vector<HeldKeys> held;
  DYNATTN_RETURN_IF_ERROR(ReadHeldKeys(args, call->step, &held));
  call->sharded = args.key_offsets.present();
  DYNATTN_RETURN_IF_ERROR(
      CheckBlockTable(args.block_table, call->step, held, args.cache->num_blocks));
  DYNATTN_RETURN_IF_ERROR(CheckWrites(call->step, held));
  DYNATTN_RETURN_IF_ERROR(CheckOutputs(attrs, args));
  call->cache = args.cache->cache;
  DYNATTN_RETURN_IF_ERROR(ApplyFp8Scales(args.k_scale, args.v_scale, &call->cache));
  if (attrs.value_from_key) {
    DYNATTN_RETURN_IF_ERROR(UseKeysAsValues(args.v_scale, ValueDimOf(attrs), &call->cache));
  }
  DYNATTN_RETURN_IF_ERROR(ReadSinks(args.sinks, attrs.num_heads, &call->sinks));
  DYNATTN_RETURN_IF_ERROR(
      ReadAlibiSlopes(attrs.is_alibi, args.alibi_slopes, attrs.num_heads, &call->alibi_slopes));
  DYNATTN_RETURN_IF_ERROR(
      CheckCallDevice(args.cache->cache, {{"query", &args.query},
                                          {"current_key", &args.current_key},
                                          {"current_value", &args.current_value},
                                          {"attn_output", &args.attn_output},
                                          {"lse", &args.lse}}));
  FillProblems(attrs, args, kv_heads, held, call);
  return Status::Ok();
}

}  // namespace dynattn::internal
