#!/usr/bin/env bash
# forecast_baselines.sh LSTMD [OUT] — issue 19 §1: every model.target × data.window_norm on the
# bundled seattle-temps series and on a trending one, against the naive forecasts.
#  - seattle: data/seattle-temps.csv, `prepare series --horizon 24 --season 24` (val 5%), trained
#    with deploy/examples/series_forecast.ini as it is (H64 L2, stream, seq_len 48, 3,000 steps);
#  - trend: bench/make_trend_series.py (2,284 weekly rows: rising trend + 52-week cycle + noise,
#    deterministic), `--horizon 4 --val-fraction 0.2 --season 52`, the issue's settings: the same
#    file with seq_len 52 and 1,500 steps.
# Seeds 1, 2, 3 each; the numbers are `lstmd eval`'s on the validation split (MSE in normalised
# target units; skill = 1 − MSE / MSE of persistence). Writes OUT (default
# bench/results/forecast-baselines-<date>.txt) and prints it.
set -eu
LSTMD=$(realpath "${1:?usage: forecast_baselines.sh LSTMD [OUT]}")
SRC=$(cd "$(dirname "$0")/.." && pwd)
OUT=${2:-$SRC/bench/results/forecast-baselines-$(date -u +%F).txt}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export CUDA_VISIBLE_DEVICES=
python3 "$SRC/bench/make_trend_series.py" "$TMP/trend.csv"
"$LSTMD" prepare series --input "$SRC/data/seattle-temps.csv" --target temp --horizon 24 \
  --season 24 --out "$TMP/seattle" 2>/dev/null
"$LSTMD" prepare series --input "$TMP/trend.csv" --target co2 --horizon 4 --val-fraction 0.2 \
  --season 52 --out "$TMP/trend" 2>/dev/null
INI=$SRC/deploy/examples/series_forecast.ini
{
  echo "# forecast-baselines: lstmd $(git -C "$SRC" rev-parse --short HEAD 2>/dev/null || echo '?'), $(date -u '+%F %H:%M UTC'), $(nproc) cores"
  echo "# seattle: $INI as it is (seq_len 48, 3000 steps), horizon 24, season 24, val 5%"
  echo "# trend:   the same with seq_len 52, 1500 steps; horizon 4, season 52, val 20%"
  echo "# MSE in normalised target units over lstmd eval's windows; skill = 1 - MSE/persistence"
  printf "%-8s %-6s %-5s %4s %10s %12s %10s %8s\n" series target norm seed val_mse persistence seasonal skill
  for series in seattle trend; do
    extra=()
    [[ $series == trend ]] && extra=(--set data.seq_len=52 --set train.steps=1500)
    for target in level delta; do
      for norm in none last mean; do
        for seed in 1 2 3; do
          run=$TMP/run-$series-$target-$norm-$seed
          "$LSTMD" train --config "$INI" --set data.path="$TMP/$series" "${extra[@]}" \
            --set model.target=$target --set data.window_norm=$norm --set train.seed=$seed \
            --set train.eval_every=0 --set train.checkpoint_every=0 --set train.log_every=0 \
            --set train.run_dir="$run" >/dev/null 2>&1
          "$LSTMD" eval --checkpoint "$run/latest.safetensors" --data "$TMP/$series" 2>/dev/null |
            python3 -c "import json,sys; e=json.load(sys.stdin); print('%-8s %-6s %-5s %4s %10.6f %12.6f %10.6f %8.4f' % ('$series', '$target', '$norm', $seed, e['loss'], e['mse_persistence'], e['mse_seasonal'], e['skill']))"
        done
      done
    done
  done
} > "$TMP/rows.txt"
{
  cat "$TMP/rows.txt"
  echo
  echo "# mean over the 3 seeds (skill: min .. max)"
  python3 - "$TMP/rows.txt" <<'PY'
import collections, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()
    if line.startswith("#") or f[0] == "series": continue
    rows[(f[0], f[1], f[2])].append((float(f[4]), float(f[5]), float(f[6]), float(f[7])))
print("%-8s %-6s %-5s %10s %12s %10s %8s %17s" % ("series", "target", "norm", "val_mse", "persistence", "seasonal", "skill", "skill range"))
both = collections.defaultdict(list)
for (s, t, n), v in rows.items():
    m = [sum(x[i] for x in v) / len(v) for i in range(4)]
    sk = [x[3] for x in v]
    both[(t, n)] += sk
    print("%-8s %-6s %-5s %10.6f %12.6f %10.6f %8.4f %8.4f .. %.4f" % (s, t, n, m[0], m[1], m[2], m[3], min(sk), max(sk)))
print()
print("# both series together: mean skill of the 6 runs (min)")
for (t, n), sk in both.items():
    print("%-6s %-5s %8.4f (%.4f)" % (t, n, sum(sk) / len(sk), min(sk)))
PY
} > "$OUT"
cat "$OUT"
