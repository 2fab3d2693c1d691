#!/usr/bin/env bash
# test_gpu_module.sh — the GPU backend as a module loaded at run time (worker/engine/gpu_backend.h),
# on a machine with the CUDA libraries and no GPU (CI): lstmd links none of them; --version loads
# the module (an undefined symbol, i.e. a function of lstmd the executable does not export, would
# fail here); LSTMD_CUDA_LIBS and a Python environment's nvidia/*/lib folders are searched before
# the system's copies; a missing module leaves the CPU backend with one line saying why, and an
# explicit cuda exits naming it. 77 where lstmd was built without the GPU backend.
set -u
LSTMD=$(realpath "${1:?usage: test_gpu_module.sh LSTMD_BINARY SOURCE_DIR}")
SRC=$(realpath "${2:?}")
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fails=0
ok() { echo "ok    $*"; }
bad() { echo "FAIL  $*"; fails=$((fails + 1)); }

"$LSTMD" --version > "$TMP/version" 2>&1
if ! grep -q "^compiled in: CUDA yes" "$TMP/version"; then
  echo "test_gpu_module: lstmd was built without the GPU backend: skipped"
  exit 77
fi
if ldd "$LSTMD" | grep -E "libcud|libnccl|libcublas"; then bad "lstmd links a CUDA library"
else ok "lstmd links no CUDA library (ldd)"; fi
grep -q "^GPU library: module .*/liblstmd_gpu.so$" "$TMP/version" \
  && grep -q "^GPU runtime: CUDA runtime" "$TMP/version" \
  && ok "--version loaded $(grep -o '/[^ ]*liblstmd_gpu.so' "$TMP/version")" \
  || { bad "--version did not load the module"; cat "$TMP/version"; }

# The library folders lstmd found, then the same files through links in folders of our own.
cudnn=$(sed -n 's/^GPU library: cudnn *//p' "$TMP/version")
cudart=$(sed -n 's/^GPU library: cudart *//p' "$TMP/version")
mkdir -p "$TMP/first" "$TMP/venv/bin" "$TMP/venv/lib/python3.11/site-packages/nvidia/cudnn/lib"
ln -s "$cudart" "$TMP/first/$(basename "$cudart")"
: > "$TMP/venv/bin/python3" && chmod +x "$TMP/venv/bin/python3"
ln -s "$cudnn" "$TMP/venv/lib/python3.11/site-packages/nvidia/cudnn/lib/$(basename "$cudnn")"
LSTMD_CUDA_LIBS=$TMP/first "$LSTMD" --version > "$TMP/v1" 2>&1
grep -q "^GPU library: cudart *$TMP/first/" "$TMP/v1" && ok "LSTMD_CUDA_LIBS is searched first" \
  || { bad "LSTMD_CUDA_LIBS not used"; grep "GPU library" "$TMP/v1"; }
env -u LD_LIBRARY_PATH VIRTUAL_ENV=$TMP/venv "$LSTMD" --version > "$TMP/v2" 2>&1
grep -q "^GPU library: cudnn *$TMP/venv/lib/python3.11/site-packages/nvidia/cudnn/lib/" "$TMP/v2" \
  && ok "a virtual environment's nvidia/cudnn/lib is searched (VIRTUAL_ENV)" \
  || { bad "VIRTUAL_ENV's wheel folder not used"; grep "GPU library" "$TMP/v2"; }
env -u LD_LIBRARY_PATH -u VIRTUAL_ENV PATH="$TMP/venv/bin:$PATH" "$LSTMD" --version > "$TMP/v3" 2>&1
grep -q "^GPU library: cudnn *$TMP/venv/" "$TMP/v3" \
  && ok "the wheel folders of the first python3 on PATH are searched" \
  || { bad "python3 on PATH: its wheel folder not used"; grep "GPU library" "$TMP/v3"; }
# A file that is not a library in the first folder: skipped, the next copy loads.
: > "$TMP/first/$(basename "$cudnn")"
LSTMD_CUDA_LIBS=$TMP/first "$LSTMD" --version > "$TMP/v4" 2>&1
grep -q "^GPU library: cudnn *$cudnn" "$TMP/v4" && ok "an unloadable copy is passed over" \
  || { bad "an empty libcudnn stopped the search"; grep "GPU library\|GPU runtime" "$TMP/v4"; }

# No module: the CPU with one line saying why; cuda refused naming it; doctor says where it looked.
head -c 40000 "$SRC/data/fortunes.txt" > "$TMP/small.txt"
"$LSTMD" prepare text --input "$TMP/small.txt" --out "$TMP/ds" >/dev/null 2>&1 || bad "prepare text"
common=(--set data.path="$TMP/ds" --set data.seq_len=8 --set data.batch_size=2 --set model.embed=4
        --set model.hidden=8 --set model.layers=1 --set train.steps=2 --set train.log_every=1
        --set train.eval_every=0 --set train.threads=1)
(cd "$TMP" && LSTMD_GPU_MODULE=$TMP/none.so "$LSTMD" train "${common[@]}" --set train.run_dir=a \
   2> a.log > /dev/null)
rc=$?
lines=$(grep -c "GPU backend not loaded: the GPU module liblstmd_gpu.so is not found" "$TMP/a.log")
[[ $rc -eq 0 && $lines -eq 1 ]] && ok "no module: trains on the CPU, one line: $(grep -o 'device auto.*not found' "$TMP/a.log")" \
  || { bad "no module: rc $rc, $lines lines saying why"; cat "$TMP/a.log"; }
(cd "$TMP" && LSTMD_GPU_MODULE=$TMP/none.so "$LSTMD" train "${common[@]}" --set train.run_dir=b \
   --device cuda 2> b.log > /dev/null)
rc=$?
[[ $rc -eq 2 ]] && grep -q "liblstmd_gpu.so is not found" "$TMP/b.log" && ok "no module: --device cuda exits 2 naming it" \
  || { bad "no module, --device cuda: rc $rc"; cat "$TMP/b.log"; }
LSTMD_GPU_MODULE=$TMP/none.so "$LSTMD" doctor > "$TMP/doctor" 2>&1
rc=$?
[[ $rc -eq 0 ]] && grep -q "^gpu module *liblstmd_gpu.so: not found" "$TMP/doctor" \
  && grep -q "^searched " "$TMP/doctor" && ok "doctor without the module: exit 0, says where it looked" \
  || { bad "doctor without the module: rc $rc"; cat "$TMP/doctor"; }

echo "test_gpu_module: $fails failing checks"
[[ $fails -eq 0 ]]
