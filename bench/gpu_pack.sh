#!/usr/bin/env bash
# gpu_pack.sh — on the build machine: puts into .runtime/ (git-ignored) the release tarball of
# `make dist` (README "Release bundle": lstmd, lstmctl, the GPU module, Open MPI and every other
# non-CUDA library, relocatable), so that the first GPU run is one command on a machine that
# has the NVIDIA driver, nvcc and PyTorch (with NVIDIA's cuDNN/NCCL/cuBLAS wheels) but no MPI,
# libuv, protobuf-c, ... and no package registry. CUDA's own libraries are the GPU machine's:
# lstmd finds them itself (python3's nvidia/*/lib wheels, /usr/local/cuda).
#
#   .runtime/lstmd.tar.gz  the release (built here with the CUDA backend, sm_80 and sm_90)
#   .runtime/PACKED        what was packed, from which commit
#
#   bench/gpu_pack.sh                 (BUILD=build)
#   then, with the device tool:  run  command="bench/gpu_run.sh checks"  carry=[".runtime"]
#                                run  command="bench/gpu_run.sh bench"   carry=[".runtime"]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
DEST=$ROOT/.runtime

cmake --build "$BUILD" -j "$(nproc)" --target dist >/dev/null
[[ -f "$BUILD/liblstmd_gpu.so" ]] || { echo "gpu_pack.sh: $BUILD has no GPU module: is the CUDA backend built?" >&2; exit 2; }
version=$(sed -n 's/^lstmd \([0-9.]*\)$/\1/p' < <("$BUILD/lstmd" --version))
tarball=$ROOT/dist/lstmd-$version-linux-x86_64.tar.gz
tar -tzf "$tarball" | grep '/lib/lstmd/liblstmd_gpu.so$' >/dev/null || { echo "gpu_pack.sh: $tarball lacks the GPU module" >&2; exit 2; }
rm -rf "$DEST"
mkdir -p "$DEST"
cp "$tarball" "$DEST/lstmd.tar.gz"
{
  echo "packed $(date -u '+%F %T UTC') on $(hostname) from commit $(git -C "$ROOT" rev-parse --short HEAD)"
  "$BUILD/lstmd" --version
} >"$DEST/PACKED"
du -sh "$DEST" | sed 's/^/gpu_pack.sh: /'
echo "gpu_pack.sh: now run bench/gpu_run.sh on the GPU machine with .runtime carried"
