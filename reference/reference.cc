// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The float64 reference of the PMX ops spec (docs/numerics.md). Each function transcribes one rule
// of the spec (the § it implements is named next to it); clarity wins over speed everywhere. Values
// that the spec rounds to a narrower type (T1, the cache type T2, the scale type T3) are rounded
// with detail::RoundTo right where the spec rounds them; everything else is exact or float64.

#include "reference/reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <set>
#include <sstream>
#include <stdexcept>

namespace dynattn_ref {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

void Require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("dynattn_ref: " + what);
}

bool IsFloat(Dt dt) { return IsActivationDt(dt); }

// Half-to-even rounding to an integer (torch.round), independent of the FPU rounding mode.
double RoundHalfToEven(double x) {
  const double floor = std::floor(x);
  const double fraction = x - floor;
  if (fraction < 0.5) return floor;
  if (fraction > 0.5) return floor + 1;
  return std::fmod(floor, 2.0) == 0 ? floor : floor + 1;
}

// ----------------------------------------------------------------------------------------------
// Narrow float formats, written from their definitions: a binary format with p significand bits
// (the leading one included) holds m * 2^(e - p + 1) for integers |m| < 2^p and exponents
// e >= min_exp (below 2^min_exp: the subnormals, same spacing as at 2^min_exp).

// `x` rounded to nearest (ties to even) in a format of p significand bits and min_exp, with an
// unbounded exponent above (the caller handles overflow). Division by a power of two is exact.
double RoundToPrecision(double x, int p, int min_exp) {
  if (x == 0 || !std::isfinite(x)) return x;
  int exp = 0;
  std::frexp(std::fabs(x), &exp);  // |x| in [2^(exp - 1), 2^exp)
  const double ulp = std::ldexp(1.0, std::max(exp - 1, min_exp) - (p - 1));
  return std::copysign(RoundHalfToEven(std::fabs(x) / ulp) * ulp, x);
}

uint32_t FloatBitsOf(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return bits;
}

float FloatOfBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// bf16: 8 significand bits, fp32's exponents (min normal 2^-126, max (2 - 2^-7) * 2^127).
constexpr int kBf16Precision = 8;
constexpr int kBf16MinExp = -126;

struct Fp8Spec {
  int mant_bits, bias;
  double max;
  bool has_inf;
};

Fp8Spec Fp8SpecOf(Dt format) {
  Require(IsFp8Dt(format), "not an fp8 format");
  if (format == Dt::kF8E4M3) return {3, 7, 448.0, false};
  return {2, 15, 57344.0, true};
}

// ----------------------------------------------------------------------------------------------
// Reading inputs.

void RequireByteCount(const Array& array, const std::string& name) {
  Require(static_cast<int64_t>(array.bytes.size()) == array.numel() * DtSize(array.dt),
          name + " byte count does not match its shape");
}

const Array& Need(const Tensors& inputs, const char* name) {
  const auto it = inputs.find(name);
  Require(it != inputs.end(), std::string("missing input ") + name);
  RequireByteCount(it->second, name);
  return it->second;
}

// An optional input; a present one with zero elements counts as absent (§5.4).
const Array* Optional(const Tensors& inputs, const char* name) {
  const auto it = inputs.find(name);
  if (it == inputs.end() || it->second.numel() == 0) return nullptr;
  RequireByteCount(it->second, name);
  return &it->second;
}

void RequireShape(const Array& array, const std::vector<int64_t>& shape, const std::string& name) {
  Require(array.shape == shape,
          name + " has shape " + ShapeString(array.shape) + ", want " + ShapeString(shape));
}

int64_t LoadI64(const Array& array, int64_t i) {
  int64_t value;
  std::memcpy(&value, array.bytes.data() + i * 8, 8);
  return value;
}

std::vector<int64_t> ReadI64Vector(const Array& array, const std::string& name) {
  Require(array.dt == Dt::kI64 && array.shape.size() == 1, name + " must be a rank-1 int64 array");
  std::vector<int64_t> values(array.shape[0]);
  for (int64_t i = 0; i < array.shape[0]; ++i) values[i] = LoadI64(array, i);
  return values;
}

int64_t ReadI64Scalar(const Tensors& inputs, const char* name) {
  const Array& array = Need(inputs, name);
  Require(array.dt == Dt::kI64 && array.numel() == 1,
          std::string(name) + " must be an int64 scalar");
  return LoadI64(array, 0);
}

// All elements of a float tensor as doubles; inputs must be finite unless `non_finite`.
std::vector<double> LoadFinite(const Array& array, const std::string& name,
                               bool non_finite = false) {
  Require(IsFloat(array.dt), name + " must be float32, float16 or bfloat16");
  std::vector<double> values(array.numel());
  for (int64_t i = 0; i < array.numel(); ++i) {
    values[i] = LoadAsDouble(array, i);
    Require(non_finite || std::isfinite(values[i]), name + " holds a non-finite value");
  }
  return values;
}

// The larger of a and b, NaN when either is (std::max drops a NaN in one operand order).
double MaxOrNaN(double a, double b) {
  return std::isnan(a) || std::isnan(b) ? kNaN : std::max(a, b);
}

// ----------------------------------------------------------------------------------------------
// §1 batch bookkeeping: request b owns query rows [seqstarts[b], seqstarts[b+1]) and context rows
// [kvstarts[b], kvstarts[b+1]).

struct Batches {
  std::vector<int64_t> seqstarts, kvstarts;

  int64_t count() const { return static_cast<int64_t>(seqstarts.size()) - 1; }
  int64_t seqlen(int64_t b) const { return seqstarts[b + 1] - seqstarts[b]; }
  int64_t kvlen(int64_t b) const { return kvstarts[b + 1] - kvstarts[b]; }
  int64_t rows() const { return seqstarts.back(); }
  int64_t context_rows() const { return kvstarts.back(); }
};

void RequireStarts(const std::vector<int64_t>& starts, const std::string& name) {
  Require(!starts.empty() && starts[0] == 0, name + " must start with 0");
  for (size_t i = 1; i < starts.size(); ++i) {
    Require(starts[i] >= starts[i - 1], name + " must be non-decreasing");
  }
}

// max_seqlen / max_kvlen are hints (§12): present and >= the true maxima, otherwise unused.
void RequireHints(const Tensors& inputs, const Batches& batches) {
  int64_t max_seqlen = 0, max_kvlen = 0;
  for (int64_t b = 0; b < batches.count(); ++b) {
    max_seqlen = std::max(max_seqlen, batches.seqlen(b));
    max_kvlen = std::max(max_kvlen, batches.kvlen(b));
  }
  Require(ReadI64Scalar(inputs, "max_seqlen") >= max_seqlen, "max_seqlen below the true maximum");
  Require(ReadI64Scalar(inputs, "max_kvlen") >= max_kvlen, "max_kvlen below the true maximum");
}

Batches ReadBatches(const Tensors& inputs) {
  Batches batches;
  batches.seqstarts = ReadI64Vector(Need(inputs, "seqstarts"), "seqstarts");
  batches.kvstarts = ReadI64Vector(Need(inputs, "kvstarts"), "kvstarts");
  RequireStarts(batches.seqstarts, "seqstarts");
  RequireStarts(batches.kvstarts, "kvstarts");
  Require(batches.seqstarts.size() == batches.kvstarts.size(),
          "seqstarts and kvstarts lengths differ");
  RequireHints(inputs, batches);
  return batches;
}

// ----------------------------------------------------------------------------------------------
// §3 cache geometry and addressing.

struct CacheGeometry {
  Dt t1 = Dt::kF32, scale_dt = Dt::kF16;
  // tc: the type cache arithmetic rounds to (bf16 activations follow the fp32 rules); cache_dt:
  // the cache tensor's element type; tensor_scale: the fp8 per-tensor scale of K (0) and V (1).
  Dt tc = Dt::kF32, cache_dt = Dt::kF32;
  double tensor_scale[2] = {1.0, 1.0};
  int layout = 0, quant_bit = 0;
  int64_t group = 1, num_layer = 1, layer = 0, hkv = 1, d = 1, max_t = 0;

  // Entries per (slot, layer, kv, head) in the cache: D values, or D/2 bytes for int4 (§2.2).
  int64_t stored_dim() const { return quant_bit == 4 ? d / 2 : d; }
  int64_t ElementOffset(int64_t slot, int kv, int64_t h, int64_t i) const {
    const int64_t index = quant_bit == 4 ? i / 2 : i;
    return detail::CacheOffset(layout, slot, layer, kv, h, index, num_layer, max_t, hkv,
                               stored_dim());
  }
  int64_t ScaleOffset(int64_t slot, int kv, int64_t h, int64_t i) const {
    return detail::CacheOffset(layout, slot, layer, kv, h, i / group, num_layer, max_t, hkv,
                               d / group);
  }
};

void RequireQuantAttrs(const CacheGeometry& geo) {
  Require(geo.quant_bit == 0 || geo.quant_bit == 4 || geo.quant_bit == 8,
          "quant_bit must be 0, 4 or 8");
  if (geo.quant_bit == 0) return;
  Require(geo.group >= 1 && geo.d % geo.group == 0, "quant_group must divide head_dim");
  if (geo.quant_bit == 4) {
    Require(geo.d % 2 == 0 && geo.group % 2 == 0, "int4 needs even head_dim and quant_group");
  }
}

void RequireCacheDtypes(const CacheGeometry& geo, const Array& cache, const Array* scale) {
  if (geo.quant_bit == 0) {
    Require(IsFloat(cache.dt) || IsFp8Dt(cache.dt),
            "an unquantized cache must be float32, float16, bfloat16 or fp8");
    Require(!IsFp8Dt(cache.dt) || scale == nullptr,
            "scale: an fp8 cache takes no scale tensor (k_scale / v_scale are its scales)");
    return;
  }
  Require(cache.dt == Dt::kI8,
          "a quantized cache must be int8 (quant_bit 4/8 and fp8/bf16 "
          "caches do not mix)");
  Require(scale != nullptr, "a quantized cache needs a scale input");
  Require(scale->dt == Dt::kF32 || scale->dt == Dt::kF16, "scale must be float32 or float16");
  RequireShape(*scale,
               detail::CacheShape(geo.layout, geo.num_layer, geo.max_t, geo.hkv, geo.d / geo.group),
               "scale");
}

// The `cache_dtype` attribute names the fp8 format of a byte cache; it must match the tensor.
void RequireCacheDtypeAttr(const std::string& cache_dtype, Dt cache_dt) {
  if (cache_dtype.empty()) return;
  Require(cache_dtype == "fp8_e4m3" || cache_dtype == "fp8_e5m2",
          "cache_dtype must be \"\", \"fp8_e4m3\" or \"fp8_e5m2\"");
  Require(cache_dt == (cache_dtype == "fp8_e4m3" ? Dt::kF8E4M3 : Dt::kF8E5M2),
          "cache_dtype " + cache_dtype + " does not match the cache tensor");
}

CacheGeometry ReadCacheGeometry(const Attrs& attrs, const Array& cache, const Array* scale, Dt t1,
                                int64_t hkv, int64_t d) {
  CacheGeometry geo;
  geo.t1 = t1;
  geo.layout = attrs.cache_layout;
  geo.quant_bit = attrs.quant_bit;
  geo.group = attrs.quant_group;
  geo.num_layer = attrs.num_layer;
  geo.layer = attrs.layer_idx;
  geo.hkv = hkv;
  geo.d = d;
  geo.tc = t1 == Dt::kBF16 ? Dt::kF32 : t1;  // bf16 activations use the fp32 rules
  geo.cache_dt = cache.dt;
  RequireCacheDtypeAttr(attrs.cache_dtype, cache.dt);
  Require(geo.layout >= 0 && geo.layout <= 3, "cache_layout must be 0..3");
  Require(geo.num_layer >= 1 && geo.layer >= 0 && geo.layer < geo.num_layer,
          "layer_idx must lie in [0, num_layer)");
  RequireQuantAttrs(geo);
  Require(cache.shape.size() == 5, "cache must have rank 5");
  geo.max_t = cache.shape[geo.layout];  // MaxT sits at dim 0, 1, 2, 3 for layouts 0-3
  RequireShape(cache,
               detail::CacheShape(geo.layout, geo.num_layer, geo.max_t, hkv, geo.stored_dim()),
               "cache");
  RequireCacheDtypes(geo, cache, scale);
  if (scale != nullptr) geo.scale_dt = scale->dt;
  return geo;
}

struct SlotMap {
  const Array* cachestarts = nullptr;
  int mode = 0;
  int64_t page_size = 1;
  int64_t max_t = 0;

  // §3.1 slot of position p of request b, with the §12 range checks.
  int64_t Slot(int64_t b, int64_t p) const {
    if (mode == 1) {
      const int64_t max_pages = cachestarts->shape[1];
      Require(p / page_size < max_pages, "page table too short for the request's context");
      Require(LoadI64(*cachestarts, b * max_pages + p / page_size) >= 0,
              "a used page-table entry is negative");
    }
    const int64_t slot = detail::SlotOf(*cachestarts, mode, page_size, b, p);
    Require(slot >= 0 && slot < max_t, "slot " + std::to_string(slot) + " outside [0, MaxT)");
    return slot;
  }
};

SlotMap ReadSlotMap(const Attrs& attrs, const Array& cachestarts, int64_t batch_count,
                    int64_t max_t) {
  SlotMap map{&cachestarts, attrs.cache_mode, attrs.page_size, max_t};
  Require(map.mode == 0 || map.mode == 1, "cache_mode must be 0 or 1");
  Require(cachestarts.dt == Dt::kI64, "cachestarts must be int64");
  if (map.mode == 0) {
    Require(cachestarts.shape == std::vector<int64_t>{batch_count}, "cachestarts must be (B)");
  } else {
    Require(map.page_size >= 1, "page_size must be >= 1");
    Require(cachestarts.shape.size() == 2 && cachestarts.shape[0] == batch_count,
            "paged cachestarts must be (B, MaxP)");
  }
  return map;
}

// ----------------------------------------------------------------------------------------------
// §2 storing and loading one head vector (D values) of one token.

void StoreQuantized(const CacheGeometry& geo, Array* cache, int64_t slot, int kv, int64_t h,
                    int64_t i, int q) {
  uint8_t& byte = cache->bytes[geo.ElementOffset(slot, kv, h, i)];
  if (geo.quant_bit == 8) {
    byte = static_cast<uint8_t>(static_cast<int8_t>(q));
  } else if (i % 2 == 0) {
    byte = detail::PackNibbles(q, detail::DecodeNibble(byte, 1));
  } else {
    byte = detail::PackNibbles(detail::DecodeNibble(byte, 0), q);
  }
}

// Write path: cast to T2 (quant_bit 0) or quantize group by group (§2.1/§2.2).
void StoreHead(const CacheGeometry& geo, int64_t slot, int kv, int64_t h,
               const std::vector<double>& x, Array* cache, Array* scale) {
  if (geo.quant_bit == 0) {
    for (int64_t i = 0; i < geo.d; ++i) {
      const int64_t offset = geo.ElementOffset(slot, kv, h, i);
      if (IsFp8Dt(geo.cache_dt)) {  // fp8_satfinite_rne(x / tensor scale)
        cache->bytes[offset] = Fp8Encode(x[i], geo.tensor_scale[kv], geo.cache_dt);
      } else {
        StoreRounded(cache, offset, x[i]);  // cast T1 -> T2 (x is exact in fp32)
      }
    }
    return;
  }
  for (int64_t start = 0; start < geo.d; start += geo.group) {
    const std::vector<double> group(x.begin() + start, x.begin() + start + geo.group);
    const detail::GroupQuant quant =
        detail::QuantizeGroup(group, geo.tc, geo.scale_dt, geo.quant_bit);
    StoreRounded(scale, geo.ScaleOffset(slot, kv, h, start), quant.stored);
    for (int64_t i = 0; i < geo.group; ++i) {
      StoreQuantized(geo, cache, slot, kv, h, start + i, quant.q[i]);
    }
  }
}

// An int8/int4 element as the cache holds it: its code and its group's stored scale.
struct StoredCode {
  int code = 0;
  double scale = 0;
};

StoredCode LoadStoredCode(const CacheGeometry& geo, const Array& cache, const Array& scale,
                          int64_t slot, int kv, int64_t h, int64_t i) {
  const uint8_t byte = cache.bytes[geo.ElementOffset(slot, kv, h, i)];
  StoredCode stored;
  stored.code = geo.quant_bit == 8 ? static_cast<int8_t>(byte) : detail::DecodeNibble(byte, i % 2);
  stored.scale = LoadAsDouble(scale, geo.ScaleOffset(slot, kv, h, i));
  return stored;
}

// Read path: element i of a head vector as the value the ops compute with (in tc: fp16 for fp16
// activations, fp32 otherwise, bf16 activations included).
double LoadDequantized(const CacheGeometry& geo, const Array& cache, const Array* scale,
                       int64_t slot, int kv, int64_t h, int64_t i) {
  const int64_t offset = geo.ElementOffset(slot, kv, h, i);
  if (geo.quant_bit == 0 && IsFp8Dt(geo.cache_dt)) {
    return detail::RoundTo(geo.tc,
                           Fp8Decode(cache.bytes[offset], geo.tensor_scale[kv], geo.cache_dt));
  }
  if (geo.quant_bit == 0) return detail::RoundTo(geo.tc, LoadAsDouble(cache, offset));
  const StoredCode stored = LoadStoredCode(geo, cache, *scale, slot, kv, h, i);
  // bf16 activations read the exact fp32 product, whatever the scale dtype (the library's
  // numerics contract; an fp16 product would cost them far more than their tolerance).
  const Dt product_dt = geo.t1 == Dt::kBF16 ? Dt::kF32 : geo.scale_dt;
  return detail::Dequantize(stored.code, stored.scale, geo.tc, product_dt);
}

// The fast tier's key element of an int8/int4 cache: code x stored scale, exact (no rounding).
double LoadRawQuantized(const CacheGeometry& geo, const Array& cache, const Array& scale,
                        int64_t slot, int kv, int64_t h, int64_t i) {
  const StoredCode stored = LoadStoredCode(geo, cache, scale, slot, kv, h, i);
  return stored.code * stored.scale;
}

// ----------------------------------------------------------------------------------------------
// §4 KeyValueCache.

struct KvcCall {
  Batches batches;
  std::vector<int64_t> start_pos;
  // MHCA on a context shard: request b's context holds positions [key_offsets[b], +kvlen_b) of
  // the whole request, start_pos[b] is its first new token's position there (empty: not a shard).
  std::vector<int64_t> key_offsets;
  CacheGeometry geo;
  SlotMap slots;
  const Array* current_key = nullptr;
  const Array* current_value = nullptr;
  const Array* cache = nullptr;
  const Array* scale = nullptr;  // null when absent
  bool non_finite = false;       // Attrs::non_finite
};

void RequireStartPositions(const KvcCall& call) {
  const Batches& batches = call.batches;
  Require(static_cast<int64_t>(call.start_pos.size()) == batches.count(), "start_pos must be (B)");
  const bool shard = !call.key_offsets.empty();
  Require(!shard || static_cast<int64_t>(call.key_offsets.size()) == batches.count(),
          "key_offsets must be (B)");
  for (int64_t b = 0; b < batches.count(); ++b) {
    Require(call.start_pos[b] >= 0, "start_pos entries must be >= 0");
    if (!shard) {
      Require(batches.kvlen(b) == call.start_pos[b] + batches.seqlen(b),
              "kvlen_b must equal start_pos_b + seqlen_b");
      continue;
    }
    Require(call.key_offsets[b] >= 0, "key_offsets entries must be >= 0");
    Require(call.key_offsets[b] + batches.kvlen(b) <= call.start_pos[b] + batches.seqlen(b),
            "a context shard holds no position past its request's last new token");
  }
}

// The context position (0-based in the call's context) that new token t of request b is written
// at: start_pos_b + t, less the shard's offset; -1 when the shard does not hold it.
int64_t WritePosition(const KvcCall& call, int64_t b, int64_t t) {
  const int64_t offset = call.key_offsets.empty() ? 0 : call.key_offsets[b];
  const int64_t p = call.start_pos[b] + t - offset;
  return p >= 0 && p < call.batches.kvlen(b) ? p : -1;
}

// k_scale / v_scale: optional 0-d (or one-element) f32, finite and > 0, fp8 caches only.
void ReadTensorScales(const Tensors& inputs, CacheGeometry* geo) {
  const char* names[2] = {"k_scale", "v_scale"};
  for (int kv = 0; kv < 2; ++kv) {
    const Array* scale = Optional(inputs, names[kv]);
    if (scale == nullptr) continue;
    const std::string name = names[kv];
    Require(IsFp8Dt(geo->cache_dt), name + " is only for an fp8 cache");
    Require(scale->dt == Dt::kF32 && scale->numel() == 1, name + " must be a float32 scalar");
    const double value = LoadAsDouble(*scale, 0);
    Require(std::isfinite(value) && value > 0, name + " must be finite and > 0");
    geo->tensor_scale[kv] = value;
  }
}

KvcCall ReadKvcCall(const Attrs& attrs, const Tensors& inputs, int64_t hkv, int64_t d) {
  KvcCall call;
  call.non_finite = attrs.non_finite;
  call.batches = ReadBatches(inputs);
  call.current_key = &Need(inputs, "current_key");
  call.current_value = &Need(inputs, "current_value");
  const Dt t1 = call.current_key->dt;
  Require(IsFloat(t1) && call.current_value->dt == t1,
          "current_key/value must share fp32/fp16/bf16");
  RequireShape(*call.current_key, {call.batches.rows(), hkv, d}, "current_key");
  RequireShape(*call.current_value, {call.batches.rows(), hkv, d}, "current_value");
  call.start_pos = ReadI64Vector(Need(inputs, "start_pos"), "start_pos");
  if (const Array* offsets = Optional(inputs, "key_offsets")) {
    call.key_offsets = ReadI64Vector(*offsets, "key_offsets");
  }
  RequireStartPositions(call);
  call.cache = &Need(inputs, "cache");
  call.scale = Optional(inputs, "scale");
  call.geo = ReadCacheGeometry(attrs, *call.cache, call.scale, t1, hkv, d);
  ReadTensorScales(inputs, &call.geo);
  call.slots =
      ReadSlotMap(attrs, Need(inputs, "cachestarts"), call.batches.count(), call.geo.max_t);
  // §12: every slot the call touches is checked before anything is written or read, so that a
  // refusal always names the broken rule (not whatever garbage an earlier read met).
  for (int64_t b = 0; b < call.batches.count(); ++b) {
    for (int64_t p = 0; p < call.batches.kvlen(b); ++p) call.slots.Slot(b, p);
  }
  return call;
}

// The D values of (row, head) of a (rows, heads, D) tensor.
std::vector<double> LoadHeadVector(const Array& tensor, int64_t row, int64_t h,
                                   const std::string& name, bool non_finite) {
  const int64_t heads = tensor.shape[1], d = tensor.shape[2];
  std::vector<double> x(d);
  for (int64_t i = 0; i < d; ++i) {
    x[i] = LoadAsDouble(tensor, (row * heads + h) * d + i);
    Require(non_finite || std::isfinite(x[i]), name + " holds a non-finite value");
  }
  return x;
}

// §3.1 writes: token t of request b goes to position start_pos_b + t (a context shard writes the
// tokens it holds, at their positions in its context); no slot written twice.
void WriteNewTokens(const KvcCall& call, Array* cache, Array* scale) {
  std::set<int64_t> written;
  for (int64_t b = 0; b < call.batches.count(); ++b) {
    for (int64_t t = 0; t < call.batches.seqlen(b); ++t) {
      const int64_t position = WritePosition(call, b, t);
      if (position < 0) continue;
      const int64_t slot = call.slots.Slot(b, position);
      Require(written.insert(slot).second, "two new tokens write the same slot");
      const int64_t row = call.batches.seqstarts[b] + t;
      for (int64_t h = 0; h < call.geo.hkv; ++h) {
        StoreHead(call.geo, slot, 0, h,
                  LoadHeadVector(*call.current_key, row, h, "current_key", call.non_finite), cache,
                  scale);
        StoreHead(call.geo, slot, 1, h,
                  LoadHeadVector(*call.current_value, row, h, "current_value", call.non_finite),
                  cache, scale);
      }
    }
  }
}

// The gathered context of K or V: the output tensor (rounded to T1) and the values attention
// computes with (in tc; they differ for bf16 activations only).
struct Gathered {
  Array out;
  std::vector<double> values;
  std::vector<double> raw;  // when asked for (int8/int4 caches): LoadRawQuantized of them
};

// §3.1 reads + §4.2/§4.3: context row kvstarts[b] + p, output head o reads kv head o / num_repeat.
// Positions p < unread[b] (when given) are left out: NaN in `values`, 0 in `out`.
Gathered GatherContext(const KvcCall& call, const Array& cache, const Array* scale, int kv,
                       int64_t num_repeat, const std::vector<int64_t>* unread,
                       bool with_raw = false) {
  const CacheGeometry& geo = call.geo;
  const int64_t out_heads = geo.hkv * num_repeat;
  Gathered gathered;
  Array& out = gathered.out;
  out = MakeArray(geo.t1, {call.batches.context_rows(), out_heads, geo.d});
  gathered.values.assign(out.numel(), 0.0);
  const bool quantized = with_raw && geo.quant_bit != 0 && scale != nullptr;
  if (quantized) gathered.raw.assign(out.numel(), kNaN);
  for (int64_t b = 0; b < call.batches.count(); ++b) {
    for (int64_t p = 0; p < call.batches.kvlen(b); ++p) {
      const int64_t slot = call.slots.Slot(b, p);
      const int64_t row = call.batches.kvstarts[b] + p;
      const bool skipped = unread != nullptr && p < (*unread)[b];
      for (int64_t o = 0; o < out_heads && skipped; ++o) {
        for (int64_t i = 0; i < geo.d; ++i)
          gathered.values[(row * out_heads + o) * geo.d + i] = kNaN;
      }
      for (int64_t o = 0; o < out_heads && !skipped; ++o) {
        for (int64_t i = 0; i < geo.d; ++i) {
          const double x = LoadDequantized(geo, cache, scale, slot, kv, o / num_repeat, i);
          Require(call.non_finite || std::isfinite(x),
                  "the context reads a non-finite cache value");
          StoreRounded(&out, (row * out_heads + o) * geo.d + i, x);
          gathered.values[(row * out_heads + o) * geo.d + i] = x;
          if (quantized) {
            gathered.raw[(row * out_heads + o) * geo.d + i] =
                LoadRawQuantized(geo, cache, *scale, slot, kv, o / num_repeat, i);
          }
        }
      }
    }
  }
  return gathered;
}

// All writes of all requests, then all reads (§3.1 ordering [REC]). `context` (optional) gets the
// gathered K and V as attention computes with them.
KvcResult RunKeyValueCache(const KvcCall& call, int64_t num_repeat,
                           std::vector<double>* context_k = nullptr,
                           std::vector<double>* context_v = nullptr,
                           const std::vector<int64_t>* unread = nullptr,
                           std::vector<double>* context_k_raw = nullptr) {
  Require(num_repeat >= 1, "num_repeat must be >= 1");
  KvcResult result;
  result.cache = *call.cache;
  result.scale = call.scale != nullptr ? *call.scale : MakeArray(Dt::kF16, {0});
  Array* scale = call.scale != nullptr ? &result.scale : nullptr;
  WriteNewTokens(call, &result.cache, scale);
  Gathered key =
      GatherContext(call, result.cache, scale, 0, num_repeat, unread, context_k_raw != nullptr);
  Gathered value = GatherContext(call, result.cache, scale, 1, num_repeat, unread);
  result.key = std::move(key.out);
  result.value = std::move(value.out);
  if (context_k != nullptr) *context_k = std::move(key.values);
  if (context_k_raw != nullptr) *context_k_raw = std::move(key.raw);
  if (context_v != nullptr) *context_v = std::move(value.values);
  return result;
}

// ----------------------------------------------------------------------------------------------
// §5 attention.

struct AttentionCall {
  Dt t1 = Dt::kF32;
  int64_t hq = 0, hkv = 0, d = 0;
  int64_t dv = 0;  // value and output rows (head_dim_v, or D)
  bool causal = true, alibi = false;
  int64_t decoding_batches = 0;
  Batches batches;
  std::vector<double> query;    // (Tq, Hq, D)
  const Array* mask = nullptr;  // null when absent
  std::vector<double> slopes;   // ALiBi slope per query head
  int64_t window_left = -1;     // -1: no sliding window
  double soft_cap = 0;          // 0: no soft-cap
  double score_scale = 1;       // softmax_scale, or 1 / sqrt(D)
  std::vector<double> sinks;    // per query head, empty when absent
  std::vector<int64_t> unread;  // per request: context positions below it are never read
  // Per request: the position of query row 0 and of context key 0 in the whole request. Without
  // key_offsets the new tokens are the context's last: kvlen_b - seqlen_b and 0.
  std::vector<int64_t> query_base, key_base;
  bool non_finite = false;  // Attrs::non_finite
  bool fast = false;        // precision=fast
};

// Context K and V as T1 values in float64, (kvstarts[B], Hkv, D) and (kvstarts[B], Hkv, Dv).
// k_fast: the keys as the fast tier's integer scores read them (code x stored scale), where a
// fast call's cache is int8 or int4 in groups FastKeyGroups takes; empty otherwise.
// bf16_dots: a fast call over an fp16 or bf16 cache, whose scores take bf16 dot products.
struct Context {
  std::vector<double> k, v;
  std::vector<double> k_fast;
  bool bf16_dots = false;
};

// Groups whose keys the fast tier scores with integer dot products: powers of two, multiples
// of 32.
bool FastKeyGroups(int64_t group) { return group % 32 == 0 && (group & (group - 1)) == 0; }

void RequireMask(const AttentionCall& call) {
  const Array& mask = *call.mask;
  Require(mask.dt == call.t1, "attn_mask must have the query's dtype");
  const int64_t rows = call.batches.rows();
  if (mask.shape.size() == 2) {
    Require(mask.shape[0] == rows, "attn_mask rows must equal Tq");
  } else {
    Require(mask.shape.size() == 3, "attn_mask must have rank 2 or 3");
    Require(mask.shape[0] == call.hq && mask.shape[1] == rows, "attn_mask must be (Hq, Tq, cols)");
  }
  Require(mask.shape.back() >= call.batches.context_rows(), "attn_mask has too few columns");
}

// Where query row 0 and context key 0 of each request sit in the whole request: the new tokens
// last in the context (kvlen_b - seqlen_b, 0), or on a context shard (MHCA's key_offsets)
// start_pos_b and key_offsets_b.
void ReadQueryPositions(const Tensors& inputs, AttentionCall* call) {
  const int64_t count = call->batches.count();
  const Array* offsets = Optional(inputs, "key_offsets");
  std::vector<int64_t> start_pos, key_offsets;
  if (offsets != nullptr) {
    start_pos = ReadI64Vector(Need(inputs, "start_pos"), "start_pos");
    key_offsets = ReadI64Vector(*offsets, "key_offsets");
    Require(static_cast<int64_t>(start_pos.size()) == count &&
                static_cast<int64_t>(key_offsets.size()) == count,
            "start_pos and key_offsets must be (B)");
  }
  for (int64_t b = 0; b < count; ++b) {
    call->query_base.push_back(
        offsets != nullptr ? start_pos[b] : call->batches.kvlen(b) - call->batches.seqlen(b));
    call->key_base.push_back(offsets != nullptr ? key_offsets[b] : 0);
  }
}

// Sliding window, soft-cap, softmax scale and sinks, with their validation rules (and the
// precision tier's: Attend computes the fast tier's own answer too where it differs).
void ReadServingFeatureAttrs(const Attrs& attrs, const Tensors& inputs, AttentionCall* call) {
  Require(attrs.precision.empty() || attrs.precision == "exact" || attrs.precision == "fast",
          "precision must be exact or fast");
  Require(attrs.window_left >= -1, "window_left must be >= -1");
  Require(std::isfinite(attrs.logits_soft_cap) && attrs.logits_soft_cap >= 0,
          "logits_soft_cap must be finite and >= 0");
  Require(std::isfinite(attrs.softmax_scale) && attrs.softmax_scale >= 0,
          "softmax_scale must be finite and >= 0");
  call->fast = attrs.precision == "fast";
  call->window_left = attrs.window_left;
  call->soft_cap = attrs.logits_soft_cap;
  call->score_scale =
      attrs.softmax_scale > 0 ? attrs.softmax_scale : 1.0 / std::sqrt(static_cast<double>(call->d));
  for (int64_t b = 0; b < call->batches.count(); ++b) {
    // The first query row's position in context key numbers (past the context on a shard
    // before the new tokens, negative on one after them).
    const int64_t first_query = call->query_base[b] - call->key_base[b];
    const int64_t seqlen = call->batches.seqlen(b);
    call->unread.push_back(
        std::min(call->batches.kvlen(b),
                 detail::UnreadContextPrefix(attrs.window_left, first_query + seqlen, seqlen)));
  }
  const Array* sinks = Optional(inputs, "sinks");
  if (sinks == nullptr) return;
  Require(sinks->dt == Dt::kF32, "sinks must be float32");
  RequireShape(*sinks, {call->hq}, "sinks");
  for (int64_t h = 0; h < call->hq; ++h) {
    call->sinks.push_back(LoadAsDouble(*sinks, h));
    Require(std::isfinite(call->sinks.back()), "sinks must be finite");
  }
}

AttentionCall ReadAttentionCall(const Attrs& attrs, const Tensors& inputs) {
  AttentionCall call;
  call.hq = attrs.num_heads;
  call.d = attrs.head_dim;
  Require(attrs.head_dim_v >= 0, "head_dim_v must be >= 0 (0: head_dim)");
  call.dv = attrs.head_dim_v > 0 ? attrs.head_dim_v : attrs.head_dim;
  call.hkv = attrs.num_kv_heads == 0 ? attrs.num_heads : attrs.num_kv_heads;  // §5.2
  Require(call.hq >= 1 && call.d >= 1 && call.hkv >= 1, "num_heads/head_dim must be >= 1");
  Require(call.hq % call.hkv == 0, "num_heads must be a multiple of num_kv_heads");
  call.causal = attrs.is_causal != 0;
  call.alibi = attrs.is_alibi != 0;
  call.batches = ReadBatches(inputs);
  const Array& query = Need(inputs, "query");
  call.t1 = query.dt;
  RequireShape(query, {call.batches.rows(), call.hq, call.d}, "query");
  call.non_finite = attrs.non_finite;
  call.query = LoadFinite(query, "query", call.non_finite);
  call.decoding_batches = ReadI64Scalar(inputs, "decoding_batches");
  Require(call.decoding_batches >= 0 && call.decoding_batches <= call.batches.count(),
          "decoding_batches must lie in [0, B]");
  call.mask = Optional(inputs, "attn_mask");
  if (call.mask != nullptr) RequireMask(call);
  call.slopes = detail::AlibiSlopes(static_cast<int>(call.hq));
  if (const Array* slopes = Optional(inputs, "alibi_slopes")) {
    Require(slopes->dt == Dt::kF32, "alibi_slopes must be float32");
    RequireShape(*slopes, {call.hq}, "alibi_slopes");
    for (int64_t h = 0; h < call.hq; ++h) {
      call.slopes[h] = LoadAsDouble(*slopes, h);
      Require(std::isfinite(call.slopes[h]), "alibi_slopes must be finite");
    }
    call.alibi = true;  // given slopes turn ALiBi on
  }
  ReadQueryPositions(inputs, &call);
  ReadServingFeatureAttrs(attrs, inputs, &call);
  return call;
}

// §5.4: request b reads mask rows seqstarts[b] + i, columns kvstarts[b] + j (padded row stride).
double MaskValue(const AttentionCall& call, int64_t b, int64_t h, int64_t i, int64_t j) {
  const Array& mask = *call.mask;
  const int64_t cols = mask.shape.back();
  const int64_t plane = mask.shape.size() == 3 ? h : 0;
  const int64_t row = call.batches.seqstarts[b] + i;
  const int64_t col = call.batches.kvstarts[b] + j;
  const double value = LoadAsDouble(mask, (plane * call.batches.rows() + row) * cols + col);
  Require(call.non_finite || (!std::isnan(value) && value != kInf),
          "attn_mask holds NaN/+inf in a read entry");
  return value;
}

// §5.3: causal masking applies only to non-decoding requests with more than one new token.
bool CausalApplies(const AttentionCall& call, int64_t b) {
  return call.causal && call.batches.seqlen(b) > 1 && b >= call.decoding_batches;
}

// Additive term C + M + A of score (h, i, j) of request b; -inf hides key j.
double ScoreBias(const AttentionCall& call, int64_t b, int64_t h, int64_t i, int64_t j) {
  // Positions in the whole request of query i (the new tokens are the last seqlen_b of the
  // context, or start at start_pos_b on a context shard) and of context key j.
  const int64_t a = call.query_base[b] + i;
  const int64_t k = call.key_base[b] + j;
  if (CausalApplies(call, b) && k > a) return -kInf;  // §5.3 bottom-right causal
  // Sliding window: keys max(0, a - W) .. a, whatever is_causal says.
  if (call.window_left >= 0 && (k > a || k < a - call.window_left)) return -kInf;
  double bias = 0;
  if (call.alibi) {  // §5.5: ALiBi is itself causal, whatever is_causal says
    if (k > a) return -kInf;
    bias += call.slopes[h] * static_cast<double>(k - a);
  }
  if (call.mask != nullptr) bias += MaskValue(call, b, h, i, j);
  return bias;
}

double Dot(const double* x, const double* y, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += x[i] * y[i];
  return sum;
}

// The logit of a visible key: s0 = scale * q.k, soft-capped when a cap is set.
double Logit(const AttentionCall& call, double dot) {
  const double s0 = call.score_scale * dot;
  return call.soft_cap > 0 ? call.soft_cap * std::tanh(s0 / call.soft_cap) : s0;
}

// The fast tier's query: s_q = fl32(max|q| / 127) and codes rne(fl32(q / s_q)) in [-127, 127]
// (all 0 when s_q is 0; s_q NaN when q holds a NaN or an infinity).
struct FastQuery {
  double scale = 0;
  std::vector<double> codes;
};

FastQuery QuantizeFastQuery(const double* q, int64_t d) {
  double max_abs = 0;
  bool finite = true;
  for (int64_t i = 0; i < d; ++i) {
    finite = finite && std::isfinite(q[i]);
    max_abs = std::max(max_abs, std::fabs(q[i]));
  }
  FastQuery fast;
  fast.scale = finite ? static_cast<float>(max_abs / 127) : kNaN;
  fast.codes.assign(d, 0.0);
  for (int64_t i = 0; i < d && fast.scale > 0; ++i) {
    const double code = std::nearbyint(static_cast<float>(q[i] / fast.scale));
    fast.codes[i] = std::min(127.0, std::max(-127.0, code));
  }
  return fast;
}

// Softmax over keys (and the head's sink, which adds exp(sink) to the denominator only) and the
// weighted sum of values for query row i of request b, head h. Returns false (and leaves `out`
// untouched) when every key is hidden or there is none; `lse` then holds the sink (or -inf).
// `fast`: the scores of the fast tier's integer dot products, fl32(s_q * sum_i q'_i k_fast_i),
// or for bf16 dot products (context.bf16_dots) sum_i bf16(q_i) bf16(k_i).
bool AttendRow(const AttentionCall& call, const Context& context, int64_t b, int64_t h, int64_t i,
               bool fast, double* out, double* lse) {
  const int64_t kvlen = call.batches.kvlen(b), d = call.d, dv = call.dv;
  const int64_t kvh = h / (call.hq / call.hkv);  // §5.2 GQA
  const double* q = &call.query[((call.batches.seqstarts[b] + i) * call.hq + h) * d];
  const bool integer_keys = fast && !context.bf16_dots;
  const FastQuery fast_query = integer_keys ? QuantizeFastQuery(q, d) : FastQuery{};
  std::vector<double> q_bf16;
  for (int64_t e = 0; fast && context.bf16_dots && e < d; ++e) {
    q_bf16.push_back(detail::RoundTo(Dt::kBF16, q[e]));
  }
  std::vector<double> scores(kvlen, -kInf);
  double best = -kInf;
  for (int64_t j = 0; j < kvlen; ++j) {
    const double bias = ScoreBias(call, b, h, i, j);
    if (bias == -kInf) continue;  // hidden key: its score stays -inf, its weight 0
    const int64_t key = ((call.batches.kvstarts[b] + j) * call.hkv + kvh) * d;
    double dot = 0;
    if (integer_keys) {
      dot = static_cast<float>(fast_query.scale *
                               Dot(fast_query.codes.data(), &context.k_fast[key], d));
    } else if (fast) {
      for (int64_t e = 0; e < d; ++e) {
        dot += q_bf16[e] * detail::RoundTo(Dt::kBF16, context.k[key + e]);
      }
    } else {
      dot = Dot(q, &context.k[key], d);
    }
    scores[j] = Logit(call, dot) + bias;  // cap before ALiBi and the mask
    best = MaxOrNaN(best, scores[j]);
  }
  const double sink = call.sinks.empty() ? -kInf : call.sinks[h];
  if (best == -kInf) {
    *lse = sink;
    return false;
  }
  best = MaxOrNaN(best, sink);
  double sum = std::exp(sink - best);  // 0 without a sink
  std::vector<double> acc(dv, 0.0);
  for (int64_t j = 0; j < kvlen; ++j) {
    if (scores[j] == -kInf) continue;  // hidden: weight 0, value not read
    const double weight = std::exp(scores[j] - best);
    const double* v = &context.v[((call.batches.kvstarts[b] + j) * call.hkv + kvh) * dv];
    sum += weight;
    for (int64_t e = 0; e < dv; ++e) acc[e] += weight * v[e];
  }
  for (int64_t e = 0; e < dv; ++e) out[e] = acc[e] / sum;
  *lse = best + std::log(sum);
  return true;
}

// The fast tier's bound on how far its scores move from the exact ones for query row i of request
// b, head h: delta = max over visible keys j of scale * (2u * A_j + B_j), u = 2^-8, A_j =
// sum_i |q_i k_ji| (a rounding of q or k to bf16, or a key's skipped fp16 rounding) and B_j =
// max|q| / 254 * sum_i |k_fast_ji| (the query's int8 grid). The soft-cap only shrinks a change.
double FastScoreDelta(const AttentionCall& call, const Context& context, int64_t b, int64_t h,
                      int64_t i) {
  const int64_t kvlen = call.batches.kvlen(b), d = call.d;
  const int64_t kvh = h / (call.hq / call.hkv);
  const double* q = &call.query[((call.batches.seqstarts[b] + i) * call.hq + h) * d];
  double max_q = 0;
  for (int64_t e = 0; e < d; ++e) max_q = std::max(max_q, std::fabs(q[e]));
  double delta = 0;
  for (int64_t j = 0; j < kvlen; ++j) {
    if (ScoreBias(call, b, h, i, j) == -kInf) continue;
    const int64_t key = ((call.batches.kvstarts[b] + j) * call.hkv + kvh) * d;
    double a = 0, k_sum = 0;
    for (int64_t e = 0; e < d; ++e) {
      a += std::fabs(q[e] * context.k[key + e]);
      if (!context.k_fast.empty()) k_sum += std::fabs(context.k_fast[key + e]);
    }
    delta = std::max(delta, call.score_scale * (std::ldexp(a, -7) + max_q / 254 * k_sum));
  }
  return delta;
}

// Largest |V element| over the context rows of request b (all kv heads) that are read.
double ContextValueMax(const AttentionCall& call, const Context& context, int64_t b) {
  double vmax = 0;
  const int64_t begin = (call.batches.kvstarts[b] + call.unread[b]) * call.hkv * call.dv;
  const int64_t end = call.batches.kvstarts[b + 1] * call.hkv * call.dv;
  for (int64_t i = begin; i < end; ++i) {
    if (std::isfinite(context.v[i])) vmax = std::max(vmax, std::fabs(context.v[i]));
  }
  return vmax;
}

std::vector<int64_t> HeadsToCompute(const AttentionCall& call, const std::vector<int>& only_heads) {
  std::vector<int64_t> heads;
  for (int h : only_heads) {
    Require(h >= 0 && h < call.hq, "only_heads entry out of range");
    heads.push_back(h);
  }
  if (heads.empty()) {
    for (int64_t h = 0; h < call.hq; ++h) heads.push_back(h);
  }
  return heads;
}

AttnResult Attend(const AttentionCall& call, const Context& context,
                  const std::vector<int>& only_heads) {
  const int64_t rows = call.batches.rows(), hq = call.hq, d = call.dv;
  AttnResult result;
  result.out.assign(rows * hq * d, kNaN);
  result.vmax.assign(rows, 0.0);
  result.must_be_zero.assign(rows * hq, 0);
  result.lse.assign(rows * hq, kNaN);
  result.computed.assign(rows * hq, 0);
  const bool fast = call.fast && (!context.k_fast.empty() || context.bf16_dots);
  result.fast_within_bound = fast && context.bf16_dots;
  if (fast) {
    result.fast_out.assign(rows * hq * d, kNaN);
    result.fast_lse.assign(rows * hq, kNaN);
    result.fast_bound.assign(rows * hq, 0.0);
  }
  const std::vector<int64_t> heads = HeadsToCompute(call, only_heads);
  for (int64_t b = 0; b < call.batches.count(); ++b) {
    const double vmax = ContextValueMax(call, context, b);
    for (int64_t i = 0; i < call.batches.seqlen(b); ++i) {
      const int64_t row = call.batches.seqstarts[b] + i;
      result.vmax[row] = vmax;
      for (int64_t h : heads) {
        double* out = &result.out[(row * hq + h) * d];
        result.computed[row * hq + h] = 1;
        if (fast) {
          double* fast_out = &result.fast_out[(row * hq + h) * d];
          if (!AttendRow(call, context, b, h, i, true, fast_out, &result.fast_lse[row * hq + h])) {
            std::fill(fast_out, fast_out + d, 0.0);
          }
          const double delta = FastScoreDelta(call, context, b, h, i);
          result.fast_bound[row * hq + h] = (std::expm1(2 * delta) + std::ldexp(2.0, -8)) * vmax;
        }
        if (AttendRow(call, context, b, h, i, false, out, &result.lse[row * hq + h])) continue;
        std::fill(out, out + d, 0.0);           // §5.6 [REC]: fully masked / empty context -> 0
        result.must_be_zero[row * hq + h] = 1;  // lse: the sink, or -inf
      }
    }
  }
  return result;
}

// MHA's key or value; rows a window leaves unread (AttentionCall::unread) may hold anything.
std::vector<double> ReadContextTensor(const Tensors& inputs, const char* name,
                                      const AttentionCall& call) {
  const Array& tensor = Need(inputs, name);
  Require(tensor.dt == call.t1, std::string(name) + " must have the query's dtype");
  const int64_t dim = std::string(name) == "value" ? call.dv : call.d;
  RequireShape(tensor, {call.batches.context_rows(), call.hkv, dim}, name);
  const int64_t row_size = call.hkv * dim;
  std::vector<double> values(tensor.numel(), kNaN);
  for (int64_t b = 0; b < call.batches.count(); ++b) {
    const int64_t first = (call.batches.kvstarts[b] + call.unread[b]) * row_size;
    for (int64_t i = first; i < call.batches.kvstarts[b + 1] * row_size; ++i) {
      values[i] = LoadAsDouble(tensor, i);
      Require(call.non_finite || std::isfinite(values[i]),
              std::string(name) + " holds a non-finite value");
    }
  }
  return values;
}

// The first `kept` of every `row`-long row of `rows` (value_from_key's values).
std::vector<double> FirstElements(const std::vector<double>& rows, int64_t row, int64_t kept) {
  std::vector<double> out;
  out.reserve(rows.size() / row * kept);
  for (size_t i = 0; i < rows.size(); i += row) {
    out.insert(out.end(), rows.begin() + i, rows.begin() + i + kept);
  }
  return out;
}

// ----------------------------------------------------------------------------------------------
// CheckAttention helpers.

struct Violation {
  double ratio = 0;  // |err| / bound of the worst element so far
  std::string text;
  int64_t count = 0;
};

double ToleranceBound(Dt dt, double want, double vmax) {
  if (dt == Dt::kF32) return 1e-5 * std::max(1.0, vmax);
  if (dt == Dt::kBF16) return std::ldexp(std::fabs(want), -8) + 1e-4 * std::max(1.0, vmax);
  return 1e-2 * std::fabs(want) + 5e-4 * std::max(4.0, vmax);
}

std::string DescribeElement(int64_t t, int64_t h, int64_t x, double got, double want, double bound,
                            const char* what) {
  std::ostringstream text;
  text.precision(9);
  text << what << " at row " << t << " head " << h << " d " << x << ": got " << got << " want "
       << want << " bound " << bound;
  return text.str();
}

}  // namespace

// ================================================================================================
// Public API.

namespace {

// Each Dt's size in bytes and short name, in enumerator order.
struct DtInfo {
  int64_t bytes;
  const char* name;
};
constexpr DtInfo kDts[] = {{4, "f32"},  {2, "f16"},    {1, "i8"},    {8, "i64"},
                           {2, "bf16"}, {1, "f8e4m3"}, {1, "f8e5m2"}};
static_assert(std::size(kDts) == static_cast<size_t>(Dt::kF8E5M2) + 1);

}  // namespace

int64_t DtSize(Dt dt) { return kDts[static_cast<size_t>(dt)].bytes; }

const char* DtName(Dt dt) { return kDts[static_cast<size_t>(dt)].name; }

bool IsActivationDt(Dt dt) { return dt == Dt::kF32 || dt == Dt::kF16 || dt == Dt::kBF16; }

bool IsFp8Dt(Dt dt) { return dt == Dt::kF8E4M3 || dt == Dt::kF8E5M2; }

int64_t Array::numel() const {
  int64_t n = 1;
  for (int64_t extent : shape) n *= extent;
  return n;
}

Array MakeArray(Dt dt, const std::vector<int64_t>& shape) {
  Array array;
  array.dt = dt;
  array.shape = shape;
  array.bytes.assign(array.numel() * DtSize(dt), 0);
  return array;
}

Array MakeI64(const std::vector<int64_t>& shape, const std::vector<int64_t>& values) {
  Array array = MakeArray(Dt::kI64, shape);
  Require(static_cast<int64_t>(values.size()) == array.numel(), "MakeI64: wrong value count");
  if (!values.empty()) std::memcpy(array.bytes.data(), values.data(), values.size() * 8);
  return array;
}

Array ScalarI64(int64_t value) { return MakeI64({}, {value}); }

double LoadAsDouble(const Array& array, int64_t i) {
  const uint8_t* p = array.bytes.data() + i * DtSize(array.dt);
  switch (array.dt) {
    case Dt::kF32: {
      float value;
      std::memcpy(&value, p, 4);
      return value;
    }
    case Dt::kF16: {
      uint16_t bits;
      std::memcpy(&bits, p, 2);
      return F16Value(bits);
    }
    case Dt::kI8:
      return static_cast<int8_t>(*p);
    case Dt::kI64:
      return static_cast<double>(LoadI64(array, i));
    case Dt::kBF16: {
      uint16_t bits;
      std::memcpy(&bits, p, 2);
      return Bf16Value(bits);
    }
    case Dt::kF8E4M3:
    case Dt::kF8E5M2:
      return Fp8Value(*p, array.dt);
  }
  return kNaN;
}

void StoreRounded(Array* array, int64_t i, double value) {
  uint8_t* p = array->bytes.data() + i * DtSize(array->dt);
  switch (array->dt) {
    case Dt::kF32: {
      const float rounded = static_cast<float>(value);
      std::memcpy(p, &rounded, 4);
      return;
    }
    case Dt::kF16: {
      const uint16_t bits = F16Bits(value);
      std::memcpy(p, &bits, 2);
      return;
    }
    case Dt::kI8:
      *p = static_cast<uint8_t>(static_cast<int8_t>(value));
      return;
    case Dt::kI64: {
      const int64_t integer = static_cast<int64_t>(value);
      std::memcpy(p, &integer, 8);
      return;
    }
    case Dt::kBF16: {
      const uint16_t bits = Bf16Bits(value);
      std::memcpy(p, &bits, 2);
      return;
    }
    case Dt::kF8E4M3:
    case Dt::kF8E5M2:
      *p = Fp8Bits(value, array->dt);
      return;
  }
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string text = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    text += (i ? ", " : "") + std::to_string(shape[i]);
  }
  return text + ")";
}

// binary16: 11 significand bits, min normal 2^-14, max 65504. Built from the rounding rule
// alone (no compiler _Float16), so the reference is the same under every compiler.
constexpr int kF16Precision = 11;
constexpr int kF16MinExp = -14;
constexpr double kF16Max = 65504.0;

uint16_t F16Bits(double x) {
  uint64_t wide;
  std::memcpy(&wide, &x, 8);
  const auto sign = static_cast<uint16_t>((wide >> 48) & 0x8000);
  if (std::isnan(x)) {  // quiet, with the payload's top bits, as a binary16 conversion keeps them
    return static_cast<uint16_t>(sign | 0x7E00 | ((wide >> 42) & 0x3FF));
  }
  const double magnitude = std::fabs(RoundToPrecision(x, kF16Precision, kF16MinExp));
  if (magnitude > kF16Max) return static_cast<uint16_t>(sign | 0x7C00);  // IEEE overflow, RNE
  if (magnitude < std::ldexp(1.0, kF16MinExp)) {  // subnormal or zero: a multiple of 2^-24
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::ldexp(magnitude, 24)));
  }
  int exp = 0;
  const double fraction = std::frexp(magnitude, &exp);  // [0.5, 1)
  const auto mantissa = static_cast<uint16_t>(std::ldexp(fraction, kF16Precision) - 1024.0);
  return static_cast<uint16_t>(sign | (exp - 1 + 15) << 10 | mantissa);
}

double F16Value(uint16_t bits) {
  const double sign = (bits & 0x8000) != 0 ? -1.0 : 1.0;
  const int exp = (bits >> 10) & 0x1F;
  const int mantissa = bits & 0x3FF;
  if (exp == 0x1F && mantissa != 0) {  // NaN: sign and payload carried into a quiet double NaN
    const uint64_t wide =
        uint64_t{bits & 0x8000u} << 48 | uint64_t{0xFFF} << 51 | uint64_t(mantissa) << 42;
    double value;
    std::memcpy(&value, &wide, 8);
    return value;
  }
  if (exp == 0x1F) return sign * kInf;
  if (exp == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(1024 + mantissa, exp - 25);
}

uint16_t Bf16Bits(double x) {
  if (std::isnan(x)) {  // the float NaN's top half, kept quiet
    return static_cast<uint16_t>((FloatBitsOf(static_cast<float>(x)) >> 16) | 0x0040);
  }
  const double max = std::ldexp(2.0 - std::ldexp(1.0, 1 - kBf16Precision), 127);
  double rounded = RoundToPrecision(x, kBf16Precision, kBf16MinExp);
  if (std::fabs(rounded) > max) rounded = std::copysign(kInf, x);  // IEEE overflow under RNE
  // Every bf16 value is a float whose low 16 bits are zero.
  return static_cast<uint16_t>(FloatBitsOf(static_cast<float>(rounded)) >> 16);
}

double Bf16Value(uint16_t bits) { return FloatOfBits(static_cast<uint32_t>(bits) << 16); }

double Fp8Value(uint8_t byte, Dt format) {
  const Fp8Spec spec = Fp8SpecOf(format);
  const int exp_field = (byte & 0x7F) >> spec.mant_bits;
  const int mant = byte & ((1 << spec.mant_bits) - 1);
  const int max_field = (1 << (7 - spec.mant_bits)) - 1;
  const double sign = (byte & 0x80) ? -1.0 : 1.0;
  if (spec.has_inf && exp_field == max_field) return mant == 0 ? sign * kInf : kNaN;
  if (!spec.has_inf && exp_field == max_field && mant == (1 << spec.mant_bits) - 1) return kNaN;
  if (exp_field == 0) return sign * std::ldexp(mant, 1 - spec.bias - spec.mant_bits);
  return sign * std::ldexp((1 << spec.mant_bits) + mant, exp_field - spec.bias - spec.mant_bits);
}

uint8_t Fp8Bits(double x, Dt format) {
  const Fp8Spec spec = Fp8SpecOf(format);
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return static_cast<uint8_t>(sign | (spec.has_inf ? 0x7E : 0x7F));
  double magnitude = std::fabs(x);
  if (!(spec.has_inf && std::isinf(x))) {
    magnitude = std::min(RoundToPrecision(magnitude, spec.mant_bits + 1, 1 - spec.bias), spec.max);
  }
  for (int code = 0; code < 0x80; ++code) {  // the code whose value it is
    if (Fp8Value(static_cast<uint8_t>(code), format) == magnitude) {
      return static_cast<uint8_t>(sign | code);
    }
  }
  Require(false, "Fp8Bits: no code for a rounded value");
  return 0;
}

uint8_t Fp8Encode(double x, double scale, Dt format) {
  // x and scale are floats: the double quotient rounded to float is the correctly rounded fp32
  // quotient (53 >= 2 * 24 + 2 bits, so the double rounding is innocuous).
  return Fp8Bits(static_cast<float>(x / scale), format);
}

double Fp8Decode(uint8_t byte, double scale, Dt format) {
  return static_cast<float>(Fp8Value(byte, format) * scale);  // exact product, one fp32 rounding
}

KvcResult KeyValueCache(const Attrs& attrs, const Tensors& inputs) {
  const Array& current_key = Need(inputs, "current_key");
  Require(current_key.shape.size() == 3, "current_key must be (Tq, Hkv, D)");
  const KvcCall call = ReadKvcCall(attrs, inputs, current_key.shape[1], current_key.shape[2]);
  return RunKeyValueCache(call, attrs.num_repeat);
}

AttnResult MultiHeadAttention(const Attrs& attrs, const Tensors& inputs,
                              const std::vector<int>& only_heads) {
  const AttentionCall call = ReadAttentionCall(attrs, inputs);
  for (int64_t b = 0; b < call.batches.count(); ++b) {
    Require(call.batches.kvlen(b) >= call.batches.seqlen(b), "MHA needs kvlen_b >= seqlen_b");
  }
  Context context{ReadContextTensor(inputs, "key", call), {}, {}};
  if (attrs.value_from_key) {
    Require(Optional(inputs, "value") == nullptr, "value must be absent with value_from_key");
    Require(call.dv <= call.d, "value_from_key needs head_dim_v <= head_dim");
    context.v = FirstElements(context.k, call.d, call.dv);
  } else {
    context.v = ReadContextTensor(inputs, "value", call);
  }
  context.bf16_dots = call.fast && attrs.bf16_dots_oracle;
  return Attend(call, context, only_heads);
}

AttnResult MultiHeadCacheAttention(const Attrs& attrs, const Tensors& inputs,
                                   const std::vector<int>& only_heads) {
  const AttentionCall call = ReadAttentionCall(attrs, inputs);
  Require(call.dv == call.d, "a PMX cache holds keys and values of one size (head_dim_v)");
  Require(!attrs.value_from_key, "value_from_key needs a latent cache, not a PMX cache tensor");
  const KvcCall kvc_call = ReadKvcCall(attrs, inputs, call.hkv, call.d);
  Require(kvc_call.geo.t1 == call.t1, "current_key/value must have the query's dtype");
  Context context;
  const bool fast_keys = call.fast && FastKeyGroups(kvc_call.geo.group);
  const Dt cache_dt = kvc_call.geo.cache_dt;
  context.bf16_dots =
      call.fast && kvc_call.geo.quant_bit == 0 && (cache_dt == Dt::kF16 || cache_dt == Dt::kBF16);
  KvcResult kvc = RunKeyValueCache(kvc_call, 1, &context.k, &context.v, &call.unread,
                                   fast_keys ? &context.k_fast : nullptr);
  AttnResult result = Attend(call, context, only_heads);
  result.cache = std::move(kvc.cache);
  result.scale = std::move(kvc.scale);
  return result;
}

AttnResult UnifiedAttention(const Attrs& attrs, const Tensors& inputs) {
  Require(attrs.block_size >= 1, "block_size must be >= 1");
  const std::vector<int64_t> qsl =
      ReadI64Vector(Need(inputs, "query_start_loc"), "query_start_loc");
  RequireStarts(qsl, "query_start_loc");
  const int64_t count = static_cast<int64_t>(qsl.size()) - 1;
  const std::vector<int64_t> context = ReadI64Vector(Need(inputs, "context_lens"), "context_lens");
  Require(static_cast<int64_t>(context.size()) == count, "context_lens must have B entries");
  const Array& table = Need(inputs, "block_table");
  Require(table.dt == Dt::kI64 && table.shape.size() == 2 && table.shape[0] == count,
          "block_table must be int64 (B, max_blocks)");
  // The definition: MultiHeadCacheAttention in paged mode, pages = blocks, each request's new
  // tokens last in its context, causal for every request.
  // A context shard (key_offsets with key_counts) is MultiHeadCacheAttention's: its context is
  // the key_counts[b] positions from key_offsets[b], the queries at context_lens[b] onward.
  Tensors mhca = inputs;
  for (const char* name : {"query_start_loc", "context_lens", "block_table", "key_counts"}) {
    mhca.erase(name);
  }
  const Array* counts = Optional(inputs, "key_counts");
  Require((counts != nullptr) == (Optional(inputs, "key_offsets") != nullptr),
          "key_offsets and key_counts come together");
  std::vector<int64_t> held;
  if (counts != nullptr) {
    held = ReadI64Vector(*counts, "key_counts");
    Require(static_cast<int64_t>(held.size()) == count, "key_counts must have B entries");
  }
  std::vector<int64_t> kvstarts{0}, start_pos, pages;
  int64_t max_seqlen = 0, max_kvlen = 0;
  for (int64_t b = 0; b < count; ++b) {
    Require(context[b] >= 0, "context_lens must be >= 0");
    const int64_t seqlen = qsl[b + 1] - qsl[b];
    if (counts != nullptr) Require(held[b] >= 0, "key_counts must be >= 0");
    kvstarts.push_back(kvstarts.back() + (counts != nullptr ? held[b] : context[b] + seqlen));
    start_pos.push_back(context[b]);
    max_seqlen = std::max(max_seqlen, seqlen);
    max_kvlen = std::max(max_kvlen, context[b] + seqlen);
  }
  for (int64_t i = 0; i < table.numel(); ++i) pages.push_back(LoadI64(table, i) * attrs.block_size);
  mhca["seqstarts"] = MakeI64({count + 1}, qsl);
  mhca["kvstarts"] = MakeI64({count + 1}, kvstarts);
  mhca["start_pos"] = MakeI64({count}, start_pos);
  mhca["cachestarts"] = MakeI64(table.shape, pages);
  mhca["decoding_batches"] = ScalarI64(0);
  mhca["max_seqlen"] = ScalarI64(max_seqlen);
  mhca["max_kvlen"] = ScalarI64(max_kvlen);
  Attrs paged = attrs;
  paged.is_causal = 1;
  paged.cache_mode = 1;
  paged.page_size = attrs.block_size;
  return MultiHeadCacheAttention(paged, mhca);
}

namespace {

// Whether (row, head) number `i` of `ref` was computed (a result built by hand has no list).
bool IsComputed(const AttnResult& ref, int64_t i) {
  return ref.computed.empty() || ref.computed[i] != 0;
}

// Whether a library LSE value meets the reference's `want`.
bool LseMatches(double want, double value) {
  if (std::isnan(want)) return std::isnan(value);
  if (std::isinf(want)) return value == want;
  return std::fabs(value - want) <= 1e-4 * std::max(1.0, std::fabs(want));
}

// The worst violation of one (row, head) of `got` against `want` (the reference's out or
// fast_out at the same index).
// `extra` widens every element's tolerance (a fast row's bound).
Violation CheckRow(const AttnResult& ref, const std::vector<double>& want_all, const Array& got,
                   int64_t t, int64_t h, int64_t hq, int64_t d, double extra = 0) {
  Violation worst;
  const bool zero = ref.must_be_zero[t * hq + h] != 0;
  for (int64_t x = 0; x < d; ++x) {
    const int64_t index = (t * hq + h) * d + x;
    const double want = want_all[index];
    const double value = LoadAsDouble(got, index);
    if (!std::isfinite(want)) {  // NaN for NaN, the same infinity for an infinity
      const bool same_class = std::isnan(want) ? std::isnan(value) : value == want;
      if (!same_class && worst.ratio < kInf) {
        worst.ratio = kInf;
        worst.text = DescribeElement(t, h, x, value, want, 0, "not the reference's non-finite");
      }
      worst.count += !same_class;
      continue;
    }
    const double bound = zero ? 0.0 : ToleranceBound(got.dt, want, ref.vmax[t]) + extra;
    const double err = std::fabs(value - want);
    double ratio = err == 0 ? 0.0 : bound == 0 ? kInf : err / bound;
    if (!std::isfinite(value)) ratio = kInf;
    if (ratio > 1) ++worst.count;
    if (ratio > worst.ratio) {
      const char* what = !std::isfinite(value) ? "non-finite output"
                         : zero                ? "non-zero output in a must-be-zero row"
                                               : "out of tolerance";
      worst.ratio = ratio;
      worst.text = DescribeElement(t, h, x, value, want, bound, what);
    }
  }
  return worst;
}

}  // namespace

std::string CheckLse(const AttnResult& ref, const Array& got) {
  if (got.dt != Dt::kF32) return "lse must be f32";
  if (got.numel() != static_cast<int64_t>(ref.lse.size())) return "lse has the wrong element count";
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double value = LoadAsDouble(got, i);
    if (!IsComputed(ref, i)) continue;
    const bool ok = LseMatches(ref.lse[i], value) ||
                    (!ref.fast_lse.empty() && LseMatches(ref.fast_lse[i], value));
    if (!ok) {
      std::ostringstream text;
      text.precision(9);
      text << "lse at (row, head) index " << i << ": got " << value << " want " << ref.lse[i];
      if (!ref.fast_lse.empty()) text << " (fast tier: " << ref.fast_lse[i] << ")";
      return text.str();
    }
  }
  return "";
}

std::string CheckAttention(const AttnResult& ref, const Array& got, double* worst_ratio) {
  const int64_t rows = static_cast<int64_t>(ref.vmax.size());
  const int64_t hq = rows == 0 ? 0 : static_cast<int64_t>(ref.must_be_zero.size()) / rows;
  const int64_t d = hq == 0 ? 0 : static_cast<int64_t>(ref.out.size()) / (rows * hq);
  if (worst_ratio != nullptr) *worst_ratio = 0;
  if (!IsFloat(got.dt)) {
    return std::string("output dtype ") + DtName(got.dt) + " is not f32/f16/bf16";
  }
  const bool shape_ok = rows == 0 ? (!got.shape.empty() && got.shape[0] == 0 && got.numel() == 0)
                                  : got.shape == std::vector<int64_t>{rows, hq, d};
  if (!shape_ok) return "output shape " + ShapeString(got.shape) + " does not match the reference";
  if (static_cast<int64_t>(got.bytes.size()) != got.numel() * DtSize(got.dt)) {
    return "output byte count does not match its shape";
  }
  Violation worst;
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t h = 0; h < hq; ++h) {
      if (!IsComputed(ref, t * hq + h)) continue;
      Violation row = CheckRow(ref, ref.out, got, t, h, hq, d);
      if (row.ratio > 1 && !ref.fast_out.empty()) {  // a fast call's row may be either tier's
        Violation fast = ref.fast_within_bound
                             ? CheckRow(ref, ref.out, got, t, h, hq, d, ref.fast_bound[t * hq + h])
                             : CheckRow(ref, ref.fast_out, got, t, h, hq, d);
        if (fast.ratio < row.ratio) row = fast;
        if (row.ratio > 1) row.text += " (neither tier's answer)";
      }
      worst.count += row.count;
      if (row.ratio > worst.ratio) {
        worst.ratio = row.ratio;
        worst.text = row.text;
      }
    }
  }
  if (worst_ratio != nullptr) *worst_ratio = worst.ratio;
  if (worst.ratio <= 1) return "";
  return worst.text + " (" + std::to_string(worst.count) + " elements out of bound)";
}

// ================================================================================================
// detail: the spec's building blocks.

namespace detail {

double RoundTo(Dt dt, double x) {
  if (dt == Dt::kF32) return static_cast<float>(x);
  if (dt == Dt::kBF16) return Bf16Value(Bf16Bits(x));
  Require(dt == Dt::kF16, "RoundTo needs a float dtype");
  return F16Value(F16Bits(x));
}

// §2.1 steps 1-5. Each T1 operation is one exact float64 operation rounded to T1; for operands
// already in T1 that equals the operation done in T1 (float64 has more than 2p+2 bits), which is
// also what fp16(float(m) / 127.0f) gives.
GroupQuant QuantizeGroup(const std::vector<double>& x, Dt t1, Dt t3, int quant_bit) {
  Require(quant_bit == 8 || quant_bit == 4, "QuantizeGroup needs quant_bit 8 or 4");
  const int q_max = quant_bit == 8 ? 127 : 7;  // 2^(bits-1) - 1
  double m = 0;
  for (double value : x) m = std::max(m, std::fabs(value));  // 1. exact absmax
  double s = RoundTo(t1, m / q_max);                         // 2. s = T1(m / Q)
  s = std::max(s, RoundTo(t1, 1e-5));                        // 3. eps floor T1(1e-5)
  GroupQuant quant;
  quant.scale = s;
  quant.stored = RoundTo(t3, s);  // 5. stored as T3 (step 4 used the unrounded T1 s)
  for (double value : x) {
    const double quotient = RoundTo(t1, value / s);  // 4. T1 quotient, then half-to-even
    quant.q.push_back(static_cast<int>(std::clamp(
        RoundHalfToEven(quotient), static_cast<double>(-q_max), static_cast<double>(q_max))));
  }
  return quant;
}

double Dequantize(int q, double stored_scale, Dt t1, Dt t3) {
  return RoundTo(t1, RoundTo(t3, q * stored_scale));
}

uint8_t PackNibbles(int low, int high) {
  return static_cast<uint8_t>((low & 0xF) | ((high & 0xF) << 4));
}

int DecodeNibble(uint8_t byte, int which) {
  const int nibble = (byte >> (4 * which)) & 0xF;
  return nibble >= 8 ? nibble - 16 : nibble;  // two's complement: 0x8 -> -8, 0xF -> -1
}

int64_t CacheOffset(int cache_layout, int64_t slot, int64_t layer, int64_t kv, int64_t head,
                    int64_t index, int64_t num_layer, int64_t max_t, int64_t num_kv_heads,
                    int64_t last_dim) {
  const int64_t s = slot, l = layer, h = head, d = index, L = num_layer, H = num_kv_heads;
  const int64_t D = last_dim, T = max_t;
  switch (cache_layout) {
    case 0:  // (MaxT, L, 2, Hkv, D)
      return (((s * L + l) * 2 + kv) * H + h) * D + d;
    case 1:  // (L, MaxT, 2, Hkv, D)
      return (((l * T + s) * 2 + kv) * H + h) * D + d;
    case 2:  // (L, 2, MaxT, Hkv, D)
      return (((l * 2 + kv) * T + s) * H + h) * D + d;
    case 3:  // (L, 2, Hkv, MaxT, D)
      return (((l * 2 + kv) * H + h) * T + s) * D + d;
  }
  Require(false, "cache_layout must be 0..3");
  return -1;
}

std::vector<int64_t> CacheShape(int cache_layout, int64_t num_layer, int64_t max_t,
                                int64_t num_kv_heads, int64_t last_dim) {
  switch (cache_layout) {
    case 0:
      return {max_t, num_layer, 2, num_kv_heads, last_dim};
    case 1:
      return {num_layer, max_t, 2, num_kv_heads, last_dim};
    case 2:
      return {num_layer, 2, max_t, num_kv_heads, last_dim};
    case 3:
      return {num_layer, 2, num_kv_heads, max_t, last_dim};
  }
  Require(false, "cache_layout must be 0..3");
  return {};
}

int64_t SlotOf(const Array& cachestarts, int cache_mode, int64_t page_size, int64_t b, int64_t p) {
  if (cache_mode == 0) return LoadI64(cachestarts, b) + p;
  Require(cachestarts.shape.size() == 2, "paged cachestarts must be (B, MaxP)");
  const int64_t max_pages = cachestarts.shape[1];
  Require(p / page_size < max_pages, "position past the page table");
  return LoadI64(cachestarts, b * max_pages + p / page_size) + p % page_size;
}

int64_t UnreadContextPrefix(int window_left, int64_t kvlen, int64_t seqlen) {
  if (window_left < 0 || seqlen == 0) return 0;
  const int64_t first_start = std::max<int64_t>(0, kvlen - seqlen - window_left);
  return first_start / kWindowSkipAlign * kWindowSkipAlign;
}

std::vector<double> AlibiSlopes(int num_heads) {
  if (num_heads < 1) return {};
  int c = 1;  // c = 2^floor(log2 Hq)
  while (c * 2 <= num_heads) c *= 2;
  std::vector<double> slopes;
  for (int h = 0; h < c; ++h) slopes.push_back(std::exp2(-8.0 * (h + 1) / c));
  for (int k = 1; static_cast<int>(slopes.size()) < num_heads; k += 2) {
    slopes.push_back(std::exp2(-4.0 * k / c));  // the Hq - c extra heads, k = 1, 3, 5, ...
  }
  return slopes;
}

}  // namespace detail
}  // namespace dynattn_ref
