// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The shared library built with nvcc, on whatever machine runs it: a CPU call works, and a call
// on CUDA tensors either runs (a GPU is there) or returns kUnsupported saying that no CUDA
// driver or device is available, never a crash or a raw runtime error. The CUDA call has no
// elements, so it touches no memory on a machine with a GPU either. Public API only, linked
// against libdynattn.so as an engine links it.

#include <cstdio>
#include <cstring>
#include <vector>

#include "dynattn/dynattn.h"

using dynattn::Device;
using dynattn::DType;
using dynattn::TensorView;

namespace {

dynattn::Status Attention(Device device, int64_t tokens, std::vector<uint16_t>* buffer) {
  static int64_t starts[2], zero = 0, max_len;
  starts[0] = 0;
  starts[1] = tokens;
  max_len = tokens;
  buffer->assign(static_cast<size_t>(tokens * 2 * 8 * 4), 0x3C00);
  uint16_t* data = tokens > 0 ? buffer->data() : nullptr;
  const int64_t shape[] = {tokens, 2, 8};
  dynattn::MultiHeadAttentionArgs a;
  a.query = TensorView::Dense(data, DType::kF16, 3, shape, device);
  a.key = TensorView::Dense(data ? data + tokens * 16 : nullptr, DType::kF16, 3, shape, device);
  a.value = TensorView::Dense(data ? data + tokens * 32 : nullptr, DType::kF16, 3, shape, device);
  a.attn_output =
      TensorView::Dense(data ? data + tokens * 48 : nullptr, DType::kF16, 3, shape, device);
  a.seqstarts = TensorView::Dense(starts, DType::kI64, {2});
  a.kvstarts = TensorView::Dense(starts, DType::kI64, {2});
  a.decoding_batches = TensorView::Dense(&zero, DType::kI64, {});
  a.max_seqlen = TensorView::Dense(&max_len, DType::kI64, {});
  a.max_kvlen = TensorView::Dense(&max_len, DType::kI64, {});
  dynattn::AttentionAttrs attrs;
  attrs.num_heads = 2;
  attrs.head_dim = 8;
  return dynattn::MultiHeadAttention(attrs, a);
}

}  // namespace

int main() {
  std::vector<uint16_t> host, device;
  const dynattn::Status cpu = Attention(Device::kCpu, 4, &host);
  if (!cpu.ok()) {
    std::printf("FAIL: the CPU call: %s\n", cpu.message().c_str());
    return 1;
  }
  const dynattn::Status cuda = Attention(Device::kCuda, 0, &device);
  std::printf("CPU call: ok; CUDA call: %s\n",
              cuda.ok() ? "ok (a GPU is here)" : cuda.message().c_str());
  if (cuda.ok()) return 0;
  if (cuda.code() != dynattn::StatusCode::kUnsupported ||
      std::strncmp(cuda.message().c_str(), "CUDA: no ", 9) != 0) {
    std::printf("FAIL: expected kUnsupported \"CUDA: no ... driver/device ...\"\n");
    return 1;
  }
  return 0;
}
