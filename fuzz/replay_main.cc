// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// `fuzz_replay FILE_OR_DIR...`: runs fuzz inputs through the same harness without libFuzzer, so
// that any compiler's build (and the test suite) replays a corpus or a crash file. Prints how
// many inputs ran, were accepted, refused or skipped; aborts on the first broken contract.

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz/harness.h"

namespace fs = std::filesystem;

namespace {

void RunFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
  dynattn_fuzz::RunOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: fuzz_replay FILE_OR_DIR...\n");
    return 2;
  }
  for (int i = 1; i < argc; ++i) {
    const fs::path path(argv[i]);
    if (!fs::is_directory(path)) {
      RunFile(path);
      continue;
    }
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(path)) files.push_back(entry.path());
    std::sort(files.begin(), files.end());
    for (const fs::path& file : files) RunFile(file);
  }
  const dynattn_fuzz::Totals& t = dynattn_fuzz::RunTotals();
  std::printf("%lld inputs: %lld accepted and run, %lld refused, %lld skipped (over the caps)\n",
              static_cast<long long>(t.inputs), static_cast<long long>(t.accepted),
              static_cast<long long>(t.refused), static_cast<long long>(t.skipped));
  return t.inputs > 0 ? 0 : 1;
}
