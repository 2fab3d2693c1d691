#!/usr/bin/env bash
# bench_gpu.sh LSTMD_BINARY — GPU training throughput of lstmd against PyTorch nn.LSTM (cuDNN)
# with AMP, on the same GPU in the same run, and lstmd's MFU against cuBLAS's bf16 GEMM rate.
#
#   BENCH_OUT=bench/results/gpu-h100-$(date -u +%F).txt bench/bench_gpu.sh build/lstmd
#
# Configs (char-LM on data/fortunes.txt, E=64, V from the data, bf16, AdamW, clip 1, one rank):
#   small  H1024 L2 T256 B128        large  H2048 L4 T128 B256
# For each: lstmd train --set train.device=cuda (steady-state tokens/s from metrics.jsonl, the
# first log interval left out; input-stall fraction = data_wait_s / step time), then
# bench/torch_lstm_gpu_peer.py on the same shape. MFU (large) = lstmd tokens/s × model FLOPs per
# token (3 × forward multiply-adds × 2, as lstmd counts them) / the cuBLAS bf16 GEMM rate that
# bench/gemm_rate_cuda.c measures first. Targets: lstmd/torch >= 1.3; MFU >= 0.40 (large).
#
# Environment: PYTHON_TORCH (python3 with PyTorch 2.11 + CUDA; default python3), STEPS (40),
# LOG_EVERY (10), NVCC (nvcc), PRECISION (bf16), BENCH_OUT (also write the output there),
# NSYS=1 (also record the large lstmd run with Nsight Systems, NVTX ranges on, if nsys exists).
set -euo pipefail
if [[ $# -ne 1 || "$1" == -h || "$1" == --help ]]; then
  sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'
  [[ $# -eq 1 ]] && exit 0 || exit 2
fi
LSTMD=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
BUILD=$(dirname "$LSTMD")
PYTHON_TORCH=${PYTHON_TORCH:-python3}
STEPS=${STEPS:-40}
LOG_EVERY=${LOG_EVERY:-10}
NVCC=${NVCC:-nvcc}
PRECISION=${PRECISION:-bf16}
E=64
TMP=$(mktemp -d "${TMPDIR:-/tmp}/lstmd-bench-gpu.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

# flops_per_token H L V: lstmd_model_flops_per_token (worker/model/model.c) for the text model.
flops_per_token() {
  awk -v H="$1" -v L="$2" -v V="$3" -v E="$E" 'BEGIN {
    f = 2 * V * H; for (k = 0; k < L; k++) f += 2 * 4 * H * ((k == 0 ? E : H) + H); printf "%.0f", 3 * f }'
}

# steady_metrics FILE: "tokens_per_s stall_fraction" averaged over the log records after the first.
steady_metrics() {
  awk -F'[:,}]' '/"tokens_per_s"/ {
      for (i = 1; i < NF; i++) { k = $i; gsub(/[{" ]/, "", k); v[k] = $(i + 1) }
      n++; if (n == 1) next
      rate += v["tokens_per_s"]; m++
      step = v["data_wait_s"] + v["compute_s"] + v["comm_wait_s"]
      if (step > 0) stall += v["data_wait_s"] / step
    } END { if (m) printf "%.0f %.4f", rate / m, stall / m; else print "0 0" }' "$1"
}

main() {
  echo "== lstmd GPU benchmark: $(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname)"
  command -v nvidia-smi >/dev/null && nvidia-smi -L || echo "(no nvidia-smi)"
  echo "lstmd: $LSTMD, commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')"
  "$LSTMD" --version | sed 's/^/  /'
  "$PYTHON_TORCH" -c 'import torch; print("  torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())' \
    || echo "  (no torch in $PYTHON_TORCH: the peer column will be empty)"

  "$NVCC" -O2 -o "$TMP/gemm_rate_cuda" "$HERE/gemm_rate_cuda.c" -lcublas
  local gemm_line tflops
  gemm_line=$("$TMP/gemm_rate_cuda" 8192 20)
  echo "$gemm_line"
  tflops=$(sed -n 's/.*tflops=\([0-9.]*\).*/\1/p' <<<"$gemm_line")

  local prep V
  prep=$("$LSTMD" prepare text --input "$ROOT/data/fortunes.txt" --out "$TMP/data" --val-fraction 0.002 2>&1 | tail -1)
  echo "$prep"
  V=$(sed -n 's/.*vocabulary \([0-9]*\).*/\1/p' <<<"$prep")
  echo "vocabulary: $V"

  declare -a rows
  local name H L T B
  for cfg in "small 1024 2 256 128" "large 2048 4 128 256"; do
    read -r name H L T B <<<"$cfg"
    echo "-- $name: H$H L$L T$T B$B $PRECISION"
    local run="$TMP/run-$name" prefix=()
    [[ "${NSYS:-0}" == 1 && $name == large ]] && command -v nsys >/dev/null &&
      prefix=(nsys profile -t cuda,nvtx,cudnn,cublas -o "$BUILD/lstmd-$name" --force-overwrite true)
    "${prefix[@]}" "$LSTMD" train --set data.path="$TMP/data" --set train.device=cuda \
      --set train.precision="$PRECISION" --set model.embed=$E --set model.hidden=$H \
      --set model.layers=$L --set data.seq_len=$T --set data.batch_size=$B \
      --set train.steps="$STEPS" --set train.log_every="$LOG_EVERY" --set train.eval_every=0 \
      --set train.checkpoint_every=0 --set optim.warmup=0 --set train.run_dir="$run" 2>"$TMP/$name.log" >/dev/null \
      || { cat "$TMP/$name.log"; echo "lstmd train failed ($name)"; exit 1; }
    grep -E "compute:|trained steps" "$TMP/$name.log" | sed 's/^/  /'
    local lm rate stall peer="" ratio="-" fpt tfl mfu="-"
    lm=$(steady_metrics "$run/metrics.jsonl")
    rate=${lm% *}
    stall=${lm#* }
    local pline
    pline=$("$PYTHON_TORCH" "$HERE/torch_lstm_gpu_peer.py" --precision "$PRECISION" --seq-len $T \
              --batch $B --vocab "$V" --embed $E --hidden $H --layers $L --steps 30 2>&1 | tail -1) || true
    echo "  $pline"
    peer=$(sed -n 's/.*tokens_per_s=\([0-9.]*\).*/\1/p' <<<"$pline")
    [[ -n $peer && $peer != 0 ]] && ratio=$(awk -v a="$rate" -v b="$peer" 'BEGIN { printf "%.2f", a / b }')
    fpt=$(flops_per_token $H $L "$V")
    local own # lstmd's own FLOP/token (its GFLOP/s over its tokens/s): warns, keeps the GPU time
    own=$(sed -n 's/.*trained steps .* (\([0-9.]*\) tokens\/s, \([0-9.]*\) GFLOP\/s).*/\1 \2/p' \
      "$TMP/$name.log" | awk '$1 > 0 { printf "%.0f", $2 * 1e9 / $1 }')
    [[ -n $own ]] && awk -v a="$own" -v b="$fpt" 'BEGIN { exit !(a < 0.99 * b || a > 1.01 * b) }' &&
      echo "  WARNING: lstmd counts $own FLOP/token, this script $fpt: flops_per_token is stale (MFU off)"
    tfl=$(awk -v r="$rate" -v f="$fpt" 'BEGIN { printf "%.1f", r * f / 1e12 }')
    [[ -n $tflops ]] && mfu=$(awk -v t="$tfl" -v p="$tflops" 'BEGIN { printf "%.2f", t / p }')
    rows+=("$(printf '| %-5s | H%-4s L%s T%-3s B%-3s | %10s | %10s | %5s | %7s | %5s | %6.1f%% |' \
      "$name" "$H" "$L" "$T" "$B" "$rate" "${peer:--}" "$ratio" "$tfl" "$mfu" \
      "$(awk -v s="$stall" 'BEGIN { print 100 * s }')")")
  done
  echo
  echo "cuBLAS bf16 GEMM (8192^3): ${tflops:-?} TFLOP/s; precision $PRECISION; targets: ratio >= 1.3, MFU (large) >= 0.40"
  echo "| cfg   | shape               | lstmd tok/s | torch tok/s | ratio | TFLOP/s | MFU   | input stall |"
  echo "|-------|---------------------|------------:|------------:|------:|--------:|------:|------------:|"
  printf '%s\n' "${rows[@]}"
}

if [[ -n "${BENCH_OUT:-}" ]]; then
  mkdir -p "$(dirname "$BENCH_OUT")"
  main 2>&1 | tee "$BENCH_OUT"
else
  main
fi
