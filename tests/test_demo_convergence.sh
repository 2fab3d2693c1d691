#!/usr/bin/env bash
# test_demo_convergence.sh — the demo config (deploy/demo.ini), shortened to 300 steps, must
# bring the validation loss of the bundled fortunes corpus below 2.6 nats per byte. For scale:
# the unigram entropy of the corpus is 3.27 nats, and the untrained model scores ln(109) = 4.69.
set -u
LSTMD=$(realpath "${1:?usage: test_demo_convergence.sh LSTMD_BINARY SOURCE_DIR}")
SRC=$(realpath "${2:?}")
BOUND=2.6
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cd "$TMP"
"$LSTMD" prepare text --input "$SRC/data/fortunes.txt" --out data 2>/dev/null || exit 1
"$LSTMD" train --config "$SRC/deploy/demo.ini" --set data.path=data --set train.steps=300 --set train.eval_every=100 \
  --set train.run_dir=run --set train.log_every=50 > train.log 2>&1
rc=$? # the training's own status (a pipe into grep would report grep's)
grep -E "^step|eval|trained" train.log
if [[ $rc -ne 0 ]]; then
  echo "test_demo_convergence: FAILED (lstmd train exited $rc)"
  tail -5 train.log
  exit 1
fi
out=$("$LSTMD" eval --checkpoint run/step-300.safetensors --data data) || exit 1
echo "$out"
loss=$(/usr/bin/python3 -c 'import json,sys; print(json.loads(sys.argv[1])["loss"])' "$out")
if /usr/bin/python3 -c "import sys; sys.exit(0 if $loss < $BOUND else 1)"; then
  echo "test_demo_convergence: passed (val loss $loss < $BOUND nats)"
else
  echo "test_demo_convergence: FAILED (val loss $loss >= $BOUND nats)"
  exit 1
fi
