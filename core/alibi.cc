// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0

#include "core/alibi.h"

#include <cmath>

namespace dynattn::internal {

std::vector<float> AlibiSlopes(int num_heads) {
  std::vector<float> slopes(num_heads);
  int closest = 1;
  while (closest * 2 <= num_heads) closest *= 2;
  for (int h = 0; h < num_heads; ++h) {
    const double exponent =
        h < closest ? -8.0 * (h + 1) / closest : -4.0 * (2 * (h - closest) + 1) / closest;
    slopes[h] = static_cast<float>(std::exp2(exponent));
  }
  return slopes;
}

}  // namespace dynattn::internal
