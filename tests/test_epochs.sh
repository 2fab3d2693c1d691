#!/usr/bin/env bash
# test_epochs.sh — training across epoch boundaries, through the lstmd binary, on a training
# split of 328 bytes: 20 windows of seq_len 16, so with a batch of 4 an epoch is 5 steps in
# shuffle order (20 windows / 4) and in stream order (4 streams of 81 bytes, 5 windows each).
#  1. with optim.lr=0 (the weights never change, so a batch's loss depends only on its windows
#     and starting state): in stream order the losses of epoch 1 repeat those of epoch 0 step for
#     step (at the wrap every stream starts over from a zero state); in shuffle order epoch 1 has
#     the same total loss (the same 20 windows, each from a zero state) in another order
#     (reshuffled);
#  2. the checkpoints' train.epoch / train.position: (0, 20) (shuffle) or (0, 5) (stream) at the
#     end of epoch 0 (step 5), (1, 4) / (1, 1) one step later, epoch 2 from step 11;
#  3. resumed from the checkpoint of step 4 or 5 (before the wrap) or 6 (after it), a run ends
#     bitwise equal to the uninterrupted one at step 12 (tests/compare_checkpoints.py --rtol 0).
set -u
LSTMD=$(realpath "${1:?usage: test_epochs.sh LSTMD_BINARY SOURCE_DIR}")
SRC=$(realpath "${2:?}")
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fails=0
ok() { echo "ok    $*"; }
bad() { echo "FAIL  $*"; fails=$((fails + 1)); }
meta() { # meta CKPT KEY: a __metadata__ value of a checkpoint
  /usr/bin/python3 "$SRC/tests/ckpt_meta.py" "$1" "$2"
}
losses() { # losses METRICS FIRST LAST: the logged losses of those steps, space-separated
  /usr/bin/python3 -c 'import json,sys
r = {}
for l in open(sys.argv[1]):
    d = json.loads(l)
    if "loss" in d: r[d["step"]] = d["loss"]
print(" ".join("%.6f" % r[s] for s in range(int(sys.argv[2]), int(sys.argv[3]) + 1)))' "$@"
}

# 345 bytes: the last floor(0.05 × 345) = 17 are the validation split, 328 remain.
head -c 345 "$SRC/data/fortunes.txt" > "$TMP/tiny.txt"
"$LSTMD" prepare text --input "$TMP/tiny.txt" --out "$TMP/ds" 2>"$TMP/prep.log" || bad "prepare: $(cat "$TMP/prep.log")"
common=(--set data.path="$TMP/ds" --set data.seq_len=16 --set data.batch_size=4 --set model.embed=8
        --set model.hidden=16 --set model.layers=1 --set train.threads=1 --set train.eval_every=0
        --set train.log_every=1)
train() { # train RUN_DIR [args...]
  local dir=$1
  shift
  "$LSTMD" train "${common[@]}" --set train.run_dir="$dir" "$@" >/dev/null 2>"$dir.log" \
    || { bad "train $dir: exit $?: $(grep '^lstmd:' "$dir.log" | grep -v 'effective config:' | tail -2)"; return 1; }
}

for order in shuffle stream; do
  # 1. lr 0: what each batch holds shows in its loss
  train "$TMP/lr0-$order" --set data.order=$order --set optim.lr=0 --set train.steps=10 || continue
  grep -q "328 training tokens" "$TMP/lr0-$order.log" || bad "$order: the split is not 328 tokens: $(grep -m1 'data:' "$TMP/lr0-$order.log")"
  e0=$(losses "$TMP/lr0-$order/metrics.jsonl" 1 5) e1=$(losses "$TMP/lr0-$order/metrics.jsonl" 6 10)
  if [[ $order == stream ]]; then
    if [[ -n $e0 && $e0 == "$e1" ]]; then
      ok "stream: at the wrap the streams start over from a zero state (lr 0: steps 6-10 repeat steps 1-5: $e1)"
    else bad "stream: epoch 1's losses ($e1) are not epoch 0's ($e0): the wrap did not restart the streams from a zero state"; fi
  else
    if [[ -n $e0 && $e0 != "$e1" ]] && /usr/bin/python3 -c 'import sys
a, b = (sum(map(float, x.split())) for x in sys.argv[1:])
sys.exit(abs(a - b) > 1e-5 * abs(a))' "$e0" "$e1"; then
      ok "shuffle: epoch 1 holds the same windows in another order (lr 0: same total loss, losses $e0 → $e1)"
    else bad "shuffle: epoch 0 losses $e0, epoch 1 losses $e1: not the same windows reshuffled"; fi
  fi

  # 2. the cursor in the checkpoints, around the wraps
  full="$TMP/full-$order"
  train "$full" --set data.order=$order --set train.steps=12 --set train.checkpoint_every=1 || continue
  [[ $order == shuffle ]] && step_windows=4 || step_windows=1 # windows the cursor moves per step
  want="4:0:$((4 * step_windows)) 5:0:$((5 * step_windows)) 6:1:$step_windows 10:1:$((5 * step_windows)) 11:2:$step_windows"
  got=""
  for s in 4 5 6 10 11; do
    got+="$s:$(meta "$full/step-$s.safetensors" train.epoch):$(meta "$full/step-$s.safetensors" train.position) "
  done
  if [[ ${got% } == "$want" ]]; then
    ok "$order: train.epoch advances at the wraps (step:epoch:position $want)"
  else bad "$order: checkpoint cursors (step:epoch:position) $got, want $want"; fi

  # 3. resume just before, at and just after the first wrap
  for k in 4 5 6; do
    r="$TMP/resume-$order-$k"
    train "$r" --set data.order=$order --set train.steps=12 --set train.checkpoint_every=1 \
      --resume "$full/step-$k.safetensors" || continue
    grep -q "resumed from .* at step $k" "$r.log" || bad "$order: no resume line for step $k"
    if msg=$(/usr/bin/python3 "$SRC/tests/compare_checkpoints.py" "$full/step-12.safetensors" \
             "$r/step-12.safetensors" --rtol 0); then
      ok "$order: resumed at step $k (epoch $(meta "$full/step-$k.safetensors" train.epoch)) = uninterrupted, bitwise at step 12 ($msg)"
    else bad "$order: resumed at step $k differs at step 12: $msg"; fi
  done
done

[[ $fails -eq 0 ]] && echo "test_epochs: passed" || echo "test_epochs: $fails FAILED"
exit $((fails > 0))
