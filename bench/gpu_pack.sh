#!/usr/bin/env bash
# gpu_pack.sh — on the build machine: packs into .runtime/ (git-ignored) what a bare GPU machine
# needs to run lstmd's GPU checks and benchmarks with bench/gpu_run.sh, so that the first GPU
# run is one command. The GPU machine of this workplace has the NVIDIA driver, nvcc, CMake and
# PyTorch (with NVIDIA's cuDNN/NCCL/cuBLAS wheels) but no MPI, libuv, protobuf-c, inih, jansson,
# ISA-L or libcsv, and no package registry; so the binaries are built here and their runtime
# travels with them:
#
#   .runtime/bin/          lstmd, lstmctl, the GPU module liblstmd_gpu.so beside lstmd (where
#                          lstmd looks for it) and test_gpu_logic, of $BUILD (built here with
#                          the CUDA backend, sm_80 and sm_90)
#   .runtime/runtime.tar.xz  ../shared/tools/runtime-bundle.sh's relocatable Open MPI, libuv,
#                          protobuf-c and OpenBLAS, plus inih, jansson, ISA-L and libcsv (the
#                          rest of lstmd's non-CUDA libraries); CUDA's own libraries are not
#                          packed: gpu_run.sh takes the GPU machine's
#   .runtime/PACKED        what was packed, from which commit
#
#   bench/gpu_pack.sh                 (BUILD=build, RUNTIME_BUNDLE=../shared/tools/runtime-bundle.sh)
#   then, with the device tool:  run  command="bench/gpu_run.sh checks"  carry=[".runtime"]
#                                run  command="bench/gpu_run.sh bench"   carry=[".runtime"]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
BUNDLER=${RUNTIME_BUNDLE:-$ROOT/../shared/tools/runtime-bundle.sh}
DEST=$ROOT/.runtime
BINS=(lstmd lstmctl liblstmd_gpu.so tests/test_gpu_logic)
# lstmd's libraries that the runtime bundle does not hold (Debian 12 packages)
EXTRA_PKGS=(libinih1 libjansson4 libisal2 libcsv3)

[[ -x "$BUNDLER" ]] || { echo "gpu_pack.sh: $BUNDLER not found (set RUNTIME_BUNDLE)" >&2; exit 2; }
cmake --build "$BUILD" -j "$(nproc)" >/dev/null
for b in "${BINS[@]}"; do
  [[ -x "$BUILD/$b" ]] || { echo "gpu_pack.sh: $BUILD/$b missing: is the CUDA backend built?" >&2; exit 2; }
done

rm -rf "$DEST"
mkdir -p "$DEST/bin"
for b in "${BINS[@]}"; do cp "$BUILD/$b" "$DEST/bin/"; done
WORK=$(mktemp -d "${TMPDIR:-/tmp}/lstmd-gpu-pack.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
"$BUNDLER" "$WORK/rt" >"$WORK/bundle.log" 2>&1 || { tail -20 "$WORK/bundle.log"; exit 1; }
(cd "$WORK" && apt-get download "${EXTRA_PKGS[@]}" >/dev/null)
for p in "${EXTRA_PKGS[@]}"; do dpkg-deb -x "$(ls "$WORK"/"${p}"_*.deb | head -1)" "$WORK/rt/root"; done
rm -rf "$WORK/rt/root/usr/share/doc"

# Every library lstmd and the tests need, but CUDA's, must now be in the bundle or the base
# system every glibc host has: checked here, not found out on the GPU machine.
base='^(libc|libm|libdl|libpthread|librt|libutil|libresolv|ld-linux-x86-64|libgcc_s|libstdc\+\+|libz)\.so'
cuda='^lib(cuda|cudart|cudnn|cublas|cublasLt|nccl)'
missing=0
for b in "$DEST"/bin/*; do
  while read -r so; do
    [[ $so =~ $base || $so =~ $cuda ]] && continue
    if [[ -z $(find "$WORK/rt/root" -name "$so" -print -quit) ]]; then
      echo "gpu_pack.sh: $(basename "$b") needs $so, which the bundle lacks" >&2
      missing=1
    fi
  done < <(readelf -d "$b" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p')
done
[[ $missing -eq 0 ]] || exit 1
tar -cJf "$DEST/runtime.tar.xz" -C "$WORK/rt" env.sh root
{
  echo "packed $(date -u '+%F %T UTC') on $(hostname) from commit $(git -C "$ROOT" rev-parse --short HEAD)"
  "$DEST/bin/lstmd" --version
} >"$DEST/PACKED"
du -sh "$DEST" | sed 's/^/gpu_pack.sh: /'
echo "gpu_pack.sh: now run bench/gpu_run.sh on the GPU machine with .runtime carried"
