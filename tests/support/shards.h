// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// A reference case cut as a distributed engine's ranks hold it: head shards (tensor
// parallelism: a rank's heads, its share of the ALiBi slopes) and context shards (context
// parallelism: a contiguous share of each request's context through `key_offsets`), and the
// merge of the context shards' (output, LSE) parts.

#ifndef DYNATTN_TESTS_SUPPORT_SHARDS_H_
#define DYNATTN_TESTS_SUPPORT_SHARDS_H_

#include <cstdint>
#include <random>
#include <vector>

#include "dynattn/dynattn.h"
#include "tests/support/run_case.h"

namespace dynattn_test {

/// The entries of an int64 array.
std::vector<int64_t> I64s(const Array& a);

/// A float32 array of `shape` holding `values`.
Array F32s(const std::vector<int64_t>& shape, const std::vector<float>& values);

/// The float32 ALiBi slopes of a model of `heads` heads (the library's standard ones).
std::vector<float> StandardSlopes(int heads);

/// Elements [begin, end) of the middle dimension of a (rows, heads, inner) tensor.
Array SliceHeads(const Array& a, int64_t begin, int64_t end);

/// Rank `rank` of `ranks` of an MHA case split by KV heads (its query heads follow them): its
/// heads' query, keys, values, mask planes and sinks, and its share of the model's ALiBi slopes.
/// `first_head` gets the rank's first query head.
Case HeadShard(const Case& whole, int rank, int ranks, int64_t* first_head);

/// Where each request's context is cut: cuts[b] = {0, c_1, ..., kvlen_b}, non-decreasing (equal
/// cuts: an empty shard). With a sliding window the cuts are multiples of 64, so that the keys
/// a shard's tiles read before the window are keys the whole call's tiles read too (the random
/// cases put NaN in the context no window reaches); in a unified-attention case they are whole
/// blocks too (kvlen_b = context_lens_b + q_len_b).
std::vector<std::vector<int64_t>> DrawCuts(const Case& whole, int ranks, std::mt19937_64* rng);

/// Rank `rank`'s call of an MHCA case (cache_mode 0) cut at `cuts`: the same queries and new
/// tokens, its share of each context (kvstarts, key_offsets, cachestarts moved by the offset),
/// the sinks only when `with_sinks`. A unified-attention case's shard has key_offsets,
/// key_counts and the block table from its first block on. The caller passes the cache as the
/// ranks before left it.
Case ContextShard(const Case& whole, const std::vector<std::vector<int64_t>>& cuts, int rank,
                  bool with_sinks);

/// Stacks the ranks' (T, H, D) float32 outputs and (T, H) log-sum-exps and merges them with
/// MergeStates into `merged` (T, H, D) and `merged_lse` (T, H).
dynattn::Status MergeParts(const std::vector<LibResult>& parts, Array* merged, Array* merged_lse);

}  // namespace dynattn_test

#endif  // DYNATTN_TESTS_SUPPORT_SHARDS_H_
