#!/usr/bin/env bash
# test_tensorboard.sh — the event file lstmd writes, read back by TensorBoard's own reader
# (PyPI's tensorboard, installed into a throwaway venv): every scalar of every log step and
# evaluation is there with the values metrics.jsonl has, and the text summaries of the samples
# taken during training (train.sample_every: tags samples/greedy and samples/temperature_0.8,
# plugin "text") hold the bytes samples.txt has. Skipped (77) when PyPI cannot be reached to
# fetch the reader.
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
  --set train.sample_every=10 --set train.sample_length=30 --set train.sample_prime="The " \
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
# the samples: samples.txt blocks "=== step S: greedy ... ===\n<text>\n" against the text tensors
import re
from tensorboard.util import tensor_util
raw = open(run + "/samples.txt", "rb").read()
blocks = re.split(rb"^=== step (\d+): (greedy|temperature)[^\n]*===\n", raw, flags=re.M)[1:]
want = {}
for step, kind, text in zip(blocks[0::3], blocks[1::3], blocks[2::3]):
    tag = "samples/greedy" if kind == b"greedy" else "samples/temperature_0.8"
    want.setdefault(tag, []).append((int(step), text[:-1]))
texts = set(acc.Tags()["tensors"])
assert {"samples/greedy", "samples/temperature_0.8"} <= texts, texts
n_text = 0
for tag, expected in sorted(want.items()):
    assert acc.SummaryMetadata(tag).plugin_data.plugin_name == "text", acc.SummaryMetadata(tag)
    events = acc.Tensors(tag)
    got = [(e.step, tensor_util.make_ndarray(e.tensor_proto).item()) for e in events]
    assert got == expected, (tag, got, expected)
    assert all(t.startswith(b"The ") and len(t) == 4 + 30 for _, t in got), got
    n_text += len(got)
print(f"test_tensorboard: passed ({len(loss)} train/loss and {len(val)} val/loss points, "
      f"{len(tags)} tags, {n_text} text samples equal to samples.txt "
      f"(e.g. step {want['samples/greedy'][0][0]} greedy {want['samples/greedy'][0][1]!r}), "
      f"read by tensorboard's EventAccumulator)")
PY
[[ $? -eq 0 ]] || exit 1

# A run resumed from an earlier checkpoint of its run dir (as after a crash, or a kill -9, past
# its last checkpoint): metrics.jsonl drops the records past the resume step, and the event file
# of the resumed run starts with a SessionLog START there, so that TensorBoard drops the old
# file's points from that step on. Without it TensorBoard showed the old and the new value at
# steps 15 and 20. Checked with both of TensorBoard's accumulators, reading the run dir as
# `tensorboard --logdir` does (the plugin one is what the TensorBoard server uses).
tb_run() {
  "$LSTMD" train --set data.path="$TMP/ds" --set data.seq_len=16 --set data.batch_size=4 \
    --set model.hidden=32 --set train.steps=20 --set train.log_every=5 --set train.eval_every=10 \
    --set train.checkpoint_every=10 --set train.run_dir="$TMP/back" "$@" 2>/dev/null
}
tb_run || exit 1
sleep 1.1 # event file names hold the second they were made: the resumed run's sorts after
tb_run --resume "$TMP/back/step-10.safetensors" || exit 1
"$TMP/venv/bin/python" - "$TMP/back" <<'PY'
import json, sys, collections
from tensorboard.backend.event_processing import event_accumulator as ea
from tensorboard.backend.event_processing import plugin_event_accumulator as pea
from tensorboard.util import tensor_util
run = sys.argv[1]
records = [json.loads(l) for l in open(run + "/metrics.jsonl")]
want = [(r["step"], r["loss"]) for r in records if "loss" in r]
assert [s for s, _ in want] == [5, 10, 15, 20], want
for name, mod in (("EventAccumulator", ea), ("plugin EventAccumulator", pea)):
    acc = mod.EventAccumulator(run, size_guidance={ea.SCALARS: 0, ea.TENSORS: 0})
    acc.Reload()
    if mod is ea:
        got = [(e.step, e.value) for e in acc.Scalars("train/loss")]
    else:
        got = [(e.step, float(tensor_util.make_ndarray(e.tensor_proto)))
               for e in acc.Tensors("train/loss")]
    assert [s for s, _ in got] == [s for s, _ in want], \
        f"{name}: train/loss steps {[s for s, _ in got]} (each once: {[s for s, _ in want]})"
    for (s, v), (_, w) in zip(got, want):
        assert abs(v - w) <= 1e-6 * max(1, abs(w)), (name, s, v, w)
print("test_tensorboard: a run resumed from step 10 of 20 in its own run dir: train/loss at steps "
      "5, 10, 15, 20 once each, with the resumed run's values, in both accumulators")
PY
