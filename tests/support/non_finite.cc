// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0

#include "tests/support/non_finite.h"

#include <limits>
#include <random>
#include <string>
#include <vector>

namespace dynattn_test {
namespace {

using dynattn_ref::Array;
using dynattn_ref::Case;

/// Flat index of a mask entry that request b's query row i reads for its key j, in head h.
int64_t MaskEntry(const Array& mask, const Case& c, std::mt19937_64& rng) {
  const Array& seqstarts = c.inputs.at("seqstarts");
  const Array& kvstarts = c.inputs.at("kvstarts");
  const int64_t requests = seqstarts.numel() - 1;
  for (int tries = 0; tries < 16; ++tries) {
    const int64_t b = static_cast<int64_t>(rng() % requests);
    const int64_t row0 = seqstarts.data<int64_t>()[b],
                  rows = seqstarts.data<int64_t>()[b + 1] - row0;
    const int64_t col0 = kvstarts.data<int64_t>()[b], cols = kvstarts.data<int64_t>()[b + 1] - col0;
    if (rows == 0 || cols == 0) continue;
    const int64_t row = row0 + static_cast<int64_t>(rng() % rows);
    const int64_t col = col0 + static_cast<int64_t>(rng() % cols);
    const int64_t width = mask.shape.back();
    const int64_t plane = mask.shape.size() == 3 ? static_cast<int64_t>(rng() % mask.shape[0]) : 0;
    return (plane * mask.shape[mask.shape.size() - 2] + row) * width + col;
  }
  return -1;
}

}  // namespace

std::string PlantNonFinite(uint64_t seed, Case* c) {
  std::mt19937_64 rng(seed);
  c->attrs.non_finite = true;
  const double inf = std::numeric_limits<double>::infinity();
  const double values[] = {std::numeric_limits<double>::quiet_NaN(), inf, -inf};
  const bool quantized = c->inputs.count("cache") != 0 && c->attrs.quant_bit != 0;
  std::vector<std::string> keys = {"query"};
  for (const char* name : {"key", "value", "attn_mask", "current_key", "current_value"}) {
    const auto it = c->inputs.find(name);
    if (it == c->inputs.end() || it->second.numel() == 0) continue;
    if (quantized && std::string(name).rfind("current_", 0) == 0) continue;
    keys.push_back(name);
  }
  std::string planted;
  const int count = 1 + static_cast<int>(rng() % 3);
  for (int k = 0; k < count; ++k) {
    const std::string& name = keys[rng() % keys.size()];
    Array& array = c->inputs.at(name);
    if (array.numel() == 0) continue;
    const bool is_value = name == "value" || name == "current_value";
    const double x = is_value ? values[0] : values[rng() % 3];
    const int64_t at = name == "attn_mask" ? MaskEntry(array, *c, rng)
                                           : static_cast<int64_t>(rng() % array.numel());
    if (at < 0) continue;
    dynattn_ref::StoreRounded(&array, at, x);
    planted += " " + name + "[" + std::to_string(at) + "]=" + std::to_string(x);
  }
  return "planted:" + planted;
}

}  // namespace dynattn_test
