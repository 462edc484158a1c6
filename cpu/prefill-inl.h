// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Kernel family: tiled attention for prefill and chunked-prefill work items (many query vectors
// per item), and the general path for any head size.
//
// Why it looks like this:
// * Keys across lanes: the decoded key tile is transposed, so each score is one fused
//   multiply-add chain over d = 0..D-1 and each output element one chain over the keys, whatever
//   the vector width; no horizontal sum.
// * Register blocking: blocks of 8 (or 4; 12 or 4 on AVX2) query vectors (rows of a tile times
//   the GQA group of its KV head) share every key and value load, in passes that fit the
//   registers. A block whose every vector sees every key of the tile (decode, prefill below the
//   diagonal; MLA's 16-128 heads on one latent head) accumulates values without per-key tests.
//   The value passes of a block take turns on each stretch of the value panels (16 elements of
//   the tile's rows, 4 KB), so a stretch comes from L2 once per block rather than once per pass.
// * Quantized K/V tiles are decoded once per tile into L1/L2-resident fp32 scratch (codec-inl.h)
//   with the exact spec rounding; many query vectors then reuse them. The value tile is stored
//   in panels of 16 elements, key after key (ValuePanelIndex), so that the value loop, which runs
//   over the keys for a few elements at a time, streams contiguous memory.
// * Sliding windows: an item's tiles start at the first one a query vector of the item sees
//   (FirstTileKey); skipped tiles are never decoded. Causal diagonals: a block stops at the last
//   key one of its vectors sees (BlockVisibleKeys).

#if defined(DYNATTN_CPU_PREFILL_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef DYNATTN_CPU_PREFILL_INL_H_
#undef DYNATTN_CPU_PREFILL_INL_H_
#else
#define DYNATTN_CPU_PREFILL_INL_H_
#endif

#include <algorithm>
#include <array>
#include <cstdint>
#include <iterator>
#include <utility>

#include "cpu/codec-inl.h"
#include "cpu/softmax-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace dynattn {
namespace HWY_NAMESPACE {

/// Query vectors scored together share each load of the key and value tiles. Blocks of 8 keep
/// enough independent FMA chains in flight for prefill tiles; decode tiles with a GQA group of 4
/// use blocks of 4. AVX2 takes blocks of 12: its 16 registers hold passes of 6 query vectors (12
/// accumulators beside 3 loads) where blocks of 8 ran passes of 4, whose 8 chains only just cover
/// two FMA pipes of 4 cycles' latency (MLA's 128 heads on one latent head ran at 40% of the FMA
/// peak so). The block size changes no bit: every dot product and every output element is its
/// own chain.
constexpr int kQueryBlock = HWY_TARGET == HWY_AVX2 ? 12 : 8;

/// The block of the query vectors an item has past its last whole kQueryBlock: a third of AVX2's
/// 12, a half of the others' 8. An item of kRowTile (32) rows under a GQA group of g has 32 g
/// vectors, which leaves 0, 4 or 8 past the blocks of 12 (0 past those of 8): no padding vector
/// is scored.
constexpr int kSmallBlock = kQueryBlock == 12 ? 4 : kQueryBlock / 2;

/// Query vectors padded up to a multiple of the small query block.
HWY_INLINE int PaddedVectors(int vectors) {
  return (vectors + kSmallBlock - 1) / kSmallBlock * kSmallBlock;
}

/// Keys scored per pass of ScoreBlock: two virtual rows on AVX-512, so that each broadcast query
/// element feeds two fused multiply-adds (one otherwise: AVX2 already holds two vectors per row).
constexpr int kScoreKeys = hn::MaxLanes(DF()) >= kVirtualLanes ? 2 * kVirtualLanes : kVirtualLanes;

/// Vector registers of the target: AVX-512 has 32, AVX2 and SSE4 16.
constexpr int kVectorRegisters = HWY_TARGET <= HWY_AVX3 ? 32 : 16;

/// Query vectors one pass of a kBlock block holds in registers when each keeps `per_vector`
/// accumulators beside `shared` other registers: kBlock where they fit (AVX-512), else a half or
/// a quarter of it (the block's 16 accumulators would spill on AVX2's 16 registers). The passes
/// share the block's tile loads through L1; no bit depends on them.
template <int kBlock>
constexpr int PassVectors(int per_vector, int shared) {
  int vectors = kBlock;
  while (vectors > 1 && vectors * per_vector + shared > kVectorRegisters) vectors /= 2;
  return vectors;
}

/// Where key j's element d lies in a transposed key tile: panels of kScoreKeys keys, each
/// head_dim rows of kScoreKeys floats, so that a step of ScorePass streams one contiguous panel
/// (rows a whole tile apart would be a stride the L1 prefetcher follows less well).
HWY_INLINE int64_t PanelIndex(int head_dim, int d, int j) {
  return static_cast<int64_t>(j / kScoreKeys) * head_dim * kScoreKeys + d * kScoreKeys +
         j % kScoreKeys;
}

/// Floats of a value panel: each key's elements [16 p, 16 p + 16) lie together, key after key, so
/// that the value loop, which runs over the keys for a few elements at a time, streams one
/// contiguous panel (rows of a tile are a row's length apart, 2 KB for MLA's 512).
constexpr int kValuePanel = internal::kVirtualLanes;

/// Where element e of key j's value row lies in a tile of value panels.
HWY_INLINE int64_t ValuePanelIndex(int e, int j) {
  return static_cast<int64_t>(e / kValuePanel) * kKeyTile * kValuePanel + j * kValuePanel +
         e % kValuePanel;
}

/// dots[v][j0, j0 + kVectors * lanes) = q_v . k_j for kPass query vectors (rows of `queries`,
/// padded_dim apart) and keys from j0 (a multiple of kScoreKeys) of a transposed tile in panels
/// (PanelIndex). Each dot is one sequential fused multiply-add chain over d.
template <int kPass, int kVectors>
HWY_INLINE void ScoreStep(const float* queries, int padded_dim, const float* keys_t, int head_dim,
                          int j0, float* dots) {
  const DF df;
  constexpr int kN = static_cast<int>(hn::MaxLanes(DF()));
  hn::Vec<DF> acc[kPass][kVectors];
  for (int v = 0; v < kPass; ++v) {
    for (int a = 0; a < kVectors; ++a) acc[v][a] = hn::Zero(df);
  }
  for (int d = 0; d < head_dim; ++d) {
    const float* k = keys_t + PanelIndex(head_dim, d, j0);
    hn::Vec<DF> kv[kVectors];
    for (int a = 0; a < kVectors; ++a) kv[a] = hn::LoadU(df, k + a * kN);
    for (int v = 0; v < kPass; ++v) {
      const auto q = hn::Set(df, queries[v * padded_dim + d]);
      for (int a = 0; a < kVectors; ++a) acc[v][a] = hn::MulAdd(q, kv[a], acc[v][a]);
    }
  }
  for (int v = 0; v < kPass; ++v) {
    for (int a = 0; a < kVectors; ++a) {
      hn::StoreU(acc[v][a], df, dots + v * kKeyTile + j0 + a * kN);
    }
  }
}

/// dots[v][j] = q_v . k_j for kPass query vectors and at least the first `num_keys` keys of a
/// transposed tile (zero-padded to a multiple of kScoreKeys), in steps of kScoreKeys keys. A last
/// step with at most one vector of keys left (a causal diagonal, a short tile) scores that vector
/// alone; the dots past it are left as they were. The step width changes no bit.
template <int kPass>
HWY_INLINE void ScorePass(const float* queries, int padded_dim, const float* keys_t, int head_dim,
                          int num_keys, float* dots) {
  constexpr int kN = static_cast<int>(hn::MaxLanes(DF()));
  constexpr int kVectors = kScoreKeys / kN;
  for (int j0 = 0; j0 < num_keys; j0 += kScoreKeys) {
    if (kVectors > 1 && num_keys - j0 <= kN) {
      ScoreStep<kPass, 1>(queries, padded_dim, keys_t, head_dim, j0, dots);
    } else {
      ScoreStep<kPass, kVectors>(queries, padded_dim, keys_t, head_dim, j0, dots);
    }
  }
}

/// ScorePass over kBlock query vectors, in passes that fit the registers (PassVectors).
template <int kBlock>
HWY_INLINE void ScoreBlock(const float* queries, int padded_dim, const float* keys_t, int head_dim,
                           int num_keys, float* dots) {
  constexpr int kVectors = kScoreKeys / static_cast<int>(hn::MaxLanes(DF()));
  constexpr int kPass = PassVectors<kBlock>(kVectors, kVectors + 1);
  for (int v = 0; v < kBlock; v += kPass) {
    ScorePass<kPass>(queries + v * padded_dim, padded_dim, keys_t, head_dim, num_keys,
                     dots + v * kKeyTile);
  }
}

/// acc_v[d, d + kParts * lanes) += sum_j p_v[j] * values[j][...] (a tile of value panels,
/// ValuePanelIndex) for kPass query vectors, one
/// fused multiply-add chain per element in key order. Keys no vector of the block sees are
/// skipped, and so is a key for each vector that does not see it (MarkActiveKeys): a hidden value
/// is never multiplied.
template <int kPass, int kParts>
HWY_INLINE void AccumulateLanes(const float* probs, const float* values, const uint8_t* active,
                                int num_keys, int padded_dim, int d, float* acc) {
  const DF df;
  constexpr int kN = static_cast<int>(hn::MaxLanes(DF()));
  hn::Vec<DF> sums[kPass][kParts];
  for (int v = 0; v < kPass; ++v) {
    for (int u = 0; u < kParts; ++u) sums[v][u] = hn::LoadU(df, acc + v * padded_dim + d + u * kN);
  }
  for (int j = 0; j < num_keys; ++j) {
    if (active[j] == kSeenByNone) continue;
    hn::Vec<DF> value[kParts];
    for (int u = 0; u < kParts; ++u) {
      value[u] = hn::LoadU(df, values + ValuePanelIndex(d + u * kN, j));
    }
    const auto add = [&](int v, float weight) {
      const auto p = hn::Set(df, weight);
      for (int u = 0; u < kParts; ++u) sums[v][u] = hn::MulAdd(p, value[u], sums[v][u]);
    };
    if (active[j] == kSeenByAll || AllFinite<kParts>(value)) {
      for (int v = 0; v < kPass; ++v) add(v, probs[v * kKeyTile + j]);
    } else {  // a non-finite value: only the vectors that see it multiply it
      for (int v = 0; v < kPass; ++v) {
        if (!IsHiddenWeight(probs[v * kKeyTile + j])) add(v, probs[v * kKeyTile + j]);
      }
    }
  }
  for (int v = 0; v < kPass; ++v) {
    for (int u = 0; u < kParts; ++u) hn::StoreU(sums[v][u], df, acc + v * padded_dim + d + u * kN);
  }
}

/// AccumulateLanes for a block whose every vector sees every key of the tile (all kSeenByAll:
/// decode, and prefill below the causal diagonal): the same chains, without the per-key tests,
/// whose registers cost a 16-register target its widest pass.
template <int kPass, int kParts>
HWY_INLINE void AccumulateLanesSeenByAll(const float* probs, const float* values, int num_keys,
                                         int padded_dim, int d, float* acc) {
  const DF df;
  constexpr int kN = static_cast<int>(hn::MaxLanes(DF()));
  hn::Vec<DF> sums[kPass][kParts];
  for (int v = 0; v < kPass; ++v) {
    for (int u = 0; u < kParts; ++u) sums[v][u] = hn::LoadU(df, acc + v * padded_dim + d + u * kN);
  }
  const float* panel[kParts];  // each part's panel, at key 0
  for (int u = 0; u < kParts; ++u) panel[u] = values + ValuePanelIndex(d + u * kN, 0);
  for (int j = 0; j < num_keys; ++j) {
    hn::Vec<DF> value[kParts];
    for (int u = 0; u < kParts; ++u) value[u] = hn::LoadU(df, panel[u] + j * kValuePanel);
    for (int v = 0; v < kPass; ++v) {
      const auto p = hn::Set(df, probs[v * kKeyTile + j]);
      for (int u = 0; u < kParts; ++u) sums[v][u] = hn::MulAdd(p, value[u], sums[v][u]);
    }
  }
  for (int v = 0; v < kPass; ++v) {
    for (int u = 0; u < kParts; ++u) hn::StoreU(sums[v][u], df, acc + v * padded_dim + d + u * kN);
  }
}

/// Query vectors per pass of AccumulateBlock when some key is not seen by every vector: as
/// PassVectors, but at most 4 (a divisor of kBlock) on 16-register targets, where the per-key
/// tests (the key's flag, the non-finite check) hold registers of their own.
template <int kBlock>
constexpr int TestedValuePassVectors() {
  int vectors = PassVectors<kBlock>(2, 3);
  if (kVectorRegisters == 16) {
    vectors = std::min(vectors, 4);
    while (kBlock % vectors != 0) --vectors;
  }
  return vectors;
}

/// The passes of AccumulateBlock over query vectors [0, kBlock), kPass at a time, for elements
/// [d, d + kParts * lanes) of the value rows.
template <int kBlock, int kPass, int kParts, bool kSeenByAll>
HWY_INLINE void AccumulateStretch(const float* probs, const float* values, const uint8_t* active,
                                  int num_keys, int padded_dim, int d, float* acc) {
  static_assert(kBlock % kPass == 0, "passes must tile the block");
  for (int v = 0; v < kBlock; v += kPass) {
    const float* p = probs + v * kKeyTile;
    float* a = acc + v * padded_dim;
    if constexpr (kSeenByAll) {
      AccumulateLanesSeenByAll<kPass, kParts>(p, values, num_keys, padded_dim, d, a);
    } else {
      AccumulateLanes<kPass, kParts>(p, values, active, num_keys, padded_dim, d, a);
    }
  }
}

/// AccumulateStretch over the whole padded row, two vectors at a time: every pass of the block
/// reads a stretch of the value panels (the tile's keys x 16 floats, 4 KB) while it is in L1.
template <int kBlock, int kPass, bool kSeenByAll>
HWY_INLINE void AccumulatePasses(const float* probs, const float* values, const uint8_t* active,
                                 int num_keys, int padded_dim, float* acc) {
  constexpr int kN = static_cast<int>(hn::MaxLanes(DF()));
  int d = 0;
  for (; d + 2 * kN <= padded_dim; d += 2 * kN) {
    AccumulateStretch<kBlock, kPass, 2, kSeenByAll>(probs, values, active, num_keys, padded_dim, d,
                                                    acc);
  }
  for (; d < padded_dim; d += kN) {
    AccumulateStretch<kBlock, kPass, 1, kSeenByAll>(probs, values, active, num_keys, padded_dim, d,
                                                    acc);
  }
}

/// acc_v += sum_j p_v[j] * values[j] over the whole padded row, two vectors per pass, in passes
/// of query vectors that fit the registers. The keys every vector sees up to the first one some
/// vector does not (a causal diagonal's block: the keys before its first row's limit) take the
/// passes without per-key tests; the rest the tested passes. Each output element stays one chain
/// in key order, so neither the split nor the pass width changes a bit.
template <int kBlock>
HWY_INLINE void AccumulateBlock(const float* probs, const float* values, const uint8_t* active,
                                int num_keys, int padded_dim, float* acc) {
  const int seen_by_all = static_cast<int>(
      std::find_if(active, active + num_keys, [](uint8_t a) { return a != kSeenByAll; }) - active);
  if (seen_by_all > 0) {
    AccumulatePasses<kBlock, PassVectors<kBlock>(2, 3), true>(probs, values, active, seen_by_all,
                                                              padded_dim, acc);
  }
  if (seen_by_all < num_keys) {
    AccumulatePasses<kBlock, TestedValuePassVectors<kBlock>(), false>(
        probs + seen_by_all, values + static_cast<int64_t>(seen_by_all) * kValuePanel,
        active + seen_by_all, num_keys - seen_by_all, padded_dim, acc);
  }
}

/// Decodes the rows of `count` slots of one plane into rows of PadToLanes(dim) floats, where
/// `rows_of` is the cache as that plane's rows see it (dim = its head_dim: ValueView for values).
template <CacheElem kElem>
HWY_INLINE void DecodeTile(const CacheDesc& rows_of, const CachePlane& plane, const RowCodec& codec,
                           const int64_t* slots, int kv_head, int count, float* rows,
                           float* scales_tmp) {
  const int dim = rows_of.head_dim, padded = static_cast<int>(internal::PadToLanes(dim));
  for (int j = 0; j < count; ++j) {
    float* row = rows + j * padded;
    const int64_t slot = slots[j];
    DecodeRow<kElem>(rows_of, codec, plane, slot, kv_head, row, scales_tmp);
    ZeroPad(row, dim, padded);
  }
}

/// DecodeTile for head sizes that are a multiple of the lane count: one pass per row, the codes
/// decoded in registers (DecodeLanes) and stored once.
template <CacheElem kElem, bool kRound>
HWY_INLINE void DecodeTileLanes(const CacheDesc& rows_of, const CachePlane& plane,
                                const ScaleLanes& lanes, const int64_t* slots, int kv_head,
                                int count, float* rows, float* scales_tmp) {
  const DF df;
  const int dim = rows_of.head_dim, padded = static_cast<int>(internal::PadToLanes(dim));
  for (int j = 0; j < count; ++j) {
    float* row = rows + j * padded;
    const int64_t slot = slots[j];
    if (lanes.mode != ScaleLanes::Mode::kNone) {
      LoadRowScales(rows_of, ScalePointer(rows_of, plane, slot, kv_head), lanes, scales_tmp);
    }
    // fp8 rows read the plane's tensor scale instead of group scales.
    const float* scales = IsFp8Elem<kElem>() ? &plane.tensor_scale : scales_tmp;
    const void* src = ContiguousRow<kElem>(plane, slot, kv_head, dim, scales_tmp);
    for (int e = 0; e < dim; e += kLanes) {
      hn::StoreU(DecodeLanes<kElem, kRound>(src, scales, lanes, e), df, row + e);
    }
    ZeroPad(row, dim, padded);
  }
}

/// Decodes the rows of `count` slots of one plane, rounded to fp16 or not (`round`, which the
/// plane's `codec` says too).
template <CacheElem kElem>
HWY_INLINE void DecodePlaneTile(const CacheDesc& rows_of, const CachePlane& plane,
                                const RowCodec& codec, const ScaleLanes& lanes,
                                const int64_t* slots, int kv_head, int count, bool round,
                                float* rows, float* scales_tmp) {
  if (rows_of.head_dim % kLanes != 0) {
    DecodeTile<kElem>(rows_of, plane, codec, slots, kv_head, count, rows, scales_tmp);
  } else if (kElem != CacheElem::kF16 && round) {
    DecodeTileLanes<kElem, true>(rows_of, plane, lanes, slots, kv_head, count, rows, scales_tmp);
  } else {
    DecodeTileLanes<kElem, false>(rows_of, plane, lanes, slots, kv_head, count, rows, scales_tmp);
  }
}

/// How a tiled item reads each plane: the cache as the plane's rows see it, their group scales'
/// lanes and their sizes in bytes (for prefetches).
struct PlaneRows {
  CacheDesc rows_of;
  ScaleLanes lanes;
  internal::RowBytes bytes;

  static PlaneRows For(const CacheDesc& rows_of) {
    return {rows_of, ScaleLanes::For(rows_of), internal::RowBytesOf(rows_of)};
  }
};

/// Decodes the value rows of `count` slots as ReadsExactValues says.
template <CacheElem kElem>
HWY_INLINE void DecodeValueTile(const AttentionProblem& p, const PlaneRows& v, const int64_t* slots,
                                int kv_head, int count, float* values, float* scales_tmp) {
  DecodePlaneTile<kElem>(v.rows_of, p.kv.cache.value, RowCodec::ForValues(v.rows_of, p.io_type),
                         v.lanes, slots, kv_head, count, ValuesRound<kElem>(p), values, scales_tmp);
}

/// Decodes the key and value rows of `count` slots: keys by the cache rule, values as
/// ReadsExactValues says.
template <CacheElem kElem>
HWY_INLINE void DecodeTiles(const AttentionProblem& p, const PlaneRows& k, const PlaneRows& v,
                            const int64_t* slots, int kv_head, int count, float* keys,
                            float* values, float* scales_tmp) {
  DecodePlaneTile<kElem>(k.rows_of, p.kv.cache.key, RowCodec::For(k.rows_of, p.io_type), k.lanes,
                         slots, kv_head, count, KeysRound<kElem>(p), keys, scales_tmp);
  DecodeValueTile<kElem>(p, v, slots, kv_head, count, values, scales_tmp);
}

#if HWY_TARGET <= HWY_AVX2
/// Transposes the 8 x 8 block of keys [j0, j0 + 8) x [d0, d0 + 8) in registers: interleaves of
/// 32-bit, then 64-bit lanes within each 128-bit half, then the halves exchanged.
HWY_INLINE void Transpose8x8(const float* keys, int padded_dim, int head_dim, int j0, int d0,
                             float* keys_t) {
  const hn::FixedTag<float, 8> d8;
  const hn::Repartition<double, decltype(d8)> d64;
  hn::Vec<decltype(d8)> pairs[8];  // rows 2i, 2i + 1 interleaved: lanes 0,1,4,5 then 2,3,6,7
  for (int i = 0; i < 4; ++i) {
    const auto a = hn::LoadU(d8, keys + (j0 + 2 * i) * padded_dim + d0);
    const auto b = hn::LoadU(d8, keys + (j0 + 2 * i + 1) * padded_dim + d0);
    pairs[2 * i] = hn::InterleaveLower(d8, a, b);
    pairs[2 * i + 1] = hn::InterleaveUpper(d8, a, b);
  }
  hn::Vec<decltype(d8)> quads[8];  // quads[4h + c]: rows 4h..4h+3 of columns c and c + 4
  for (int h = 0; h < 2; ++h) {
    for (int u = 0; u < 2; ++u) {
      const auto lo = hn::BitCast(d64, pairs[4 * h + u]),
                 hi = hn::BitCast(d64, pairs[4 * h + 2 + u]);
      quads[4 * h + 2 * u] = hn::BitCast(d8, hn::InterleaveLower(d64, lo, hi));
      quads[4 * h + 2 * u + 1] = hn::BitCast(d8, hn::InterleaveUpper(d64, lo, hi));
    }
  }
  for (int c = 0; c < 4; ++c) {
    hn::StoreU(hn::ConcatLowerLower(d8, quads[4 + c], quads[c]), d8,
               keys_t + PanelIndex(head_dim, d0 + c, j0));
    hn::StoreU(hn::ConcatUpperUpper(d8, quads[4 + c], quads[c]), d8,
               keys_t + PanelIndex(head_dim, d0 + c + 4, j0));
  }
}
#endif

/// keys_t[PanelIndex(head_dim, d, j)] = keys[j][d] for j < count (zeros up to a multiple of
/// kScoreKeys).
/// AVX2 and AVX-512 move whole 8 x 8 blocks through registers; the rest goes element by element.
HWY_INLINE void TransposeTile(const float* keys, int count, int head_dim, int padded_dim,
                              float* keys_t) {
  const int padded_count =
      std::min<int>(kKeyTile, (count + kScoreKeys - 1) / kScoreKeys * kScoreKeys);
  int block_keys = 0, block_dims = 0;  // the part moved by 8 x 8 blocks
#if HWY_TARGET <= HWY_AVX2
  block_keys = count / 8 * 8;
  block_dims = head_dim / 8 * 8;
  for (int j0 = 0; j0 < block_keys; j0 += 8) {
    for (int d0 = 0; d0 < block_dims; d0 += 8) {
      Transpose8x8(keys, padded_dim, head_dim, j0, d0, keys_t);
    }
  }
#endif
  for (int d = 0; d < head_dim; ++d) {
    for (int j = d < block_dims ? block_keys : 0; j < count; ++j) {
      keys_t[PanelIndex(head_dim, d, j)] = keys[j * padded_dim + d];
    }
    for (int j = count; j < padded_count; ++j) keys_t[PanelIndex(head_dim, d, j)] = 0.0f;
  }
}

/// panels[ValuePanelIndex(e, j)] = rows[j][e] for the `count` decoded value rows of a tile (rows
/// of padded_dim floats, a multiple of kValuePanel), a panel at a time: each panel is written
/// front to back, key after key.
HWY_INLINE void PanelValueTile(const float* rows, int count, int padded_dim, float* panels) {
  const DF df;
  constexpr int kN = static_cast<int>(hn::MaxLanes(DF()));
  for (int e = 0; e < padded_dim; e += kValuePanel) {
    float* panel = panels + ValuePanelIndex(e, 0);
    const float* column = rows + e;
    for (int j = 0; j < count; ++j, panel += kValuePanel, column += padded_dim) {
      for (int l = 0; l < kValuePanel; l += kN) {
        hn::StoreU(hn::LoadU(df, column + l), df, panel + l);
      }
    }
  }
}

/// Dimension pairs of a head of `head_dim`: the bf16 dot products multiply two at a time (an odd
/// head's last pair has a zero partner).
HWY_INLINE int DimPairs(int head_dim) { return (head_dim + 1) / 2; }

/// Scratch carve-up for one tiled work item.
struct ItemScratch {
  VectorStates states;  ///< Running softmax states of the item's query vectors.
  QueryRow* rows;       ///< The item's query vectors.
  int64_t* slots;       ///< kKeyTile slots of the current tile, then kKeyTile of the next.
  float* queries;       ///< padded vectors x padded_dim
  float* keys;          ///< kKeyTile x padded_dim
  float* keys_t;        ///< head_dim x kKeyTile: the key tile transposed, in panels
  float* value_rows;    ///< kKeyTile x padded_value_dim: the value tile as decoded
  float* values;        ///< the same in panels (ValuePanelIndex)
  float* scores;        ///< kQueryBlock x kKeyTile
  float* scales;        ///< longer row + 2 * 16 (group scales of one row, with lane slack)
  uint8_t* active;      ///< kKeyTile flags: some vector of the block gives the key weight
  // The fast tier's bf16 tiles (cpu/bf16_tiles-inl.h), each element a pair of bf16 in 32 bits:
  uint32_t* query_pairs;   ///< vectors x padded_dim / 2: the queries in dimension pairs
  uint32_t* key_pairs;     ///< DimPairs(head_dim) x kKeyTile: the key tile, in panels
  uint32_t* value_pairs;   ///< padded_value_dim x kKeyTile / 2: the value tile in key pairs
  uint32_t* weight_pairs;  ///< kQueryBlock x kKeyTile / 2: a block's weights in key pairs

  /// The sizes (in floats) of the parts below for `vectors` query vectors.
  static std::array<size_t, 18> Sizes(int vectors, const AttentionProblem& p) {
    const size_t dp = p.padded_dim, dpv = p.padded_value_dim, dim = p.head_dim, n = vectors;
    const size_t longer = std::max(p.head_dim, p.value_dim);
    const size_t pairs = DimPairs(p.head_dim);
    constexpr size_t kRowFloats = (sizeof(QueryRow) + sizeof(float) - 1) / sizeof(float);
    return {n * dpv,
            n,
            n,
            dpv,
            n * kRowFloats,
            4 * kKeyTile,
            n * dp,
            kKeyTile * dp,
            dim * kKeyTile,
            kKeyTile * dpv,
            kKeyTile * dpv,
            kQueryBlock * kKeyTile,
            longer + 2 * kVirtualLanes,
            kKeyTile,
            n * dp / 2,
            pairs * kKeyTile,
            dpv * kKeyTile / 2,
            kQueryBlock * kKeyTile / 2};
  }

  /// Splits the worker's scratch; `vectors` is a multiple of kSmallBlock (PaddedVectors).
  static ItemScratch Carve(int vectors, const AttentionProblem& p, internal::Scratch* scratch) {
    const auto parts = scratch->Carve(Sizes(vectors, p));
    return {{parts[0], parts[1], parts[2], parts[3]},
            reinterpret_cast<QueryRow*>(parts[4]),
            reinterpret_cast<int64_t*>(parts[5]),
            parts[6],
            parts[7],
            parts[8],
            parts[9],
            parts[10],
            parts[11],
            parts[12],
            reinterpret_cast<uint8_t*>(parts[13]),
            reinterpret_cast<uint32_t*>(parts[14]),
            reinterpret_cast<uint32_t*>(parts[15]),
            reinterpret_cast<uint32_t*>(parts[16]),
            reinterpret_cast<uint32_t*>(parts[17])};
  }
};

/// Keys [0, n) of a tile of `count` keys from key0 that some query vector of the block [first,
/// first + block) may see: past the last visible key of each (a causal diagonal), every vector of
/// the block masks the tile's keys. The rest of the tile is then neither scored nor exponentiated,
/// which changes no bit: those keys would get score -inf, weight +0 and no value.
HWY_INLINE int BlockVisibleKeys(const QueryRow* rows, int vectors, int first, int block,
                                int64_t key0, int count) {
  int64_t last = key0 - 1;
  for (int index = first; index < std::min(vectors, first + block); ++index) {
    last = std::max(last, rows[index].last_key);
  }
  return static_cast<int>(std::min<int64_t>(count, last - key0 + 1));
}

/// Scores, softmax and value accumulation of query vectors [first, first + kBlock) against one
/// decoded tile, up to the last key any of them sees. A block that sees none of the tile keeps
/// its states as they are, which is what a pass of all -inf scores would leave.
template <int kBlock>
HWY_INLINE void AttendBlock(const AttentionProblem& p, int vectors, int first, int64_t key0,
                            int count, const ItemScratch& s) {
  const int visible = BlockVisibleKeys(s.rows, vectors, first, kBlock, key0, count);
  if (visible == 0) return;
  const int dp = p.padded_dim, dpv = p.padded_value_dim;
  ScoreBlock<kBlock>(s.queries + static_cast<int64_t>(first) * dp, dp, s.keys_t, p.head_dim,
                     visible, s.scores);
  SoftmaxBlock(p, s.rows, vectors, first, kBlock, key0, visible, s.scores, s.states);
  MarkActiveKeys<kBlock>(s.scores, std::clamp(vectors - first, 0, kBlock), visible, s.active);
  AccumulateBlock<kBlock>(s.scores, s.values, s.active, visible, dpv,
                          s.states.acc + static_cast<int64_t>(first) * dpv);
}

/// The keys of a tiled item: keys [key_begin, key_end) of the sequence `slots` maps for
/// `request`, and the KV head they are read under.
struct TiledKeys {
  const internal::SlotMap* slots;
  int64_t request;
  int kv_head;
  int64_t key_begin, key_end;
};

/// Slots of keys [key0, key0 + count) of `k` into `slots`, and a prefetch of their K and V rows
/// (with scales), so that the tile after the one being scored arrives while it is scored: rows
/// of a KV head are strided, often a page apart, where the hardware prefetchers do not follow.
template <CacheElem kElem>
HWY_INLINE void FetchTileSlots(const AttentionProblem& p, const TiledKeys& k, int64_t key0,
                               int count, const PlaneRows& keys, const PlaneRows& values,
                               int64_t* slots) {
  k.slots->Slots(k.request, key0, count, slots);
  const CacheDesc& cache = p.kv.cache;
  for (int j = 0; j < count; ++j) {
    for (int plane = 0; plane < 2; ++plane) {
      const CachePlane& rows = plane == 0 ? cache.key : cache.value;
      const internal::RowBytes& bytes = plane == 0 ? keys.bytes : values.bytes;
      PrefetchBytes(RowPointer<kElem>(rows, slots[j], k.kv_head), bytes.row);
      if (bytes.scales != 0) {
        PrefetchBytes(ScalePointer(cache, rows, slots[j], k.kv_head), bytes.scales);
      }
    }
  }
}

/// Loads the query vectors s.rows[0, vectors) (already filled) into s.queries and empties their
/// running states: the start of every tiled item.
HWY_INLINE void StartTiledItem(const AttentionProblem& p, int vectors, const ItemScratch& s) {
  const int padded_vectors = PaddedVectors(vectors);
  PrefetchQueries(p, s.rows, vectors);
  LoadQueries(p, s.rows, vectors, padded_vectors, s.queries);
  s.states.Reset(padded_vectors, p.padded_value_dim);
}

/// Calls `attend_tile(key0, count, slots)` on the tiles of keys `k` that some of the query
/// vectors s.rows[0, vectors) sees, in order (`slots`: those of the tile's keys): the tile loop
/// both tiers share. The slots and rows of the next tile are fetched while one is attended.
template <CacheElem kElem, class AttendTile>
HWY_INLINE void ForEachTile(const AttentionProblem& p, int vectors, const TiledKeys& k,
                            const ItemScratch& s, const AttendTile& attend_tile) {
  const PlaneRows keys = PlaneRows::For(p.kv.cache);
  const PlaneRows values = PlaneRows::For(internal::ValueView(p.kv.cache));
  const auto tile_count = [&](int64_t key0) {
    return static_cast<int>(std::min<int64_t>(kKeyTile, k.key_end - key0));
  };
  int64_t* slots = s.slots;
  int64_t* next_slots = s.slots + kKeyTile;
  const int64_t first_key0 = FirstTileKey(s.rows, vectors, k.key_begin);
  if (first_key0 < k.key_end) {
    FetchTileSlots<kElem>(p, k, first_key0, tile_count(first_key0), keys, values, slots);
  }
  for (int64_t key0 = first_key0; key0 < k.key_end; key0 += kKeyTile) {
    const int count = tile_count(key0);
    if (key0 + kKeyTile < k.key_end) {
      FetchTileSlots<kElem>(p, k, key0 + kKeyTile, tile_count(key0 + kKeyTile), keys, values,
                            next_slots);
    }
    attend_tile(key0, count, static_cast<const int64_t*>(slots));
    std::swap(slots, next_slots);
  }
}

/// The query vectors s.rows[0, vectors) (already filled) against keys `k`, through decoded,
/// transposed tiles. Leaves the vectors' running states in s.states.
template <CacheElem kElem>
void AttendTiledCore(const AttentionProblem& p, int vectors, const TiledKeys& k,
                     const ItemScratch& s) {
  StartTiledItem(p, vectors, s);
  const PlaneRows keys = PlaneRows::For(p.kv.cache);
  const PlaneRows values = PlaneRows::For(internal::ValueView(p.kv.cache));
  ForEachTile<kElem>(p, vectors, k, s, [&](int64_t key0, int count, const int64_t* slots) {
    DecodeTiles<kElem>(p, keys, values, slots, k.kv_head, count, s.keys, s.value_rows, s.scales);
    TransposeTile(s.keys, count, p.head_dim, p.padded_dim, s.keys_t);
    PanelValueTile(s.value_rows, count, p.padded_value_dim, s.values);
    int first = 0;
    for (; first + kQueryBlock <= vectors; first += kQueryBlock) {
      AttendBlock<kQueryBlock>(p, vectors, first, key0, count, s);
    }
    for (; first < vectors; first += kSmallBlock) {
      AttendBlock<kSmallBlock>(p, vectors, first, key0, count, s);
    }
  });
}

/// A request work item through decoded, transposed tiles.
template <CacheElem kElem>
void AttendTiled(const AttentionProblem& p, const internal::WorkItem& w, float* states,
                 internal::Scratch* scratch) {
  const int vectors = p.group_size * (w.row_end - w.row_begin);
  const ItemScratch s = ItemScratch::Carve(PaddedVectors(vectors), p, scratch);
  MakeQueryRows(p, w, s.rows);
  AttendTiledCore<kElem>(p, vectors,
                         TiledKeys{&p.kv.slots, w.request, w.kv_head, w.key_begin, w.key_end}, s);
  FinishItem(p, w, s.rows, s.states, states);
}

/// The query vectors of a shared-path item, in (head of the group, reader) order, each seeing its
/// reader's prefix of the segment.
HWY_INLINE void MakeSharedRows(const AttentionProblem& p, const internal::SharedItem& w,
                               QueryRow* out) {
  for (int index = 0; index < p.group_size * w.num_readers; ++index) {
    const internal::SharedReader& reader = w.readers[index % w.num_readers];
    QueryRow& r = out[index];
    r.request = reader.request;
    r.token = reader.token;
    r.head = w.kv_head * p.group_size + index / w.num_readers;
    r.last_key = reader.visible - 1;
    r.origin = reader.origin;
    // The reader's sliding window in segment key numbers (origin is its own position).
    r.first_key = p.window_left >= 0 ? reader.origin - p.window_left : 0;
  }
}

/// The slots of a shared item's segment: its blocks, keys numbered from the segment's start.
HWY_INLINE internal::SlotMap SegmentSlots(const internal::SharedItem& w) {
  return {internal::SlotMap::Mode::kBlocks, w.blocks, 0, w.block_size, w.block_stride};
}

/// A shared-path item of unified attention: the segment's keys are decoded once per tile and
/// scored against every reader's query vectors; each reader sees its own prefix of the segment.
template <CacheElem kElem>
void AttendShared(const AttentionProblem& p, const internal::SharedItem& w, float* states,
                  internal::Scratch* scratch) {
  const int vectors = p.group_size * w.num_readers;
  const ItemScratch s = ItemScratch::Carve(PaddedVectors(vectors), p, scratch);
  MakeSharedRows(p, w, s.rows);
  const internal::SlotMap segment = SegmentSlots(w);
  AttendTiledCore<kElem>(p, vectors, TiledKeys{&segment, 0, w.kv_head, w.key_begin, w.key_end}, s);
  WriteStates(p, w.state_index, vectors, s.states, states);
}

}  // namespace HWY_NAMESPACE
}  // namespace dynattn
HWY_AFTER_NAMESPACE();

#endif  // DYNATTN_CPU_PREFILL_INL_H_
