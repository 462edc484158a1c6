// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Overflow-checked integer arithmetic: the one place where sizes, offsets and indices built from
// a caller's values are multiplied and added. Why: a product of extents or an offset sum that
// wraps is undefined behaviour in C++ and, worse, a small wrong number that passes the bounds
// checks after it. Every such computation goes through these helpers before the value is
// trusted; code that runs after validation works on values these checks have bounded.

#ifndef DYNATTN_CORE_CHECKED_MATH_H_
#define DYNATTN_CORE_CHECKED_MATH_H_

#include <cstdint>
#include <initializer_list>

namespace dynattn::internal {

/// `*out = a * b`; false (and `*out` unspecified) when the product does not fit in int64.
[[nodiscard]] inline bool CheckedMul(int64_t a, int64_t b, int64_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}

/// `*out = a + b`; false when the sum does not fit in int64.
[[nodiscard]] inline bool CheckedAdd(int64_t a, int64_t b, int64_t* out) {
  return !__builtin_add_overflow(a, b, out);
}

/// The product of `factors`; false when it (or a partial product) does not fit in int64.
[[nodiscard]] inline bool CheckedProduct(std::initializer_list<int64_t> factors, int64_t* out) {
  int64_t product = 1;
  for (int64_t f : factors) {
    if (!CheckedMul(product, f, &product)) return false;
  }
  *out = product;
  return true;
}

/// `a * b`, or INT64_MAX when it does not fit (for extents >= 0: a size that is too large is
/// refused as such, never wrapped into a small one).
inline int64_t SaturatingMul(int64_t a, int64_t b) {
  int64_t product = 0;
  return CheckedMul(a, b, &product) ? product : INT64_MAX;
}

/// The element count of `rank` extents, or -1 when an extent is negative or the product does not
/// fit. A zero extent gives 0 whatever the others are.
inline int64_t CheckedElementCount(const int64_t* shape, int rank) {
  int64_t count = 1;
  bool overflow = false;
  for (int i = 0; i < rank; ++i) {
    if (shape[i] < 0) return -1;
    if (shape[i] == 0) return 0;
    overflow = overflow || !CheckedMul(count, shape[i], &count);
  }
  return overflow ? -1 : count;
}

}  // namespace dynattn::internal

#endif  // DYNATTN_CORE_CHECKED_MATH_H_
