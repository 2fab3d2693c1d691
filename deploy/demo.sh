#!/usr/bin/env bash
# demo.sh — `make demo`: prepare the bundled corpus, train a small char-LM on the CPU for about
# two minutes on 2 MPI ranks (one core each, 16 windows each: the global batch of deploy/demo.ini)
# with a live progress line, report the validation score, and print a generated sample.
set -euo pipefail
LSTMD=$(realpath "${1:-build/lstmd}")
cd "$(dirname "$0")/.."
rm -rf demo/run
mkdir -p demo
"$LSTMD" prepare text --input data/fortunes.txt --out demo/data
if [[ $(id -u) -eq 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export OMPI_MCA_plm=${OMPI_MCA_plm:-isolated} # one machine, no ssh needed
mpirun -np 2 "$LSTMD" train --config deploy/demo.ini --set data.batch_size=16 --set train.threads=1
echo "--- validation score of demo/run/latest.safetensors:"
"$LSTMD" eval --checkpoint demo/run/latest.safetensors --data demo/data
echo "--- a sample (temperature 0.7):"
"$LSTMD" sample --checkpoint demo/run/latest.safetensors --prime "The " --length 500 \
  --temperature 0.7 --seed 7
echo
