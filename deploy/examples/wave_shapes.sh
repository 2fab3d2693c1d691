#!/usr/bin/env bash
# wave_shapes.sh — the series-classification example (README: "Series classification"): SYNTHETIC
# noisy waves from deploy/examples/wave_shapes.py (ROWS rows of 64 samples, fixed seed 1; nothing
# measured) → lstmd prepare classify --series → lstmd train with deploy/examples/wave_shapes.ini
# → lstmd eval (accuracy, confusion) → lstmd classify on fresh rows (seed 2) without labels.
#
# usage: deploy/examples/wave_shapes.sh [LSTMD] (env: WORK=work/wave_shapes ROWS=8000, and any
#        extra `lstmd train` arguments in TRAIN_ARGS, e.g. "--set train.steps=500")
set -euo pipefail
LSTMD=${1:-lstmd}
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=${WORK:-work/wave_shapes}
ROWS=${ROWS:-8000}
mkdir -p "$WORK" prepared
python3 "$HERE/wave_shapes.py" "$ROWS" --seed 1 > "$WORK/waves.csv"
"$LSTMD" prepare classify --series --input "$WORK/waves.csv" --out prepared/wave_shapes \
  --val-fraction 0.1
rm -rf runs/wave_shapes # a rerun of the example starts over (lstmd train refuses a used run dir)
# shellcheck disable=SC2086
"$LSTMD" train --config "$HERE/wave_shapes.ini" ${TRAIN_ARGS:-} 2>&1 | grep -E "eval step|trained"
"$LSTMD" eval --checkpoint runs/wave_shapes/latest.safetensors --data prepared/wave_shapes
python3 "$HERE/wave_shapes.py" 5 --seed 2 --no-label > "$WORK/fresh.csv" 2> "$WORK/fresh.labels"
"$LSTMD" classify --checkpoint runs/wave_shapes/latest.safetensors --input "$WORK/fresh.csv" |
  paste "$WORK/fresh.labels" -
