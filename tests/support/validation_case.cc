// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The valid step the validation suite breaks, and its call as views (validation_case.h).

#include "tests/support/validation_case.h"

#include <random>
#include <vector>

#include "reference/reference.h"

namespace dynattn_test {

Array RandomActivations(Dt dt, const std::vector<int64_t>& shape, uint64_t salt) {
  Array a = MakeArray(dt, shape);
  std::mt19937_64 rng(BaseSeed() + salt);
  std::normal_distribution<double> normal;
  for (int64_t i = 0; i < a.numel(); ++i) dynattn_ref::StoreRounded(&a, i, normal(rng));
  return a;
}

Case BaseCase(const std::string& op, int cache_mode) {
  Case c;
  c.op = op;
  c.attrs.num_heads = 4;
  c.attrs.head_dim = 8;
  c.attrs.num_kv_heads = 2;
  c.attrs.num_layer = 2;
  c.attrs.layer_idx = 1;
  c.attrs.quant_bit = 8;
  c.attrs.quant_group = 4;
  c.attrs.cache_mode = cache_mode;
  c.attrs.page_size = 4;
  const int64_t max_t = 16;
  Tensors& in = c.inputs;
  in["query"] = RandomActivations(Dt::kF16, {4, 4, 8}, 1);
  in["current_key"] = RandomActivations(Dt::kF16, {4, 2, 8}, 2);
  in["current_value"] = RandomActivations(Dt::kF16, {4, 2, 8}, 3);
  in["seqstarts"] = MakeI64({3}, {0, 1, 4});
  in["kvstarts"] = MakeI64({3}, {0, 5, 8});
  in["start_pos"] = MakeI64({2}, {4, 0});
  in["cachestarts"] = cache_mode == 0 ? MakeI64({2}, {0, 8}) : MakeI64({2, 2}, {0, 4, 8, -1});
  in["decoding_batches"] = ScalarI64(1);
  in["max_seqlen"] = ScalarI64(3);
  in["max_kvlen"] = ScalarI64(5);
  in["cache"] = MakeArray(Dt::kI8, {max_t, 2, 2, 2, 8});
  std::mt19937_64 rng(BaseSeed() + 4);  // a failure names the seed (harness.h)
  for (uint8_t& byte : in["cache"].bytes) {
    byte = static_cast<uint8_t>(static_cast<int>(rng() % 255) - 127);  // int8 codes -127..127
  }
  in["scale"] = RandomActivations(Dt::kF16, {max_t, 2, 2, 2, 2}, 5);
  in["attn_mask"] = RandomActivations(Dt::kF16, {4, 12}, 6);
  if (op == "multi_head_attention") {
    in["key"] = RandomActivations(Dt::kF16, {8, 2, 8}, 7);
    in["value"] = RandomActivations(Dt::kF16, {8, 2, 8}, 8);
    for (const char* unused :
         {"current_key", "current_value", "start_pos", "cachestarts", "cache", "scale"}) {
      in.erase(unused);
    }
  }
  if (op == "key_value_cache") {
    for (const char* unused : {"query", "decoding_batches", "attn_mask"}) in.erase(unused);
  }
  return c;
}

dynattn::MultiHeadCacheAttentionArgs MhcaArgs(Case& c, Array* out) {
  dynattn::MultiHeadCacheAttentionArgs a;
  Tensors& in = c.inputs;
  a.query = ViewOf(in["query"]);
  a.current_key = ViewOf(in["current_key"]);
  a.current_value = ViewOf(in["current_value"]);
  a.seqstarts = ViewOf(in["seqstarts"]);
  a.kvstarts = ViewOf(in["kvstarts"]);
  a.cachestarts = ViewOf(in["cachestarts"]);
  a.start_pos = ViewOf(in["start_pos"]);
  a.decoding_batches = ViewOf(in["decoding_batches"]);
  a.max_seqlen = ViewOf(in["max_seqlen"]);
  a.max_kvlen = ViewOf(in["max_kvlen"]);
  a.cache = ViewOf(in["cache"]);
  a.scale = ViewOf(in["scale"]);
  a.attn_output = ViewOf(*out);
  return a;
}

}  // namespace dynattn_test
