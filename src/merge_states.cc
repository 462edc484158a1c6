// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// MergeStates: the exact merge of partial softmax states (spec unified-and-ksana.md §1.4, §3,
// §6.5). Why it looks the way it does:
// * Every input is checked (forms, shapes, overlap, then every value) before anything is written,
//   so a rejected call leaves the caller's buffers as they were.
// * Empty parts never enter the arithmetic: they are skipped, not weighted by
//   exp(-inf - -inf) = NaN, which is the bug of the upstream merges (FlashInfer #4051, UA's
//   offline merge, vLLM's Triton path). Merging an empty part is therefore a bitwise no-op.
// * Sums are taken in double and rounded to float once, in an order fixed by the parts' values
//   (not their index), so that any permutation of the parts gives the same bits.
// * Rows are independent, so the parallel loop over rows cannot change a single bit.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/softmax_state.h"
#include "dynattn/merge.h"
#include "src/aliasing.h"
#include "src/context.h"
#include "src/validate.h"

namespace dynattn {
namespace {

using std::to_string;

using internal::CheckNoAliasing;
using internal::FloatString;
using internal::ReadBuffer;
using internal::ShapeString;
using internal::WrittenBuffer;

/// "name[i, j, k]" for the element at dense offset `flat` of `t`.
std::string ElementName(const char* name, const TensorView& t, int64_t flat) {
  std::string index;
  for (int i = t.rank - 1; i >= 0; --i) {
    const int64_t extent = t.shape[i];
    index = to_string(flat % extent) + (index.empty() ? "" : ", ") + index;
    flat /= extent;
  }
  return std::string(name) + "[" + index + "]";
}

/// A present fp32 tensor on the CPU, dense, of rank `rank`.
Status CheckF32(const char* name, const TensorView& t, int rank, const char* shape_rule) {
  if (!t.present()) return Status::Invalid(name, "is required but absent");
  DYNATTN_RETURN_IF_ERROR(internal::CheckStorage(name, t));
  if (t.device != Device::kCpu) return Status::Unsupported(name, "must be in CPU memory");
  if (t.dtype != DType::kF32) {
    return Status::Invalid(name, std::string("must be float32, got ") + DTypeName(t.dtype));
  }
  if (t.rank != rank) {
    return Status::Invalid(
        name, std::string("must have shape ") + shape_rule + ", got " + ShapeString(t));
  }
  return Status::Ok();
}

/// `t` (already checked by CheckF32) has exactly the extents `want`.
Status CheckShape(const char* name, const TensorView& t, std::initializer_list<int64_t> want,
                  const char* shape_rule) {
  bool same = true;
  int i = 0;
  for (int64_t extent : want) same = same && t.shape[i++] == extent;
  if (same) return Status::Ok();
  std::string expected = "(";
  i = 0;
  for (int64_t extent : want) expected += (i++ ? ", " : "") + to_string(extent);
  return Status::Invalid(name, std::string("must have shape ") + shape_rule + " = " + expected +
                                   "), got " + ShapeString(t));
}

/// The validated call.
struct MergeCall {
  bool normalised = false;
  int64_t parts = 0;            // K
  int64_t rows = 0;             // T * H
  int64_t dim = 0;              // D
  const float* vec = nullptr;   // out or acc, (K, rows, D)
  const float* lse = nullptr;   // normalised form, (K, rows)
  const float* max = nullptr;   // unnormalised form, (K, rows)
  const float* sum = nullptr;   // unnormalised form, (K, rows)
  float* merged_out = nullptr;  // (rows, D)
  float* merged_lse = nullptr;  // (rows) or null
};

Status ValidateForm(const MergeStatesArgs& args, bool* normalised) {
  const bool any_normalised = args.out.present() || args.lse.present();
  const bool any_unnormalised = args.acc.present() || args.max.present() || args.sum.present();
  if (any_normalised && any_unnormalised) {
    const char* extra = args.acc.present() ? "acc" : args.max.present() ? "max" : "sum";
    return Status::Invalid(extra,
                           "give either out and lse (normalised form) or acc, max and sum "
                           "(unnormalised form), not both");
  }
  if (!any_normalised && !any_unnormalised) {
    return Status::Invalid("out",
                           "is required: give either out and lse (normalised form) or acc, max "
                           "and sum (unnormalised form)");
  }
  *normalised = any_normalised;
  return Status::Ok();
}

Status ValidateShapes(const MergeStatesArgs& args, MergeCall* call) {
  const char* vec_name = call->normalised ? "out" : "acc";
  const TensorView& vec = call->normalised ? args.out : args.acc;
  DYNATTN_RETURN_IF_ERROR(CheckF32(vec_name, vec, 4, "(K, T, H, D)"));
  const int64_t k = vec.shape[0], t = vec.shape[1], h = vec.shape[2], d = vec.shape[3];
  static const char* const kExtentNames[] = {"K (parts)", "T (tokens)", "H (heads)",
                                             "D (head dim)"};
  for (int i = 0; i < 4; ++i) {
    if (vec.shape[i] < 1) {
      return Status::Invalid(vec_name, std::string("must have ") + kExtentNames[i] +
                                           " >= 1, got shape " + ShapeString(vec));
    }
  }
  if (call->normalised) {
    DYNATTN_RETURN_IF_ERROR(CheckF32("lse", args.lse, 3, "(K, T, H)"));
    DYNATTN_RETURN_IF_ERROR(CheckShape("lse", args.lse, {k, t, h}, "(K, T, H) like out"));
  } else {
    DYNATTN_RETURN_IF_ERROR(CheckF32("max", args.max, 3, "(K, T, H)"));
    DYNATTN_RETURN_IF_ERROR(CheckShape("max", args.max, {k, t, h}, "(K, T, H) like acc"));
    DYNATTN_RETURN_IF_ERROR(CheckF32("sum", args.sum, 3, "(K, T, H)"));
    DYNATTN_RETURN_IF_ERROR(CheckShape("sum", args.sum, {k, t, h}, "(K, T, H) like acc"));
  }
  DYNATTN_RETURN_IF_ERROR(CheckF32("merged_out", args.merged_out, 3, "(T, H, D)"));
  DYNATTN_RETURN_IF_ERROR(CheckShape("merged_out", args.merged_out, {t, h, d}, "(T, H, D)"));
  if (args.merged_lse.present()) {
    DYNATTN_RETURN_IF_ERROR(CheckF32("merged_lse", args.merged_lse, 2, "(T, H)"));
    DYNATTN_RETURN_IF_ERROR(CheckShape("merged_lse", args.merged_lse, {t, h}, "(T, H)"));
  }
  call->parts = k;
  call->rows = t * h;
  call->dim = d;
  return Status::Ok();
}

/// The outputs may not share memory with the inputs or with each other.
Status ValidateOverlap(const MergeStatesArgs& args) {
  return CheckNoAliasing({ReadBuffer("out", args.out), ReadBuffer("lse", args.lse),
                          ReadBuffer("acc", args.acc), ReadBuffer("max", args.max),
                          ReadBuffer("sum", args.sum), WrittenBuffer("merged_lse", args.merged_lse),
                          WrittenBuffer("merged_out", args.merged_out)});
}

/// Every value rule; the first offending element is named.
Status ValidateValues(const MergeStatesArgs& args, const MergeCall& call) {
  const char* vec_name = call.normalised ? "out" : "acc";
  const TensorView& vec = call.normalised ? args.out : args.acc;
  const int64_t vec_count = call.parts * call.rows * call.dim;
  for (int64_t i = 0; i < vec_count; ++i) {
    if (!std::isfinite(call.vec[i])) {
      return Status::Invalid(vec_name, "must be finite, got " + ElementName(vec_name, vec, i) +
                                           " = " + FloatString(call.vec[i]));
    }
  }
  const int64_t count = call.parts * call.rows;
  if (call.normalised) {
    for (int64_t i = 0; i < count; ++i) {
      if (std::isnan(call.lse[i])) {
        return Status::Invalid("lse", "must not be NaN, got " + ElementName("lse", args.lse, i) +
                                          " = nan (an empty part has lse -inf)");
      }
    }
    return Status::Ok();
  }
  for (int64_t i = 0; i < count; ++i) {
    const float m = call.max[i];
    if (std::isnan(m) || m == std::numeric_limits<float>::infinity()) {
      return Status::Invalid("max", "must be finite or -inf (empty part), got " +
                                        ElementName("max", args.max, i) + " = " + FloatString(m));
    }
  }
  for (int64_t i = 0; i < count; ++i) {
    const float l = call.sum[i];
    if (!std::isfinite(l) || l < 0) {
      return Status::Invalid("sum", "must be finite and >= 0, got " +
                                        ElementName("sum", args.sum, i) + " = " + FloatString(l));
    }
    if (l != 0 && call.max[i] == -std::numeric_limits<float>::infinity()) {
      return Status::Invalid("sum", "must be 0 where max is -inf (an empty part), got " +
                                        ElementName("sum", args.sum, i) + " = " + FloatString(l));
    }
  }
  return Status::Ok();
}

/// A float's bits as an unsigned key whose order is the IEEE total order (-0 < +0).
uint32_t OrderKey(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

/// One non-empty part of one row.
struct Part {
  float m;         // max (or lse in the normalised form)
  float l;         // sum (1 in the normalised form)
  const float* a;  // D values: acc (or out)
};

/// Orders parts by (m, l, a[0], ..., a[D-1]) in the IEEE total order. Parts that compare equal
/// have identical bits, so the order among them cannot change the sums.
struct PartOrder {
  int64_t dim;
  bool operator()(const Part& x, const Part& y) const {
    if (OrderKey(x.m) != OrderKey(y.m)) return OrderKey(x.m) < OrderKey(y.m);
    if (OrderKey(x.l) != OrderKey(y.l)) return OrderKey(x.l) < OrderKey(y.l);
    for (int64_t d = 0; d < dim; ++d) {
      if (OrderKey(x.a[d]) != OrderKey(y.a[d])) return OrderKey(x.a[d]) < OrderKey(y.a[d]);
    }
    return false;
  }
};

/// Per-thread buffers of MergeRow.
struct RowScratch {
  std::vector<Part> parts;
  std::vector<double> acc;
};

void MergeRow(const MergeCall& call, int64_t row, RowScratch* scratch) {
  const int64_t dim = call.dim;
  std::vector<Part>& parts = scratch->parts;
  parts.clear();
  for (int64_t k = 0; k < call.parts; ++k) {
    const int64_t at = k * call.rows + row;
    const float* a = call.vec + at * dim;
    if (call.normalised) {
      // -inf is an empty part; +inf is what FlashAttention-2 reports for one (vLLM reads it so).
      if (std::isfinite(call.lse[at])) parts.push_back({call.lse[at], 1.0f, a});
    } else if (call.sum[at] > 0) {  // sum == 0 is an empty part, whatever its max
      parts.push_back({call.max[at], call.sum[at], a});
    }
  }
  float* out = call.merged_out + row * dim;
  if (parts.empty()) {
    std::fill(out, out + dim, 0.0f);
    if (call.merged_lse) call.merged_lse[row] = -std::numeric_limits<float>::infinity();
    return;
  }
  std::sort(parts.begin(), parts.end(), PartOrder{dim});
  // Sorted ascending by m, so the last part holds the maximum.
  const double m = parts.back().m;
  double l = 0;
  std::vector<double>& acc = scratch->acc;
  acc.assign(dim, 0.0);
  for (const Part& part : parts) {
    const double weight =  // in (0, 1]: empty parts were left out
        internal::MergeWeight(static_cast<double>(part.m), m, [](double x) { return std::exp(x); });
    l += weight * part.l;
    for (int64_t d = 0; d < dim; ++d) acc[d] += weight * part.a[d];
  }
  // l >= the largest part's sum > 0: the part holding m has weight exactly 1.
  for (int64_t d = 0; d < dim; ++d) out[d] = static_cast<float>(acc[d] / l);
  if (call.merged_lse) call.merged_lse[row] = static_cast<float>(m + std::log(l));
}

}  // namespace

Status MergeStates(const MergeStatesArgs& args, const RunOptions& options) {
  DYNATTN_RETURN_IF_ERROR(internal::ValidateRunOptions(options));
  MergeCall call;
  DYNATTN_RETURN_IF_ERROR(ValidateForm(args, &call.normalised));
  DYNATTN_RETURN_IF_ERROR(ValidateShapes(args, &call));
  DYNATTN_RETURN_IF_ERROR(ValidateOverlap(args));
  if (call.normalised) {
    call.vec = args.out.As<const float>();
    call.lse = args.lse.As<const float>();
  } else {
    call.vec = args.acc.As<const float>();
    call.max = args.max.As<const float>();
    call.sum = args.sum.As<const float>();
  }
  call.merged_out = args.merged_out.As<float>();
  call.merged_lse = args.merged_lse.present() ? args.merged_lse.As<float>() : nullptr;
  DYNATTN_RETURN_IF_ERROR(ValidateValues(args, call));

  // Rows are independent and each is computed by one thread alone, so the thread count and the
  // partition cannot change any bit. Small calls stay on the caller's thread.
  constexpr int64_t kMinWorkPerTask = int64_t{1} << 14;  // part elements
  const int64_t work_per_row = call.parts * (call.dim + 2);
  const int64_t grain = std::max<int64_t>(1, kMinWorkPerTask / work_per_row);
  if (call.rows <= grain) {
    RowScratch scratch;
    for (int64_t row = 0; row < call.rows; ++row) MergeRow(call, row, &scratch);
    return Status::Ok();
  }
  internal::PooledContext context(options.num_threads, options.pin_threads);
  internal::StateOf(*context.get())
      ->ParallelFor((call.rows + grain - 1) / grain,
                    [&call, grain](int64_t chunk, internal::Scratch*) {
                      RowScratch scratch;
                      const int64_t end = std::min(call.rows, (chunk + 1) * grain);
                      for (int64_t row = chunk * grain; row < end; ++row)
                        MergeRow(call, row, &scratch);
                    });
  return Status::Ok();
}

}  // namespace dynattn
