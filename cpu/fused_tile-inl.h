// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The fused decode's building blocks that its exact loops (decode-inl.h) and the fast tier's
// bf16 dot products (bf16_dots-inl.h) share: a tile's row pointers and their fetching ahead, and
// the fixed tree that folds an accumulator's partial sums into a dot product.

#if defined(DYNATTN_CPU_FUSED_TILE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef DYNATTN_CPU_FUSED_TILE_INL_H_
#undef DYNATTN_CPU_FUSED_TILE_INL_H_
#else
#define DYNATTN_CPU_FUSED_TILE_INL_H_
#endif

#include <algorithm>
#include <cstdint>

#include "cpu/codec-inl.h"
#include "cpu/softmax-inl.h"
#include "hwy/cache_control.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace dynattn {
namespace HWY_NAMESPACE {

#if HWY_TARGET <= HWY_AVX3
/// The sums of the 16 lanes of each of 16 one-vector accumulators x[0, 16), sum m in lane m, by
/// the same tree and pairs as the 8-lane fold below (so the same bits for floats), in about 46
/// operations where two 8-lane folds take about 76. D: 16 lanes of float or int32.
template <class D>
HWY_INLINE hn::Vec<D> FoldSixteenLanes(D d, const hn::Vec<D>* x) {
  const hn::Repartition<double, D> d64;
  const hn::Repartition<float, D> d32;  // the 128-bit block shuffle, on any lanes' bits
  using V = hn::Vec<D>;
  V y[8];  // fold by 8: lanes [0, 8) of y[i] belong to x[2i], lanes [8, 16) to x[2i + 1]
  for (int i = 0; i < 8; ++i) {
    y[i] = hn::Add(hn::ConcatLowerLower(d, x[2 * i + 1], x[2 * i]),
                   hn::ConcatUpperUpper(d, x[2 * i + 1], x[2 * i]));
  }
  V z[4];  // fold by 4: 128-bit block b of z[i] belongs to x[4i + b]
  for (int i = 0; i < 4; ++i) {
    const __m512 lo = hn::BitCast(d32, y[2 * i]).raw, hi = hn::BitCast(d32, y[2 * i + 1]).raw;
    using V32 = hn::Vec<decltype(d32)>;
    z[i] = hn::Add(hn::BitCast(d, V32{_mm512_shuffle_f32x4(lo, hi, _MM_SHUFFLE(2, 0, 2, 0))}),
                   hn::BitCast(d, V32{_mm512_shuffle_f32x4(lo, hi, _MM_SHUFFLE(3, 1, 3, 1))}));
  }
  V w[2];  // fold by 2: block b of w[m] holds x[8m + b] in lanes 0-1, x[8m + 4 + b] in lanes 2-3
  for (int m = 0; m < 2; ++m) {
    const auto lo = hn::BitCast(d64, z[2 * m]), hi = hn::BitCast(d64, z[2 * m + 1]);
    w[m] = hn::Add(hn::BitCast(d, hn::InterleaveLower(d64, lo, hi)),
                   hn::BitCast(d, hn::InterleaveUpper(d64, lo, hi)));
  }
  // fold by 1: x[m] lands in lane kOrder[m] of `sums`, and the lookup moves it to lane m.
  const V sums = hn::Add(hn::ConcatEven(d, w[1], w[0]), hn::ConcatOdd(d, w[1], w[0]));
  constexpr int kOrder[16] = {0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15};
  return hn::TableLookupLanes(sums, hn::SetTableIndices(d, kOrder));
}

/// FoldVirtualLanes of 16 one-vector accumulators x[0, 16) into out[0, 16).
HWY_INLINE void FoldSixteen(const hn::Vec<DF>* x, float* out) {
  const DF df;
  hn::StoreU(FoldSixteenLanes(df, x), df, out);
}
#endif

/// out[x] = the fixed-tree sum of the kVirtualLanes partial sums of accumulator x, for x < kCount.
/// acc holds kCount virtual rows of kVectorsPerRow vectors each.
template <int kCount>
HWY_INLINE void FoldVirtualLanes(const hn::Vec<DF>* acc, float* out) {
#if HWY_TARGET <= HWY_AVX3
  if constexpr (kCount % 16 == 0) {
    for (int first = 0; first < kCount; first += 16) FoldSixteen(acc + first, out + first);
    return;
  }
#endif
#if HWY_TARGET == HWY_SCALAR || HWY_TARGET == HWY_EMU128 || HWY_TARGET == HWY_SSE4 || \
    HWY_TARGET == HWY_SSSE3  // 128-bit vectors: no 8-lane tag
  const DF df;
  for (int x = 0; x < kCount; ++x) {
    HWY_ALIGN float lanes[kVirtualLanes];
    for (int a = 0; a < kVectorsPerRow; ++a)
      hn::Store(acc[x * kVectorsPerRow + a], df, lanes + a * kLanes);
    for (int width = kVirtualLanes / 2; width >= 1; width /= 2) {
      for (int i = 0; i < width; ++i) lanes[i] += lanes[i + width];
    }
    out[x] = lanes[0];
  }
#else
  const hn::FixedTag<float, 8> d8;
  const hn::Repartition<double, decltype(d8)> d64;
  // Lane i of the folded vector holds accumulator kOrder[i] (see the shuffles below).
  constexpr int kOrder[8] = {0, 2, 1, 3, 4, 6, 5, 7};
  for (int first = 0; first < kCount; first += 8) {
    hn::Vec<decltype(d8)> a[8];
    for (int i = 0; i < 8; ++i) {  // fold by 8: lane l + lane l + 8
      const hn::Vec<DF>* x = acc + (first + i) * kVectorsPerRow;
      if (first + i >= kCount) {
        a[i] = hn::Zero(d8);
        continue;
      }
#if HWY_TARGET <= HWY_AVX3  // one 512-bit vector per virtual row
      a[i] = hn::Add(hn::LowerHalf(d8, x[0]), hn::UpperHalf(d8, x[0]));
#else                       // two 256-bit vectors
      a[i] = hn::Add(x[0], x[1]);
#endif
    }
    hn::Vec<decltype(d8)> b[4];
    for (int k = 0; k < 4; ++k) {  // fold by 4: the 128-bit halves; b[k] = [a[2k] | a[2k+1]]
      b[k] = hn::Add(hn::ConcatLowerLower(d8, a[2 * k + 1], a[2 * k]),
                     hn::ConcatUpperUpper(d8, a[2 * k + 1], a[2 * k]));
    }
    hn::Vec<decltype(d8)> c[2];
    for (int m = 0; m < 2; ++m) {  // fold by 2: lane pairs (i, i + 2) within each 128-bit block
      const auto lo = hn::BitCast(d64, b[2 * m]), hi = hn::BitCast(d64, b[2 * m + 1]);
      c[m] = hn::Add(hn::BitCast(d8, hn::InterleaveLower(d64, lo, hi)),
                     hn::BitCast(d8, hn::InterleaveUpper(d64, lo, hi)));
    }
    // fold by 1: even + odd lanes, then each sum to the lane of its accumulator (kOrder is its
    // own inverse). One vector store: scalar stores read back by a vector load would stall.
    const auto sums = hn::Add(hn::ConcatEven(d8, c[1], c[0]), hn::ConcatOdd(d8, c[1], c[0]));
    const auto ordered = hn::TableLookupLanes(sums, hn::SetTableIndices(d8, kOrder));
    if (first + 8 <= kCount) {
      hn::StoreU(ordered, d8, out + first);
    } else {
      HWY_ALIGN float lanes[8];
      hn::Store(ordered, d8, lanes);
      for (int i = 0; first + i < kCount; ++i) out[first + i] = lanes[i];
    }
  }
#endif
}

/// The rows of one tile of one plane: row pointers, scale pointers and widened group scales.
struct TileRows {
  const void* rows[kKeyTile];
  const void* scale_rows[kKeyTile];
  float* scales;   ///< kKeyTile x row_floats; for fp8 one float, the plane's tensor scale.
  int row_floats;  ///< Scale buffer stride.
  float* staging;  ///< kKeyTile x row floats: a dimension-major plane's rows, gathered.
  bool normal_products = false;  ///< NormalProducts holds for the tile's rows.
  /// Dimension-major key planes: bytes between elements d and d + 1 of a row (0 otherwise), and
  /// which runs of kLanes keys lie side by side in their block: those rows point at the block
  /// (element 0 of the run's first key), not at gathered copies.
  int64_t dim_bytes = 0;
  int dims = 0;        ///< Dimension-major planes: elements of a row.
  int elem_bytes = 0;  ///< Dimension-major planes: bytes of an element.
  bool vertical_run[kKeyTile / kLanes] = {};
  bool joins_next[kKeyTile / kLanes] = {};  ///< Vertical runs r and r + 1 lie side by side.
};

/// Rows [j, min(j + n, count)) of a tile, with their scales, fetched ahead into the caches.
struct RowsAhead {
  const TileRows* rows = nullptr;  ///< Nothing to fetch when null.
  int count = 0;
  internal::RowBytes bytes;
  PrefetchTo to = PrefetchTo::kL2;  ///< The cache level the rows are fetched into.

  HWY_INLINE void Fetch(int j, int n) const {
    if (rows == nullptr) return;
    if (to == PrefetchTo::kL1) return FetchInto<PrefetchTo::kL1>(j, n);
    FetchInto<PrefetchTo::kL2>(j, n);
  }

  template <PrefetchTo kTo>
  HWY_INLINE void FetchInto(int j, int n) const {
    if (rows->dim_bytes != 0) return FetchDimensions(j, n);
    for (int k = j; k < std::min(j + n, count); ++k) {
      PrefetchBytes<kTo>(rows->rows[k], bytes.row);
      if (bytes.scales != 0) PrefetchBytes<kTo>(rows->scale_rows[k], bytes.scales);
    }
  }

  /// A dimension-major tile is fetched a share of its dimensions at a time (keys [j, j + n) of
  /// `count` stand for the same share of the dimensions), each dimension's stretch of adjacent
  /// runs as one range, into L2: its dimensions lie a block's row apart (256 bytes for pages of
  /// 128 fp16 keys), so a tile fills a few L1 sets, and fetched into L1 it would evict the tile
  /// being scored, which maps to the same sets. Gathered keys are already in the caches.
  HWY_NOINLINE void FetchDimensions(int j, int n) const {
    if (count == 0) return;
    const int first = rows->dims * j / count;
    const int last = rows->dims * std::min(j + n, count) / count;
    for (int k = 0; k < count && first < last;) {
      if (!rows->vertical_run[k / kLanes]) {
        k += kLanes;
        continue;
      }
      const char* begin = static_cast<const char*>(rows->rows[k]);
      int end = k + kLanes;
      while (rows->joins_next[end / kLanes - 1]) end += kLanes;
      for (int d = first; d < last; ++d) {
        PrefetchBytes<PrefetchTo::kL2>(begin + d * rows->dim_bytes,
                                       size_t(end - k) * rows->elem_bytes);
      }
      k = end;
    }
  }
};

}  // namespace HWY_NAMESPACE
}  // namespace dynattn
HWY_AFTER_NAMESPACE();

#endif  // DYNATTN_CPU_FUSED_TILE_INL_H_
