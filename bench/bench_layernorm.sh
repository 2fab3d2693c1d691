#!/usr/bin/env bash
# bench_layernorm.sh — what model.layer_norm costs and buys on the demo corpus: `make demo`'s run
# (deploy/demo.sh: deploy/demo.ini, data/fortunes.txt, 2 MPI ranks of one thread, 16 windows
# each) with and without the layer-normalised LSTM, the same steps and seed. Prints the exact
# commands, each run's last progress lines and its "trained steps" line (tokens/s of the training
# steps alone, evaluation excluded), and `lstmd eval` of the final checkpoint (validation bpc).
#   bench/bench_layernorm.sh build/lstmd [OUT_FILE]
# Environment: STEPS (deploy/demo.ini's 1200), ROUNDS (1: plain then layer_norm; N alternates
# N times, for a shared host: the summary gives each round's tokens/s ratio and their median),
# KEEP (a folder to keep the runs in).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
LSTMD=$(realpath "${1:?usage: bench_layernorm.sh LSTMD [OUT_FILE]}")
OUT_FILE=${2:-}
STEPS=${STEPS:-1200} ROUNDS=${ROUNDS:-1}
TMP=${KEEP:-$(mktemp -d "${TMPDIR:-/tmp}/lstmd-bench-ln.XXXXXX")}
mkdir -p "$TMP"
[[ -z ${KEEP:-} ]] && trap 'rm -rf "$TMP"' EXIT
[[ -n $OUT_FILE ]] && exec > >(tee "$OUT_FILE") 2>&1
if [[ $(id -u) -eq 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export OMPI_MCA_plm=${OMPI_MCA_plm:-isolated}

echo "bench_layernorm.sh on $(hostname), $(nproc) cores (shared host: other jobs ran beside it), $(date -u +%F)"
"$LSTMD" --version | head -3
"$LSTMD" prepare text --input "$ROOT/data/fortunes.txt" --out "$TMP/data" 2>&1 | tail -1

declare -A BPC TOKS
# one NAME LN: the demo's training with model.layer_norm=LN, then eval.
one() {
  local name=$1 ln=$2
  local cmd=(mpirun -np 2 "$LSTMD" train --config "$ROOT/deploy/demo.ini" --set data.batch_size=16
             --set train.threads=1 --set data.path="$TMP/data" --set train.run_dir="$TMP/$name"
             --set train.steps="$STEPS" --set model.layer_norm="$ln")
  echo
  echo "== $name: ${cmd[*]}"
  if ! "${cmd[@]}" > "$TMP/$name.log" 2>&1; then
    echo "FAILED:"; tail -5 "$TMP/$name.log"; return 1
  fi
  grep -E '^lstmd: (data|compute):' "$TMP/$name.log"
  grep -E '^step ' "$TMP/$name.log" | tail -2
  grep -E 'eval step' "$TMP/$name.log" | tail -1
  grep -E 'trained steps' "$TMP/$name.log"
  local ev=("$LSTMD" eval --checkpoint "$TMP/$name/latest.safetensors" --data "$TMP/data")
  echo "\$ ${ev[*]}"
  local out
  out=$("${ev[@]}")
  echo "$out"
  BPC[$name]=$(sed -n 's/.*"bpc":\([0-9.]*\).*/\1/p' <<<"$out")
  TOKS[$name]=$(sed -n 's/.*(\([0-9]*\) tokens\/s.*/\1/p' "$TMP/$name.log" | tail -1)
}

names=()
for ((r = 1; r <= ROUNDS; r++)); do
  one "plain-$r" false && names+=("plain-$r")
  one "layernorm-$r" true && names+=("layernorm-$r")
done
echo
echo "== summary: $STEPS steps, global batch 32 x 128, 2 ranks x 1 thread"
printf '%-14s %-10s %s\n' run val_bpc train_tokens_per_s
for n in "${names[@]}"; do printf '%-14s %-10s %s\n' "$n" "${BPC[$n]}" "${TOKS[$n]}"; done
# Each round's pair ran back to back, so its ratio is less disturbed by the shared host than the
# absolute rates; the median of the rounds' ratios is the figure to quote.
ratios=()
for ((r = 1; r <= ROUNDS; r++)); do
  p=${TOKS[plain-$r]:-} l=${TOKS[layernorm-$r]:-}
  [[ -n $p && -n $l ]] && ratios+=("$(awk -v a="$l" -v b="$p" 'BEGIN { printf "%.3f", a / b }')")
done
if ((${#ratios[@]})); then
  echo "layernorm/plain tokens/s per round: ${ratios[*]}; median $(printf '%s\n' "${ratios[@]}" |
    sort -g | awk '{ v[NR] = $1 } END { printf "%.3f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')"
fi
