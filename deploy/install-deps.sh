#!/usr/bin/env bash
# install-deps.sh [build|dist|all] — installs the Debian packages lstmd needs, if any are missing:
# `build` those the build needs (what `make` checks), `dist` those and what `make dist` needs,
# `all` (the default) also those the tests and benchmarks use (what `make test` checks).
# Idempotent: does nothing when everything is present.
# As root it runs apt-get; otherwise it prints the exact command to run and fails, so a bare
# `make` on a fresh machine says how to get going instead of failing inside pkg-config.
set -euo pipefail

build=(
  cmake make gcc pkg-config
  libopenblas-dev   # CPU GEMM (OpenBLAS)
  libinih-dev       # INI config files
  libjansson-dev    # JSON: safetensors headers, checkpoint metadata
  libisal-dev       # CRC-32C (hardware-accelerated) for dataset checksums
  libcsv-dev        # CSV parsing for time series
  libopenmpi-dev openmpi-bin libuv1-dev libprotobuf-c-dev protobuf-c-compiler
)
dist=(
  patchelf          # $ORIGIN run paths in the release bundle (deploy/make_dist.sh)
)
tests=(
  python3 python3-numpy python3-torch python3-venv  # references in tests, peer in benchmarks
  time              # peak RSS per rank in bench/bench_pipeline.sh
  strace            # holds prepare text between its two passes (tests/test_bad_input.sh)
  clang             # the sanitizer and libFuzzer builds of the protocol tests
  slurm-wlm slurmctld slurmd slurm-client munge  # the one-node Slurm cluster of tests/test_slurm.sh
)
case ${1:-all} in
  build) packages=("${build[@]}") ;;
  dist) packages=("${build[@]}" "${dist[@]}") ;;
  all) packages=("${build[@]}" "${dist[@]}" "${tests[@]}") ;;  # tests/test_dist_bareroot runs make_dist
  *) echo "usage: install-deps.sh [build|dist|all]" >&2; exit 2 ;;
esac

if ! command -v dpkg-query >/dev/null; then
  echo "lstmd: not a Debian-like system (no dpkg-query): install the equivalents of" \
       "${packages[*]} with your package manager" >&2
  exit 1
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  exit 0
fi
cmd=(apt-get install -y --no-install-recommends "${missing[@]}")
if [[ $(id -u) -ne 0 ]]; then
  echo "lstmd: missing packages: ${missing[*]}" >&2
  echo "lstmd: install them as root with:  apt-get update && ${cmd[*]}" >&2
  exit 1
fi
echo "lstmd: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
"${cmd[@]}" -qq >/dev/null
