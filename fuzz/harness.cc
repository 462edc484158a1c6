// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0

#include "fuzz/harness.h"

#include <malloc.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "dynattn/dynattn.h"
#include "dynattn/named_args.h"
#include "dynattn/plan.h"
#include "fuzz/fuzz_input.h"

namespace dynattn_fuzz {
namespace {

using dynattn::DType;
using dynattn::Status;
using dynattn::TensorView;

// Caps that keep one execution in the millisecond range (fuzzing wants many small calls).
constexpr int64_t kMaxTensorBytes = int64_t{1} << 19;  // 512 KiB per tensor
constexpr int64_t kMaxCallBytes = int64_t{1} << 21;    // 2 MiB per call
constexpr int64_t kMaxWork = int64_t{1} << 23;  // ~ query elements x key rows, past it: plan only
constexpr DType kDTypes[] = {DType::kF32, DType::kF16,  DType::kI8,     DType::kI64,
                             DType::kI32, DType::kBF16, DType::kF8E4M3, DType::kF8E5M2};
// fp8 scales past this may overflow fp32 once multiplied by an fp8 maximum and summed over a
// row: a call with one is checked for everything but the finiteness of its outputs.
constexpr float kMaxFiniteSafeScale = 1e30f;
// Below this, x / scale overflows fp32 for an activation of magnitude 2 (|x| / 2^-126 > 2^127),
// and an e5m2 cache rightly stores infinity (e4m3fn saturates instead).
constexpr float kMinFiniteSafeE5m2Scale = 1e-37f;

Totals totals;

/// Buffers of up to a few MiB are allocated and freed on every input; glibc would map and unmap
/// each one (its mmap threshold is 128 KiB), and the page faults would cost more than the call.
/// Keeping them on the heap makes an execution several times faster.
const bool kHeapKeepsBuffers = [] {
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, 1 << 26);
  mallopt(M_TRIM_THRESHOLD, 1 << 28);
#endif
  return true;
}();

/// One tensor of the call: its view and the memory it owns (none when aliased or too large).
struct Buffer {
  const char* name;
  Role role;
  TensorView view;
  std::vector<uint64_t> storage;  // 8-byte aligned
  std::vector<uint64_t> snapshot;
  size_t bytes = 0;  // of storage
};

[[noreturn]] void Broken(const std::string& what) {
  std::fprintf(stderr, "dynattn fuzz: contract broken: %s\n", what.c_str());
  std::abort();
}

bool IsWritten(Role role) {
  return role == Role::kCache || role == Role::kScale || role == Role::kOutput ||
         role == Role::kLse;
}

bool IsCacheMemory(Role role) { return role == Role::kCache || role == Role::kScale; }

DType CacheDType(const Call& call, DType act) {
  switch (call.ext.cache) {
    case CacheChoice::kDefault:
      return call.attrs.quant_bit != 0 ? DType::kI8 : act;
    case CacheChoice::kBF16:
      return DType::kBF16;
    case CacheChoice::kF8E4M3:
      return DType::kF8E4M3;
    case CacheChoice::kF8E5M2:
      return DType::kF8E5M2;
  }
  return act;
}

DType RoleDType(Role role, const Call& call) {
  const DType act = call.ext.bf16 ? DType::kBF16 : (call.flags.f16 ? DType::kF16 : DType::kF32);
  switch (role) {
    case Role::kActivation:
    case Role::kOutput:
      return act;
    case Role::kIndex:
      return call.flags.int32_index ? DType::kI32 : DType::kI64;
    case Role::kCache:
      return CacheDType(call, act);
    case Role::kScale:
      return call.flags.f32_scale ? DType::kF32 : DType::kF16;
    case Role::kLse:
    case Role::kSinks:
    case Role::kTensorScale:
      return DType::kF32;
  }
  return act;
}

// bf16 bits of `x`, rounded to nearest even (x is finite here).
uint16_t ToBf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  bits += 0x7FFF + ((bits >> 16) & 1);
  return static_cast<uint16_t>(bits >> 16);
}

// A random fp8 byte that is a finite number: NaN (and e5m2's infinities) would make any
// output that reads them NaN, which the finiteness check cannot tell from a kernel bug.
uint8_t FiniteFp8(DType dtype, uint64_t random) {
  uint8_t b = static_cast<uint8_t>(random & 0xFF);
  if (dtype == DType::kF8E4M3 && (b & 0x7F) == 0x7F) b ^= 1;     // 0x7F/0xFF: NaN
  if (dtype == DType::kF8E5M2 && (b & 0x7C) == 0x7C) b &= 0x7B;  // exponent 31
  return b;
}

/// splitmix64: a cheap generator for data values (their distribution does not steer validation).
struct Rng {
  uint64_t state;
  uint64_t operator()() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
};

/// Uniform in [lo, hi).
struct Uniform {
  float lo, hi;
  float operator()(Rng& rng) const {
    return lo + (hi - lo) * static_cast<float>(rng() >> 40) * (1.0f / 16777216.0f);
  }
};

/// Fills `b` (owned storage, `count` elements): index values from the input, data from `rng`.
void Fill(const TensorInput& t, int64_t count, Rng* rng, Buffer* b) {
  if (IsWritten(b->role) && b->role != Role::kCache && b->role != Role::kScale) {
    std::memset(b->storage.data(), 0xFF, b->bytes);  // poison: NaN in fp16 and fp32
    return;
  }
  const bool positive = b->role == Role::kScale || b->role == Role::kTensorScale;
  const Uniform unit = positive ? Uniform{0.01f, 1.0f} : Uniform{-2.0f, 2.0f};
  void* p = b->storage.data();
  for (int64_t i = 0; i < count; ++i) {
    const bool has_value = b->role == Role::kIndex && !t.index_values.empty();
    const int64_t v =
        has_value ? t.index_values[std::min<size_t>(i, t.index_values.size() - 1)] : 0;
    const bool has_real = !t.real_values.empty();
    const float real =
        has_real ? t.real_values[std::min<size_t>(i, t.real_values.size() - 1)] : 0.0f;
    switch (b->view.dtype) {
      case DType::kF32:
        static_cast<float*>(p)[i] = has_real ? real : unit(*rng);
        break;
      case DType::kBF16:
        static_cast<uint16_t*>(p)[i] = ToBf16(unit(*rng));
        break;
      case DType::kF8E4M3:
      case DType::kF8E5M2:
        static_cast<uint8_t*>(p)[i] = FiniteFp8(b->view.dtype, (*rng)());
        break;
      case DType::kF16:
        static_cast<uint16_t*>(p)[i] = dynattn::FloatToHalf(unit(*rng));
        break;
      case DType::kI8:
        static_cast<int8_t*>(p)[i] = static_cast<int8_t>((*rng)() & 0xFF);
        break;
      case DType::kI64:
        static_cast<int64_t*>(p)[i] = has_value ? v : static_cast<int64_t>((*rng)() % 64);
        break;
      case DType::kI32:
        static_cast<int32_t*>(p)[i] = static_cast<int32_t>(has_value ? v : (*rng)() % 64);
        break;
    }
  }
}

/// Applies an aliasing mutation: `b` moves into `previous`'s memory when it fits there.
void Alias(const Buffer& previous, int64_t bytes, bool inside, Buffer* b) {
  if (previous.view.data == nullptr) return;
  const size_t offset = inside ? dynattn::DTypeSize(previous.view.dtype) : 0;
  const auto* base = static_cast<const char*>(previous.view.data);
  const auto* end = reinterpret_cast<const char*>(previous.storage.data()) + previous.bytes;
  if (previous.storage.empty()) return;  // previous is itself an alias: keep it simple
  if (base + offset + bytes > end) return;
  b->view.data = const_cast<char*>(base + offset);
  b->storage.clear();
  b->bytes = 0;
}

/// The element count of `rank` extents: -1 when one is negative or the count overflows int64.
int64_t ElementsOf(const int64_t* shape, int rank) {
  if (std::any_of(shape, shape + rank, [](int64_t e) { return e < 0; })) return -1;
  if (std::find(shape, shape + rank, int64_t{0}) != shape + rank) return 0;
  int64_t count = 1;
  for (int i = 0; i < rank; ++i) {
    if (__builtin_mul_overflow(count, shape[i], &count)) return -1;
  }
  return count;
}

/// Elements between the rows of a kPaddedRows tensor and the next (0: dense, no padding).
int64_t PaddingOf(const TensorInput& t, const TensorView& view) {
  if (t.mutation != Mutation::kPaddedRows || view.rank < 2 || view.shape[0] < 2) return 0;
  const int64_t row = view.strides[0];
  return row > 0 && row <= kMaxTensorBytes ? row / 2 + 1 : 0;
}

/// Builds the buffers of `call`; false when they exceed the harness's memory cap.
bool BuildBuffers(const Call& call, std::vector<Buffer>* buffers) {
  Rng rng{call.data_seed};
  const std::vector<TensorSpec> specs = AllTensors(call.op);
  int64_t call_bytes = 0;
  const Buffer* previous = nullptr;
  for (size_t k = 0; k < specs.size(); ++k) {
    const TensorInput& t = call.tensors[k];
    buffers->push_back(Buffer{specs[k].name, specs[k].role, TensorView{}, {}, {}, 0});
    Buffer& b = buffers->back();
    if (!t.present) continue;
    DType dtype = RoleDType(b.role, call);
    if (t.mutation == Mutation::kOtherDType) dtype = kDTypes[t.other_dtype % std::size(kDTypes)];
    const int stored_rank = std::min(t.rank, 6);
    b.view = TensorView::Dense(nullptr, dtype, stored_rank, t.shape);
    b.view.rank = t.rank;
    const int64_t elements = ElementsOf(t.shape, stored_rank);
    const int64_t pad = elements >= 0 && elements <= kMaxTensorBytes ? PaddingOf(t, b.view) : 0;
    // With padded rows the buffer spans shape[0] - 1 row strides and one last row.
    const int64_t count = pad > 0 ? elements + (t.shape[0] - 1) * pad : elements;
    int64_t bytes = 0;
    const bool fits =
        count >= 0 &&
        !__builtin_mul_overflow(count, static_cast<int64_t>(dynattn::DTypeSize(dtype)), &bytes) &&
        bytes <= kMaxTensorBytes;
    if (!fits || call_bytes + bytes > kMaxCallBytes) return false;
    call_bytes += bytes;
    b.bytes = static_cast<size_t>(bytes);
    b.storage.assign((b.bytes + 7) / 8 + 1, 0);
    b.view.data = b.storage.data();
    Fill(t, count, &rng, &b);
    switch (t.mutation) {
      case Mutation::kNullData:
        b.view.data = nullptr;
        break;
      case Mutation::kBrokenStride:
        b.view.strides[0] -= 1;  // rows overlap: neither dense nor row-strided
        break;
      case Mutation::kPaddedRows:
        b.view.strides[0] += pad;
        break;
      case Mutation::kOnCuda:
        b.view.device = dynattn::Device::kCuda;
        break;
      case Mutation::kAliasPrevious:
      case Mutation::kAliasInside:
        // A unified call's cache is a BlockCache, raw memory trusted by design: a tensor laid
        // over it is the caller's contract to break, not the library's to detect. (Scale over
        // cache is still checked: MakePmxBlockCache sees both tensors.)
        if (previous != nullptr &&
            !(call.op == Op::kUnified && IsCacheMemory(b.role) != IsCacheMemory(previous->role))) {
          Alias(*previous, bytes, t.mutation == Mutation::kAliasInside, &b);
        }
        break;
      default:
        break;
    }
    previous = &b;
  }
  return true;
}

const TensorView* Find(const std::vector<Buffer>& buffers, const std::string& name) {
  for (const Buffer& b : buffers) {
    if (name == b.name) return &b.view;
  }
  return nullptr;
}

dynattn::TensorLookup LookupOf(const std::vector<Buffer>& buffers) {
  return [&buffers](const std::string& name) {
    const TensorView* v = Find(buffers, name);
    return v != nullptr ? *v : TensorView{};
  };
}

dynattn::CacheAttrs CacheAttrsOf(const Attrs& a) {
  dynattn::CacheAttrs c;
  c.num_layer = static_cast<int>(a.num_layer);
  c.layer_idx = static_cast<int>(a.layer_idx);
  c.quant_bit = static_cast<int>(a.quant_bit);
  c.quant_group = static_cast<int>(a.quant_group);
  c.cache_mode = static_cast<int>(a.cache_mode);
  c.cache_layout = static_cast<int>(a.cache_layout);
  c.page_size = static_cast<int>(a.page_size);
  return c;
}

// The extension's score attributes (window, soft-cap, softmax scale) and the flags' precision
// into `attrs`.
template <typename AttentionLikeAttrs>
void SetScoreAttrs(const Flags& flags, const Ext& ext, AttentionLikeAttrs* attrs) {
  attrs->precision = flags.fast ? dynattn::Precision::kFast : dynattn::Precision::kExact;
  attrs->window_left = static_cast<int>(ext.window_left);
  attrs->logits_soft_cap = ext.logits_soft_cap;
  attrs->softmax_scale = ext.softmax_scale;
  attrs->head_dim_v = static_cast<int>(ext.head_dim_v);
  attrs->value_from_key = ext.value_from_key;
}

dynattn::AttentionAttrs AttentionAttrsOf(const Call& call) {
  const Attrs& a = call.attrs;
  dynattn::AttentionAttrs t;
  t.num_heads = static_cast<int>(a.num_heads);
  t.num_kv_heads = static_cast<int>(a.num_kv_heads);
  t.head_dim = static_cast<int>(a.head_dim);
  t.is_causal = a.is_causal != 0;
  t.is_alibi = a.is_alibi != 0;
  SetScoreAttrs(call.flags, call.ext, &t);
  return t;
}

dynattn::ContextOptions ContextOptionsOf(int threads) {
  dynattn::ContextOptions options;
  options.num_threads = threads;
  return options;
}

/// RunKeyValueCache as a Run op (it has no per-layer attributes).
Status RunKeyValueCacheOp(const dynattn::Plan& plan, const dynattn::KeyValueCacheArgs& args,
                          dynattn::Context* context, const dynattn::LayerAttrs*) {
  return dynattn::RunKeyValueCache(plan, args, context);
}

/// Plan, then Run twice (the second with the plan's attributes given as a layer's) with the bits
/// of the outputs and the cache compared; or the one-shot.
template <typename Attrs_, typename Args>
Status Invoke(const Call& call, bool plan_only, const Attrs_& attrs, const Args& args,
              Status (*plan_fn)(const Attrs_&, const Args&, dynattn::Plan*),
              Status (*run_fn)(const dynattn::Plan&, const Args&, dynattn::Context*,
                               const dynattn::LayerAttrs*),
              Status (*one_shot)(const Attrs_&, const Args&, const dynattn::RunOptions&),
              std::vector<Buffer>* buffers) {
  const int threads = call.flags.two_threads ? 2 : 1;
  if (!plan_only && !call.flags.plan_run) {
    dynattn::RunOptions options;
    options.num_threads = threads;
    return one_shot(attrs, args, options);
  }
  dynattn::Plan plan;
  Status status = plan_fn(attrs, args, &plan);
  if (!status.ok() || plan_only) return status;
  // Contexts are reused across inputs, as an engine reuses its own across steps.
  static dynattn::Context contexts[2] = {dynattn::Context(ContextOptionsOf(1)),
                                         dynattn::Context(ContextOptionsOf(2))};
  dynattn::Context& context = contexts[threads - 1];
  status = run_fn(plan, args, &context, nullptr);
  if (!status.ok()) return status;
  std::vector<std::vector<uint64_t>> first;
  for (const Buffer& b : *buffers) first.push_back(b.storage);
  // The second Run restates the planned attributes as a layer's: the same bits.
  const dynattn::LayerAttrs planned_layer = plan.layer_attrs();
  status = run_fn(plan, args, &context, &planned_layer);
  if (!status.ok()) Broken("a second Run of an accepted plan failed: " + status.message());
  for (size_t i = 0; i < buffers->size(); ++i) {
    if ((*buffers)[i].storage != first[i]) {
      Broken(std::string("a second Run changed the bits of ") + (*buffers)[i].name);
    }
  }
  return status;
}

Status CallOp(const Call& call, bool plan_only, std::vector<Buffer>* buffers) {
  const dynattn::TensorLookup tensors = LookupOf(*buffers);
  const Attrs& a = call.attrs;
  switch (call.op) {
    case Op::kKeyValueCache: {
      dynattn::KeyValueCacheAttrs attrs;
      attrs.cache = CacheAttrsOf(a);
      attrs.num_repeat = static_cast<int>(a.num_repeat);
      return Invoke(call, plan_only, attrs, dynattn::KeyValueCacheArgsByName(tensors),
                    &dynattn::PlanKeyValueCache, &RunKeyValueCacheOp, &dynattn::KeyValueCache,
                    buffers);
    }
    case Op::kMultiHeadAttention:
      return Invoke(call, plan_only, AttentionAttrsOf(call),
                    dynattn::MultiHeadAttentionArgsByName(tensors),
                    &dynattn::PlanMultiHeadAttention, &dynattn::RunMultiHeadAttention,
                    &dynattn::MultiHeadAttention, buffers);
    case Op::kMultiHeadCacheAttention: {
      dynattn::MultiHeadCacheAttentionAttrs attrs;
      attrs.attention = AttentionAttrsOf(call);
      attrs.cache = CacheAttrsOf(a);
      return Invoke(call, plan_only, attrs, dynattn::MultiHeadCacheAttentionArgsByName(tensors),
                    &dynattn::PlanMultiHeadCacheAttention, &dynattn::RunMultiHeadCacheAttention,
                    &dynattn::MultiHeadCacheAttention, buffers);
    }
    case Op::kUnified: {
      dynattn::UnifiedAttentionAttrs attrs;
      attrs.num_heads = static_cast<int>(a.num_heads);
      attrs.num_kv_heads = static_cast<int>(a.num_kv_heads);
      attrs.head_dim = static_cast<int>(a.head_dim);
      attrs.is_alibi = a.is_alibi != 0;
      SetScoreAttrs(call.flags, call.ext, &attrs);
      const int kv_heads = attrs.num_kv_heads > 0 ? attrs.num_kv_heads : attrs.num_heads;
      dynattn::BlockCache cache;
      DYNATTN_RETURN_IF_ERROR(dynattn::MakePmxBlockCache(tensors("cache"), tensors("scale"),
                                                         CacheAttrsOf(a), kv_heads, attrs.head_dim,
                                                         static_cast<int>(a.block_size), &cache));
      return Invoke(call, plan_only, attrs, dynattn::UnifiedAttentionArgsByName(tensors, &cache),
                    &dynattn::PlanUnifiedAttention, &dynattn::RunUnifiedAttention,
                    &dynattn::UnifiedAttention, buffers);
    }
  }
  return Status::Ok();
}

/// Query-rows x key-rows, roughly: the attention work a call may do.
bool TooMuchWork(const std::vector<Buffer>& buffers) {
  int64_t queries = 0, keys = 0;
  for (const Buffer& b : buffers) {
    const int64_t n = b.view.NumElements();
    const std::string name = b.name;
    if (name == "query" || name == "current_key") queries = std::max(queries, n);
    if (name == "cache" || name == "key") keys = std::max(keys, n);
  }
  int64_t work = 0;
  return __builtin_mul_overflow(queries, keys, &work) || work > kMaxWork;
}

/// Index in the buffer of the view's element i (row-strided views skip their padding).
int64_t StoredIndex(const TensorView& v, int64_t i) {
  const int64_t row = v.shape[0] > 0 ? v.NumElements() / v.shape[0] : 0;
  return row > 0 && v.shape[0] > 1 ? (i / row) * v.strides[0] + i % row : i;
}

/// True when the view's rows leave a gap that is not theirs (a row-strided view).
bool HasPadding(const TensorView& v) { return v.shape[0] > 1 && !v.IsDense(); }

bool IsFiniteElement(const TensorView& v, int64_t i) {
  if (v.dtype == DType::kF16) return (v.As<const uint16_t>()[i] & 0x7C00) != 0x7C00;
  if (v.dtype == DType::kBF16) return (v.As<const uint16_t>()[i] & 0x7F80) != 0x7F80;
  return std::isfinite(v.As<const float>()[i]);
}

void CheckRefused(const Status& status, const std::vector<Buffer>& buffers) {
  const std::string& m = status.message();
  if (m.empty() || m.find(": ") == std::string::npos || m[0] == ' ') {
    Broken("an error without an input name: '" + m + "'");
  }
  for (const Buffer& b : buffers) {
    if (b.storage != b.snapshot) Broken(std::string(b.name) + " changed by a refused call: " + m);
  }
}

/// The largest |ALiBi bias| the call may add: its largest |slope| (the standard slopes are at most
/// 1) times a bound on any key-to-query distance: no position exceeds twice the largest index
/// value (a start or offset plus a length) plus the largest tensor extent.
double LargestAlibiBias(const Call& call, const std::vector<Buffer>& buffers) {
  double slope = call.attrs.is_alibi != 0 ? 1.0 : 0.0, largest_index = 0.0, elements = 0.0;
  for (const Buffer& b : buffers) {
    if (b.view.data == nullptr || b.view.rank < 0 || b.view.rank > 6) continue;
    const int64_t n = b.view.NumElements();
    elements = std::max(elements, static_cast<double>(n));
    const bool slopes = std::strcmp(b.name, "alibi_slopes") == 0 && b.view.dtype == DType::kF32;
    for (int64_t i = 0; i < n && slopes; ++i) {
      slope = std::max(slope, std::fabs(static_cast<double>(b.view.As<const float>()[i])));
    }
    const bool index =
        b.role == Role::kIndex && (b.view.dtype == DType::kI64 || b.view.dtype == DType::kI32);
    for (int64_t i = 0; i < n && index; ++i) {
      const double v = b.view.dtype == DType::kI64 ? b.view.As<const int64_t>()[i]
                                                   : b.view.As<const int32_t>()[i];
      largest_index = std::max(largest_index, std::fabs(v));
    }
  }
  return slope * (2.0 * largest_index + elements);
}

/// False when a score may overflow fp32: scores are IEEE fp32, so an infinite score makes its row
/// NaN (inf - inf). Activations are in [-2, 2]; `largest_key` bounds |key|. The soft-cap bounds
/// the dot product's part (tanh maps +-inf to +-1), not the ALiBi bias added after it.
bool ScoresStayFinite(const Call& call, const std::vector<Buffer>& buffers, float largest_key) {
  const double scale = call.ext.softmax_scale > 0.0f ? call.ext.softmax_scale : 1.0;
  const double dot = 2.0 * largest_key * static_cast<double>(call.attrs.head_dim);
  const double capped = call.ext.logits_soft_cap > 0.0f ? call.ext.logits_soft_cap : scale * dot;
  return capped + LargestAlibiBias(call, buffers) < 1e37;
}

/// False when an fp8 scale is so large that dequantized values may overflow fp32 in a row's sums
/// (or, with fp16 outputs, fp16: a cached fp8 code times the scale may pass 65504), or (e5m2) so
/// small that x / scale overflows to a stored infinity, or when a score may overflow
/// (ScoresStayFinite): then an output may rightly be infinite or NaN.
bool OutputsMustBeFinite(const Call& call, const std::vector<Buffer>& buffers) {
  bool e5m2 = false, e4m3 = false, f16_outputs = false;
  for (const Buffer& b : buffers) {
    e5m2 |= b.role == Role::kCache && b.view.dtype == DType::kF8E5M2;
    e4m3 |= b.role == Role::kCache && b.view.dtype == DType::kF8E4M3;
    f16_outputs |= b.role == Role::kOutput && b.view.dtype == DType::kF16;
  }
  const float smallest = e5m2 ? kMinFiniteSafeE5m2Scale : 0.0f;
  const float largest_code = e5m2 ? dynattn::kFp8E5M2Max : e4m3 ? dynattn::kFp8E4M3Max : 0.0f;
  const float largest =
      f16_outputs && largest_code > 0 ? 65504.0f / largest_code : kMaxFiniteSafeScale;
  float largest_seen = 1.0f;  // the fp8 planes' default scale
  for (const Buffer& b : buffers) {
    if (b.role != Role::kTensorScale || b.storage.empty() || b.view.dtype != DType::kF32) continue;
    for (int64_t i = 0; i < b.view.NumElements(); ++i) {
      const float scale = std::fabs(b.view.As<const float>()[i]);
      if (!(scale <= largest && scale >= smallest)) return false;
      largest_seen = std::max(largest_seen, scale);
    }
  }
  return ScoresStayFinite(call, buffers, largest_code > 0 ? largest_code * largest_seen : 2.0f);
}

// True when element i still holds the poison Fill wrote (all bits set).
bool IsPoison(const TensorView& v, int64_t i) {
  const size_t size = dynattn::DTypeSize(v.dtype);
  const auto* bytes = static_cast<const uint8_t*>(v.data) + i * static_cast<int64_t>(size);
  for (size_t k = 0; k < size; ++k) {
    if (bytes[k] != 0xFF) return false;
  }
  return true;
}

void CheckAccepted(const Call& call, const std::vector<Buffer>& buffers) {
  const bool finite = OutputsMustBeFinite(call, buffers);
  for (const Buffer& b : buffers) {
    if (!IsWritten(b.role) && b.storage != b.snapshot) {
      Broken(std::string("input ") + b.name + " changed by an accepted call");
    }
    if ((b.role != Role::kOutput && b.role != Role::kLse) || b.storage.empty()) continue;
    const int64_t n = b.view.NumElements();
    std::vector<bool> is_element(HasPadding(b.view) ? b.bytes / dynattn::DTypeSize(b.view.dtype)
                                                    : 0);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t at = StoredIndex(b.view, i);
      if (!is_element.empty()) is_element[at] = true;
      bool ok = !IsPoison(b.view, at);
      if (finite) {
        ok = b.role == Role::kLse ? !std::isnan(b.view.As<const float>()[at])
                                  : IsFiniteElement(b.view, at);
      }
      if (!ok) Broken(std::string(b.name) + " element " + std::to_string(i) + " not written");
    }
    for (size_t at = 0; at < is_element.size(); ++at) {
      if (!is_element[at] && !IsPoison(b.view, static_cast<int64_t>(at))) {
        Broken(std::string(b.name) + " padding element " + std::to_string(at) + " written");
      }
    }
  }
}

}  // namespace

int RunOneInput(const uint8_t* data, size_t size) {
  ++totals.inputs;
  const Call call = Decode(data, size);
  std::vector<Buffer> buffers;
  buffers.reserve(AllTensors(call.op).size());
  if (!BuildBuffers(call, &buffers)) {
    ++totals.skipped;
    return 0;
  }
  for (Buffer& b : buffers) b.snapshot = b.storage;
  const bool plan_only = TooMuchWork(buffers);
  const Status status = CallOp(call, plan_only, &buffers);
  if (!status.ok()) {
    ++totals.refused;
    CheckRefused(status, buffers);
  } else if (plan_only) {
    ++totals.skipped;
    for (const Buffer& b : buffers) {
      if (b.storage != b.snapshot) Broken(std::string("a plan wrote ") + b.name);
    }
  } else {
    ++totals.accepted;
    CheckAccepted(call, buffers);
  }
  return 0;
}

const Totals& RunTotals() { return totals; }

}  // namespace dynattn_fuzz
