// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// `dynattn demo`: the main job. One realistic serving step of a Llama-3-8B-like attention layer
// (32 query heads, 8 KV heads, head_dim 128, int8 cache with groups of 8 and fp16 scales, paged,
// layout 3): 24 decoding requests with contexts from 512 to 8192 and two 512-token prefill chunks,
// through MultiHeadCacheAttention. It prints the step's shape, the median time, the KV bytes read
// per second, and checks a sample of heads against the independent float64 reference.

#include "src/cli/demo_command.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "dynattn/dynattn.h"
#include "src/cli/run_command.h"
#include "tests/reference/reference.h"

namespace dynattn::cli {
namespace {

using dynattn_ref::Array;
using dynattn_ref::Dt;

constexpr int kHeads = 32, kKvHeads = 8, kDim = 128, kGroup = 8, kPage = 128;
constexpr int kDecodes = 24, kPrefillTokens = 512;

struct Request {
  int64_t start_pos, seqlen;
};

/// 24 decodes with contexts spread over [512, 8192], then a fresh prompt chunk and a later one.
std::vector<Request> DemoRequests(std::mt19937_64& rng) {
  std::vector<Request> requests;
  std::uniform_int_distribution<int64_t> context(512, 8192);
  for (int i = 0; i < kDecodes; ++i) requests.push_back({context(rng) - 1, 1});
  requests.push_back({0, kPrefillTokens});
  requests.push_back({1024, kPrefillTokens});
  return requests;
}

Array RandomF16(const std::vector<int64_t>& shape, std::mt19937_64& rng, double sigma) {
  Array a = dynattn_ref::MakeArray(Dt::kF16, shape);
  std::normal_distribution<double> normal(0.0, sigma);
  for (int64_t i = 0; i < a.numel(); ++i) dynattn_ref::StoreRounded(&a, i, normal(rng));
  return a;
}

/// The step's inputs, named as the spec's. Pages are handed out in a shuffled order, and the
/// cache already holds quantized history (random codes, positive scales) for every past token.
dynattn_ref::Tensors BuildStep(const std::vector<Request>& requests, std::mt19937_64& rng) {
  const int64_t batch = static_cast<int64_t>(requests.size());
  std::vector<int64_t> seqstarts{0}, kvstarts{0}, start_pos;
  int64_t max_pages = 0, total_pages = 0, max_seqlen = 0, max_kvlen = 0;
  for (const Request& r : requests) {
    seqstarts.push_back(seqstarts.back() + r.seqlen);
    kvstarts.push_back(kvstarts.back() + r.start_pos + r.seqlen);
    start_pos.push_back(r.start_pos);
    const int64_t pages = (r.start_pos + r.seqlen + kPage - 1) / kPage;
    max_pages = std::max(max_pages, pages);
    total_pages += pages;
    max_seqlen = std::max(max_seqlen, r.seqlen);
    max_kvlen = std::max(max_kvlen, r.start_pos + r.seqlen);
  }
  std::vector<int64_t> page_order(total_pages);
  for (int64_t i = 0; i < total_pages; ++i) page_order[i] = i * kPage;
  std::shuffle(page_order.begin(), page_order.end(), rng);
  std::vector<int64_t> table(batch * max_pages, -1);
  int64_t next = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t pages = (kvstarts[b + 1] - kvstarts[b] + kPage - 1) / kPage;
    for (int64_t k = 0; k < pages; ++k) table[b * max_pages + k] = page_order[next++];
  }
  const int64_t max_t = total_pages * kPage, tq = seqstarts.back();
  dynattn_ref::Tensors in;
  in["query"] = RandomF16({tq, kHeads, kDim}, rng, 1.0);
  in["current_key"] = RandomF16({tq, kKvHeads, kDim}, rng, 1.0);
  in["current_value"] = RandomF16({tq, kKvHeads, kDim}, rng, 1.0);
  in["seqstarts"] = dynattn_ref::MakeI64({batch + 1}, seqstarts);
  in["kvstarts"] = dynattn_ref::MakeI64({batch + 1}, kvstarts);
  in["cachestarts"] = dynattn_ref::MakeI64({batch, max_pages}, table);
  in["start_pos"] = dynattn_ref::MakeI64({batch}, start_pos);
  in["decoding_batches"] = dynattn_ref::ScalarI64(kDecodes);
  in["max_seqlen"] = dynattn_ref::ScalarI64(max_seqlen);
  in["max_kvlen"] = dynattn_ref::ScalarI64(max_kvlen);
  Array cache = dynattn_ref::MakeArray(Dt::kI8, {1, 2, kKvHeads, max_t, kDim});
  std::uniform_int_distribution<int> code(-127, 127);
  for (uint8_t& byte : cache.bytes) byte = static_cast<uint8_t>(code(rng));
  in["cache"] = std::move(cache);
  Array scale = dynattn_ref::MakeArray(Dt::kF16, {1, 2, kKvHeads, max_t, kDim / kGroup});
  std::uniform_real_distribution<double> step(0.004, 0.02);
  for (int64_t i = 0; i < scale.numel(); ++i) dynattn_ref::StoreRounded(&scale, i, step(rng));
  in["scale"] = std::move(scale);
  return in;
}

TensorView View(Array& a) {
  const DType dtype = a.dt == Dt::kF16 ? DType::kF16 : a.dt == Dt::kI8 ? DType::kI8 : DType::kI64;
  return TensorView::Dense(a.bytes.data(), dtype, static_cast<int>(a.shape.size()), a.shape.data());
}

MultiHeadCacheAttentionAttrs DemoAttrs() {
  MultiHeadCacheAttentionAttrs attrs;
  attrs.attention.num_heads = kHeads;
  attrs.attention.head_dim = kDim;
  attrs.attention.num_kv_heads = kKvHeads;
  attrs.cache.quant_bit = 8;
  attrs.cache.quant_group = kGroup;
  attrs.cache.cache_mode = 1;
  attrs.cache.cache_layout = 3;
  attrs.cache.page_size = kPage;
  return attrs;
}

/// One call of the op on `in` (cache and scale updated in place), output into `out`.
Status RunStep(dynattn_ref::Tensors& in, Array* out) {
  MultiHeadCacheAttentionArgs args;
  args.query = View(in["query"]);
  args.current_key = View(in["current_key"]);
  args.current_value = View(in["current_value"]);
  args.seqstarts = View(in["seqstarts"]);
  args.kvstarts = View(in["kvstarts"]);
  args.cachestarts = View(in["cachestarts"]);
  args.start_pos = View(in["start_pos"]);
  args.decoding_batches = View(in["decoding_batches"]);
  args.max_seqlen = View(in["max_seqlen"]);
  args.max_kvlen = View(in["max_kvlen"]);
  args.cache = View(in["cache"]);
  args.scale = View(in["scale"]);
  args.attn_output = View(*out);
  return MultiHeadCacheAttention(DemoAttrs(), args);
}

/// KV bytes a step reads: every context token's int8 K and V rows and their fp16 scales.
double KvBytesRead(const dynattn_ref::Tensors& in) {
  const Array& kvstarts = in.at("kvstarts");
  const double tokens = static_cast<double>(kvstarts.data<int64_t>()[kvstarts.numel() - 1]);
  return tokens * kKvHeads * 2 * (kDim + 2.0 * kDim / kGroup);
}

dynattn_ref::Attrs ReferenceAttrs() {
  dynattn_ref::Attrs a;
  a.num_heads = kHeads;
  a.head_dim = kDim;
  a.num_kv_heads = kKvHeads;
  a.quant_bit = 8;
  a.quant_group = kGroup;
  a.cache_mode = 1;
  a.cache_layout = 3;
  a.page_size = kPage;
  return a;
}

/// Rows [begin, end) of a packed tensor (dim 0).
Array Rows(const Array& a, int64_t begin, int64_t end) {
  Array out = a;
  const int64_t row = static_cast<int64_t>(a.bytes.size()) / std::max<int64_t>(1, a.shape[0]);
  out.shape[0] = end - begin;
  out.bytes.assign(a.bytes.begin() + begin * row, a.bytes.begin() + end * row);
  return out;
}

void AppendRows(const Array& from, Array* to) {
  to->shape[0] += from.shape[0];
  to->bytes.insert(to->bytes.end(), from.bytes.begin(), from.bytes.end());
}

/// The sub-step made of `picked` requests (decodes first) over the same cache: requests are
/// independent, so its reference output equals the full step's rows for those requests. Also
/// returns the library's output rows of those requests in `got`.
dynattn_ref::Tensors SubStep(const dynattn_ref::Tensors& full, const std::vector<int64_t>& picked,
                             const Array& out, Array* got) {
  const int64_t* qs = full.at("seqstarts").data<int64_t>();
  const int64_t* ks = full.at("kvstarts").data<int64_t>();
  const Array& table = full.at("cachestarts");
  const int64_t pages = table.shape[1];
  dynattn_ref::Tensors sub = full;
  std::vector<int64_t> seqstarts{0}, kvstarts{0}, start_pos, cachestarts;
  *got = Rows(out, 0, 0);
  for (const char* name : {"query", "current_key", "current_value"})
    sub[name] = Rows(full.at(name), 0, 0);
  int64_t decodes = 0;
  for (int64_t b : picked) {
    seqstarts.push_back(seqstarts.back() + qs[b + 1] - qs[b]);
    kvstarts.push_back(kvstarts.back() + ks[b + 1] - ks[b]);
    start_pos.push_back(full.at("start_pos").data<int64_t>()[b]);
    cachestarts.insert(cachestarts.end(), table.data<int64_t>() + b * pages,
                       table.data<int64_t>() + (b + 1) * pages);
    for (const char* name : {"query", "current_key", "current_value"}) {
      AppendRows(Rows(full.at(name), qs[b], qs[b + 1]), &sub[name]);
    }
    AppendRows(Rows(out, qs[b], qs[b + 1]), got);
    decodes += b < kDecodes ? 1 : 0;
  }
  const int64_t batch = static_cast<int64_t>(picked.size());
  sub["seqstarts"] = dynattn_ref::MakeI64({batch + 1}, seqstarts);
  sub["kvstarts"] = dynattn_ref::MakeI64({batch + 1}, kvstarts);
  sub["start_pos"] = dynattn_ref::MakeI64({batch}, start_pos);
  sub["cachestarts"] = dynattn_ref::MakeI64({batch, pages}, cachestarts);
  sub["decoding_batches"] = dynattn_ref::ScalarI64(decodes);
  return sub;
}

}  // namespace

CLI::App* AddDemoCommand(CLI::App* app) {
  return app->add_subcommand(
      "demo", "Run one serving step of a Llama-3-8B-like layer and check it against float64");
}

int RunDemoCommand() {
  std::mt19937_64 rng(20261122);
  const std::vector<Request> requests = DemoRequests(rng);
  const dynattn_ref::Tensors original = BuildStep(requests, rng);
  dynattn_ref::Tensors in = original;
  const Array& query = in.at("query");
  Array out = dynattn_ref::MakeArray(Dt::kF16, query.shape);
  std::printf("libdynattn demo: MultiHeadCacheAttention, one serving step on %s\n",
              CpuTargetName());
  std::printf(
      "  layer: %d query heads, %d KV heads, head_dim %d; int8 cache, groups of %d, fp16 "
      "scales, paged (page %d), layout 3\n",
      kHeads, kKvHeads, kDim, kGroup, kPage);
  std::printf(
      "  batch: %d decodes (contexts 512..8192) + 2 prefill chunks of %d tokens; %lld query "
      "tokens, %lld context tokens\n",
      kDecodes, kPrefillTokens, static_cast<long long>(query.shape[0]),
      static_cast<long long>(in.at("kvstarts").data<int64_t>()[requests.size()]));
  std::vector<double> times;
  for (int run = 0; run < 7; ++run) {
    const auto start = std::chrono::steady_clock::now();
    const Status status = RunStep(in, &out);
    times.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    if (!status.ok()) {
      std::fprintf(stderr, "dynattn: %s\n", status.message().c_str());
      return kExitFailure;
    }
  }
  std::sort(times.begin(), times.end());
  const double median = times[times.size() / 2];
  std::printf("  time: %.2f ms median of %zu runs (min %.2f ms); KV read %.1f MB -> %.1f GB/s\n",
              median * 1e3, times.size(), times.front() * 1e3, KvBytesRead(in) / 1e6,
              KvBytesRead(in) / median / 1e9);
  const std::vector<int> heads = {0, 5, 13, 22, 31};
  const std::vector<int64_t> picked = {0, 11, 23, kDecodes, kDecodes + 1};
  std::printf(
      "  check: requests 0, 11, 23 (decode) and both prefill chunks, heads 0, 5, 13, 22, 31, "
      "against the float64 reference ... ");
  std::fflush(stdout);
  Array got;
  const dynattn_ref::Tensors sub = SubStep(original, picked, out, &got);
  const dynattn_ref::AttnResult ref =
      dynattn_ref::MultiHeadCacheAttention(ReferenceAttrs(), sub, heads);
  double worst = 0;
  const std::string error = dynattn_ref::CheckAttention(ref, got, &worst);
  if (!error.empty()) {
    std::printf("FAILED\n    %s\n", error.c_str());
    return kExitFailure;
  }
  std::printf("pass (worst error %.2f of the spec's fp16 bound)\n", worst);
  return kExitOk;
}

}  // namespace dynattn::cli
