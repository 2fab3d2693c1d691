# Makefile — thin wrapper over CMake: `make` checks the build's Debian packages (installing the
# missing ones as root, else printing the apt-get command) and builds into build/; `make test`
# does the same for the test packages too, then runs ctest (`make test-asan`: under ASan + UBSan,
# in build-asan/); `make demo` trains a small char-LM
# on the bundled corpus; `make bench` runs bench/*.sh (bench_infer.sh: int8 inference; `make
# bench-serve`: the daemon's only; bench_onnx.sh: onnxruntime on the exported model beside
# lstmd; bench_compress.sh: pruning and distillation); `make dist` writes the relocatable release,
# dist/lstmd-<version>-linux-x86_64.tar.gz.
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: all build-deps deps dist-deps configure test test-asan demo bench bench-serve dist clean

all: build-deps configure
	cmake --build $(BUILD) -j $(JOBS)

build-deps:
	@deploy/install-deps.sh build

deps:
	@deploy/install-deps.sh all

dist-deps:
	@deploy/install-deps.sh dist

configure:
	@test -f $(BUILD)/CMakeCache.txt || cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release

test: deps all
	cd $(BUILD) && ctest --output-on-failure -j 2

# Every C source under ASan + UBSan in $(ASAN_BUILD), then the tests but the 10-minute demo run
# (about 15 minutes on 2 cores). Any sanitizer report fails it, also one from an lstmd that a
# test expected to fail: each process writes its report under $(ASAN_BUILD)/sanitizer-logs.
# detect_leaks=0: Open MPI and OpenBLAS keep allocations to exit; verify_asan_link_order=0:
# test_server_faults preloads its libuv fault shim.
ASAN_BUILD ?= build-asan
ASAN_LOGS = $(abspath $(ASAN_BUILD))/sanitizer-logs
test-asan: deps
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLSTMD_SANITIZE=ON >/dev/null
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	rm -rf $(ASAN_LOGS) && mkdir -p $(ASAN_LOGS)
	cd $(ASAN_BUILD) && \
	  ASAN_OPTIONS=detect_leaks=0:verify_asan_link_order=0:log_path=$(ASAN_LOGS)/asan \
	  UBSAN_OPTIONS=print_stacktrace=1:log_path=$(ASAN_LOGS)/ubsan \
	  ctest --output-on-failure -j 2 -E '^test_demo_convergence$$'; rc=$$?; \
	if [ -n "$$(ls -A $(ASAN_LOGS))" ]; then head -n 40 $(ASAN_LOGS)/*; \
	  echo "make test-asan: sanitizer reports in $(ASAN_LOGS)"; rc=1; fi; exit $$rc

demo: deps all
	deploy/demo.sh $(BUILD)/lstmd

bench: deps all
	SWEEP=1 bench/bench_cpu.sh $(BUILD)/lstmd
	bench/bench_scaling.sh $(BUILD)/lstmd
	bench/bench_pipeline.sh $(BUILD)/lstmd $(BUILD)/pipe_predict
	bench/bench_serve.sh $(BUILD)/lstmd
	bench/bench_infer.sh $(BUILD)/lstmd
	bench/bench_onnx.sh $(BUILD)/lstmd
	bench/bench_compress.sh $(BUILD)/lstmd

bench-serve: deps all
	bench/bench_serve.sh $(BUILD)/lstmd

# (re-running cmake gives a build folder configured before the dist target existed its rule)
dist: dist-deps configure
	@cmake -S . -B $(BUILD) >/dev/null
	cmake --build $(BUILD) --target dist -j $(JOBS)

clean:
	rm -rf $(BUILD)
