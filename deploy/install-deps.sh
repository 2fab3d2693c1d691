#!/usr/bin/env bash
# install-deps.sh — installs the Debian packages lstmd builds and tests with, if any are missing.
# Idempotent: does nothing when everything is present. As root it runs apt-get; otherwise it
# prints the exact command to run and fails.
set -euo pipefail

packages=(
  cmake make gcc pkg-config
  libopenblas-dev   # CPU GEMM (OpenBLAS)
  libinih-dev       # INI config files
  libjansson-dev    # JSON: safetensors headers, checkpoint metadata
  libisal-dev       # CRC-32C (hardware-accelerated) for dataset checksums
  libcsv-dev        # CSV parsing for time series
  libopenmpi-dev openmpi-bin libuv1-dev libprotobuf-c-dev protobuf-c-compiler
  python3 python3-numpy python3-torch python3-venv  # references in tests, peer in benchmarks
  slurm-wlm slurmctld slurmd slurm-client munge  # the one-node Slurm cluster of tests/test_slurm.sh
)

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
  echo "lstmd: run as root:  apt-get update && ${cmd[*]}" >&2
  exit 1
fi
echo "lstmd: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
"${cmd[@]}" -qq >/dev/null
