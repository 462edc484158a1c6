// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0

#include "core/plan_unified.h"

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <utility>

#include "core/plan.h"

namespace dynattn::internal {
namespace {

using std::to_string;

/// A cached block as one request reads it: physical id, request, logical block index, and its
/// rank in request-then-logical order.
struct BlockUse {
  int64_t id, request, logical;
  size_t rank;
  bool operator<(const BlockUse& o) const {
    return std::tie(id, request, logical) < std::tie(o.id, o.request, o.logical);
  }
};

/// Sorts `uses`, which arrive in (request, logical) order, by (id, request, logical). Block ids
/// index the cache's block pool, so they are dense: a stable counting sort by id alone orders
/// them in O(uses + ids), about 0.5 ms less per call than std::sort at 9216 uses. Ids spread
/// far beyond the number of uses (a large pool read sparsely), or negative ones (hand-made steps
/// only), take std::sort; the plan suite holds the two to the same plans.
void SortByBlockId(std::vector<BlockUse>* uses) {
  int64_t min_id = 0, max_id = -1;
  for (const BlockUse& u : *uses) {
    min_id = std::min(min_id, u.id);
    max_id = std::max(max_id, u.id);
  }
  const auto n = static_cast<int64_t>(uses->size());
  if (min_id < 0 || max_id > 8 * n + 4096) {
    std::sort(uses->begin(), uses->end());
    return;
  }
  std::vector<size_t> start(static_cast<size_t>(max_id) + 2, 0);
  for (const BlockUse& u : *uses) ++start[static_cast<size_t>(u.id) + 1];
  for (size_t k = 1; k < start.size(); ++k) start[k] += start[k - 1];
  std::vector<BlockUse> sorted(uses->size());
  for (const BlockUse& u : *uses) sorted[start[static_cast<size_t>(u.id)]++] = u;
  uses->swap(sorted);
}

/// Every cached block read in the step, and how many query tokens read each id. Flat sorted
/// arrays, searched by bisection: a step reads thousands of blocks, and the planner looks each
/// one up several times per call.
struct BlockReads {
  std::vector<BlockUse> uses;        ///< Sorted by (id, request, logical).
  std::vector<int64_t> ids;          ///< The distinct ids, ascending.
  std::vector<size_t> first;         ///< ids[k]'s uses are uses[first[k], first[k + 1]).
  std::vector<int64_t> tokens;       ///< Query tokens reading ids[k].
  std::vector<size_t> request_rank;  ///< Rank of request b's first use (FirstContextBlock).
  std::vector<bool> shared_at;       ///< By rank: the block is read by more than one token.

  explicit BlockReads(const UnifiedStep& s) {
    for (int64_t b = 0; b < s.num_requests; ++b) {
      request_rank.push_back(uses.size());
      for (int64_t j = s.FirstContextBlock(b); j < s.ContextBlocks(b); ++j) {
        uses.push_back({s.Block(b, j), b, j, uses.size()});
      }
    }
    SortByBlockId(&uses);
    for (size_t i = 0; i < uses.size(); ++i) {
      if (i == 0 || uses[i].id != uses[i - 1].id) {
        ids.push_back(uses[i].id);
        first.push_back(i);
        tokens.push_back(0);
      }
      tokens.back() += s.QueryLen(uses[i].request);
    }
    first.push_back(uses.size());
    shared_at.resize(uses.size());
    for (size_t k = 0; k + 1 < first.size(); ++k) {
      for (size_t i = first[k]; i < first[k + 1]; ++i) shared_at[uses[i].rank] = tokens[k] > 1;
    }
  }
  /// Whether logical block j of request b (from its FirstContextBlock) is shared.
  bool SharedAt(const UnifiedStep& s, int64_t b, int64_t j) const {
    return shared_at[request_rank[b] + static_cast<size_t>(j - s.FirstContextBlock(b))];
  }
  /// The position of `id` in `ids`; `id` must be one the step reads.
  size_t Index(int64_t id) const {
    return static_cast<size_t>(std::lower_bound(ids.begin(), ids.end(), id) - ids.begin());
  }
  bool Shared(int64_t id) const { return tokens[Index(id)] > 1; }
  /// The uses of `id`: [first, last).
  std::pair<size_t, size_t> Uses(int64_t id) const {
    const size_t k = Index(id);
    return {first[k], first[k + 1]};
  }
};

/// A part of one token's attention, with the logical position of its first key (its rank in the
/// token's merge order). A direct part is written as the token's output by its item (its only
/// part); the others leave states that the token's merge reads.
struct PendingPart {
  int64_t first_key;
  PartRef ref;
  bool direct = false;
};

class Planner {
 public:
  explicit Planner(const UnifiedStep& step)
      : s_(step), reads_(step), pending_(static_cast<size_t>(step.Tokens())) {}

  UnifiedPlan Run() {
    PlanSharedSegments();
    for (int64_t b = 0; b < s_.num_requests; ++b) {
      if (!PlanUniqueRuns(b)) PlanCausal(b);
    }
    FinishParts();
    OrderItems();
    return std::move(plan_);
  }

 private:
  /// The shared block that follows `id` in every one of its readers, or -1 (end of segment).
  int64_t Successor(int64_t id) const {
    const auto [first, last] = reads_.Uses(id);
    int64_t next = -1;
    for (size_t u = first; u < last; ++u) {
      const BlockUse& use = reads_.uses[u];
      if (use.logical + 1 >= s_.ContextBlocks(use.request)) return -1;
      const int64_t candidate = s_.Block(use.request, use.logical + 1);
      if (next != -1 && candidate != next) return -1;
      next = candidate;
    }
    if (next == -1 || !reads_.Shared(next)) return -1;
    const auto [next_first, next_last] = reads_.Uses(next);
    if (next_last - next_first != last - first) return -1;
    for (size_t u = 0; u < last - first; ++u) {
      if (reads_.uses[next_first + u].request != reads_.uses[first + u].request) return -1;
    }
    return next;
  }

  void PlanSharedSegments() {
    const size_t num_ids = reads_.ids.size();
    std::vector<int64_t> successor(num_ids, -1);  // by position in reads_.ids
    std::vector<bool> has_predecessor(num_ids, false);
    for (size_t k = 0; k < num_ids; ++k) {
      if (reads_.tokens[k] <= 1) {
        ++plan_.num_unique_blocks;
        continue;
      }
      ++plan_.num_shared_blocks;
      successor[k] = Successor(reads_.ids[k]);
      if (successor[k] != -1) has_predecessor[reads_.Index(successor[k])] = true;
    }
    // Segments and readers are stored first and pointed to afterwards (no reallocation then).
    std::vector<std::pair<size_t, size_t>> segments;  // [begin, end) in segment_blocks
    for (size_t k = 0; k < num_ids; ++k) {
      if (reads_.tokens[k] <= 1 || has_predecessor[k]) continue;
      const size_t begin = plan_.segment_blocks.size();
      for (int64_t block = reads_.ids[k]; block != -1; block = successor[reads_.Index(block)]) {
        plan_.segment_blocks.push_back(block);
      }
      segments.emplace_back(begin, plan_.segment_blocks.size());
    }
    for (const auto& [begin, end] : segments) PlanSegment(begin, end);
  }

  /// Readers of the segment starting with block id `first_block`, in request order, with the
  /// logical position of the segment's first key (`first_keys`) and each reader's first visible
  /// segment key (`window_keys`: its sliding window's start, possibly negative).
  std::vector<SharedReader> SegmentReaders(int64_t first_block, int64_t num_blocks,
                                           std::vector<int64_t>* first_keys,
                                           std::vector<int64_t>* window_keys) const {
    std::vector<SharedReader> readers;
    const auto [first, last] = reads_.Uses(first_block);
    for (size_t u = first; u < last; ++u) {
      const BlockUse& use = reads_.uses[u];
      const int64_t offset = use.logical * s_.block_size;  // first key's logical position
      const int64_t context = s_.context_lens[use.request];
      for (int64_t i = 0; i < s_.QueryLen(use.request); ++i) {
        SharedReader r;
        r.token = s_.query_start_loc[use.request] + i;
        r.request = use.request;
        r.visible = std::min(num_blocks * s_.block_size, context - offset);
        r.origin = context + i - offset;
        readers.push_back(r);
        first_keys->push_back(offset);
        window_keys->push_back(s_.FirstKey(use.request, i) - offset);
      }
    }
    return readers;
  }

  void PlanSegment(size_t begin, size_t end) {
    const int64_t num_blocks = static_cast<int64_t>(end - begin);
    std::vector<int64_t> offsets, window_keys;
    const std::vector<SharedReader> readers =
        SegmentReaders(plan_.segment_blocks[begin], num_blocks, &offsets, &window_keys);
    int64_t keys = 0;
    for (const SharedReader& r : readers) keys = std::max(keys, r.visible);
    for (int64_t key0 = 0; key0 < keys; key0 += kSplitKeys) {
      const int64_t key1 = std::min(keys, key0 + kSplitKeys);
      std::vector<size_t> chunk_readers;  // readers with a visible key in [key0, key1)
      for (size_t r = 0; r < readers.size(); ++r) {
        if (readers[r].visible > key0 && window_keys[r] < key1) chunk_readers.push_back(r);
      }
      for (size_t t0 = 0; t0 < chunk_readers.size(); t0 += kSharedReaders) {
        const size_t t1 = std::min(chunk_readers.size(), t0 + kSharedReaders);
        int64_t first = key1;  // the item starts at the first key tile one of its readers sees
        for (size_t t = t0; t < t1; ++t) first = std::min(first, window_keys[chunk_readers[t]]);
        const int64_t start = first <= key0 ? key0 : key0 + (first - key0) / kKeyTile * kKeyTile;
        AddSharedTile(begin, readers, offsets, chunk_readers, t0, t1, start, key1);
      }
    }
  }

  void AddSharedTile(size_t segment_begin, const std::vector<SharedReader>& readers,
                     const std::vector<int64_t>& offsets, const std::vector<size_t>& chunk,
                     size_t t0, size_t t1, int64_t key0, int64_t key1) {
    const int32_t n = static_cast<int32_t>(t1 - t0);
    const int64_t base = plan_.num_states;
    const size_t reader_begin = plan_.readers.size();
    for (size_t t = t0; t < t1; ++t) {
      const SharedReader& r = readers[chunk[t]];
      plan_.readers.push_back(r);
      pending_[r.token].push_back({offsets[chunk[t]] + key0, PartRef{base + int64_t(t - t0), n}});
    }
    for (int g = 0; g < s_.num_kv_heads; ++g) {
      SharedItem item;  // blocks and readers are pointed to in FinishParts
      shared_offsets_.emplace_back(segment_begin, reader_begin);
      item.block_size = s_.block_size;
      item.block_stride = s_.block_stride;
      item.num_readers = n;
      item.kv_head = g;
      item.key_begin = key0;
      item.key_end = key1;
      item.state_index = base + int64_t{g} * s_.group_size * n;
      plan_.shared_items.push_back(item);
    }
    plan_.num_states += int64_t{s_.num_kv_heads} * s_.group_size * n;
  }

  /// Request items over keys [key0, key1) for rows [row0, row1) of request b, cut at the
  /// multiples of kSplitKeys (as PlanAttention cuts a context, so a lone decode gets its splits);
  /// `single` items (the rows' only part, one chunk) write the outputs directly.
  void AddRequestItems(int64_t b, int32_t row0, int32_t row1, int64_t key0, int64_t key1,
                       UnifiedPath path, bool single) {
    const int32_t rows = row1 - row0;
    for (int64_t k0 = key0, next = 0; k0 < key1; k0 = next) {
      next = std::min(key1, (k0 / kSplitKeys + 1) * kSplitKeys);
      const int64_t base = plan_.num_states;
      for (int32_t r = row0; r < row1; ++r) {
        pending_[s_.query_start_loc[b] + r].push_back(
            {k0, PartRef{base + (r - row0), rows}, single});
      }
      for (int g = 0; g < s_.num_kv_heads; ++g) {
        WorkItem item;
        item.request = b;
        item.kv_head = g;
        item.row_begin = row0;
        item.row_end = row1;
        item.key_begin = k0;
        item.key_end = next;
        item.num_splits = single ? 1 : 2;  // fixed in FinishParts
        item.state_index = base + int64_t{g} * s_.group_size * rows;
        plan_.request_items.push_back(item);
        plan_.request_paths.push_back(path);
      }
      if (!single) plan_.num_states += int64_t{s_.num_kv_heads} * s_.group_size * rows;
    }
  }

  /// Unique runs of request b (only a one-token request has any). A run that ends the context
  /// also takes the token's own fresh key, so that a decode without shared blocks is one pass
  /// over its context, as in a pure decode step, with no causal item (spec §1.7, the
  /// alternative partition). Returns true when the fresh key was taken.
  /// Under a sliding window the first run starts at the key tile holding the token's window start,
  /// as PlanAttention starts a windowed decode (so the two give the same bits).
  bool PlanUniqueRuns(int64_t b) {
    const int64_t blocks = s_.ContextBlocks(b), context = s_.context_lens[b];
    const int64_t first_block = s_.FirstContextBlock(b);
    const int64_t window_tile = s_.FirstKey(b, 0) / kKeyTile * kKeyTile;
    bool folded = false;
    for (int64_t j = first_block; j < blocks;) {
      if (reads_.SharedAt(s_, b, j)) {
        ++j;
        continue;
      }
      int64_t end = j;
      while (end < blocks && !reads_.SharedAt(s_, b, end)) ++end;
      folded = end == blocks;  // unique blocks are read by one token: QueryLen(b) == 1
      const int64_t key_begin = j == first_block ? window_tile : j * s_.block_size;
      const int64_t key_end = folded ? context + 1 : end * s_.block_size;
      const bool single =
          j == first_block && folded && key_begin / kSplitKeys == (key_end - 1) / kSplitKeys;
      AddRequestItems(b, 0, 1, key_begin, key_end, UnifiedPath::kUnique, single);
      j = end;
    }
    return folded;
  }

  /// Fresh keys of request b against its own tokens. A row tile whose first token's window starts
  /// past the cached context reads no cached key: its items are its tokens' only parts.
  void PlanCausal(int64_t b) {
    const int64_t queries = s_.QueryLen(b), context = s_.context_lens[b];
    for (int64_t row = 0; row < queries; row += kRowTile) {
      const int64_t row_end = std::min(queries, row + kRowTile);
      const int64_t key_begin = std::max(context, s_.FirstKey(b, row));
      const bool no_cached = s_.ContextBlocks(b) == 0 || s_.FirstKey(b, row) >= context;
      const bool single =
          no_cached && key_begin / kSplitKeys == (context + row_end - 1) / kSplitKeys;
      AddRequestItems(b, static_cast<int32_t>(row), static_cast<int32_t>(row_end), key_begin,
                      context + row_end, UnifiedPath::kCausal, single);
    }
  }

  /// Orders every token's parts by their first key, drops the parts of tokens written directly,
  /// and points the shared items at their blocks and readers.
  void FinishParts() {
    plan_.part_begin.assign(1, 0);
    for (size_t t = 0; t < pending_.size(); ++t) {
      auto& parts = pending_[t];
      std::sort(parts.begin(), parts.end(), [](const PendingPart& x, const PendingPart& y) {
        return x.first_key < y.first_key;
      });
      if (parts.size() > 1 || (parts.size() == 1 && !parts[0].direct)) {
        for (const PendingPart& part : parts) plan_.parts.push_back(part.ref);
      }
      plan_.part_begin.push_back(static_cast<int64_t>(plan_.parts.size()));
    }
    for (size_t i = 0; i < plan_.shared_items.size(); ++i) {
      plan_.shared_items[i].blocks = plan_.segment_blocks.data() + shared_offsets_[i].first;
      plan_.shared_items[i].readers = plan_.readers.data() + shared_offsets_[i].second;
    }
  }

  /// Longest request items first, so the tail of the parallel loop is made of short ones.
  void OrderItems() {
    std::vector<size_t> order(plan_.request_items.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    const auto cost = [&](size_t i) {
      const WorkItem& w = plan_.request_items[i];
      return (w.key_end - w.key_begin) * (w.row_end - w.row_begin);
    };
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t x, size_t y) { return cost(x) > cost(y); });
    std::vector<WorkItem> items;
    std::vector<UnifiedPath> paths;
    for (size_t i : order) {
      items.push_back(plan_.request_items[i]);
      paths.push_back(plan_.request_paths[i]);
    }
    plan_.request_items = std::move(items);
    plan_.request_paths = std::move(paths);
  }

  const UnifiedStep& s_;
  const BlockReads reads_;
  std::vector<std::vector<PendingPart>> pending_;
  std::vector<std::pair<size_t, size_t>> shared_offsets_;  ///< Per shared item: block, reader.
  UnifiedPlan plan_;
};

/// Per (token, KV head): how often each key position is covered, and the states written for it.
class CoverageCounter {
 public:
  explicit CoverageCounter(const UnifiedStep& s) : s_(s) {
    for (int64_t b = 0; b < s.num_requests; ++b) {
      for (int64_t i = 0; i < s.QueryLen(b); ++i) {
        position_.push_back(s.context_lens[b] + i);
        first_.push_back(s.FirstKey(b, i));
        request_.push_back(b);
      }
    }
    counts_.resize(position_.size() * s.num_kv_heads);
    for (size_t t = 0; t < position_.size(); ++t) {
      for (int g = 0; g < s.num_kv_heads; ++g) {
        counts_[t * s.num_kv_heads + g].assign(static_cast<size_t>(position_[t] + 1), 0);
      }
    }
  }

  /// Counts key position `pos` for (token, g); returns false when it lies past the token.
  bool Cover(int64_t token, int g, int64_t pos) {
    if (pos < 0 || pos > position_[token]) {
      bad_ = "token " + to_string(token) + " (position " + to_string(position_[token]) +
             ") is given key position " + to_string(pos);
      return false;
    }
    ++counts_[token * s_.num_kv_heads + g][pos];
    return true;
  }

  std::string Verdict() const {
    if (!bad_.empty()) return bad_;
    for (size_t t = 0; t < position_.size(); ++t) {
      for (int g = 0; g < s_.num_kv_heads; ++g) {
        const auto& c = counts_[t * s_.num_kv_heads + g];
        for (size_t pos = 0; pos < c.size(); ++pos) {
          const int want = static_cast<int64_t>(pos) >= first_[t] ? 1 : 0;  // the window's keys
          if (c[pos] != want) {
            return "token " + to_string(t) + " kv head " + to_string(g) + " key position " +
                   to_string(pos) + " is covered " + to_string(int{c[pos]}) + " times";
          }
        }
      }
    }
    return "";
  }

  int64_t Position(int64_t token) const { return position_[token]; }
  /// The first key the token sees (its sliding window's start).
  int64_t First(int64_t token) const { return first_[token]; }

 private:
  const UnifiedStep& s_;
  std::vector<int64_t> position_, first_, request_;
  std::vector<std::vector<uint8_t>> counts_;
  std::string bad_;
};

/// States of (token, query head) that the items write, as the kernels lay them out.
using WrittenStates = std::map<std::pair<int64_t, int64_t>, std::vector<int64_t>>;

bool CoverRequestItem(const UnifiedStep& s, const WorkItem& w, CoverageCounter* counter,
                      WrittenStates* written, int64_t* direct) {
  const int64_t queries = s.QueryLen(w.request), context = s.context_lens[w.request];
  const int32_t rows = w.row_end - w.row_begin;
  for (int32_t r = w.row_begin; r < w.row_end; ++r) {
    const int64_t token = s.query_start_loc[w.request] + r;
    // The kernels' rule (MakeQueryRows): bottom-right causal when a request has several tokens.
    const int64_t last = queries > 1 ? context + r : context + queries - 1;
    const int64_t first = std::max(w.key_begin, counter->First(token));  // FinishScores' window
    for (int64_t k = first; k < std::min(w.key_end, last + 1); ++k) {
      if (!counter->Cover(token, w.kv_head, k)) return false;
    }
    for (int h = 0; h < s.group_size; ++h) {
      const int64_t head = int64_t{w.kv_head} * s.group_size + h;
      if (w.num_splits == 1) {
        ++*direct;
      } else {
        (*written)[{token, head}].push_back(w.state_index + int64_t{h} * rows + (r - w.row_begin));
      }
    }
  }
  return true;
}

bool CoverSharedItem(const UnifiedStep& s, const SharedItem& w, CoverageCounter* counter,
                     WrittenStates* written) {
  for (int32_t r = 0; r < w.num_readers; ++r) {
    const SharedReader& reader = w.readers[r];
    const int64_t shift = counter->Position(reader.token) - reader.origin;
    const int64_t first = std::max(w.key_begin, counter->First(reader.token) - shift);
    for (int64_t k = first; k < std::min(w.key_end, reader.visible); ++k) {
      if (!counter->Cover(reader.token, w.kv_head, k + shift)) return false;
    }
    for (int h = 0; h < s.group_size; ++h) {
      const int64_t head = int64_t{w.kv_head} * s.group_size + h;
      (*written)[{reader.token, head}].push_back(w.state_index + int64_t{h} * w.num_readers + r);
    }
  }
  return true;
}

/// Every state an item writes is merged into its token, and nothing else is.
std::string CheckMergedStates(const UnifiedStep& s, const UnifiedPlan& plan,
                              const WrittenStates& written) {
  const int64_t heads = int64_t{s.num_kv_heads} * s.group_size;
  for (int64_t t = 0; t < s.Tokens(); ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      std::vector<int64_t> merged;
      for (int64_t k = plan.part_begin[t]; k < plan.part_begin[t + 1]; ++k) {
        merged.push_back(plan.parts[k].first + h * plan.parts[k].head_stride);
      }
      std::vector<int64_t> want;
      const auto it = written.find({t, h});
      if (it != written.end()) want = it->second;
      std::sort(merged.begin(), merged.end());
      std::sort(want.begin(), want.end());
      if (merged != want) {
        return "token " + to_string(t) + " head " + to_string(h) + " merges " +
               to_string(merged.size()) + " states but its items write " + to_string(want.size());
      }
    }
  }
  return "";
}

}  // namespace

UnifiedPlan PlanUnified(const UnifiedStep& step) { return Planner(step).Run(); }

int MaxQueryVectors(int group_size, const std::vector<WorkItem>& items,
                    const std::vector<SharedItem>& shared) {
  int most = 1;
  for (const WorkItem& w : items) most = std::max(most, group_size * (w.row_end - w.row_begin));
  for (const SharedItem& s : shared) most = std::max(most, group_size * s.num_readers);
  return most;
}

std::string CheckCoverage(const UnifiedStep& step, const UnifiedPlan& plan) {
  CoverageCounter counter(step);
  WrittenStates written;
  int64_t direct = 0;
  for (const WorkItem& w : plan.request_items) {
    if (!CoverRequestItem(step, w, &counter, &written, &direct)) return counter.Verdict();
  }
  for (const SharedItem& w : plan.shared_items) {
    if (!CoverSharedItem(step, w, &counter, &written)) return counter.Verdict();
  }
  std::string verdict = counter.Verdict();
  if (verdict.empty()) verdict = CheckMergedStates(step, plan, written);
  return verdict;
}

}  // namespace dynattn::internal
