# Makefile — thin wrapper over CMake: `make` builds into build/, `make test` installs missing
# Debian packages, builds and runs ctest, `make demo` trains a small char-LM on the bundled corpus,
# `make bench` runs bench/*.sh (`make bench-serve`: only the control daemon's).
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: all deps configure test demo bench bench-serve clean

all: configure
	cmake --build $(BUILD) -j $(JOBS)

deps:
	deploy/install-deps.sh

configure:
	@test -f $(BUILD)/CMakeCache.txt || cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release

test: deps all
	cd $(BUILD) && ctest --output-on-failure -j 2

demo: deps all
	deploy/demo.sh $(BUILD)/lstmd

bench: deps all
	bench/bench_cpu.sh $(BUILD)/lstmd
	bench/bench_scaling.sh $(BUILD)/lstmd
	bench/bench_serve.sh $(BUILD)/lstmd

bench-serve: deps all
	bench/bench_serve.sh $(BUILD)/lstmd

clean:
	rm -rf $(BUILD)
