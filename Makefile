# Thin wrapper over CMake. `make test` and `make demo` set up everything on a fresh Debian 12.
JOBS      ?= $(shell nproc)
# pytest workers: one per core, at most 4 (each holds a JAX runtime and loads of up to 1 GB)
PYTEST_JOBS ?= $(shell n=$$(nproc); echo $$(( n < 4 ? n : 4 )))
BUILD     ?= build
ASAN      ?= build-asan
FUZZB     ?= build-fuzz
CMAKE_ARGS ?=
FUZZ_SECONDS ?= 60
PREFIX    ?= /usr/local

.PHONY: all deps install test test-release test-python test-asan demo fuzz bench clean

all: deps
	cmake -S . -B $(BUILD) -DSL_WERROR=ON $(CMAKE_ARGS) >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

deps:
	@scripts/deps.sh build

# libshardload.so.0 and .a, the CLI, the header, shardload.pc and the CMake package into PREFIX
# (DESTDIR is honoured); then `pkg-config --cflags --libs shardload` with PKG_CONFIG_PATH=PREFIX/lib/pkgconfig.
install: all
	cmake --install $(BUILD) --prefix $(abspath $(PREFIX))

# Release build tests, the Python package's tests (pytest in .venv), then every unit test and the
# fuzz corpus replay again under ASan+UBSan.
test:
	@scripts/deps.sh test
	@scripts/pyenv.sh   # first: ctest's cli_pjrt_real finds XLA's CPU PJRT plugin in .venv
	$(MAKE) --no-print-directory test-release test-python test-asan

test-release: all
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The package is built from this tree into .venv (scripts/pyenv.sh); the tests cross-check it with
# the CLI and the CUDA stand-in of the same tree's build.
test-python: all
	scripts/pyenv.sh
	SL_CLI=$(abspath $(BUILD))/shardload SL_FAKE_CUDART=$(abspath $(BUILD))/tests/libfake_cudart.so \
	  XLA_FLAGS=--xla_force_host_platform_device_count=8 \
	  .venv/bin/python -m pytest -q -p no:cacheprovider -n $(PYTEST_JOBS) tests/python

# -O1, as AddressSanitizer's documentation advises for speed: the unit tests ran in 189 s here
# against 295 s at -O0, every check still on.
test-asan:
	CC=clang cmake -S . -B $(ASAN) -DSL_WERROR=ON -DSL_SANITIZE=address,undefined \
	  -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_C_FLAGS_DEBUG=-g -O1" $(CMAKE_ARGS) >/dev/null
	cmake --build $(ASAN) -j $(JOBS)
	cd $(ASAN) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure -j $(JOBS) -E '^oracle_'

demo: all
	$(BUILD)/shardload demo

# Real libFuzzer runs (FUZZ_SECONDS each), seeded with fuzz/corpus/<target>; the inputs they find
# go to $(FUZZB)/corpus/<target>, not into the committed corpus (the replay tests read it whole:
# add an input there by hand when it reaches new code or once crashed); crash, timeout and
# slow-unit files to $(FUZZB)/artifacts/<target>/ (libFuzzer's default is the current directory).
fuzz:
	@scripts/deps.sh test
	CC=clang cmake -S . -B $(FUZZB) -DSL_BUILD_FUZZ=ON -DSL_SANITIZE=address,undefined \
	  -DCMAKE_C_FLAGS=-fsanitize=fuzzer-no-link >/dev/null
	cmake --build $(FUZZB) -j $(JOBS)
	for t in $$(cd fuzz && ls fuzz_*.c | sed 's/\.c$$//'); do \
	  mkdir -p $(FUZZB)/corpus/$$t $(FUZZB)/artifacts/$$t && \
	  $(FUZZB)/fuzz/$$t -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -timeout=60 \
	    -artifact_prefix=$(FUZZB)/artifacts/$$t/ $(FUZZB)/corpus/$$t fuzz/corpus/$$t || exit 1; \
	done

bench: all
	@scripts/deps.sh bench
	bash bench/run.sh

clean:
	rm -rf $(BUILD) $(ASAN) $(FUZZB) .venv
