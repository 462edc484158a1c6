// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Caches whose value rows have another size than their key rows (CacheDesc::head_dim_v, as
// engines keep MLA's non-absorbed K and V): a history written by KeyValueCache, then one step of
// MultiHeadCacheAttention and of unified attention over separate key (Dk) and value (Dv) planes,
// or over one latent plane whose rows' first Dv elements are the values (value_from_key: MLA's
// absorbed form), in every cache format, on every target.
//   * Writes: each plane's bytes equal those the same tokens give a cache of that plane's size
//     for both halves (the equal-size path the reference proves bit for bit).
//   * Outputs: within tolerance of the float64 reference's MultiHeadAttention over the context
//     the cache holds after the step (KeyValueCache's gather of it).

#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "reference/reference.h"
#include "tests/support/run_case.h"

namespace dynattn_test {
namespace {

using dynattn::CacheElem;
using dynattn_ref::Dt;

/// A drawn step: requests with a cached history and new tokens, heads and head sizes, a format.
struct Step {
  int64_t hq = 1, hkv = 1, dk = 8, dv = 8;
  /// A latent cache (value_from_key): one plane of Dk-element rows, the values their first Dv.
  bool latent = false;
  Dt io = Dt::kF32;
  CacheElem elem = CacheElem::kF32;
  std::vector<int64_t> past, seqlen, cachestarts;
  int64_t slots = 0;

  int64_t Requests() const { return static_cast<int64_t>(past.size()); }
};

/// Bits per element of `elem` (int4: 4).
int ElementBits(CacheElem elem) {
  switch (elem) {
    case CacheElem::kF32:
      return 32;
    case CacheElem::kF16:
    case CacheElem::kBF16:
      return 16;
    case CacheElem::kInt4:
      return 4;
    default:
      return 8;
  }
}

bool Quantized(CacheElem elem) { return elem == CacheElem::kInt8 || elem == CacheElem::kInt4; }

constexpr int kGroup = 8;  // divides every drawn head size

Step DrawStep(std::mt19937_64& rng) {
  static const std::pair<int64_t, int64_t> kDims[] = {{192, 128}, {72, 40}, {16, 48}, {96, 64},
                                                      {576, 512}, {8, 24},  {40, 40}};
  static const CacheElem kElems[] = {CacheElem::kF32,   CacheElem::kF16,  CacheElem::kBF16,
                                     CacheElem::kInt8,  CacheElem::kInt4, CacheElem::kF8E4M3,
                                     CacheElem::kF8E5M2};
  static const std::pair<int64_t, int64_t> kLatentDims[] = {
      {576, 512}, {64, 48}, {72, 40}, {40, 40}};
  Step s;
  s.latent = rng() % 3 == 0;
  const auto [dk, dv] =
      s.latent ? kLatentDims[rng() % std::size(kLatentDims)] : kDims[rng() % std::size(kDims)];
  s.dk = dk;
  s.dv = dv;
  s.hkv = dk >= 512 ? 1 : 1 + static_cast<int64_t>(rng() % 2);
  s.hq = s.hkv * (dk >= 512 ? 16 : 1 + static_cast<int64_t>(rng() % 4));
  s.elem = kElems[rng() % std::size(kElems)];
  s.io = s.elem == CacheElem::kF32    ? Dt::kF32
         : s.elem == CacheElem::kF16  ? Dt::kF16
         : s.elem == CacheElem::kBF16 ? Dt::kBF16
                                      : std::vector<Dt>{Dt::kF32, Dt::kF16, Dt::kBF16}[rng() % 3];
  const int64_t requests = 1 + static_cast<int64_t>(rng() % 4);
  for (int64_t b = 0; b < requests; ++b) {
    const bool decode = rng() % 2 == 0;
    s.past.push_back(static_cast<int64_t>(rng() % (rng() % 4 == 0 ? 1500 : 70)));
    s.seqlen.push_back(decode ? 1 : 1 + static_cast<int64_t>(rng() % 20));
    s.cachestarts.push_back(s.slots + static_cast<int64_t>(rng() % 3));
    s.slots = s.cachestarts.back() + s.past.back() + s.seqlen.back();
  }
  return s;
}

/// Separate key and value planes of (slots, Hkv, D) rows, with group scales when quantized.
struct Planes {
  std::vector<uint8_t> key, value, key_scale, value_scale;
  dynattn::CacheDesc desc;
};

/// Planes for rows of `dk` keys and `dv` values, filled with 0xFF (never read: the history
/// writes every row a step reads). A latent step's cache is its key plane alone, described as
/// both planes (the history writes each key twice, identically).
Planes MakePlanes(const Step& s, int64_t dk, int64_t dv) {
  Planes p;
  const int bits = ElementBits(s.elem);
  p.key.assign(s.slots * s.hkv * dk * bits / 8, 0xFF);
  p.value.assign(s.slots * s.hkv * dv * bits / 8, 0xFF);
  const bool quantized = Quantized(s.elem);
  // bf16 activations read a quantized value as the exact product of code and scale; fp32 scales
  // give fp32 activations (the gather the outputs are checked over) that product too.
  const bool f32_scales = s.io == Dt::kBF16;
  const int64_t scale_bytes = f32_scales ? 4 : 2;
  p.key_scale.assign(quantized ? s.slots * s.hkv * dk / kGroup * scale_bytes : 1, 0);
  p.value_scale.assign(quantized ? s.slots * s.hkv * dv / kGroup * scale_bytes : 1, 0);
  dynattn::CacheDesc& d = p.desc;
  d.elem = s.elem;
  d.scale_type = f32_scales ? dynattn::ScaleType::kF32 : dynattn::ScaleType::kF16;
  d.quant_group = quantized ? kGroup : static_cast<int>(dk);
  d.num_kv_heads = static_cast<int>(s.hkv);
  d.head_dim = static_cast<int>(dk);
  d.head_dim_v = static_cast<int>(dv);
  d.num_slots = s.slots;
  d.key = {p.key.data(),        s.hkv * dk, dk, quantized ? p.key_scale.data() : nullptr,
           s.hkv * dk / kGroup, dk / kGroup};
  d.value = {p.value.data(),      s.hkv * dv, dv, quantized ? p.value_scale.data() : nullptr,
             s.hkv * dv / kGroup, dv / kGroup};
  d.key.tensor_scale = 0.5f;  // fp8 planes: scales that are not 1
  d.value.tensor_scale = 2.0f;
  if (s.latent) {
    p.value.clear();
    p.value_scale.clear();
    d.value = d.key;
    d.head_dim_v = 0;
  }
  return p;
}

/// Points a copy's descriptor at its own buffers.
void PointAtOwnPlanes(Planes* p) {
  const bool latent = p->value.empty();
  p->desc.key.data = p->key.data();
  p->desc.value.data = latent ? p->key.data() : p->value.data();
  if (Quantized(p->desc.elem)) {
    p->desc.key.scale = p->key_scale.data();
    p->desc.value.scale = latent ? p->key_scale.data() : p->value_scale.data();
  }
}

Array Random(std::mt19937_64& rng, Dt dt, const std::vector<int64_t>& shape) {
  Array a = dynattn_ref::MakeArray(dt, shape);
  std::uniform_real_distribution<double> uniform(-2.0, 2.0);
  for (int64_t i = 0; i < a.numel(); ++i) dynattn_ref::StoreRounded(&a, i, uniform(rng));
  return a;
}

Array Poisoned(Dt dt, const std::vector<int64_t>& shape) {
  Array a = dynattn_ref::MakeArray(dt, shape);
  std::fill(a.bytes.begin(), a.bytes.end(), 0xFF);
  return a;
}

/// `a`'s values in `dt` (exact when widening bf16 to fp32).
Array Converted(const Array& a, Dt dt) {
  Array out = dynattn_ref::MakeArray(dt, a.shape);
  for (int64_t i = 0; i < a.numel(); ++i) {
    dynattn_ref::StoreRounded(&out, i, dynattn_ref::LoadAsDouble(a, i));
  }
  return out;
}

std::vector<int64_t> Starts(const std::vector<int64_t>& lengths) {
  std::vector<int64_t> starts{0};
  for (int64_t n : lengths) starts.push_back(starts.back() + n);
  return starts;
}

int64_t Largest(const std::vector<int64_t>& v) {
  return v.empty() ? 0 : *std::max_element(v.begin(), v.end());
}

/// The index tensors of a step over `s`'s slots: `seqlen` new tokens per request from
/// `start_pos`, contexts of `kvlen` positions.
dynattn_ref::Tensors StepIndex(const Step& s, const std::vector<int64_t>& start_pos,
                               const std::vector<int64_t>& seqlen,
                               const std::vector<int64_t>& kvlen) {
  const int64_t b = s.Requests();
  return {{"seqstarts", dynattn_ref::MakeI64({b + 1}, Starts(seqlen))},
          {"kvstarts", dynattn_ref::MakeI64({b + 1}, Starts(kvlen))},
          {"cachestarts", dynattn_ref::MakeI64({b}, s.cachestarts)},
          {"start_pos", dynattn_ref::MakeI64({b}, start_pos)},
          {"decoding_batches", dynattn_ref::ScalarI64(0)},
          {"max_seqlen", dynattn_ref::ScalarI64(Largest(seqlen))},
          {"max_kvlen", dynattn_ref::ScalarI64(Largest(kvlen))}};
}

/// Views of the tensors in `t` by name (absent when not there).
dynattn::TensorLookup LookupIn(dynattn_ref::Tensors* t) {
  return [t](const std::string& name) {
    const auto it = t->find(name);
    return it == t->end() ? dynattn::TensorView{} : ViewOf(it->second);
  };
}

int QuantBit(CacheElem elem) {
  return elem == CacheElem::kInt8 ? 8 : elem == CacheElem::kInt4 ? 4 : 0;
}

/// KeyValueCache over `planes`: writes `seqlen` new tokens per request at `start_pos` and
/// gathers each request's first `kvlen` positions; returns the gathered key (.., Dk) and value
/// (.., Dv).
std::pair<Array, Array> RunKvc(const Step& s, Planes* planes, const Array& current_key,
                               const Array& current_value, const std::vector<int64_t>& start_pos,
                               const std::vector<int64_t>& seqlen,
                               const std::vector<int64_t>& kvlen) {
  dynattn_ref::Tensors t = StepIndex(s, start_pos, seqlen, kvlen);
  const int64_t rows = Starts(kvlen).back();
  const dynattn::CacheDesc& d = planes->desc;
  t["current_key"] = current_key;
  t["current_value"] = current_value;
  t["key"] = Poisoned(current_key.dt, {rows, s.hkv, d.head_dim});
  t["value"] =
      Poisoned(current_key.dt, {rows, s.hkv, d.head_dim_v > 0 ? d.head_dim_v : d.head_dim});
  dynattn::KeyValueCacheArgs args = dynattn::KeyValueCacheArgsByName(LookupIn(&t));
  args.cache_desc = &planes->desc;
  dynattn::KeyValueCacheAttrs attrs;
  attrs.cache.quant_bit = QuantBit(s.elem);
  attrs.cache.quant_group = kGroup;
  const dynattn::Status status = dynattn::KeyValueCache(attrs, args);
  REQUIRE_MESSAGE(status.ok(), status.message());
  return {t.at("key"), t.at("value")};
}

/// The step's new tokens and queries.
struct NewTokens {
  Array query, key, value;
};

std::vector<int64_t> ContextLengths(const Step& s) {
  std::vector<int64_t> kvlen(s.Requests());
  for (int64_t b = 0; b < s.Requests(); ++b) kvlen[b] = s.past[b] + s.seqlen[b];
  return kvlen;
}

/// The library's MultiHeadCacheAttention of the step over `planes` (its writes land there).
Array RunMhca(const Step& s, const NewTokens& n, Planes* planes,
              dynattn::Precision precision = dynattn::Precision::kExact) {
  dynattn_ref::Tensors t = StepIndex(s, s.past, s.seqlen, ContextLengths(s));
  t["query"] = n.query;
  t["current_key"] = n.key;
  if (!s.latent) t["current_value"] = n.value;
  t["attn_output"] = Poisoned(s.io, {n.query.shape[0], s.hq, s.dv});
  dynattn::MultiHeadCacheAttentionArgs args =
      dynattn::MultiHeadCacheAttentionArgsByName(LookupIn(&t));
  args.cache_desc = &planes->desc;
  dynattn::MultiHeadCacheAttentionAttrs attrs;
  attrs.attention.num_heads = static_cast<int>(s.hq);
  attrs.attention.num_kv_heads = static_cast<int>(s.hkv);
  attrs.attention.head_dim = static_cast<int>(s.dk);
  attrs.attention.head_dim_v = static_cast<int>(s.dv);
  attrs.attention.value_from_key = s.latent;
  attrs.attention.precision = precision;
  attrs.cache.quant_bit = QuantBit(s.elem);
  attrs.cache.quant_group = kGroup;
  const dynattn::Status status = dynattn::MultiHeadCacheAttention(attrs, args);
  REQUIRE_MESSAGE(status.ok(), status.message());
  return t.at("attn_output");
}

/// The library's unified attention of the step over `planes`, as blocks of one slot.
Array RunUnified(const Step& s, const NewTokens& n, Planes* planes) {
  const int64_t b = s.Requests();
  const std::vector<int64_t> kvlen = ContextLengths(s);
  const int64_t width = std::max<int64_t>(1, Largest(kvlen));
  std::vector<int64_t> table(b * width, 0);
  for (int64_t i = 0; i < b; ++i) {
    for (int64_t p = 0; p < kvlen[i]; ++p) table[i * width + p] = s.cachestarts[i] + p;
  }
  dynattn_ref::Tensors t = {{"query", n.query},
                            {"current_key", n.key},
                            {"query_start_loc", dynattn_ref::MakeI64({b + 1}, Starts(s.seqlen))},
                            {"context_lens", dynattn_ref::MakeI64({b}, s.past)},
                            {"block_table", dynattn_ref::MakeI64({b, width}, table)},
                            {"attn_output", Poisoned(s.io, {n.query.shape[0], s.hq, s.dv})}};
  if (!s.latent) t["current_value"] = n.value;
  dynattn::BlockCache cache;
  cache.cache = planes->desc;
  cache.block_size = 1;
  cache.num_blocks = s.slots;
  dynattn::UnifiedAttentionAttrs attrs;
  attrs.num_heads = static_cast<int>(s.hq);
  attrs.num_kv_heads = static_cast<int>(s.hkv);
  attrs.head_dim = static_cast<int>(s.dk);
  attrs.head_dim_v = static_cast<int>(s.dv);
  attrs.value_from_key = s.latent;
  const dynattn::Status status =
      dynattn::UnifiedAttention(attrs, dynattn::UnifiedAttentionArgsByName(LookupIn(&t), &cache));
  REQUIRE_MESSAGE(status.ok(), status.message());
  return t.at("attn_output");
}

std::string Describe(const Step& s) {
  std::string text = "Dk " + std::to_string(s.dk) + " Dv " + std::to_string(s.dv) + " Hq " +
                     std::to_string(s.hq) + " Hkv " + std::to_string(s.hkv) + " elem " +
                     dynattn::CacheElemName(s.elem) + " io " + dynattn_ref::DtName(s.io) +
                     (s.latent ? " latent" : "") + " past/new";
  for (int64_t b = 0; b < s.Requests(); ++b) {
    text += " " + std::to_string(s.past[b]) + "/" + std::to_string(s.seqlen[b]);
  }
  return text;
}

/// A step's data: the history's keys and values, then the queries and new tokens.
struct StepData {
  Array past_key, past_value;
  NewTokens now;
};

StepData DrawData(std::mt19937_64& rng, const Step& s) {
  const int64_t tokens = Starts(s.seqlen).back(), history = Starts(s.past).back();
  StepData d;
  d.past_key = Random(rng, s.io, {history, s.hkv, s.dk});
  d.past_value = Random(rng, s.io, {history, s.hkv, s.dv});
  d.now = {Random(rng, s.io, {tokens, s.hq, s.dk}), Random(rng, s.io, {tokens, s.hkv, s.dk}),
           Random(rng, s.io, {tokens, s.hkv, s.dv})};
  return d;
}

/// Each plane of `written` holds the bytes that a cache of that plane's row size for both
/// halves gets from the same history and step.
void CheckEachPlane(const Step& s, const StepData& d, const Planes& written) {
  const std::vector<int64_t> none(s.Requests(), 0), kvlen = ContextLengths(s);
  Planes keys = MakePlanes(s, s.dk, s.dk), values = MakePlanes(s, s.dv, s.dv);
  RunKvc(s, &keys, d.past_key, d.past_key, none, s.past, s.past);
  RunKvc(s, &keys, d.now.key, d.now.key, s.past, s.seqlen, kvlen);
  CHECK(written.key == keys.key);
  CHECK(written.key_scale == keys.key_scale);
  if (s.latent) return;  // the keys are the whole cache
  RunKvc(s, &values, d.past_value, d.past_value, none, s.past, s.past);
  RunKvc(s, &values, d.now.value, d.now.value, s.past, s.seqlen, kvlen);
  CHECK(written.value == values.value);
  CHECK(written.value_scale == values.value_scale);
}

/// The float64 reference's MultiHeadAttention of the step over the context `planes` holds after
/// it, gathered in fp32 under bf16 activations (which read the cache unrounded); with `fast`, also
/// the bf16 dot products' answer and bound.
dynattn_ref::AttnResult ReferenceOverCache(const Step& s, const NewTokens& n, Planes* planes,
                                           bool fast = false) {
  const std::vector<int64_t> no_new(s.Requests(), 0), kvlen = ContextLengths(s);
  const Dt exact = s.io == Dt::kBF16 ? Dt::kF32 : s.io;
  const Array none = dynattn_ref::MakeArray(exact, {0, s.hkv, s.dk});
  const Array no_values = dynattn_ref::MakeArray(exact, {0, s.hkv, s.latent ? s.dk : s.dv});
  const auto [key, value] = RunKvc(s, planes, none, no_values, kvlen, no_new, kvlen);
  dynattn_ref::Tensors inputs = StepIndex(s, s.past, s.seqlen, kvlen);
  inputs["query"] = Converted(n.query, exact);
  inputs["key"] = key;
  if (!s.latent) inputs["value"] = value;
  dynattn_ref::Attrs attrs;
  attrs.num_heads = static_cast<int>(s.hq);
  attrs.num_kv_heads = static_cast<int>(s.hkv);
  attrs.head_dim = static_cast<int>(s.dk);
  attrs.head_dim_v = static_cast<int>(s.dv);
  attrs.value_from_key = s.latent ? 1 : 0;
  if (fast) {
    attrs.precision = "fast";
    attrs.bf16_dots_oracle = true;
  }
  return dynattn_ref::MultiHeadAttention(attrs, inputs);
}

TEST_SUITE("cache_desc") {
  TEST_CASE(
      "caches with value rows of another size (head_dim_v) and latent caches (value_from_key) on "
      "every target") {
    ForEachTarget([](const std::string& target) {
      for (int i = 0; i < 12; ++i) {
        const uint64_t seed = BaseSeed() + 950000 + i;
        std::mt19937_64 rng(seed);
        const Step s = DrawStep(rng);
        INFO("target " << target << ", seed " << seed << ": " << Describe(s));
        const StepData d = DrawData(rng, s);
        // The history, then the step through MHCA and (from the same history) unified attention.
        Planes mhca = MakePlanes(s, s.dk, s.dv);
        RunKvc(s, &mhca, d.past_key, s.latent ? d.past_key : d.past_value,
               std::vector<int64_t>(s.Requests(), 0), s.past, s.past);
        Planes unified = mhca;
        PointAtOwnPlanes(&unified);
        const Array mhca_out = RunMhca(s, d.now, &mhca);
        const Array unified_out = RunUnified(s, d.now, &unified);
        CHECK(unified.key == mhca.key);
        CHECK(unified.value == mhca.value);
        CHECK(unified.key_scale == mhca.key_scale);
        CHECK(unified.value_scale == mhca.value_scale);
        CheckEachPlane(s, d, mhca);
        const dynattn_ref::AttnResult ref = ReferenceOverCache(s, d.now, &mhca);
        CHECK(dynattn_ref::CheckAttention(ref, mhca_out) == "");
        CHECK(dynattn_ref::CheckAttention(ref, unified_out) == "");
      }
    });
  }

  // The fast tier over such caches in fp16 and bf16: the bf16 kernels read value rows of their
  // own size, and a latent cache's values from its key rows.
  TEST_CASE("fast calls over fp16 and bf16 caches with value rows of another size, every target") {
    ForEachTarget([](const std::string& target) {
      int outside_exact = 0, cases = 0;
      for (int i = 0; i < 12; ++i) {
        const uint64_t seed = BaseSeed() + 960000 + i;
        std::mt19937_64 rng(seed);
        Step s = DrawStep(rng);
        s.elem = i % 2 == 0 ? CacheElem::kF16 : CacheElem::kBF16;
        s.io = s.elem == CacheElem::kF16 ? Dt::kF16 : Dt::kBF16;
        INFO("target " << target << ", seed " << seed << ": " << Describe(s));
        const StepData d = DrawData(rng, s);
        Planes planes = MakePlanes(s, s.dk, s.dv);
        RunKvc(s, &planes, d.past_key, s.latent ? d.past_key : d.past_value,
               std::vector<int64_t>(s.Requests(), 0), s.past, s.past);
        const Array out = RunMhca(s, d.now, &planes, dynattn::Precision::kFast);
        dynattn_ref::AttnResult ref = ReferenceOverCache(s, d.now, &planes, true);
        REQUIRE(ref.fast_within_bound);
        CHECK(dynattn_ref::CheckAttention(ref, out) == "");
        ref.fast_out.clear();  // the exact answer alone
        ref.fast_within_bound = false;
        outside_exact += !dynattn_ref::CheckAttention(ref, out).empty();
        ++cases;
      }
      // Where the bf16 dot products run, their roundings leave the exact tolerance.
      if (Bf16DotsRun()) CHECK(outside_exact * 4 >= cases);
    });
  }
}

}  // namespace
}  // namespace dynattn_test
