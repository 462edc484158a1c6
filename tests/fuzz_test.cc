// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Differential fuzzing of validation: random valid cases get one random mutation (an entry of an
// index tensor or a scalar set to a random, often hostile value, or an attribute changed). The
// library and the independent reference must then agree on whether the call is valid; when both
// accept it, the results must match; when the library refuses it, nothing may have been written.
// Run under ASan in CI, this is also the proof that no input makes the library read or write out
// of bounds.

#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <iterator>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "reference/reference.h"
#include "tests/support/run_case.h"

namespace dynattn_test {
namespace {

using dynattn_ref::Dt;

/// A value that is often at or just past a boundary, sometimes wild.
int64_t HostileValue(std::mt19937_64& rng, int64_t current) {
  switch (rng() % 8) {
    case 0:
      return current + 1;
    case 1:
      return current - 1;
    case 2:
      return -1;
    case 3:
      return 0;
    case 4:
      return current * 2 + 1;
    case 5:
      return int64_t{1} << (rng() % 62);
    case 6:
      return -(int64_t{1} << (rng() % 62));
    default:
      return static_cast<int64_t>(rng() % 300);
  }
}

/// A float that is valid for a scale, cap or sink, or breaks its rule (negative, zero, NaN, inf).
double HostileReal(std::mt19937_64& rng) {
  const double values[] = {-1.0, 0.0, NAN, INFINITY, -INFINITY, 0.5, 2.0, 30.0};
  return values[rng() % std::size(values)];
}

/// Changes a score attribute (window, soft-cap, softmax scale) or one value of the sinks or of an
/// fp8 scale. Returns what it did.
std::string MutateScore(Case* c, std::mt19937_64& rng) {
  std::vector<std::string> reals;
  for (const char* name : {"sinks", "k_scale", "v_scale"}) {
    if (c->inputs.count(name) && c->inputs.at(name).numel() > 0) reals.push_back(name);
  }
  const size_t which = rng() % (3 + reals.size());
  if (which == 0) {
    c->attrs.window_left = static_cast<int>(HostileValue(rng, c->attrs.window_left) % 100000);
    return "window_left = " + std::to_string(c->attrs.window_left);
  }
  if (which == 1 || which == 2) {
    double& field = which == 1 ? c->attrs.logits_soft_cap : c->attrs.softmax_scale;
    field = HostileReal(rng);
    return std::string(which == 1 ? "logits_soft_cap" : "softmax_scale") + " = " +
           std::to_string(field);
  }
  dynattn_ref::Array& a = c->inputs[reals[which - 3]];
  const int64_t index = static_cast<int64_t>(rng() % a.numel());
  a.data<float>()[index] = static_cast<float>(HostileReal(rng));
  return reals[which - 3] + "[" + std::to_string(index) +
         "] = " + std::to_string(a.data<float>()[index]);
}

/// Changes one random entry of one random int64 input, one attribute, or (for attention ops) one
/// window, soft-cap, softmax scale, sinks or fp8 scale attribute or input. Returns what it did.
std::string Mutate(Case* c, std::mt19937_64& rng) {
  if (c->op != "key_value_cache" && rng() % 5 == 0) return MutateScore(c, rng);
  std::vector<std::string> names;
  for (auto& [name, array] : c->inputs) {
    if (array.dt == Dt::kI64 && array.numel() > 0) names.push_back(name);
  }
  if (rng() % 4 == 0 || names.empty()) {
    int* const fields[] = {&c->attrs.num_heads,    &c->attrs.head_dim,   &c->attrs.num_kv_heads,
                           &c->attrs.num_layer,    &c->attrs.layer_idx,  &c->attrs.quant_bit,
                           &c->attrs.quant_group,  &c->attrs.num_repeat, &c->attrs.cache_mode,
                           &c->attrs.cache_layout, &c->attrs.page_size};
    const size_t which = rng() % std::size(fields);
    *fields[which] = static_cast<int>(HostileValue(rng, *fields[which]) % 100000);
    return "attribute #" + std::to_string(which) + " = " + std::to_string(*fields[which]);
  }
  const std::string& name = names[rng() % names.size()];
  dynattn_ref::Array& a = c->inputs[name];
  const int64_t index = static_cast<int64_t>(rng() % a.numel());
  a.data<int64_t>()[index] = HostileValue(rng, a.data<int64_t>()[index]);
  return name + "[" + std::to_string(index) + "] = " + std::to_string(a.data<int64_t>()[index]);
}

/// Mutated cases per op (DYNATTN_FUZZ_CASES overrides, for a long soak).
int FuzzCases() {
  if (const char* env = std::getenv("DYNATTN_FUZZ_CASES")) return std::atoi(env);
  return 150;
}

/// What the reference made of a mutated case.
enum class Verdict {
  kAccepted,
  kRuleBroken,   ///< A rule of the spec is broken: the library must refuse too.
  kGarbageRead,  ///< Valid, but a mutated index now reads cache or mask garbage (NaN, Inf),
                 ///< which the reference refuses to compute with; the library must accept.
};

Verdict RunReference(const Case& c, dynattn_ref::KvcResult* kvc, dynattn_ref::AttnResult* attn) {
  try {
    if (c.op == "key_value_cache") {
      *kvc = dynattn_ref::KeyValueCache(c.attrs, c.inputs);
    } else if (c.op == "multi_head_attention") {
      *attn = dynattn_ref::MultiHeadAttention(c.attrs, c.inputs);
    } else {
      *attn = dynattn_ref::MultiHeadCacheAttention(c.attrs, c.inputs);
    }
    return Verdict::kAccepted;
  } catch (const std::invalid_argument& error) {
    const std::string what = error.what();
    const bool garbage =
        what.find("non-finite") != std::string::npos || what.find("NaN/+inf") != std::string::npos;
    return garbage ? Verdict::kGarbageRead : Verdict::kRuleBroken;
  }
}

TEST_SUITE("fuzz") {
  TEST_CASE("library and reference agree on validity; refusals write nothing") {
    std::mt19937_64 rng(BaseSeed() + 77);
    int accepted = 0, refused = 0;
    for (const char* op :
         {"key_value_cache", "multi_head_attention", "multi_head_cache_attention"}) {
      dynattn_ref::GenOptions small;
      small.small = true;
      for (int i = 0; i < FuzzCases(); ++i) {
        const uint64_t seed = BaseSeed() + 1000000 + i;
        Case c = dynattn_ref::RandomCase(op, seed, small);
        const std::string mutation = Mutate(&c, rng);
        INFO(std::string(op) << " seed " << seed << ", " << mutation << ": " << c.description);
        const LibResult lib = RunLibrary(c);
        dynattn_ref::KvcResult kvc;
        dynattn_ref::AttnResult attn;
        const Verdict verdict = RunReference(c, &kvc, &attn);
        CHECK_MESSAGE(lib.status.ok() == (verdict != Verdict::kRuleBroken),
                      "library: " << (lib.status.ok() ? "ok" : lib.status.message()));
        std::string why;
        if (!lib.status.ok()) {
          ++refused;
          if (c.inputs.count("cache"))
            CHECK_MESSAGE(SameBytes(lib.cache, c.inputs.at("cache"), &why), why);
          if (c.inputs.count("scale"))
            CHECK_MESSAGE(SameBytes(lib.scale, c.inputs.at("scale"), &why), why);
          continue;
        }
        ++accepted;
        if (verdict == Verdict::kGarbageRead) continue;
        if (std::string(op) == "key_value_cache") {
          CHECK_MESSAGE(SameBytes(lib.cache, kvc.cache, &why), why);
          CHECK_MESSAGE(SameBytes(lib.key, kvc.key, &why), why);
        } else {
          const std::string error = dynattn_ref::CheckAttention(attn, lib.attn_output);
          CHECK_MESSAGE(error.empty(), error);
        }
      }
    }
    MESSAGE(accepted << " mutated cases accepted, " << refused << " refused");
    CHECK(refused > 100);  // the mutations do hit the rules
  }
}

}  // namespace
}  // namespace dynattn_test
