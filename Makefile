# libdynattn: the two commands of the README, and their parts.
#   make demo   installs what is missing, builds, runs one realistic serving step, then a model
#               serving requests with continuous batching on the library (examples/serve/)
#   make test   installs what is missing, builds, and runs every test suite
BUILD ?= build
SANITIZE_BUILD ?= build-sanitize
FUZZ_SECONDS ?= 90

# The CUDA module (meson option `cuda`, 'auto') is built whenever nvcc is found; the toolkit's
# default location counts even when it is not in PATH.
ifneq ($(wildcard /usr/local/cuda/bin/nvcc),)
export PATH := /usr/local/cuda/bin:$(PATH)
endif

.PHONY: setup build demo test sanitize-setup test-sanitize fuzz bench format clean

setup:
	@bash scripts/setup.sh

build: setup
	@[ -f $(BUILD)/build.ninja ] || meson setup $(BUILD) --buildtype=release
	ninja -C $(BUILD)

# Debian's interpreter: it has the packages setup.sh installs (a pyenv python3 in PATH may not).
PYTHON ?= /usr/bin/python3

demo: build
	./$(BUILD)/tools/dynattn demo
	PYTHONPATH=$(BUILD)/bindings/python $(PYTHON) examples/serve/serve.py --backend dynattn --check

test: build
	bash scripts/run_tests.sh $(BUILD)

# Serving steps timed against this machine's measured bandwidth and FMA peak and against composed
# oneDNN and Eigen baselines, all in one run (under 5 minutes on 2 cores); results also as JSON.
bench: build
	./$(BUILD)/tools/dynattn bench --json $(BUILD)/bench.json

# The same suites under AddressSanitizer and UndefinedBehaviorSanitizer (CI runs it too), at -O1
# with line tables only. NDEBUG stays defined, as in the release build (meson's b_ndebug=if-release
# with debug off): the unified plan's coverage proof, which debug builds run on every call, is run
# by its own tests (plan, unified_steps) instead. Its kernels are compiled for AVX2 only
# (-march=haswell -maes -mpclmul makes AVX2 Highway's baseline, so its emulated EMU128 fallback,
# which costs about ten times a native target to compile under the sanitizers, is left out; with
# AVX-512 too, this phase took 1124 s of CI's 40 minutes on 2 cores); the release build runs every
# suite on every target, AVX-512, EMU128 and SSE4 included, and the sanitizers see all
# target-independent code through the AVX2 kernels. This build is clang's (about half g++'s
# compile time under the sanitizers). It leaves the nvcc build of the CUDA module out (nvcc takes no sanitizer
# flags, and ASan's shadow memory collides with the CUDA driver's mappings), but the gpu suite runs
# here too: on the CUDA emulator, the kernels compiled by clang under ASan + UBSan. The tests' and
# the tool's own code is not instrumented (tests/meson.build, tools/meson.build): the buffers they
# hand the library come from ASan's allocator all the same. In the kernels (cpu/), UBSan skips the
# checks ASan covers there (cpu/ubsan_ignorelist.txt).
# The benchmark (bench/: oneDNN and Eigen baselines, test scaffolding rather than the library) is
# left out too; the release build runs its suite.
# The same build holds the libFuzzer target (-Dfuzz=enabled: the library, but its SIMD kernels, and
# the harness carry coverage instrumentation), so `make fuzz` compiles no library of its own: a
# separate fuzz build compiled the kernels under ASan + UBSan a second time in CI.
SANITIZE_TARGETS_OFF := HWY_SSSE3|HWY_SSE4|HWY_AVX3|HWY_AVX3_DL|HWY_EMU128|HWY_SCALAR

sanitize-setup: setup
	@[ -f $(SANITIZE_BUILD)/build.ninja ] || CC=clang CXX=clang++ meson setup $(SANITIZE_BUILD) \
	  -Dcuda=disabled --buildtype=plain -Doptimization=1 \
	  -Dcpp_args='-g1 -march=haswell -maes -mpclmul' \
	  -Db_sanitize=address,undefined -Db_lundef=false -Dpython=disabled -Dbench=disabled -Dfuzz=enabled \
	  -Dsimd_disabled_targets='$(SANITIZE_TARGETS_OFF)'
	@grep -q op_fuzzer $(SANITIZE_BUILD)/build.ninja || meson configure $(SANITIZE_BUILD) -Dfuzz=enabled

test-sanitize: sanitize-setup
	ninja -C $(SANITIZE_BUILD)
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  bash scripts/run_tests.sh $(SANITIZE_BUILD)

# The libFuzzer target (fuzz/) under ASan + UBSan for FUZZ_SECONDS, seeded with the golden cases
# of the release build (CI runs it for 60 s). Clang only; it lives in the sanitizer build above.
fuzz: build sanitize-setup
	ninja -C $(SANITIZE_BUILD) fuzz/op_fuzzer
	bash scripts/fuzz.sh $(BUILD) $(SANITIZE_BUILD) $(FUZZ_SECONDS)

format:
	clang-format -i $$(git ls-files '*.h' '*.cc')

clean:
	rm -rf $(BUILD) $(SANITIZE_BUILD)
