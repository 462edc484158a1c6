// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// MergeStates' validation (spec unified-and-ksana.md §6.5): every rule refuses its input with a
// status that names it, and every buffer of the call is unchanged after a rejected call.

#include <doctest/doctest.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "dynattn/dynattn.h"
#include "tests/support/merge_parts.h"
#include "tests/support/run_case.h"

namespace dynattn_test {
namespace {

TEST_SUITE("merge") {
  /// A small valid call of either form, and every buffer it touches.
  struct Call {
    Parts p;
    std::vector<float> merged_out, merged_lse;
    MergeStatesArgs args;

    explicit Call(Form form) {
      p.k = 3;
      p.t = 2;
      p.h = 2;
      p.d = 4;
      std::mt19937_64 rng(BaseSeed() + 7);  // a failure names the seed (harness.h)
      RandomParts(rng, &p);
      merged_out.assign(p.Rows() * p.d, Poison());
      merged_lse.assign(p.Rows(), Poison());
      if (form == Form::kNormalised) {
        args.out = TensorView::Dense(p.out.data(), DType::kF32, {p.k, p.t, p.h, p.d});
        args.lse = TensorView::Dense(p.lse.data(), DType::kF32, {p.k, p.t, p.h});
      } else {
        args.acc = TensorView::Dense(p.acc.data(), DType::kF32, {p.k, p.t, p.h, p.d});
        args.max = TensorView::Dense(p.max.data(), DType::kF32, {p.k, p.t, p.h});
        args.sum = TensorView::Dense(p.sum.data(), DType::kF32, {p.k, p.t, p.h});
      }
      args.merged_out = TensorView::Dense(merged_out.data(), DType::kF32, {p.t, p.h, p.d});
      args.merged_lse = TensorView::Dense(merged_lse.data(), DType::kF32, {p.t, p.h});
    }
    /// Every buffer, as bytes.
    std::vector<uint8_t> Snapshot() const {
      std::vector<uint8_t> bytes;
      for (const std::vector<float>* v :
           {&p.out, &p.lse, &p.acc, &p.max, &p.sum, &merged_out, &merged_lse}) {
        const auto* b = reinterpret_cast<const uint8_t*>(v->data());
        bytes.insert(bytes.end(), b, b + v->size() * sizeof(float));
      }
      return bytes;
    }
  };

  struct Mutation {
    const char* what;
    Form form;
    const char* input;    // the name the error must start with
    const char* mention;  // a substring the message must contain ("" for none)
    std::function<void(Call*)> apply;
    dynattn::StatusCode code = dynattn::StatusCode::kInvalidArgument;
  };

  TEST_CASE("validation: each rule names its input and nothing is written") {
    const Form kN = Form::kNormalised, kU = Form::kUnnormalised;
    const float nan = std::numeric_limits<float>::quiet_NaN();
    // Element (k=1, t=0, h=1) of a (3, 2, 2) tensor is flat index 1*4 + 0*2 + 1 = 5.
    const std::vector<Mutation> mutations = {
        {"no form", kN, "out", "either", [](Call* c) { c->args.out = c->args.lse = TensorView(); }},
        {"both forms", kN, "acc", "not both",
         [](Call* c) {
           c->args.acc = TensorView::Dense(c->p.acc.data(), DType::kF32, {3, 2, 2, 4});
           c->args.max = TensorView::Dense(c->p.max.data(), DType::kF32, {3, 2, 2});
           c->args.sum = TensorView::Dense(c->p.sum.data(), DType::kF32, {3, 2, 2});
         }},
        {"out without lse", kN, "lse", "required", [](Call* c) { c->args.lse = TensorView(); }},
        {"lse without out", kN, "out", "required", [](Call* c) { c->args.out = TensorView(); }},
        {"acc without sum", kU, "sum", "required", [](Call* c) { c->args.sum = TensorView(); }},
        {"max alone", kU, "acc", "required",
         [](Call* c) { c->args.acc = c->args.sum = TensorView(); }},
        {"out float16", kN, "out", "float32", [](Call* c) { c->args.out.dtype = DType::kF16; }},
        {"lse int64", kN, "lse", "float32", [](Call* c) { c->args.lse.dtype = DType::kI64; }},
        {"sum float16", kU, "sum", "float32", [](Call* c) { c->args.sum.dtype = DType::kF16; }},
        {"merged_out float16", kN, "merged_out", "float32",
         [](Call* c) { c->args.merged_out.dtype = DType::kF16; }},
        {"merged_lse float16", kU, "merged_lse", "float32",
         [](Call* c) { c->args.merged_lse.dtype = DType::kF16; }},
        {"out rank 3", kN, "out", "(K, T, H, D)",
         [](Call* c) {
           c->args.out = TensorView::Dense(c->p.out.data(), DType::kF32, {3, 4, 4});
         }},
        {"no parts", kN, "out", "K (parts) >= 1",
         [](Call* c) {
           c->args.out = TensorView::Dense(c->p.out.data(), DType::kF32, {0, 2, 2, 4});
           c->args.lse = TensorView::Dense(c->p.lse.data(), DType::kF32, {0, 2, 2});
         }},
        {"no tokens", kU, "acc", "T (tokens) >= 1",
         [](Call* c) {
           c->args.acc = TensorView::Dense(c->p.acc.data(), DType::kF32, {3, 0, 2, 4});
         }},
        {"no head dim", kU, "acc", "D (head dim) >= 1",
         [](Call* c) {
           c->args.acc = TensorView::Dense(c->p.acc.data(), DType::kF32, {3, 2, 2, 0});
         }},
        {"lse of other heads", kN, "lse", "(3, 2, 2)",
         [](Call* c) {
           c->args.lse = TensorView::Dense(c->p.lse.data(), DType::kF32, {3, 2, 1});
         }},
        {"max of fewer parts", kU, "max", "(3, 2, 2)",
         [](Call* c) {
           c->args.max = TensorView::Dense(c->p.max.data(), DType::kF32, {2, 2, 2});
         }},
        {"merged_out absent", kN, "merged_out", "required",
         [](Call* c) { c->args.merged_out = TensorView(); }},
        {"merged_out of another D", kN, "merged_out", "(2, 2, 4)",
         [](Call* c) {
           c->args.merged_out = TensorView::Dense(c->merged_out.data(), DType::kF32, {2, 2, 3});
         }},
        {"merged_lse rank 3", kU, "merged_lse", "(T, H)",
         [](Call* c) {
           c->args.merged_lse = TensorView::Dense(c->merged_lse.data(), DType::kF32, {2, 2, 1});
         }},
        {"out not dense", kN, "out", "dense", [](Call* c) { c->args.out.strides[3] = 2; }},
        {"sum not dense", kU, "sum", "dense", [](Call* c) { c->args.sum.strides[0] = 8; }},
        {"out null", kN, "out", "null", [](Call* c) { c->args.out.data = nullptr; }},
        {"out on CUDA", kN, "out", "CPU",
         [](Call* c) { c->args.out.device = dynattn::Device::kCuda; },
         dynattn::StatusCode::kUnsupported},
        {"merged_lse on CUDA", kN, "merged_lse", "CPU",
         [](Call* c) { c->args.merged_lse.device = dynattn::Device::kCuda; },
         dynattn::StatusCode::kUnsupported},
        {"merged_out over out", kN, "merged_out", "overlap",
         [](Call* c) {
           c->args.merged_out = TensorView::Dense(c->p.out.data(), DType::kF32, {2, 2, 4});
         }},
        {"merged_lse inside sum", kU, "merged_lse", "overlap",
         [](Call* c) {
           c->args.merged_lse = TensorView::Dense(c->p.sum.data() + 3, DType::kF32, {2, 2});
         }},
        {"merged_lse inside merged_out", kN, "merged_lse", "overlap",
         [](Call* c) {
           c->args.merged_lse = TensorView::Dense(c->merged_out.data() + 1, DType::kF32, {2, 2});
         }},
        {"NaN in out", kN, "out", "out[1, 0, 1, 2]", [nan](Call* c) { c->p.out[5 * 4 + 2] = nan; }},
        {"inf in out", kN, "out", "finite", [](Call* c) { c->p.out[7] = -kInf; }},
        {"NaN in acc", kU, "acc", "acc[2, 1, 1, 3]", [nan](Call* c) { c->p.acc.back() = nan; }},
        {"inf in acc", kU, "acc", "finite", [](Call* c) { c->p.acc[0] = kInf; }},
        {"NaN in lse", kN, "lse", "lse[1, 0, 1]", [nan](Call* c) { c->p.lse[5] = nan; }},
        {"NaN in max", kU, "max", "max[1, 0, 1]", [nan](Call* c) { c->p.max[5] = nan; }},
        {"+inf max", kU, "max", "-inf", [](Call* c) { c->p.max[5] = kInf; }},
        {"NaN in sum", kU, "sum", "sum[1, 0, 1]", [nan](Call* c) { c->p.sum[5] = nan; }},
        {"negative sum", kU, "sum", ">= 0", [](Call* c) { c->p.sum[5] = -1.0f; }},
        {"-0 is fine but -tiny is not", kU, "sum", ">= 0",
         [](Call* c) {
           c->p.sum[4] = -0.0f;
           c->p.sum[5] = -1e-30f;
         }},
        {"infinite sum", kU, "sum", "finite", [](Call* c) { c->p.sum[5] = kInf; }},
        {"sum > 0 with max -inf", kU, "sum", "where max is -inf",
         [](Call* c) {
           c->p.max[5] = -kInf;
           c->p.sum[5] = 1.0f;
         }},
    };
    for (const Mutation& m : mutations) {
      {
        // The unmutated call is valid (so the error below is the mutation's).
        Call fresh(m.form);
        const Status ok = dynattn::MergeStates(fresh.args);
        REQUIRE_MESSAGE(ok.ok(), m.what << ": base call fails: " << ok.message());
      }
      Call c(m.form);
      m.apply(&c);
      const std::vector<uint8_t> before = c.Snapshot();
      const Status status = dynattn::MergeStates(c.args);
      INFO(m.what << ": " << status.message());
      CHECK(!status.ok());
      CHECK(status.code() == m.code);
      CHECK(status.message().rfind(std::string(m.input) + ": ", 0) == 0);
      CHECK(status.message().find(m.mention) != std::string::npos);
      CHECK(c.Snapshot() == before);
    }
  }
}

}  // namespace
}  // namespace dynattn_test
