#!/usr/bin/env bash
# bench_pipeline.sh LSTMD_BINARY [PIPE_PREDICT] — pipeline stages against data parallelism on 2
# CPU ranks (PIPELINE.md §5), the CPU benchmark shape (bench/char_lm_h512.ini: E64 H512 L2 T128,
# global batch 32), one thread per rank, rank-bound.
#
#   bench/bench_pipeline.sh build/lstmd build/pipe_predict
#   BENCH_OUT=bench/results/pipeline-cpu-2core-$(date +%F).txt bench/bench_pipeline.sh ...
#   ONLY='dp,wavefront K=16,wavefront K=16 layers' bench/bench_pipeline.sh ...  # those rows
#
# Rows: data parallel (2 ranks × 16 windows), then model.stages=2 with the wavefront at K = 4,
# 8, 16, 32 time chunks, gpipe at M = 2, 4, 8 micro-batches, 1f1b M=4 and 1f1b M=2 K=8, all with
# the default model.stage_split=auto, which is balanced on CPU ranks (stage 0 also computes the
# first 992 of weight_ih_l1's 2048 rows: worker/engine/pipe_split.c). "wavefront K=16
# layers" is the K=16 wavefront with whole layers per stage: at this shape those are unequal
# (layer 0 reads the 64-wide embedding, layer 1 the 512-wide layer 0 and feeds the head: about
# 1.4x the work). The last two rows repeat DP and the K=16 wavefront with model.embed=512.
# ONLY: a comma-separated list of row names to run (default: all).
# Columns, steady state (the first log interval left out), best of ROUNDS runs by tokens/s:
#   tokens/s, step ms; the bubble measured (metrics.jsonl: 1 − Σ busy / Σ step time over the
#   ranks) and predicted (bench/pipe_predict: lstmd's schedule simulator on the per-stage median
#   F, B, W times of the run's own --trace, no latency), the closed form (S−1)/(N+S−1); the
#   time per step waiting for the other stage (p2p) and for the gradient all-reduce; peak RSS
#   of each rank (GNU time).
# Targets (issue 13), each printed with its verdict after the table (for the rows that ran):
# measured bubble ≤ predicted + 0.05; wavefront K=M ≥ gpipe M in tokens/s (M = 4, 8); wavefront
# K=16 ≥ 90% of data parallel's tokens/s.
set -euo pipefail
LSTMD=$(realpath "${1:?usage: bench_pipeline.sh LSTMD_BINARY [PIPE_PREDICT]}")
PREDICT=${2:-$(dirname "$LSTMD")/pipe_predict}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
STEPS=${STEPS:-20}
ROUNDS=${ROUNDS:-3}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/lstmd-pipe.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export OMPI_MCA_plm=${OMPI_MCA_plm:-isolated} OMPI_MCA_rmaps_base_oversubscribe=1
[[ $(id -u) -eq 0 ]] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[[ -x /usr/bin/time ]] || { echo "bench_pipeline: needs GNU time (apt-get install time)"; exit 1; }

# name|extra settings (model.stages=2 unless "dp")
configs=(
  "dp|--set data.batch_size=16"
  "wavefront K=4|--set model.stages=2 --set train.time_chunks=4"
  "wavefront K=8|--set model.stages=2 --set train.time_chunks=8"
  "wavefront K=16|--set model.stages=2 --set train.time_chunks=16"
  "wavefront K=16 layers|--set model.stages=2 --set train.time_chunks=16 --set model.stage_split=layers"
  "wavefront K=32|--set model.stages=2 --set train.time_chunks=32"
  "gpipe M=2|--set model.stages=2 --set train.schedule=gpipe --set train.micro_batches=2"
  "gpipe M=4|--set model.stages=2 --set train.schedule=gpipe --set train.micro_batches=4"
  "gpipe M=8|--set model.stages=2 --set train.schedule=gpipe --set train.micro_batches=8"
  "1f1b M=4|--set model.stages=2 --set train.schedule=1f1b --set train.micro_batches=4"
  "1f1b M=2 K=8|--set model.stages=2 --set train.schedule=1f1b --set train.micro_batches=2 --set train.time_chunks=8"
  "dp E512|--set data.batch_size=16 --set model.embed=512"
  "wavefront K=16 E512|--set model.stages=2 --set train.time_chunks=16 --set model.embed=512"
)

# steady MEAN over metrics.jsonl records after the first: tokens/s, step s, bubble, p2p, comm
steady() {
  /usr/bin/python3 - "$1" <<'EOF'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if '"tokens_per_s"' in l][1:]
n = len(recs)
tps = sum(r["tokens_per_s"] for r in recs) / n
step = sum(r["compute_s"] + r["comm_wait_s"] + r["data_wait_s"] for r in recs) / n
bub = sum(r.get("bubble", 0.0) for r in recs) / n
p2p = sum(r.get("p2p_wait_s", 0.0) for r in recs) / n
comm = sum(r["comm_wait_s"] for r in recs) / n
print("%.1f %.6f %.4f %.6f %.6f" % (tps, step, bub, p2p, comm))
EOF
}

# costs TRACE: per stage the median F, B, W durations (ms) after the first step
costs() {
  /usr/bin/python3 - "$1" <<'EOF'
import json, statistics, sys
text = open(sys.argv[1]).read().rstrip()
ev = json.loads(text if text.endswith("]") else text + "]")
out = []
for r in sorted({e["pid"] for e in ev if e.get("ph") == "X"}):
    opt = sorted(e["ts"] for e in ev if e.get("pid") == r and e.get("name") == "optimizer")
    start = opt[0] if opt else 0
    for k in "FBW":
        d = [e["dur"] / 1000 for e in ev if e.get("pid") == r and e.get("name") == k and e["ts"] > start]
        out.append("%.4f" % statistics.median(d))
print(" ".join(out))
EOF
}

# The targets' verdicts from the rows that ran (tps_of, bub_of, pred_of: by row name).
declare -A tps_of bub_of pred_of
verdict() { awk -v ok="$1" 'BEGIN{exit !ok}' && echo PASS || echo BELOW; }
verdicts() {
  echo "targets:"
  local n
  for n in "${!bub_of[@]}"; do
    [[ ${pred_of[$n]} == - ]] && continue
    echo "  $n: bubble ${bub_of[$n]} <= predicted ${pred_of[$n]} + 0.05: $(verdict \
      "$(awk -v b="${bub_of[$n]}" -v p="${pred_of[$n]}" 'BEGIN{print (b <= p + 0.05)}')")"
  done | sort
  for m in 4 8; do
    local w=${tps_of["wavefront K=$m"]-} g=${tps_of["gpipe M=$m"]-}
    [[ -n $w && -n $g ]] && echo "  wavefront K=$m $w >= gpipe M=$m $g tokens/s: $(verdict \
      "$(awk -v w="$w" -v g="$g" 'BEGIN{print (w >= g)}')")"
  done
  local w=${tps_of["wavefront K=16"]-} d=${tps_of[dp]-}
  [[ -n $w && -n $d ]] && echo "  wavefront K=16 / dp = $w / $d = $(awk -v w="$w" -v d="$d" \
    'BEGIN{printf "%.3f", w / d}') >= 0.90: $(verdict "$(awk -v w="$w" -v d="$d" 'BEGIN{print (w >= 0.9 * d)}')")"
  return 0
}

{
  echo "== lstmd pipeline stages vs data parallel (CPU backend): $(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname), $(nproc) cores"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'); flags: $(grep -o -m1 -w 'avx512f\|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  echo "lstmd commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?'); E64 H512 L2 T128, global batch 32, 2 ranks x 1 thread, $STEPS steps, best of $ROUNDS"
  "$LSTMD" prepare text --input "$ROOT/data/fortunes.txt" --out "$TMP/ds" 2>/dev/null
  printf '%-24s %9s %8s %9s %9s %8s %8s %8s %10s\n' config tokens/s step_ms bubble predicted formula \
    p2p_ms comm_ms rss_MiB
  for c in "${configs[@]}"; do
    name=${c%%|*}
    [[ -z ${ONLY:-} || ",$ONLY," == *",$name,"* ]] || continue
    read -r -a extra <<<"${c#*|}"
    best=""
    for round in $(seq "$ROUNDS"); do
      run="$TMP/run"
      rm -rf "$run" "$TMP/trace.json" "$TMP"/rss.*
      # each rank's peak RSS into its own file (GNU time -o), named by its rank
      mpirun -np 2 --bind-to core sh -c 'exec /usr/bin/time -f %M -o "$0.$OMPI_COMM_WORLD_RANK" "$@"' \
        "$TMP/rss" "$LSTMD" train \
        --config "$HERE/char_lm_h512.ini" --set "data.path=$TMP/ds" --set "train.run_dir=$run" \
        --set "train.steps=$STEPS" --set train.log_every=4 --set train.threads=1 \
        --trace "$TMP/trace.json" "${extra[@]}" >/dev/null 2>"$TMP/log" ||
        { echo "$name failed:"; tail -5 "$TMP/log"; exit 1; }
      read -r tps step bub p2p comm < <(steady "$run/metrics.jsonl")
      rss=$(cat "$TMP/rss.0" "$TMP/rss.1" | awk '{printf "%s%.0f", sep, $1 / 1024; sep="/"}')
      pred="-"
      form="-"
      if [[ $name != dp* ]]; then
        kind=${name%% *}
        m=$(sed -n 's/.*micro_batches=\([0-9]*\).*/\1/p' <<<"${c#*|}")
        k=$(sed -n 's/.*time_chunks=\([0-9]*\).*/\1/p' <<<"${c#*|}")
        read -r -a cost < <(costs "$TMP/trace.json")
        read -r _ _ _ pred _ form < <("$PREDICT" "$kind" 2 "${m:-1}" "${k:-1}" 0 "${cost[@]}")
      fi
      line=$(printf '%-24s %9.0f %8.1f %9.3f %9s %8s %8.2f %8.2f %10s' "$name" "$tps" \
        "$(awk -v s="$step" 'BEGIN{print 1000*s}')" "$bub" "$pred" "$form" \
        "$(awk -v s="$p2p" 'BEGIN{print 1000*s}')" "$(awk -v s="$comm" 'BEGIN{print 1000*s}')" "$rss")
      if [[ -z $best ]] || awk -v a="$tps" -v b="${best_tps}" 'BEGIN{exit !(a > b)}'; then
        best=$line
        best_tps=$tps
      fi
    done
    echo "$best"
    read -r _ tps_of["$name"] _ bub_of["$name"] pred_of["$name"] _ <<<"${best/$name/row}"
  done
  verdicts
} | tee ${BENCH_OUT:+"$BENCH_OUT"}
