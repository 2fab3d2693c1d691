#!/usr/bin/env bash
# gpu_algo_sweep.sh [LSTMD] — each cuDNN LSTM algorithm forced in turn (LSTMD_CUDNN_ALGO: not
# timed, its first set-up that runs, the unpacked layout) on bench_gpu.sh's two shapes, through gpu_profile.sh:
# the step time each gives in training, beside what lstmd's own choice gives, to check that the
# start-up timing (kernels/cuda/model_cuda.c, 1.) picks the fastest. A refused algorithm prints
# its error line.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
LSTMD=${1:-$HERE/../build/lstmd}
printf '%-6s %-24s %-60s %s\n' shape algorithm "lstmd's choice (its start-up time)" "step ms"
for shape in "small 1024 2 256 128" "large 2048 4 128 256"; do
  read -r name H L T B <<<"$shape"
  for algo in "" standard persist_static persist_dynamic persist_static_small_h; do
    out=$(LSTMD_CUDNN_ALGO=$algo SHAPE="$H $L $T $B" STEPS=${STEPS:-20} bash "$HERE/gpu_profile.sh" "$LSTMD" 2>&1)
    choice=$(sed -n 's/.*cuDNN LSTM algorithm \([^,]*\), \([0-9.]*\) ms per.*/\1 (\2 ms)/p' <<<"$out" | head -1)
    [[ -n $choice ]] || choice="$(sed -n 's/.*cuDNN LSTM algorithm \([^,]*\),.*/\1/p' <<<"$out" | head -1) (forced, untimed)"
    step=$(sed -n 's/^step time .*: \([0-9.]*\) ms$/\1/p' <<<"$out")
    [[ -n $step ]] || { choice=$(grep 'lstmd:' <<<"$out" | tail -1 | cut -c1-60); step=-; }
    printf '%-6s %-24s %-60s %s\n' "$name" "${algo:-(lstmd picks)}" "$choice" "$step"
  done
done
