#!/usr/bin/env bash
# test_divergence.sh — a run that diverges stops every rank at the same step, with a message and
# exit status 1, and never writes a checkpoint holding a non-finite value (so the last one can
# always be resumed):
#  1. a real divergence (series model, SGD at lr 10, momentum 0.99, no clipping) on 2 ranks;
#  2. a NaN in one rank's gradients before they are summed (LSTMD_FAULT=nan_grad@3:1);
#  3. a NaN in the parameters after the update of step 3 (LSTMD_FAULT=nan_update@3): the
#     checkpoint of step 3 is refused by rank 0, both ranks stop, latest.safetensors is step 2;
#  4. optim.eps = 0 (0/0 for a never-updated parameter under AdamW) is refused at start, exit 2;
#  5. 2 and 3 on pipeline stages (model.stages=2): nan_grad on stage 0, which has no loss to scale,
#     and nan_update on stage 1, which does not own params[0] (both did nothing there: exit 0).
#  6. AdamW at lr 10 without clipping (one rank, text, no checkpoint due): the gradient norm
#     passes √FLT_MAX ≈ 1.8e19 while the loss is still finite; the run stops at that step, exit
#     1, naming the norm (it used to go on with AdamW's second moments infinite, its updates 0,
#     until a checkpoint refused them, or to the end).
set -u
LSTMD=$(realpath "${1:?usage: test_divergence.sh LSTMD_BINARY SOURCE_DIR [MPIEXEC]}")
SRC=$(realpath "${2:?}")
MPIEXEC=${3:-mpirun}
PY=/usr/bin/python3
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cd "$TMP" || exit 1
fails=0
ok() { echo "ok    $*"; }
bad() { echo "FAIL  $*"; fails=$((fails + 1)); }

head -c 200000 "$SRC/data/fortunes.txt" > small.txt
"$LSTMD" prepare text --input small.txt --out text >/dev/null 2>&1 || bad "prepare text"
"$LSTMD" prepare series --input "$SRC/data/seattle-temps.csv" --target temp --out series \
  >/dev/null 2>&1 || bad "prepare series"
common=(--set data.seq_len=16 --set data.batch_size=4 --set model.hidden=16 --set model.embed=8
        --set train.checkpoint_every=1 --set train.log_every=1 --set train.eval_every=0
        --set train.threads=1)

# finite CKPT: prints "STEP" when every tensor of CKPT is finite, else "nonfinite NAMES".
finite() {
  "$PY" - "$1" <<'PYEOF'
import json, struct, sys
import numpy as np
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
bad = [k for k, v in h.items() if k != "__metadata__" and not np.isfinite(
    np.frombuffer(b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]], np.float32)).all()]
print("nonfinite " + ",".join(bad) if bad else h["__metadata__"]["train.step"])
PYEOF
}

# diverge NAME DATA EXPECT_STEP|any [env...] -- [--set ...]: 2 ranks; exit 1; the messages name
# one step, none of them twice (a reason every rank knows, the summed loss or gradient norm, is
# rank 0's line alone); latest.safetensors finite and one step earlier; no checkpoint of the
# failing step. Prints the failing step on success.
diverge() {
  local name=$1 data=$2 want=$3
  shift 3
  local envs=()
  while [[ $# -gt 0 && $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  timeout 120 env "${envs[@]}" "$MPIEXEC" -np 2 "$LSTMD" train "${common[@]}" \
    --set data.path="$data" --set train.run_dir="run-$name" --set train.steps=40 "$@" \
    >/dev/null 2>"log-$name"
  local rc=$?
  [[ $rc -eq 1 ]] || { bad "$name: exit $rc, expected 1"; tail -5 "log-$name"; return; }
  # the messages lstmd itself printed about stopping
  local lines steps
  lines=$(grep -E '^lstmd: .*step [0-9]+' "log-$name" | grep -E 'not finite|non-finite|did not write')
  steps=$(grep -oE 'step [0-9]+' <<<"$lines" | sort -u)
  if [[ -z $lines || $(sort <<<"$lines" | uniq -d | wc -l) -ne 0 || $(wc -l <<<"$steps") -ne 1 || -z $steps ]]; then
    bad "$name: expected messages naming one step, none repeated, got:"; echo "$lines"; return
  fi
  local step=${steps#step }
  [[ $want == any || $step -eq $want ]] || { bad "$name: stopped at step $step, expected $want"; return; }
  local latest
  latest=$(finite "run-$name/latest.safetensors")
  if [[ $latest != $((step - 1)) ]]; then
    bad "$name: latest.safetensors is '$latest', expected the finite step $((step - 1))"; return
  fi
  [[ -e run-$name/step-$step.safetensors ]] && { bad "$name: a checkpoint of step $step exists"; return; }
  ok "$name: both ranks stopped at step $step with exit 1, $(wc -l <<<"$lines") line(s) ($(head -1 <<<"$lines" | cut -c1-90)...);" \
     "latest.safetensors is step $((step - 1)), all finite"
}

# 1. a real divergence: SGD with a huge learning rate on the MSE of a series model
diverge real series any -- --set optim.algo=sgd --set optim.lr=10 --set optim.momentum=0.99 \
  --set optim.clip_norm=0 --set optim.schedule=constant
# 2. rank 1 alone has NaN gradients before the all-reduce
diverge nan_grad text 3 LSTMD_FAULT=nan_grad@3:1 --
# 3. the update of step 3 leaves a NaN in the parameters: rank 0 refuses to write step 3
diverge nan_update text 3 LSTMD_FAULT=nan_update@3 --
grep -q "^lstmd: step 3: the parameters after the update are not finite" log-nan_update &&
  grep -q "^lstmd: rank 1: stopping: rank 0 did not write the checkpoint of step 3" log-nan_update &&
  ok "nan_update: rank 0 says why, rank 1 says it stops for rank 0" ||
  bad "nan_update: messages: $(grep '^lstmd:' log-nan_update | tail -3)"

# 5. the same faults on the ranks of pipeline stages where they used to do nothing (fault.h):
# stage 0 has no loss to scale by the NaN, and params[0] (the embedding) is not stage 1's
diverge pipe_nan_grad text 3 LSTMD_FAULT=nan_grad@3:0 -- --set model.stages=2
diverge pipe_nan_update text 3 LSTMD_FAULT=nan_update@3:1 -- --set model.stages=2
grep -q "^lstmd: step 3: the parameters after the update are not finite" log-pipe_nan_update &&
  ok "pipe_nan_update: rank 0 finds stage 1's NaN in the gathered checkpoint" ||
  bad "pipe_nan_update: messages: $(grep '^lstmd:' log-pipe_nan_update | tail -3)"

# 6. a gradient norm whose squares overflow float, before any loss is non-finite
"$LSTMD" prepare text --input "$SRC/data/fortunes.txt" --out fortunes >/dev/null 2>&1 ||
  bad "prepare fortunes"
timeout 120 "$LSTMD" train --config "$SRC/deploy/examples/char_lm.ini" --set data.path=fortunes \
  --set model.hidden=64 --set model.embed=16 --set train.steps=120 --set train.run_dir=run-huge \
  --set optim.lr=10 --set optim.clip_norm=0 --set optim.warmup=0 --set train.threads=1 \
  --set train.log_every=1 --set train.checkpoint_every=1000 --set train.eval_every=0 \
  >/dev/null 2>log-huge
rc=$?
line=$(grep -E '^lstmd: step [0-9]+: gradient norm [0-9.e+]+ \(loss [0-9.e+-]+\): not finite, or past 1.8e\+19' log-huge)
step=$(sed -n 's/^lstmd: step \([0-9]*\): gradient norm.*/\1/p' <<<"$line")
norm=$(sed -n 's/.*gradient norm \([0-9.e+]*\) .*/\1/p' <<<"$line")
before=$("$PY" -c '
import json, sys
ok = [d for d in map(json.loads, open("run-huge/metrics.jsonl")) if "grad_norm" in d]
print(max(d["grad_norm"] for d in ok), max(d["step"] for d in ok))' 2>/dev/null)
if [[ $rc -eq 1 && -n $step ]] && "$PY" -c "import sys; m, last = map(float, '$before'.split()); \
     sys.exit(not ($norm > 1.8446742e19 >= m and last == $step - 1))" &&
   ! ls run-huge/*.safetensors >/dev/null 2>&1; then
  ok "gradient norm $norm at step $step (the logged steps before it at most ${before% *}): exit 1, no checkpoint"
else bad "huge gradient norm: exit $rc, '$line', before '$before': $(grep '^lstmd:' log-huge | tail -2)"; fi

# 4. optim.eps = 0 is refused before training
"$LSTMD" train "${common[@]}" --set data.path=text --set optim.eps=0 --set train.steps=2 \
  --set train.run_dir=run-eps >/dev/null 2>log-eps
rc=$?
if [[ $rc -eq 2 ]] && grep -q '^lstmd: .*optim.eps.*out of range' log-eps && [[ ! -e run-eps ]]; then
  ok "optim.eps=0 refused (exit 2): $(grep -m1 'optim.eps' log-eps)"
else bad "optim.eps=0: exit $rc: $(grep -m1 '^lstmd:' log-eps)"; fi

((fails == 0)) && echo "test_divergence: all passed" || echo "test_divergence: $fails failed"
((fails == 0))
