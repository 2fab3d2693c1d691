#!/usr/bin/env bash
# gpu_algo_sweep.sh [LSTMD] — each cuDNN LSTM algorithm forced in turn (LSTMD_CUDNN_ALGO: not
# timed, its first set-up that runs, the unpacked layout) on bench_gpu.sh's shapes, through
# gpu_profile.sh: the step time each gives in training, beside what lstmd's own choice gives, to
# check that the start-up timing (kernels/cuda/model_cuda.c, 1.) picks the fastest. A refused
# algorithm prints its error line; exit 1 when lstmd's own pick or the standard algorithm did not
# train (the persistent ones may be refused for a shape).
#   SHAPES ("small large"), ALGOS ("" = lstmd picks, then each), REPEAT (1: each row once more
#   per repeat, interleaved, since on the H200 one forced algorithm's step time moved by a
#   quarter from one process to the next), STEPS (20), CLOCKS_OUT (a file: nvidia-smi's SM clock,
#   power and temperature every 200 ms while the sweep runs, to tell throttling from noise)
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
LSTMD=${1:-$HERE/../build/lstmd}
declare -A SHAPE_OF=([small]="1024 2 256 128" [large]="2048 4 128 256")
read -r -a shapes <<<"${SHAPES:-small large}"
read -r -a algos <<<"${ALGOS:-auto standard persist_static persist_dynamic persist_static_small_h}"
clock_pid=
if [[ -n ${CLOCKS_OUT:-} ]] && command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
    --format=csv -lms 200 >"$CLOCKS_OUT" 2>&1 &
  clock_pid=$!
fi
bad=0
printf '%-6s %-3s %-24s %-60s %s\n' shape run algorithm "lstmd's choice (its start-up time)" "step ms"
for ((r = 1; r <= ${REPEAT:-1}; r++)); do
  for name in "${shapes[@]}"; do
    for algo in "${algos[@]}"; do
      [[ $algo == auto ]] && algo=
      out=$(LSTMD_CUDNN_ALGO=$algo SHAPE="${SHAPE_OF[$name]}" STEPS=${STEPS:-20} bash "$HERE/gpu_profile.sh" "$LSTMD" 2>&1)
      choice=$(sed -n 's/.*cuDNN LSTM algorithm \([^,]*\), \([0-9.]*\) ms per.*/\1 (\2 ms)/p' <<<"$out" | head -1)
      [[ -n $choice ]] || choice="$(sed -n 's/.*cuDNN LSTM algorithm \([^,]*\),.*/\1/p' <<<"$out" | head -1) (forced, untimed)"
      step=$(sed -n 's/^step time .*: \([0-9.]*\) ms$/\1/p' <<<"$out")
      if [[ -z $step ]]; then
        choice=$(grep 'lstmd:' <<<"$out" | tail -1 | cut -c1-60)
        step=-
        [[ -z $algo || $algo == standard ]] && bad=1
      fi
      printf '%-6s %-3s %-24s %-60s %s\n' "$name" "$r" "${algo:-(lstmd picks)}" "$choice" "$step"
    done
  done
done
[[ -n $clock_pid ]] && kill "$clock_pid" 2>/dev/null
exit "$bad"
