#!/usr/bin/env bash
# test_train_device.sh — train.device through the lstmd binary.
# Without a usable GPU (CI): auto trains on the CPU and says why in exactly one line (one rank
# and two under mpirun), cuda exits 2 naming the reason (one line under mpirun too), and
# --version says what is compiled in.
# With a GPU: auto and cuda train on it in fp32, tf32, bf16 and fp16 (metrics.jsonl carries the
# loss scale), and a GPU checkpoint resumes on the CPU and a CPU one on the GPU. Either way,
# model.layer_norm with cuda in bf16 or with dropout exits 2 naming the key (its GPU path is fp32
# without dropout) and with auto trains on the CPU.
set -u
LSTMD=$(realpath "${1:?usage: test_train_device.sh LSTMD_BINARY SOURCE_DIR [MPIEXEC]}")
SRC=$(realpath "${2:?}")
MPIEXEC=${3:-mpirun}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fails=0
ok() { echo "ok    $*"; }
bad() { echo "FAIL  $*"; fails=$((fails + 1)); }

head -c 60000 "$SRC/data/fortunes.txt" > "$TMP/small.txt"
"$LSTMD" prepare text --input "$TMP/small.txt" --out "$TMP/ds" 2>/dev/null || bad "prepare text"
common=(--set data.path="$TMP/ds" --set data.seq_len=16 --set data.batch_size=4
        --set model.embed=8 --set model.hidden=16 --set model.layers=2 --set train.steps=4
        --set train.log_every=1 --set train.eval_every=0 --set train.threads=1)

"$LSTMD" --version > "$TMP/version" || bad "--version exits 0"
grep -q "^compiled in: CUDA \(yes\|no\), cuDNN \(yes\|no\), NCCL \(yes\|no\)$" "$TMP/version" \
  && ok "--version: $(grep '^compiled in' "$TMP/version")" || bad "--version lacks the compiled-in line"

(cd "$TMP" && "$LSTMD" train "${common[@]}" --set train.run_dir=auto 2> auto.log >/dev/null)
rc=$?
[ $rc -eq 0 ] && ok "train.device=auto (the default) trains" || { bad "auto exited $rc"; cat "$TMP/auto.log"; }
n_auto=$(grep -c "device auto:" "$TMP/auto.log")
if [ "$n_auto" -gt 0 ]; then # no usable GPU here
  [ "$n_auto" -eq 1 ] && grep -q "device auto: .*; using the CPU backend$" "$TMP/auto.log" \
    && ok "auto without a GPU: one line: $(grep 'device auto:' "$TMP/auto.log")" \
    || bad "auto without a GPU: expected exactly one 'device auto: ...; using the CPU backend' line"
  grep -q "compute: CPU" "$TMP/auto.log" && ok "auto without a GPU: the CPU backend ran" || bad "no CPU compute line"
  (cd "$TMP" && "$LSTMD" train "${common[@]}" --set train.device=cuda --set train.run_dir=cuda 2> cuda.log >/dev/null)
  rc=$?
  [ $rc -eq 2 ] && grep -q "train.device=cuda, but" "$TMP/cuda.log" \
    && ok "train.device=cuda without a GPU: exit 2: $(grep 'train.device=cuda' "$TMP/cuda.log")" \
    || { bad "train.device=cuda without a GPU: exit $rc (want 2)"; cat "$TMP/cuda.log"; }
  [ ! -e "$TMP/cuda/latest.safetensors" ] && ok "  ... and wrote nothing" || bad "cuda run wrote a checkpoint"
  (cd "$TMP" && "$LSTMD" train "${common[@]}" --device cuda --set train.run_dir=cuda2 2>/dev/null >/dev/null)
  rc=$?
  [ $rc -eq 2 ] && ok "--device cuda without a GPU: exit 2" || bad "--device cuda: exit $rc (want 2)"
  if command -v "$MPIEXEC" >/dev/null; then
    (cd "$TMP" && "$MPIEXEC" -np 2 "$LSTMD" train "${common[@]}" --set train.run_dir=mpi 2> mpi.log >/dev/null)
    rc=$?
    [ $rc -eq 0 ] && [ "$(grep -c 'device auto:' "$TMP/mpi.log")" -eq 1 ] \
      && ok "auto under mpirun -np 2: trains, one line (rank 0)" \
      || { bad "auto under mpirun: exit $rc, $(grep -c 'device auto:' "$TMP/mpi.log") lines"; cat "$TMP/mpi.log"; }
    (cd "$TMP" && "$MPIEXEC" -np 2 "$LSTMD" train "${common[@]}" --set train.device=cuda --set train.run_dir=mpic 2> mpic.log >/dev/null)
    rc=$?
    # one line, not one per rank ("lstmd: rank 1 (vm): train.device=cuda, but ..." from each)
    n_cuda=$(grep -c 'train.device=cuda, but' "$TMP/mpic.log")
    [ $rc -eq 2 ] && [ "$n_cuda" -eq 1 ] && ok "cuda under mpirun -np 2 without a GPU: exit 2, one line" ||
      bad "cuda under mpirun: exit $rc (want 2), $n_cuda 'train.device=cuda, but' lines (want 1)"
  fi
else # a GPU: train on it in every precision, and move checkpoints between the backends
  grep -q "compute: .*GPU" "$TMP/auto.log" && ok "auto with a GPU: $(grep 'compute:' "$TMP/auto.log")" \
    || { bad "auto with a GPU did not use it"; cat "$TMP/auto.log"; }
  for p in fp32 tf32 bf16 fp16; do
    (cd "$TMP" && "$LSTMD" train "${common[@]}" --set train.device=cuda --set train.precision=$p \
       --set train.run_dir=gpu_$p 2> gpu_$p.log >/dev/null)
    rc=$?
    [ $rc -eq 0 ] && [ -s "$TMP/gpu_$p/latest.safetensors" ] && ok "cuda $p: trains, checkpoint written" \
      || { bad "cuda $p: exit $rc"; cat "$TMP/gpu_$p.log"; }
  done
  grep -q '"loss_scale":' "$TMP/gpu_fp16/metrics.jsonl" && ok "fp16: loss_scale in metrics.jsonl" \
    || bad "fp16: no loss_scale in metrics.jsonl"
  (cd "$TMP" && "$LSTMD" train "${common[@]}" --set train.device=cpu --set train.steps=8 \
     --set train.run_dir=gpu_fp32 --resume 2> resume_cpu.log >/dev/null) \
    && grep -q "resumed from" "$TMP/resume_cpu.log" && ok "a GPU checkpoint resumes on the CPU" \
    || { bad "GPU checkpoint did not resume on the CPU"; cat "$TMP/resume_cpu.log"; }
  (cd "$TMP" && "$LSTMD" train "${common[@]}" --set train.device=cuda --set train.steps=12 \
     --set train.run_dir=gpu_fp32 --resume 2> resume_gpu.log >/dev/null) \
    && grep -q "resumed from" "$TMP/resume_gpu.log" && ok "a CPU checkpoint resumes on the GPU" \
    || { bad "CPU checkpoint did not resume on the GPU"; cat "$TMP/resume_gpu.log"; }
fi
# model.layer_norm's GPU path is fp32/tf32 without dropout (with or without a GPU): bf16 or dropout
# with cuda is refused before any device is touched, exit 2 naming the key; auto trains on the CPU.
for extra in "train.precision=bf16" "model.dropout=0.1"; do
  (cd "$TMP" && "$LSTMD" train "${common[@]}" --set model.layer_norm=true --set train.device=cuda \
     --set "$extra" --set train.run_dir=ln_cuda 2> ln_cuda.log >/dev/null)
  rc=$?
  [ $rc -eq 2 ] && grep -q "^lstmd: model.layer_norm: the layer-normalised LSTM on the GPU .*(train.device=cuda)$" "$TMP/ln_cuda.log" \
    && [ ! -e "$TMP/ln_cuda/latest.safetensors" ] \
    && ok "layer_norm and $extra with train.device=cuda: exit 2, nothing written: $(grep '^lstmd: model.layer_norm' "$TMP/ln_cuda.log")" \
    || { bad "layer_norm and $extra with train.device=cuda: exit $rc (want 2 naming model.layer_norm)"; cat "$TMP/ln_cuda.log"; }
done
# auto with dropout (which the GPU path lacks) trains on the CPU: with a GPU it says why
(cd "$TMP" && "$LSTMD" train "${common[@]}" --set model.layer_norm=true --set model.dropout=0.1 \
   --set train.run_dir=ln_auto 2> ln_auto.log >/dev/null)
rc=$?
[ $rc -eq 0 ] && grep -q "compute: CPU" "$TMP/ln_auto.log" && [ -s "$TMP/ln_auto/latest.safetensors" ] \
  && { [ "$n_auto" -gt 0 ] || grep -q "device auto: model.layer_norm on the GPU .*; using the CPU backend" "$TMP/ln_auto.log"; } \
  && ok "layer_norm and dropout with train.device=auto: trains on the CPU" \
  || { bad "layer_norm and dropout with auto: exit $rc"; cat "$TMP/ln_auto.log"; }
if [ "$n_auto" -eq 0 ]; then # a GPU: fp32 without dropout trains there (kernels/cuda/lstm_ln_cuda.cu)
  (cd "$TMP" && "$LSTMD" train "${common[@]}" --set model.layer_norm=true --set train.device=cuda \
     --set train.run_dir=ln_gpu 2> ln_gpu.log >/dev/null)
  rc=$?
  [ $rc -eq 0 ] && grep -q "compute: .*layer-normalised" "$TMP/ln_gpu.log" \
    && ok "layer_norm with train.device=cuda (fp32): $(grep 'compute:' "$TMP/ln_gpu.log")" \
    || { bad "layer_norm with train.device=cuda: exit $rc"; cat "$TMP/ln_gpu.log"; }
fi
echo "test_train_device: $fails failure(s)"
[ $fails -eq 0 ]
