#!/usr/bin/env bash
# bench_scaling.sh LSTMD_BINARY [RANKS...] — weak scaling of the CPU backend over MPI ranks.
#
#   bench/bench_scaling.sh build/lstmd          (ranks 1 2; on a 16-core host: 1 2 4 8)
#   BENCH_OUT=results.txt bench/bench_scaling.sh build/lstmd 1 2 4 8
#
# The benchmark model of bench/char_lm_h512.ini with data.batch_size=32 per rank and one thread
# (one core, single-threaded OpenBLAS) per rank, so N ranks do N times the work of one. Reports,
# from metrics.jsonl after the first log interval: tokens/s, weak-scaling efficiency
# (tokens/s(N) / (N · tokens/s(1))), and per step the compute time, the all-reduce time backward
# did not hide (exposed communication) and the time spent waiting for data.
# Targets (issue): >= 95% efficiency at 8 ranks, exposed communication < 5% of the step.
set -euo pipefail
LSTMD=$(realpath "${1:?usage: bench_scaling.sh LSTMD_BINARY [RANKS...]}")
shift
RANKS=("$@")
((${#RANKS[@]})) || RANKS=(1 2)
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
STEPS=${STEPS:-25}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/lstmd-scaling.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export OMPI_MCA_plm=${OMPI_MCA_plm:-isolated} OMPI_MCA_rmaps_base_oversubscribe=1
[[ $(id -u) -eq 0 ]] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

{
  echo "== lstmd weak scaling (CPU backend): $(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname), $(nproc) cores"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'); OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-chosen by lstmd}"
  echo "lstmd commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?'); model E64 H512 L2, T128, 32 windows per rank, 1 thread per rank"
  "$LSTMD" prepare text --input "$ROOT/data/fortunes.txt" --out "$TMP/ds" 2>/dev/null
  printf '%6s %12s %11s %11s %11s %11s %9s\n' ranks tokens/s efficiency compute_ms comm_ms data_ms comm%
  base=""
  for n in "${RANKS[@]}"; do
    run="$TMP/run-$n"
    mpirun -np "$n" --bind-to core "$LSTMD" train --config "$HERE/char_lm_h512.ini" \
      --set "data.path=$TMP/ds" --set "train.run_dir=$run" --set "train.steps=$STEPS" \
      --set train.log_every=5 --set train.threads=1 --set train.eval_every=0 \
      >/dev/null 2>"$TMP/log-$n" || { echo "ranks=$n failed:"; tail -5 "$TMP/log-$n"; exit 1; }
    # Steady state: skip the first log record (start-up), average the rest.
    read -r rate comp comm data < <(awk -F'[:,}]' '/"tokens_per_s"/ {
        n++; if (n == 1) next
        for (i = 1; i < NF; i++) {
          if ($i ~ /"tokens_per_s"$/) r += $(i + 1); if ($i ~ /"compute_s"$/) c += $(i + 1)
          if ($i ~ /"comm_wait_s"$/) m += $(i + 1); if ($i ~ /"data_wait_s"$/) d += $(i + 1) }
        k++ }
      END { printf "%.0f %.6f %.6f %.6f\n", r / k, c / k, m / k, d / k }' "$run/metrics.jsonl")
    [[ -n $base ]] || base=$rate
    awk -v n="$n" -v r="$rate" -v b="$base" -v c="$comp" -v m="$comm" -v d="$data" 'BEGIN {
      printf "%6d %12.0f %10.1f%% %11.1f %11.2f %11.3f %8.1f%%\n", n, r, 100 * r / (n * b),
        1000 * c, 1000 * m, 1000 * d, 100 * m / (c + m + d) }'
  done
} | tee ${BENCH_OUT:+"$BENCH_OUT"}
