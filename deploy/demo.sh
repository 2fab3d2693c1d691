#!/usr/bin/env bash
# demo.sh — `make demo`: prepare the bundled corpus, train a small char-LM on the CPU for about
# two minutes (live progress line), report the validation score, and print a generated sample.
set -euo pipefail
LSTMD=$(realpath "${1:-build/lstmd}")
cd "$(dirname "$0")/.."
rm -rf demo/run
mkdir -p demo
"$LSTMD" prepare text --input data/fortunes.txt --out demo/data
"$LSTMD" train --config deploy/demo.ini
echo "--- validation score of demo/run/latest.safetensors:"
"$LSTMD" eval --checkpoint demo/run/latest.safetensors --data demo/data
echo "--- a sample (temperature 0.7):"
"$LSTMD" sample --checkpoint demo/run/latest.safetensors --prime "The " --length 500 \
  --temperature 0.7 --seed 7
echo
