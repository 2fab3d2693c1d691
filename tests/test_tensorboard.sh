#!/usr/bin/env bash
# test_tensorboard.sh — the event file lstmd writes, read back by TensorBoard's own reader
# (PyPI's tensorboard, installed into a throwaway venv): every scalar of every log step and
# evaluation is there with the values metrics.jsonl has. Skipped (77) when PyPI cannot be
# reached to fetch the reader.
set -u
LSTMD=$(realpath "${1:?usage: test_tensorboard.sh LSTMD_BINARY SOURCE_DIR}")
SRC=$(realpath "${2:?}")
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# Debian's python3 (numpy) plus tensorboard's reader and the two packages it imports.
/usr/bin/python3 -m venv --system-site-packages "$TMP/venv" >/dev/null 2>&1 || { echo "no python3-venv"; exit 77; }
if ! timeout 300 "$TMP/venv/bin/pip" install -q --no-deps tensorboard protobuf absl-py >"$TMP/pip.log" 2>&1; then
  echo "test_tensorboard: cannot install tensorboard from PyPI (skipped): $(tail -1 "$TMP/pip.log")"
  exit 77
fi
head -c 200000 "$SRC/data/fortunes.txt" > "$TMP/small.txt"
"$LSTMD" prepare text --input "$TMP/small.txt" --out "$TMP/ds" 2>/dev/null || exit 1
"$LSTMD" train --set data.path="$TMP/ds" --set data.seq_len=16 --set data.batch_size=4 \
  --set model.hidden=32 --set train.steps=20 --set train.log_every=5 --set train.eval_every=10 \
  --set train.run_dir="$TMP/run" 2>/dev/null || exit 1
"$TMP/venv/bin/python" - "$TMP/run" <<'PY'
import glob, json, sys
from tensorboard.backend.event_processing import event_accumulator as ea

run = sys.argv[1]
files = glob.glob(run + "/events.out.tfevents.*")
assert len(files) == 1, files
acc = ea.EventAccumulator(files[0], size_guidance={ea.SCALARS: 0})
acc.Reload()
tags = set(acc.Tags()["scalars"])
want = {"train/loss", "train/lr", "train/grad_norm", "train/tokens_per_s", "time/compute_s",
        "time/comm_wait_s", "time/data_wait_s", "val/loss", "val/bpc"}
assert want <= tags, f"missing {want - tags}"
records = [json.loads(l) for l in open(run + "/metrics.jsonl")]
steps = [r for r in records if "loss" in r]
evals = [r for r in records if "val_loss" in r]
loss = acc.Scalars("train/loss")
assert [e.step for e in loss] == [r["step"] for r in steps], ([e.step for e in loss], steps)
for e, r in zip(loss, steps):
    assert abs(e.value - r["loss"]) <= 1e-6 * max(1, abs(r["loss"])), (e, r)
val = acc.Scalars("val/loss")
assert [e.step for e in val] == [r["step"] for r in evals], (val, evals)
for e, r in zip(val, evals):
    assert abs(e.value - r["val_loss"]) <= 1e-6 * abs(r["val_loss"]), (e, r)
print(f"test_tensorboard: passed ({len(loss)} train/loss and {len(val)} val/loss points, "
      f"{len(tags)} tags, read by tensorboard's EventAccumulator)")
PY
