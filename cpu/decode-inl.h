// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Kernel family: fused decode attention. Work items with few query vectors (the GQA group of one
// query row, or of a few rows of a multi-token decode) read each cached key and value row once,
// in its own layout, and consume its codes inside the dot products and the P.V accumulation.
//
// Why it looks like this:
// * Decode does 2R flops per cached element (R query vectors share a KV head), so it is bound by
//   bytes and by the work spent per element. Nothing is decoded into a buffer: each vector of
//   codes is widened, scaled and rounded as attention reads it (codec-inl.h: keys as the spec
//   rounds them, values of quantized caches under fp16 activations unrounded) in registers, and
//   used at once by every query vector of the item.
// * Dimensions across lanes: key rows need no transposed tile. Each dot product keeps
//   kVirtualLanes partial sums (lane l sums d = l, l + 16, ...: one fused multiply-add chain
//   each), folded by the fixed tree of FoldPartialSums. Eight dot products are folded together
//   with in-register shuffles (sixteen on AVX-512, in whole 512-bit vectors). AVX2 (two vectors per
//   virtual row) and AVX-512 (one) run the same chains and the same tree, so their bits agree;
//   narrower targets fold through memory. AVX2 scores a virtual row half by half (its own shape:
//   half the accumulators live at a time, so it keeps as many keys in flight as its 16 registers
//   allow).
// * Values: each output element is one chain over the keys in order, as in the tiled path.
//   Tiles whose every key every query vector sees (decode's usual tile) take loops without
//   per-key tests.
// * Register budget: AVX2's 16 registers hold 12 accumulators for fp16, bf16 and fp32 rows (8
//   chains only just cover two FMA pipes of 4 cycles' latency) and 8 for fp8, int8 and int4,
//   whose decoding keeps constants in registers; blocks of 8 are scored as two halves of 4.
// * Dimension-major keys (vLLM's CPU layout, [D, block_size] per block): a run of kLanes keys
//   adjacent in their block is scored with keys across lanes, one vector per dimension, so
//   nothing is gathered. Each lane runs the 16 chains of its key's dot product one after another
//   and folds them by the same fixed tree, vertically (no shuffles): the bits of the row layout.
//   A chain's dimensions lie 16 block rows apart, in the same L1 sets, so every run of a stretch
//   of adjacent runs takes one chain while its lines are in L1, and the next chain's lines (other
//   sets) are fetched into L1 meanwhile.
// * Quantized rows that round to fp16 (keys; values too under fp32 activations) take the
//   three-operation split rounding (RoundNormalToF16) instead of two conversions, on tiles whose
//   group scales keep every code x scale product in fp16's normal range. There the split is
//   exact, so the bits are those of the conversions; other tiles keep the conversions.
// * The inner loops are compiled per scale mode (broadcast, lookup, or read at run time), so
//   the mode is not tested per vector of codes.
// * Addressing: the slots of a tile are computed once (one division per page), and the group
//   scales of a row are widened once (and checked against the normal-range bounds in the same
//   pass) and spread over lanes with a table lookup. fp8 rows take their plane's tensor scale
//   instead; a sliding window's decode starts at its first tile.

#if defined(DYNATTN_CPU_DECODE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef DYNATTN_CPU_DECODE_INL_H_
#undef DYNATTN_CPU_DECODE_INL_H_
#else
#define DYNATTN_CPU_DECODE_INL_H_
#endif

#include <algorithm>
#include <cstdint>

#include "cpu/bf16_dots-inl.h"
#include "cpu/codec-inl.h"
#include "cpu/fast_keys-inl.h"
#include "cpu/fused_tile-inl.h"
#include "cpu/softmax-inl.h"
#include "hwy/cache_control.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace dynattn {
namespace HWY_NAMESPACE {

/// Floats a tile needs to gather the rows of `plane` (none unless it is dimension-major).
HWY_INLINE size_t StagingFloats(const CachePlane& plane, int head_dim) {
  return internal::DimStride(plane) > 1 ? size_t{kKeyTile} * head_dim : 0;
}

/// Largest item (in query vectors) that runs fused; larger ones use the tiled path.
constexpr int kFusedMaxVectors = 8;

/// True when items of `vectors` query vectors run through the fused decode kernel.
HWY_INLINE bool UseFusedDecode(const AttentionProblem& p, int vectors) {
  return vectors <= kFusedMaxVectors && p.head_dim % kVirtualLanes == 0 &&
         p.value_dim % kVirtualLanes == 0;
}

/// Accumulator registers a fused step may hold: 16 of AVX-512's 32. On the 16-register targets,
/// 12 for the formats a load and one conversion widen (fp16, bf16, fp32), whose loops then keep
/// half again as many chains in flight as the two FMA pipes' latency needs; 8 for fp8, int8 and
/// int4, whose decoding holds constants and scales in registers of its own.
template <CacheElem kElem>
constexpr int AccumulatorBudget() {
  if (kVectorsPerRow == 1) return 16;
  return UnquantizedElemBytes<kElem>() >= 2 ? 12 : 8;
}

/// Keys scored per step for blocks of kBlock query vectors: one accumulator per (query vector,
/// key) within the budget. Virtual rows of two vectors (AVX2) are scored half by half, so a
/// half's accumulators, not a whole row's, count against the budget: 8-vector blocks no longer
/// spill there.
template <CacheElem kElem, int kBlock>
constexpr int FusedKeys() {
  constexpr int kKeys = AccumulatorBudget<kElem>() / kBlock;
  return kKeys < 1 ? 1 : (kKeys > 8 ? 8 : kKeys);
}

/// Query vectors a score step takes at once: blocks whose step would score a single key (8
/// vectors under a budget of 12) are scored as two halves of 3 keys each, so that each step keeps
/// 12 chains in flight and folds 12 dot products instead of 8 and 8; each half converts the keys
/// again. (The value passes of such blocks, halved the same way, measured no gain.) The portable
/// targets keep whole blocks (the compile time of more copies).
template <CacheElem kElem, int kBlock>
constexpr int ScoreStepBlock() {
  if constexpr (!kPortableTarget && kBlock % 2 == 0) {
    if (FusedKeys<kElem, kBlock>() == 1 && FusedKeys<kElem, kBlock / 2>() >= 3) return kBlock / 2;
  }
  return kBlock;
}

/// Value vectors accumulated per pass for blocks of kBlock query vectors: one accumulator per
/// (query vector, part) within the budget, at most 4 parts (a 128-dimension row takes two passes
/// on AVX-512). Fewer passes reload the probabilities and row pointers fewer times. A loop that
/// tests each key (some key of the tile is hidden from some vector) keeps 8 accumulators on the
/// 16-register targets: the tests hold registers of their own.
template <CacheElem kElem, int kBlock, bool kSeenByAll>
constexpr int FusedValueParts() {
  constexpr int kBudget = kSeenByAll || kVectorsPerRow == 1 ? AccumulatorBudget<kElem>() : 8;
  constexpr int kParts = kBudget / kBlock;
  return kParts < 1 ? 1 : (kParts > 4 ? 4 : kParts);
}

/// dots[v * kKeyTile + k] = q_v . k_k for kBlock query vectors (rows of `queries`, padded_dim
/// apart) and kKeys key rows starting at row j of `keys`.
template <CacheElem kElem, bool kRound, bool kNormal, ScaleLanes::Mode kMode, int kBlock, int kKeys>
HWY_INLINE void FusedDots(const float* queries, int padded_dim, const TileRows& keys, int j,
                          const ScaleLanes& lanes, int head_dim, float* dots) {
  const DF df;
  hn::Vec<DF> acc[kBlock * kKeys * kVectorsPerRow];
  for (int a = 0; a < kVectorsPerRow; ++a) {  // each half of a virtual row: its own chains
    hn::Vec<DF> part[kBlock * kKeys];
    for (auto& v : part) v = hn::Zero(df);
    for (int chunk = 0; chunk < head_dim; chunk += kVirtualLanes) {
      const int e = chunk + a * kLanes;
      hn::Vec<DF> q[kBlock];
      for (int v = 0; v < kBlock; ++v) q[v] = hn::LoadU(df, queries + v * padded_dim + e);
      for (int k = 0; k < kKeys; ++k) {
        const auto key = DecodeLanes<kElem, kRound, kNormal, kMode>(
            keys.rows[j + k], keys.scales + (j + k) * keys.row_floats, lanes, e);
        for (int v = 0; v < kBlock; ++v) {
          part[v * kKeys + k] = hn::MulAdd(q[v], key, part[v * kKeys + k]);
        }
      }
    }
    for (int x = 0; x < kBlock * kKeys; ++x) acc[x * kVectorsPerRow + a] = part[x];
  }
  float folded[kBlock * kKeys];
  FoldVirtualLanes<kBlock * kKeys>(acc, folded);
  for (int v = 0; v < kBlock; ++v) {
    for (int k = 0; k < kKeys; ++k) dots[v * kKeyTile + j + k] = folded[v * kKeys + k];
  }
}

/// Keys [j, j + n) of the rows of `ahead` and `also_ahead` fetched in `parts` even shares, part
/// by part, as a kernel's loop goes: the next tile's rows fetched all at once before a
/// dimension-major tile is scored took 1.06x the time of the same fetches spread over the leaves
/// of VerticalDotsOf (bursts of prefetches wait on the misses already outstanding).
struct FetchInParts {
  const RowsAhead* ahead = nullptr;
  const RowsAhead* also_ahead = nullptr;
  int j = 0, n = 0, parts = 1;

  HWY_INLINE void Fetch(int part, int count) const {
    const int begin = j + n * part / parts;
    const int end = j + n * (part + count) / parts;
    ahead->Fetch(begin, end - begin);
    also_ahead->Fetch(begin, end - begin);
  }
};

/// The dot products' 16 chains (chain l sums dimensions l, l + 16, ...) in the order of the leaves
/// of FoldVirtualLanes' tree, which pairs l with l + 8, then l + 4, l + 2 and l + 1.
constexpr int kTreeOrder[16] = {0, 8, 4, 12, 2, 10, 6, 14, 1, 9, 5, 13, 3, 11, 7, 15};

/// Adds the sums of one chain at leaf `leaf` of the fold's tree (`sums[x]`, whose pending left
/// operands lie at pending + offsets[x]) to the pending sums like a binary counter: a leaf that
/// closes a pair is added to its left neighbour, level by level (left + right, FoldVirtualLanes'
/// pairs), and the root, after leaf 15, goes to roots[x]. Level l's pending operands are
/// l * level_stride further on. Level by level over all of `sums`: one test per level, not per
/// sum, and the sums stay in registers. The loop over the levels stays rolled: unrolled, its four
/// copies of the kSums loads and adds made the vertical kernels' code generation under the
/// sanitizers take 1.7x as long and bought nothing measurable.
template <int kSums>
HWY_INLINE void FoldLeaf(int leaf, hn::Vec<DF>* sums, float* pending, const int* offsets,
                         size_t level_stride, float* const* roots) {
  const DF df;
  int levels = 0;  // the leaf's trailing ones: the pairs it closes
  while (levels < 4 && ((leaf >> levels) & 1)) ++levels;
#pragma GCC unroll 1
  for (int level = 0; level < levels; ++level) {
    const float* left = pending + level * level_stride;
#pragma GCC unroll 16
    for (int x = 0; x < kSums; ++x) sums[x] = hn::Add(hn::Load(df, left + offsets[x]), sums[x]);
  }
  if (levels == 4) {
#pragma GCC unroll 16
    for (int x = 0; x < kSums; ++x) hn::StoreU(sums[x], df, roots[x]);
    return;
  }
  float* slot = pending + levels * level_stride;
#pragma GCC unroll 16
  for (int x = 0; x < kSums; ++x) hn::Store(sums[x], df, slot + offsets[x]);
}

/// Runs of kLanes dimension-major keys per key tile.
constexpr int kRunsPerTile = kKeyTile / kLanes;

/// The bytes of one dimension of a run of kLanes dimension-major keys.
template <CacheElem kElem>
constexpr int64_t RunBytes() {
  return kLanes * static_cast<int64_t>(UnquantizedElemBytes<kElem>());
}

/// Chains [leaf, leaf + kChains) of the dot products of kSub query vectors with the kRuns runs
/// from run r0 of `run` (see VerticalDotsOf), each folded into the tree as it ends.
template <CacheElem kElem, bool kRound, int kSub, int kRuns, int kChains>
HWY_INLINE void ChainsOfRuns(const float* queries, int padded_dim, const char* run, int r0,
                             int leaf, int64_t dim_bytes, const float* scales,
                             const ScaleLanes& lanes, int head_dim, float* pending,
                             size_t level_stride, float* dots) {
  const DF df;
  using V = hn::Vec<DF>;
  V acc[kChains][kSub][kRuns];
  for (auto& chain : acc) {
    for (auto& vector : chain) {
      for (auto& a : vector) a = hn::Zero(df);
    }
  }
  const char* group = run + r0 * RunBytes<kElem>();
  // The pragmas keep GCC from leaving `acc` in memory (stored on every step) inside the rolled
  // loops around it.
  for (int base = 0; base < head_dim; base += internal::kVirtualLanes) {
#pragma GCC unroll 8
    for (int c = 0; c < kChains; ++c) {
      const int d = base + kTreeOrder[leaf + c];
      V key[kRuns];
#pragma GCC unroll 8
      for (int r = 0; r < kRuns; ++r) {
        key[r] = DecodeLanes<kElem, kRound>(group + r * RunBytes<kElem>() + d * dim_bytes, scales,
                                            lanes, 0);
      }
#pragma GCC unroll 8
      for (int v = 0; v < kSub; ++v) {
        const V q = hn::Set(df, queries[v * padded_dim + d]);
#pragma GCC unroll 8
        for (int r = 0; r < kRuns; ++r) acc[c][v][r] = hn::MulAdd(q, key[r], acc[c][v][r]);
      }
    }
  }
  int offsets[kSub * kRuns];
  float* roots[kSub * kRuns];
  for (int v = 0; v < kSub; ++v) {
    for (int r = 0; r < kRuns; ++r) {
      offsets[v * kRuns + r] = (v * kRunsPerTile + r0 + r) * kLanes;
      roots[v * kRuns + r] = dots + v * kKeyTile + (r0 + r) * kLanes;
    }
  }
#pragma GCC unroll 8
  for (int c = 0; c < kChains; ++c) {
    FoldLeaf<kSub * kRuns>(leaf + c, &acc[c][0][0], pending, offsets, level_stride, roots);
  }
}

/// dots[v * kKeyTile + r * kLanes + i] = q_v . k for kSub query vectors and `runs` runs of kLanes
/// dimension-major keys side by side (key i of run r has element d at run + (r * kLanes + i) *
/// elem + d * dim_bytes), one key per lane: the 16 chains of each dot product (chain l sums
/// dimensions l, l + 16, ...) one after another in the order of the leaves of FoldVirtualLanes'
/// tree, each folded in as soon as it ends (FoldLeaf), so the sums are those of FusedDots and
/// FoldVirtualLanes, bit for bit. Runs go kRuns at a time (kSub * kRuns accumulators per chain),
/// the rest in pairs and a single run; a stretch of 3k + 1 runs takes two pairs, not a single.
///
/// Why leaves outside runs: a leaf reads dimensions 16 apart, which lie 16 block rows apart and so
/// map to the same few L1 sets (one set per 64 bytes of the stretch for 128-key pages of fp16).
/// Every run of the stretch and every query vector take a leaf's lines while they are in L1, and
/// the next leaf's lines, in other sets, are fetched into L1 meanwhile. The loop over the leaves
/// is kept rolled: one copy of the inner loop per (format, rounding, shape) keeps the kernels'
/// compile time in bounds.
template <CacheElem kElem, bool kRound, int kSub, int kRuns, int kChains>
DYNATTN_TILE_STEP void VerticalDotsOf(const float* queries, int padded_dim, const char* run,
                                      int runs, int64_t dim_bytes, const float* scales,
                                      const ScaleLanes& lanes, int head_dim,
                                      const FetchInParts& fetch, int part0, float* dots) {
  static_assert(internal::kVirtualLanes == 16, "kTreeOrder is a tree of four levels");
  HWY_ALIGN float pending[4][kSub][kRunsPerTile][kLanes];
  float* const tree = &pending[0][0][0][0];
  const size_t level_stride = sizeof(pending[0]) / sizeof(float);
  const size_t stretch_bytes = static_cast<size_t>(runs * RunBytes<kElem>());
  int grouped = runs / kRuns * kRuns;
  if (kRuns > 2 && runs % kRuns == 1 && grouped > 0) grouped -= kRuns;
#pragma GCC unroll 1
  for (int leaf = 0; leaf < 16; leaf += kChains) {
    if (leaf + kChains < 16) {
      for (int base = 0; base < head_dim; base += internal::kVirtualLanes) {
        for (int c = 0; c < kChains; ++c) {
          const int d = base + kTreeOrder[leaf + kChains + c];
          PrefetchBytes<PrefetchTo::kL1>(run + d * dim_bytes, stretch_bytes);
        }
      }
    }
    // After the next leaf's lines: issued before them, the next tile's share held them up
    // (1.07x the time).
    fetch.Fetch(part0 + leaf, kChains);
#pragma GCC unroll 1
    for (int r0 = 0; r0 < grouped; r0 += kRuns) {
      ChainsOfRuns<kElem, kRound, kSub, kRuns, kChains>(queries, padded_dim, run, r0, leaf,
                                                        dim_bytes, scales, lanes, head_dim, tree,
                                                        level_stride, dots);
    }
    int r0 = grouped;
    if constexpr (kRuns > 2) {
#pragma GCC unroll 1
      for (; r0 + 2 <= runs; r0 += 2) {
        ChainsOfRuns<kElem, kRound, kSub, 2, kChains>(queries, padded_dim, run, r0, leaf, dim_bytes,
                                                      scales, lanes, head_dim, tree, level_stride,
                                                      dots);
      }
    }
    if (r0 < runs) {
      ChainsOfRuns<kElem, kRound, kSub, 1, kChains>(queries, padded_dim, run, r0, leaf, dim_bytes,
                                                    scales, lanes, head_dim, tree, level_stride,
                                                    dots);
    }
  }
}

/// The runs per step of VerticalDotsOf for blocks of kSub query vectors: AVX2's 16 registers
/// hold 4 x 3 accumulators, 3 keys and a broadcast (8 accumulators only just cover two FMA pipes
/// of 4 cycles' latency); wider vectors make fewer runs per tile, which pairs divide evenly.
template <int kSub>
constexpr int VerticalRuns() {
  return kLanes == 8 && kSub == 4 ? 3 : 2;
}

/// VerticalDotsOf for kBlock query vectors over `runs` runs from key j: blocks of four vectors
/// one chain at a time, smaller blocks more chains at a time, so that at least eight
/// accumulators are in flight and each broadcast query element serves several runs.
template <CacheElem kElem, bool kRound, int kBlock>
HWY_INLINE void VerticalDots(const float* queries, int padded_dim, const TileRows& keys, int j,
                             int runs, const ScaleLanes& lanes, int head_dim, FetchInParts fetch,
                             float* dots) {
  constexpr int kSub = kBlock < 4 ? kBlock : 4;
  constexpr int kRuns = VerticalRuns<kSub>();
  constexpr int kChains = 8 / (kSub * kRuns) > 0 ? 8 / (kSub * kRuns) : 1;
  const char* run = static_cast<const char*>(keys.rows[j]);
  fetch.parts = 16 * ((kBlock + kSub - 1) / kSub);
  for (int v = 0; v < kBlock; v += kSub) {
    VerticalDotsOf<kElem, kRound, kSub, kRuns, kChains>(
        queries + v * padded_dim, padded_dim, run, runs, keys.dim_bytes, keys.scales, lanes,
        head_dim, fetch, v / kSub * 16, dots + v * kKeyTile + j);
  }
}

/// acc_v[e, e + kParts * kLanes) += sum_j p_v[j] * value_j, one chain per element in key order,
/// while the rows of `ahead` are fetched in step with the keys. kSeenByAll: every key of the tile
/// is seen by every vector (MarkActiveKeys), so no key is tested.
template <CacheElem kElem, bool kRound, bool kNormal, ScaleLanes::Mode kMode, int kBlock,
          int kParts, bool kSeenByAll>
HWY_INLINE void FusedAccumulateLanes(const float* probs, const uint8_t* active,
                                     const TileRows& values, int count, const ScaleLanes& lanes,
                                     int e, int padded_dim, const RowsAhead& ahead, float* acc) {
  const DF df;
  hn::Vec<DF> sums[kBlock][kParts];
  for (int v = 0; v < kBlock; ++v) {
    for (int u = 0; u < kParts; ++u)
      sums[v][u] = hn::LoadU(df, acc + v * padded_dim + e + u * kLanes);
  }
  for (int j = 0; j < count; ++j) {
    if (j % 4 == 0) ahead.Fetch(j, 4);
    if (!kSeenByAll && active[j] == kSeenByNone) continue;
    hn::Vec<DF> value[kParts];
    for (int u = 0; u < kParts; ++u) {
      value[u] = DecodeLanes<kElem, kRound, kNormal, kMode>(
          values.rows[j], values.scales + j * values.row_floats, lanes, e + u * kLanes);
    }
    const auto add = [&](int v, float p) {
      const auto weight = hn::Set(df, p);
      for (int u = 0; u < kParts; ++u) sums[v][u] = hn::MulAdd(weight, value[u], sums[v][u]);
    };
    if (kSeenByAll || active[j] == kSeenByAll || AllFinite<kParts>(value)) {
      for (int v = 0; v < kBlock; ++v) add(v, probs[v * kKeyTile + j]);
    } else {  // a non-finite value: only the vectors that see it multiply it
      for (int v = 0; v < kBlock; ++v) {
        if (!IsHiddenWeight(probs[v * kKeyTile + j])) add(v, probs[v * kKeyTile + j]);
      }
    }
  }
  for (int v = 0; v < kBlock; ++v) {
    for (int u = 0; u < kParts; ++u)
      hn::StoreU(sums[v][u], df, acc + v * padded_dim + e + u * kLanes);
  }
}

/// The whole P.V of a tile in passes of FusedValueParts; the first pass over the keys fetches the
/// rows of `ahead`.
template <CacheElem kElem, bool kRound, bool kNormal, ScaleLanes::Mode kMode, int kBlock,
          bool kSeenByAll>
HWY_INLINE void FusedAccumulatePasses(const float* probs, const uint8_t* active,
                                      const TileRows& values, int count, const ScaleLanes& lanes,
                                      int head_dim, int padded_dim, RowsAhead ahead, float* acc) {
  constexpr int kParts = FusedValueParts<kElem, kBlock, kSeenByAll>();
  int e = 0;
  for (; e + kParts * kLanes <= head_dim; e += kParts * kLanes) {
    FusedAccumulateLanes<kElem, kRound, kNormal, kMode, kBlock, kParts, kSeenByAll>(
        probs, active, values, count, lanes, e, padded_dim, ahead, acc);
    ahead.rows = nullptr;
  }
  for (; e < head_dim; e += kLanes) {
    FusedAccumulateLanes<kElem, kRound, kNormal, kMode, kBlock, 1, kSeenByAll>(
        probs, active, values, count, lanes, e, padded_dim, ahead, acc);
    ahead.rows = nullptr;
  }
}

/// The whole P.V of a tile: without per-key tests where every vector sees every key (decode's
/// usual tile), with them otherwise. Tiles with a hidden key (a window's first tile, a multi-token
/// decode's diagonal) share the conversions' loop with the scale mode read at run time, which
/// gives the same bits and saves a copy of the tested loops per (rounding, scale mode).
template <CacheElem kElem, bool kRound, bool kNormal, ScaleLanes::Mode kMode, int kBlock>
DYNATTN_TILE_STEP void FusedAccumulateRounded(const float* probs, const uint8_t* active,
                                              const TileRows& values, int count,
                                              const ScaleLanes& lanes, int head_dim, int padded_dim,
                                              RowsAhead ahead, float* acc) {
  if (std::all_of(active, active + count, [](uint8_t a) { return a == kSeenByAll; })) {
    return FusedAccumulatePasses<kElem, kRound, kNormal, kMode, kBlock, true>(
        probs, active, values, count, lanes, head_dim, padded_dim, ahead, acc);
  }
  FusedAccumulatePasses<kElem, kRound, false, ScaleLanes::Mode::kAny, kBlock, false>(
      probs, active, values, count, lanes, head_dim, padded_dim, ahead, acc);
}

/// True when rows of kElem rounded as kRound says may take RoundNormalToF16 (when their tile
/// proves NormalProducts): quantized rows that round, on the targets that keep per-case copies.
template <CacheElem kElem, bool kRound>
constexpr bool MayRoundNormal() {
  return kRound && IsGroupScaledElem<kElem>() && !kPortableTarget;
}

template <CacheElem kElem, bool kRound, ScaleLanes::Mode kMode, int kBlock>
HWY_INLINE void FusedAccumulate(const float* probs, const uint8_t* active, const TileRows& values,
                                int count, const ScaleLanes& lanes, int head_dim, int padded_dim,
                                const RowsAhead& ahead, float* acc) {
  if constexpr (MayRoundNormal<kElem, kRound>()) {
    if (values.normal_products) {
      return FusedAccumulateRounded<kElem, kRound, true, kMode, kBlock>(
          probs, active, values, count, lanes, head_dim, padded_dim, ahead, acc);
    }
    // Tiles outside NormalProducts' bounds pay for the conversions anyway: they share the
    // mode-generic loop, which saves a copy of the loops per scale mode.
    return FusedAccumulateRounded<kElem, kRound, false, ScaleLanes::Mode::kAny, kBlock>(
        probs, active, values, count, lanes, head_dim, padded_dim, ahead, acc);
  }
  FusedAccumulateRounded<kElem, kRound, false, kMode, kBlock>(probs, active, values, count, lanes,
                                                              head_dim, padded_dim, ahead, acc);
}

/// PointTileRows of a dimension-major key plane: runs of kLanes keys whose elements lie side by
/// side point at their block; other keys are gathered.
template <CacheElem kElem>
HWY_INLINE void PointDimMajorRows(const CachePlane& plane, const int64_t* slots, int kv_head,
                                  int count, int head_dim, TileRows* tile) {
  constexpr int64_t kSize = UnquantizedElemBytes<kElem>();
  tile->dim_bytes = internal::DimStride(plane) * kSize;
  tile->dims = head_dim;
  tile->elem_bytes = static_cast<int>(kSize);
  const char* previous = nullptr;  // the previous run's first key, when that run is vertical
  for (int j0 = 0; j0 < count; j0 += kLanes) {
    const int run = j0 / kLanes;
    const char* first = static_cast<const char*>(RowPointer<kElem>(plane, slots[j0], kv_head));
    bool side_by_side = j0 + kLanes <= count;
    for (int i = 1; side_by_side && i < kLanes; ++i) {
      side_by_side = RowPointer<kElem>(plane, slots[j0 + i], kv_head) == first + i * kSize;
    }
    tile->vertical_run[run] = side_by_side;
    tile->joins_next[run] = false;
    if (run > 0) {
      tile->joins_next[run - 1] =
          side_by_side && previous != nullptr && first == previous + kLanes * kSize;
    }
    previous = side_by_side ? first : nullptr;
    for (int j = j0; j < std::min(j0 + kLanes, count); ++j) {
      tile->rows[j] = side_by_side ? first + (j - j0) * kSize
                                   : ContiguousRow<kElem>(plane, slots[j], kv_head, head_dim,
                                                          tile->staging + int64_t{j} * head_dim);
    }
  }
}

/// Points `tile` at the rows (and scale rows) of `slots` of one plane; a dimension-major plane's
/// rows are gathered into the tile's staging rows first (ContiguousRow), except, for keys
/// (`vertical`), the runs of kLanes keys that lie side by side in their block.
template <CacheElem kElem>
HWY_INLINE void PointTileRows(const CacheDesc& cache, const CachePlane& plane, const int64_t* slots,
                              int kv_head, int count, bool vertical, TileRows* tile) {
  if constexpr (!IsGroupScaledElem<kElem>()) {
    if (vertical && internal::DimStride(plane) > 1)
      return PointDimMajorRows<kElem>(plane, slots, kv_head, count, cache.head_dim, tile);
  }
  for (int j = 0; j < count; ++j) {
    tile->rows[j] = ContiguousRow<kElem>(plane, slots[j], kv_head, cache.head_dim,
                                         tile->staging + static_cast<int64_t>(j) * cache.head_dim);
    if constexpr (IsGroupScaledElem<kElem>()) {
      tile->scale_rows[j] = ScalePointer(cache, plane, slots[j], kv_head);
    }
  }
}

/// Widens the group scales of the tile's rows and sees whether they prove NormalProducts
/// (nothing for unquantized caches).
template <CacheElem kElem>
DYNATTN_TILE_STEP void WidenTileScales(const CacheDesc& cache, const ScaleLanes& lanes, int count,
                                       TileRows* tile) {
  if (lanes.mode == ScaleLanes::Mode::kNone) return;
  if (lanes.mode != ScaleLanes::Mode::kExpanded && lanes.groups % kLanes == 0) {
    tile->normal_products =
        cache.scale_type == ScaleType::kF16
            ? WidenWholeScaleRows<kElem, true>(tile->scale_rows, count, lanes, tile->scales)
            : WidenWholeScaleRows<kElem, false>(tile->scale_rows, count, lanes, tile->scales);
    return;
  }
  if (lanes.mode != ScaleLanes::Mode::kExpanded && lanes.groups < kLanes) {
    tile->normal_products =
        cache.scale_type == ScaleType::kF16
            ? WidenShortScaleRows<kElem, true>(tile->scale_rows, count, lanes, tile->scales)
            : WidenShortScaleRows<kElem, false>(tile->scale_rows, count, lanes, tile->scales);
    return;
  }
  for (int j = 0; j < count; ++j) {
    LoadRowScales(cache, tile->scale_rows[j], lanes, tile->scales + j * tile->row_floats);
  }
  tile->normal_products = NormalProducts<kElem>(tile->scales, count, lanes);
}

/// The key and value rows of one tile, and its key range.
struct FusedTile {
  TileRows keys, values;
  int64_t key0 = 0;
  int count = 0;
};

/// ScoreFusedTile of dimension-major keys: runs side by side in their block take VerticalDots,
/// other keys (gathered) FusedDots one at a time.
template <CacheElem kElem, bool kRound, int kBlock>
HWY_INLINE void ScoreDimMajorTile(const AttentionProblem& p, const float* queries,
                                  const FusedTile& tile, const RowsAhead& ahead,
                                  const RowsAhead& also_ahead, const ScaleLanes& lanes,
                                  float* scores) {
  const TileRows& keys = tile.keys;
  for (int j0 = 0; j0 < tile.count;) {
    const int run = j0 / kLanes;
    if (!keys.vertical_run[run]) {
      ahead.Fetch(j0, kLanes);
      also_ahead.Fetch(j0, kLanes);
      for (int j = j0; j < std::min(j0 + kLanes, tile.count); ++j) {
        FusedDots<kElem, kRound, false, ScaleLanes::Mode::kAny, kBlock, 1>(
            queries, p.padded_dim, keys, j, lanes, p.head_dim, scores);
      }
      j0 += kLanes;
      continue;
    }
    int runs = 1;  // the stretch of runs that follow one another in their block
    while (keys.joins_next[run + runs - 1]) ++runs;
    const FetchInParts fetch{&ahead, &also_ahead, j0, runs * kLanes};
    VerticalDots<kElem, kRound, kBlock>(queries, p.padded_dim, keys, j0, runs, lanes, p.head_dim,
                                        fetch, scores);
    j0 += runs * kLanes;
  }
}

/// scores[v * kKeyTile + j] = q_v . k_j for the keys of `tile`, kKeys at a time, while the rows
/// of `ahead` and `also_ahead` are fetched in step.
template <CacheElem kElem, bool kRound, bool kNormal, ScaleLanes::Mode kMode, int kBlock>
DYNATTN_TILE_STEP void ScoreFusedTile(const AttentionProblem& p, const float* queries,
                                      const FusedTile& tile, const RowsAhead& ahead,
                                      const RowsAhead& also_ahead, const ScaleLanes& lanes,
                                      float* scores) {
  constexpr int kSub = ScoreStepBlock<kElem, kBlock>();
  constexpr int kKeys = FusedKeys<kElem, kSub>();
  const int dp = p.padded_dim;
  if constexpr (!IsGroupScaledElem<kElem>()) {
    if (tile.keys.dim_bytes != 0) {
      return ScoreDimMajorTile<kElem, kRound, kBlock>(p, queries, tile, ahead, also_ahead, lanes,
                                                      scores);
    }
  }
  int j = 0;
  for (; j + kKeys <= tile.count; j += kKeys) {
    ahead.Fetch(j, kKeys);
    also_ahead.Fetch(j, kKeys);
    for (int v = 0; v < kBlock; v += kSub) {
      FusedDots<kElem, kRound, kNormal, kMode, kSub, kKeys>(
          queries + v * dp, dp, tile.keys, j, lanes, p.head_dim, scores + v * kKeyTile);
    }
  }
  ahead.Fetch(j, kKeyTile);
  also_ahead.Fetch(j, kKeyTile);
  for (; j < tile.count; ++j) {
    FusedDots<kElem, kRound, kNormal, kMode, kBlock, 1>(queries, dp, tile.keys, j, lanes,
                                                        p.head_dim, scores);
  }
}

/// ScoreFusedTile with the split rounding where the tile's key scales allow it (as in
/// FusedAccumulate, other tiles take the mode-generic loop).
template <CacheElem kElem, bool kRound, ScaleLanes::Mode kMode, int kBlock>
HWY_INLINE void ScoreTile(const AttentionProblem& p, const float* queries, const FusedTile& tile,
                          const RowsAhead& ahead, const RowsAhead& also_ahead,
                          const ScaleLanes& lanes, float* scores) {
  if constexpr (MayRoundNormal<kElem, kRound>()) {
    if (tile.keys.normal_products) {
      return ScoreFusedTile<kElem, kRound, true, kMode, kBlock>(p, queries, tile, ahead, also_ahead,
                                                                lanes, scores);
    }
    return ScoreFusedTile<kElem, kRound, false, ScaleLanes::Mode::kAny, kBlock>(
        p, queries, tile, ahead, also_ahead, lanes, scores);
  }
  ScoreFusedTile<kElem, kRound, false, kMode, kBlock>(p, queries, tile, ahead, also_ahead, lanes,
                                                      scores);
}

/// ScoreFusedTile in the fast tier's integer key scores: each key's integer dot products
/// with every query vector of the block.
template <CacheElem kElem, int kBlock>
DYNATTN_TILE_STEP void ScoreFastTile(const AttentionProblem& p, const FastQueries& queries,
                                     const FusedTile& tile, const RowsAhead& ahead,
                                     const RowsAhead& also_ahead, float* scores) {
  const int group = p.kv.cache.quant_group;
  for (int j = 0; j < tile.count; ++j) {
    if (j % 2 == 0) {
      ahead.Fetch(j, 2);
      also_ahead.Fetch(j, 2);
    }
    FastDots<kElem, kBlock>(queries, tile.keys.rows[j], tile.keys.scales + j * tile.keys.row_floats,
                            group, p.head_dim, scores + j);
  }
}

/// Computes the slots of keys [key0, key0 + count) and points `tile` at their rows.
template <CacheElem kElem>
HWY_INLINE void PointTile(const AttentionProblem& p, const internal::WorkItem& w, int64_t key0,
                          int64_t* slots, FusedTile* tile) {
  tile->key0 = key0;
  tile->count =
      static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(kKeyTile, w.key_end - key0)));
  if (tile->count == 0) return;
  const CacheDesc& cache = p.kv.cache;
  p.kv.slots.Slots(w.request, key0, tile->count, slots);
  PointTileRows<kElem>(cache, cache.key, slots, w.kv_head, tile->count, true, &tile->keys);
  PointTileRows<kElem>(internal::ValueView(cache), cache.value, slots, w.kv_head, tile->count,
                       false, &tile->values);
}

/// The fused kernel's scratch for a block of `block` query vectors: queries, their running states,
/// a tile's scores, slots and flags, two tiles' key and value scales, the query rows, two tiles'
/// staging rows for the planes that are dimension-major, the fast tier's query codes (int16 or
/// int8 codes, or bf16 elements) and scales, its bf16 weight pairs and its byte codes' group sums.
HWY_INLINE std::array<size_t, 21> FusedBlockScratch(const AttentionProblem& p, int block) {
  const ScaleLanes key_lanes = ScaleLanes::For(p.kv.cache);
  const ScaleLanes value_lanes = ScaleLanes::For(internal::ValueView(p.kv.cache));
  const size_t n = static_cast<size_t>(block), dp = static_cast<size_t>(p.padded_dim);
  const size_t dpv = static_cast<size_t>(p.padded_value_dim);
  // Quantized tiles widen their group scales here; fp8 tiles keep the plane's tensor scale.
  const size_t key_scales = std::max<size_t>(1, size_t{kKeyTile} * key_lanes.row_floats);
  const size_t value_scales = std::max<size_t>(1, size_t{kKeyTile} * value_lanes.row_floats);
  constexpr size_t kRowFloats = (sizeof(QueryRow) + sizeof(float) - 1) / sizeof(float);
  return {n * dp,
          n * dpv,
          n,
          n,
          dpv,
          n * kKeyTile,
          2 * kKeyTile,
          kKeyTile,
          key_scales,
          value_scales,
          key_scales,
          value_scales,
          n * kRowFloats,
          StagingFloats(p.kv.cache.key, p.head_dim),
          StagingFloats(p.kv.cache.value, p.value_dim),
          StagingFloats(p.kv.cache.key, p.head_dim),
          StagingFloats(p.kv.cache.value, p.value_dim),
          (n * std::max<size_t>({dp, size_t(Bf16QueryStride(p.head_dim)),
                                 size_t(ByteQueryStride(p.head_dim) / 2)}) +
           1) /
              2,
          n,
          n * kKeyTile / 2,
          n * static_cast<size_t>(p.head_dim / 64 + 1)};
}

/// The fast tier's kernels in the fused decode: integer key scores (pmaddwd, or VNNI's byte dot
/// products) for int8 and int4 caches, bf16 dot products for fp16 and bf16 caches.
enum class FastKernel : uint8_t { kNone, kIntegerKeys, kVnniKeys, kBf16Dots };

/// One fused work item with kBlock >= its query vectors. Rows are prefetched ahead of their use
/// (the schedule is below): rows of a KV head are strided (often a page apart) in the common
/// layouts, where the hardware prefetchers do not follow. kFast: the fast tier's kernel
/// (internal::FastCovers holds): integer key scores for int8 and int4 caches (kRoundKeys is then
/// unused), bf16 dot products for fp16 and bf16 caches (tiles with a hidden key take the exact
/// value loops).
template <CacheElem kElem, bool kRoundKeys, bool kRoundValues, ScaleLanes::Mode kMode, int kBlock,
          FastKernel kFast = FastKernel::kNone>
void AttendFusedBlock(const AttentionProblem& p, const internal::WorkItem& w, float* states,
                      internal::Scratch* scratch) {
  const int rows = w.row_end - w.row_begin;
  const int dpv = p.padded_value_dim;
  const CacheDesc value_view = internal::ValueView(p.kv.cache);
  const ScaleLanes lanes = ScaleLanes::For(p.kv.cache);
  const ScaleLanes value_lanes = ScaleLanes::For(value_view);
  const internal::RowBytes bytes = internal::RowBytesOf(p.kv.cache);
  const internal::RowBytes value_bytes = internal::RowBytesOf(value_view);
  const auto parts = scratch->Carve(FusedBlockScratch(p, kBlock));
  float* queries = parts[0];
  const VectorStates s{parts[1], parts[2], parts[3], parts[4]};
  float* scores = parts[5];
  int64_t* slots = reinterpret_cast<int64_t*>(parts[6]);
  uint8_t* active = reinterpret_cast<uint8_t*>(parts[7]);
  FusedTile tiles[2];
  for (int t = 0; t < 2; ++t) {
    tiles[t].keys.scales = parts[8 + 2 * t];
    tiles[t].values.scales = parts[9 + 2 * t];
    tiles[t].keys.row_floats = lanes.row_floats;
    tiles[t].values.row_floats = value_lanes.row_floats;
    tiles[t].keys.staging = parts[13 + 2 * t];
    tiles[t].values.staging = parts[14 + 2 * t];
    if constexpr (IsFp8Elem<kElem>()) {
      tiles[t].keys.scales[0] = p.kv.cache.key.tensor_scale;
      tiles[t].values.scales[0] = p.kv.cache.value.tensor_scale;
    }
  }
  QueryRow* query_rows = reinterpret_cast<QueryRow*>(parts[12]);
  MakeQueryRows(p, w, query_rows);
  const int vectors = p.group_size * rows;
  LoadQueries(p, query_rows, vectors, kBlock, queries);
  constexpr bool kBf16Dots = kFast == FastKernel::kBf16Dots && kBf16DotsTarget;
  constexpr bool kVnniKeys = kFast == FastKernel::kVnniKeys && kVnniTarget;
  constexpr bool kIntegerKeys = kFast == FastKernel::kIntegerKeys;
  const FastQueries fast{reinterpret_cast<int16_t*>(parts[17]), parts[18], p.padded_dim};
  const int group = p.kv.cache.quant_group;
  const ByteQueries bytes_q{reinterpret_cast<int8_t*>(parts[17]),
                            reinterpret_cast<int32_t*>(parts[20]), parts[18],
                            ByteQueryStride(p.head_dim), group > 0 ? p.head_dim / group : 0};
  uint16_t* bf16_queries = reinterpret_cast<uint16_t*>(parts[17]);
  uint32_t* weight_pairs = reinterpret_cast<uint32_t*>(parts[19]);
  const int bf16_stride = Bf16QueryStride(p.head_dim);
  if constexpr (kIntegerKeys) QuantizeQueries<kElem>(queries, kBlock, p.head_dim, fast);
  if constexpr (kVnniKeys) {
    QuantizeQueryBytes(queries, kBlock, p.padded_dim, p.head_dim, group, bytes_q);
  }
  if constexpr (kBf16Dots) {
    RoundQueriesToBf16(queries, kBlock, p.padded_dim, p.head_dim, bf16_stride, bf16_queries);
  }
  s.Reset(kBlock, dpv);
  PointTile<kElem>(p, w, FirstTileKey(query_rows, vectors, w.key_begin), slots, &tiles[0]);
  // Prefetch schedule. Quantized caches: each phase fetches the rows the next phase reads (the
  // values of this tile while its keys are scored, the keys of the next tile while these values
  // are accumulated), so rows arrive about half a tile ahead at an even pace. Other caches fetch
  // the whole next tile while the keys are scored, and the first tile's rows all at once before
  // it (short items, such as the unique runs of unified attention, spend a large share of their
  // time in that tile), into L1. Each measured faster for its own caches, and quantized rows
  // into L1 measured no gain (docs/performance-history.md, "Decode").
  constexpr bool kPhased = IsGroupScaledElem<kElem>();
  constexpr PrefetchTo kTo = kPhased ? PrefetchTo::kL2 : PrefetchTo::kL1;
  const RowsAhead none;
  RowsAhead{&tiles[0].keys, tiles[0].count, bytes, kTo}.Fetch(0, kKeyTile);
  if (!kPhased) RowsAhead{&tiles[0].values, tiles[0].count, value_bytes, kTo}.Fetch(0, kKeyTile);
  for (int t = 0; tiles[t].count > 0; t ^= 1) {
    FusedTile& tile = tiles[t];
    FusedTile& next = tiles[t ^ 1];
    PointTile<kElem>(p, w, tile.key0 + kKeyTile, slots, &next);
    WidenTileScales<kElem>(p.kv.cache, lanes, tile.count, &tile.keys);
    if (!kPhased) WidenTileScales<kElem>(value_view, value_lanes, tile.count, &tile.values);
    const RowsAhead next_keys{&next.keys, next.count, bytes, kTo};
    const RowsAhead key_phase =
        kPhased ? RowsAhead{&tile.values, tile.count, value_bytes, kTo} : next_keys;
    const RowsAhead key_phase_too =
        kPhased ? none : RowsAhead{&next.values, next.count, value_bytes, kTo};
    if constexpr (kIntegerKeys) {
      ScoreFastTile<kElem, kBlock>(p, fast, tile, key_phase, key_phase_too, scores);
    } else if constexpr (kVnniKeys) {
      ScoreVnniTile<kElem, kBlock>(bytes_q, tile.keys, tile.count, group, p.head_dim, key_phase,
                                   key_phase_too, scores);
    } else if constexpr (kBf16Dots) {
      ScoreBf16Tile<kElem, kBlock>(bf16_queries, bf16_stride, p.head_dim, tile.keys, tile.count,
                                   key_phase, key_phase_too, scores);
    } else {
      ScoreTile<kElem, kRoundKeys, kMode, kBlock>(p, queries, tile, key_phase, key_phase_too, lanes,
                                                  scores);
    }
    SoftmaxBlock(p, query_rows, vectors, 0, kBlock, tile.key0, tile.count, scores, s);
    MarkActiveKeys<kBlock>(scores, vectors, tile.count, active);
    if (kPhased) WidenTileScales<kElem>(value_view, value_lanes, tile.count, &tile.values);
    if constexpr (kBf16Dots) {
      if (std::all_of(active, active + tile.count, [](uint8_t a) { return a == kSeenByAll; })) {
        AccumulateBf16Tile<kElem, kBlock>(scores, tile.values, tile.count, p.value_dim, dpv,
                                          weight_pairs, s.acc);
        continue;
      }
    }
    FusedAccumulate<kElem, kRoundValues, kMode, kBlock>(scores, active, tile.values, tile.count,
                                                        value_lanes, p.value_dim, dpv,
                                                        kPhased ? next_keys : none, s.acc);
  }
  FinishItem(p, w, query_rows, s, states);
}

/// AttendFusedBlock with the smallest block that holds the item's query vectors (the largest on
/// the portable targets).
template <CacheElem kElem, bool kRoundKeys, bool kRoundValues, ScaleLanes::Mode kMode,
          FastKernel kFast = FastKernel::kNone>
void AttendFusedBlocks(const AttentionProblem& p, const internal::WorkItem& w, float* states,
                       internal::Scratch* scratch) {
  const int vectors = p.group_size * (w.row_end - w.row_begin);
  if constexpr (kPortableTarget) {  // one block size there (the compile time of the others)
    return AttendFusedBlock<kElem, kRoundKeys, kRoundValues, kMode, kFusedMaxVectors, kFast>(
        p, w, states, scratch);
  }
  if (vectors <= 1) {
    return AttendFusedBlock<kElem, kRoundKeys, kRoundValues, kMode, 1, kFast>(p, w, states,
                                                                              scratch);
  }
  if (vectors <= 2) {
    return AttendFusedBlock<kElem, kRoundKeys, kRoundValues, kMode, 2, kFast>(p, w, states,
                                                                              scratch);
  }
  if (vectors <= 4) {
    return AttendFusedBlock<kElem, kRoundKeys, kRoundValues, kMode, 4, kFast>(p, w, states,
                                                                              scratch);
  }
  AttendFusedBlock<kElem, kRoundKeys, kRoundValues, kMode, 8, kFast>(p, w, states, scratch);
}

/// A work item through the fused decode kernel (UseFusedDecode holds), with keys and values
/// rounded to fp16 or not (KeysRound, ValuesRound). Quantized caches in the two power-of-two
/// scale modes get their own inner loops (no mode test per vector of codes, fewer live
/// registers): lookup (groups shorter than a vector, e.g. 8 on AVX-512; on narrower vectors only
/// groups of 4 or less, which share the run-time loops there) and broadcast (groups of a vector
/// or more, e.g. 8 on AVX2). Other group sizes, tiles whose scales keep the conversions
/// (ScoreTile, FusedAccumulate), and every tile on the portable targets read the mode at run
/// time.
template <CacheElem kElem, bool kRoundKeys, bool kRoundValues>
void AttendFused(const AttentionProblem& p, const internal::WorkItem& w, float* states,
                 internal::Scratch* scratch) {
  using Mode = ScaleLanes::Mode;
  if constexpr (IsGroupScaledElem<kElem>() && !kPortableTarget) {
    const Mode mode = ScaleLanes::For(p.kv.cache).mode;
    if constexpr (kLanes >= 16) {  // on narrower vectors only groups of 4 or less look up
      if (mode == Mode::kLookup) {
        return AttendFusedBlocks<kElem, kRoundKeys, kRoundValues, Mode::kLookup>(p, w, states,
                                                                                 scratch);
      }
    }
    if (mode == Mode::kBroadcast) {
      return AttendFusedBlocks<kElem, kRoundKeys, kRoundValues, Mode::kBroadcast>(p, w, states,
                                                                                  scratch);
    }
  }
  AttendFusedBlocks<kElem, kRoundKeys, kRoundValues, Mode::kAny>(p, w, states, scratch);
}

/// AttendFusedBlocks of the fast tier with the exact value loops' rounding, for the tiles that take
/// them.
template <CacheElem kElem, ScaleLanes::Mode kMode, FastKernel kFast>
void AttendFastBlocks(const AttentionProblem& p, const internal::WorkItem& w, float* states,
                      internal::Scratch* scratch) {
  if (ValuesRound<kElem>(p)) {
    return AttendFusedBlocks<kElem, false, true, kMode, kFast>(p, w, states, scratch);
  }
  AttendFusedBlocks<kElem, false, false, kMode, kFast>(p, w, states, scratch);
}

/// Runs a work item in the fast tier and returns true where a fast kernel covers it: a fused
/// decode item (UseFusedDecode) over a cache that internal::FastCovers takes: int8 and int4 keys
/// scored by integer dot products (kVnni: VNNI's byte dot products) and the rest
/// as AttendFused runs it, or fp16 and bf16 rows through bf16 dot products. Returns false, having
/// written nothing, for every other item (the exact kernels run those).
template <CacheElem kElem, bool kVnni = false>
bool AttendFastDecode(const AttentionProblem& p, const internal::WorkItem& w, float* states,
                      internal::Scratch* scratch) {
  const int vectors = p.group_size * (w.row_end - w.row_begin);
  if (!UseFusedDecode(p, vectors) || !internal::FastCovers(p.kv.cache)) return false;
  if constexpr (IsBf16DotElem<kElem>()) {
    AttendFastBlocks<kElem, ScaleLanes::Mode::kAny, FastKernel::kBf16Dots>(p, w, states, scratch);
    return true;
  } else {
    // FastCovers' groups are powers of two of at least 32 codes: broadcast mode everywhere
    // (the portable targets read it at run time).
    static_assert(kLanes <= internal::kFastGroupMultiple, "a group is whole vectors");
    constexpr auto kMode = kPortableTarget ? ScaleLanes::Mode::kAny : ScaleLanes::Mode::kBroadcast;
    constexpr FastKernel kKeys = kVnni ? FastKernel::kVnniKeys : FastKernel::kIntegerKeys;
    AttendFastBlocks<kElem, kMode, kKeys>(p, w, states, scratch);
    return true;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace dynattn
HWY_AFTER_NAMESPACE();

#endif  // DYNATTN_CPU_DECODE_INL_H_
