#!/usr/bin/env bash
# test_compress_train.sh — pruning ([prune]) and distillation ([distill]) through the binary, on
# a tiny char-LM (H 16, 2 layers, dropout, stream order) of the bundled corpus:
#   pruning: the masked weights of every pruned tensor exactly zero after training and their count
#     n − max(round(n(1 − s)), 1); metrics.jsonl's pruning records at the pruning steps with the
#     closed-form target; `lstmd eval` reporting the masks' sparsity; 2 ranks (batch 2 each) equal
#     to 1 rank (batch 4): weights within 1e-5 and the masks identical (a rank that masked
#     differently would compute other gradients); a resume between two pruning steps (from
#     step 4: its masks loaded and kept through step 5, then step 6's) ending byte for byte as the
#     uninterrupted run; a resume with prune.target_sparsity 0, or a prune.tensors without some
#     of the checkpoint's masks, warning (stderr and train.log) that those masks are dropped; one
#     past prune.end_step with another target, warning that the masks only hold;
#   distillation: alpha 0 equal to training without a teacher bit for bit, alpha 0.5 not (text;
#     series: alpha 0 and 1); a resume with a teacher byte for byte, one with another teacher
#     warning (the checkpoint's distill.teacher_crc32c); a teacher of another
#     vocabulary, another horizon, another normalisation (the column and both values) or another
#     kind refused (exit 2, naming distill.teacher and what differs);
#   set-up warnings: prune.end_step past train.steps, no mask update within the run, the last
#     update short of the target (end_step - begin_step not a multiple of frequency); a note of
#     [distill] settings without distill.teacher and [prune] ones without a target (lstmd train
#     and lstmctl submit);
#   refusals (exit 2 naming the key): model.stages 2, a bias or a layer-norm gain in
#     prune.tensors, prune.end_step not after begin_step;
#   the daemon: a job with [prune] and [distill] submitted with lstmctl succeeds with its pruning
#     records, and so does one with model.layer_norm=true (masks on no LN gain); `lstmctl logs` of
#     a job whose teacher was refused at its start names the reason; a teacher outside --data-root and a bad prune.tensors are refused at submission.
set -u
LSTMD=$(realpath "${1:?usage: test_compress_train.sh LSTMD_BINARY SOURCE_DIR LSTMCTL_BINARY}")
SRC=$(realpath "${2:?}")
LSTMCTL=$(realpath "${3:?}")
PY=/usr/bin/python3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_plm=isolated
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fails=0
ok() { echo "ok    $*"; }
bad() { echo "FAIL  $*"; fails=$((fails + 1)); }

head -c 20000 "$SRC/data/fortunes.txt" > "$TMP/a.txt"
seq 1 3000 > "$TMP/digits.txt" # another vocabulary: digits and newlines
"$LSTMD" prepare text --input "$TMP/a.txt" --out "$TMP/ds" 2>/dev/null || bad "prepare ds"
"$LSTMD" prepare text --input "$TMP/digits.txt" --out "$TMP/digits" 2>/dev/null || bad "prepare digits"
base=(--set data.path="$TMP/ds" --set data.seq_len=16 --set data.batch_size=4 --set data.order=stream
      --set model.embed=8 --set model.hidden=16 --set model.layers=2 --set model.dropout=0.1
      --set train.threads=1 --set train.eval_every=0 --set train.log_every=1 --set train.steps=8
      --set train.checkpoint_every=3 --set optim.clip_norm=0 --set train.run_dir=run)
prune=(--set prune.target_sparsity=0.75 --set prune.begin_step=2 --set prune.end_step=6
       --set prune.frequency=2 --set train.checkpoint_every=4)
# run DIR ARGS...: lstmd train in $TMP/DIR (run dir "run" there, so configs are equal)
run() {
  local d=$TMP/$1
  shift
  mkdir -p "$d"
  (cd "$d" && timeout 120 "$@" > log 2>&1)
}

# ---- pruning ----
run p1 "$LSTMD" train "${base[@]}" "${prune[@]}" || bad "pruned run: $(tail -2 "$TMP/p1/log")"
if msg=$("$PY" - "$TMP/p1/run/step-8.safetensors" "$TMP/p1/run/metrics.jsonl" 2>&1 <<'PYEOF'
import json, struct, sys
import numpy as np
raw = open(sys.argv[1], "rb").read()
(n,) = struct.unpack("<Q", raw[:8])
hdr = json.loads(raw[8:8 + n])
meta = hdr.pop("__metadata__")
def get(name):
    t = hdr[name]
    b, e = t["data_offsets"]
    dt = {"F32": "<f4", "I8": "i1"}[t["dtype"]]
    return np.frombuffer(raw[8 + n + b:8 + n + e], dtype=dt).reshape(t["shape"])
names = meta["prune.masks"].split(",")
want = ["lstm.weight_ih_l0", "lstm.weight_hh_l0", "lstm.weight_ih_l1", "lstm.weight_hh_l1", "head.weight"]
assert names == want, names
for name in names:
    w, m = get(name), get("prune.mask." + name)
    assert np.all(w[m == 0] == 0.0), "%s: %d masked weights are not zero" % (name, np.sum(w[m == 0] != 0))
    kept = max(int(np.round(w.size * 0.25)), 1)
    assert np.sum(m == 0) == w.size - kept, "%s: %d pruned, want %d" % (name, np.sum(m == 0), w.size - kept)
    assert np.sum(w[m == 1] == 0) == 0, "%s: a kept weight is zero" % name
recs = [json.loads(l) for l in open(sys.argv[2]) if "prune_target" in l]
steps = [r["step"] for r in recs]
assert steps == [2, 4, 6], steps
for r in recs:  # 0.75 + (0 - 0.75)(1 - (step - 2)/4)^3
    t = 0.75 - 0.75 * (1 - (r["step"] - 2) / 4) ** 3
    assert abs(r["prune_target"] - t) < 1e-6, (r, t)
print("%d tensors, 75%% pruned, masked weights 0, records at steps %s" % (len(names), steps))
PYEOF
); then ok "pruned weights: $msg"; else bad "pruned weights: $(tail -1 <<<"$msg")"; fi
ev=$("$LSTMD" eval --checkpoint "$TMP/p1/run/step-8.safetensors" --data "$TMP/ds" 2>&1)
grep -q '"sparsity":{"lstm.weight_ih_l0":0.75,"lstm.weight_hh_l0":0.75,"lstm.weight_ih_l1":0.75,"lstm.weight_hh_l1":0.75,"head.weight":0.75' <<<"$ev" \
  && ok "eval reports the sparsity per tensor: $ev" || bad "eval sparsity: $ev"

run p2 mpirun -np 2 "$LSTMD" train "${base[@]}" "${prune[@]}" --set data.batch_size=2 \
  || bad "2-rank pruned run: $(tail -2 "$TMP/p2/log")"
msg=$("$PY" "$SRC/tests/compare_checkpoints.py" "$TMP/p2/run/step-8.safetensors" \
  "$TMP/p1/run/step-8.safetensors" --rtol 1e-5 2>&1) && ok "2 ranks = 1 rank, masks identical: $msg" \
  || bad "2 ranks vs 1 rank: $msg"

run p3 "$LSTMD" train "${base[@]}" "${prune[@]}" --resume ../p1/run/step-4.safetensors \
  || bad "pruned resume: $(tail -2 "$TMP/p3/log")"
cmp -s "$TMP/p1/run/step-8.safetensors" "$TMP/p3/run/step-8.safetensors" \
  && ok "resume at step 4 (its masks; step 5 must keep them) across the pruning step 6: step 8 byte for byte" \
  || bad "pruned resume differs: $("$PY" "$SRC/tests/compare_checkpoints.py" "$TMP/p3/run/step-8.safetensors" "$TMP/p1/run/step-8.safetensors" --rtol 0 2>&1)"
grep -q 'holds pruning masks' "$TMP/p3/log" && bad "a resume with the same prune settings warns of dropped masks"
# a resume that no longer prunes (or prunes fewer tensors) drops the checkpoint's masks, and
# their weights grow back: said on stderr and in train.log, naming them (user trial: silent)
run p4 "$LSTMD" train "${base[@]}" "${prune[@]}" --set prune.target_sparsity=0 \
  --resume ../p1/run/step-4.safetensors || bad "unpruned resume: $(tail -2 "$TMP/p4/log")"
run p5 "$LSTMD" train "${base[@]}" "${prune[@]}" --set prune.tensors=head.weight \
  --resume ../p1/run/step-4.safetensors || bad "head-only resume: $(tail -2 "$TMP/p5/log")"
w4=$(grep 'warning: .*holds pruning masks' "$TMP/p4/log")
w5=$(grep 'warning: .*holds pruning masks' "$TMP/p5/run/train.log")
[[ $w4 == *"step-4.safetensors holds pruning masks of lstm.weight_ih_l0 (sparsity 0.6"*"head.weight (sparsity 0.6"*"), and this run prunes nothing"* &&
   $w5 == *"lstm.weight_hh_l1 (sparsity 0.6"*"), and this run prunes only prune.tensors = head.weight"* &&
   $w5 != *"head.weight (sparsity"* ]] \
  && ok "a resume dropping the checkpoint's masks warns: $w4" \
  || bad "dropped masks not said: stderr '$w4', train.log '$w5'"
# a resume past prune.end_step with another target: no mask update is left, the masks hold at
# the checkpoint's sparsity (user trial: 0.5 -> 0.75 past end_step, only the changed-settings line)
run p6 "$LSTMD" train "${base[@]}" "${prune[@]}" --set prune.target_sparsity=0.9 --set train.steps=10 \
  --resume ../p1/run/step-8.safetensors || bad "resume past end_step: $(tail -2 "$TMP/p6/log")"
run p7 "$LSTMD" train "${base[@]}" "${prune[@]}" --set train.steps=10 \
  --resume ../p1/run/step-8.safetensors || bad "resume past end_step, same target: $(tail -2 "$TMP/p7/log")"
run p8 "$LSTMD" train "${base[@]}" "${prune[@]}" --set prune.target_sparsity=0.9 \
  --resume ../p1/run/step-4.safetensors || bad "resume before end_step: $(tail -2 "$TMP/p8/log")"
w6=$(grep 'warning: .*masks only hold' "$TMP/p6/run/train.log")
[[ $w6 == *"step-8.safetensors is at step 8, and no mask update"*"at sparsity 0.7500 (mean over 5 tensors), not prune.target_sparsity 0.9; to reach it, resume with a prune.end_step after step 8"* ]] &&
  ! grep -q 'masks only hold' "$TMP/p7/log" "$TMP/p8/log" \
  && ok "a resume past prune.end_step with another target warns: $w6" \
  || bad "masks that only hold not said (or said wrongly): '$w6'; $(grep -h 'masks only hold' "$TMP/p7/log" "$TMP/p8/log")"

# ---- distillation ----
run teacher "$LSTMD" train "${base[@]}" --set model.hidden=24 --set model.layers=3 --set train.steps=6 \
  || bad "teacher: $(tail -2 "$TMP/teacher/log")"
T=$TMP/teacher/run/step-6.safetensors
run plain "$LSTMD" train "${base[@]}" || bad "plain run: $(tail -2 "$TMP/plain/log")"
run kd0 "$LSTMD" train "${base[@]}" --set distill.teacher="$T" --set distill.alpha=0 \
  || bad "alpha 0 run: $(tail -2 "$TMP/kd0/log")"
msg=$("$PY" "$SRC/tests/compare_checkpoints.py" "$TMP/kd0/run/step-8.safetensors" \
  "$TMP/plain/run/step-8.safetensors" --rtol 0 2>&1) && ok "alpha 0 = no teacher bitwise: $msg" \
  || bad "alpha 0 vs no teacher: $msg"
run kd "$LSTMD" train "${base[@]}" --set distill.teacher="$T" --set distill.alpha=0.5 \
  --set distill.temperature=2 || bad "distilled run: $(tail -2 "$TMP/kd/log")"
msg=$("$PY" "$SRC/tests/compare_checkpoints.py" "$TMP/kd/run/step-8.safetensors" \
  "$TMP/plain/run/step-8.safetensors" --rtol 1e-3 2>&1) && bad "alpha 0.5 changed nothing: $msg" \
  || ok "alpha 0.5 trains differently: $msg"
run kd-resume "$LSTMD" train "${base[@]}" --set distill.teacher="$T" --set distill.alpha=0.5 \
  --set distill.temperature=2 --resume ../kd/run/step-3.safetensors \
  || bad "distilled resume: $(tail -2 "$TMP/kd-resume/log")"
cmp -s "$TMP/kd/run/step-8.safetensors" "$TMP/kd-resume/run/step-8.safetensors" \
  && ok "distilled resume at step 3: step 8 byte for byte" || bad "distilled resume differs"
grep -q "is not the model" "$TMP/kd-resume/log" && bad "a resume with the same teacher warns of another"
# the checkpoint knows its teacher: a resume distilling from another model (the same path
# retrained meanwhile, here another file) warns, naming both CRCs (user trial: silent)
run kd-other "$LSTMD" train "${base[@]}" --set distill.teacher="$TMP/plain/run/step-8.safetensors" \
  --set distill.alpha=0.5 --set distill.temperature=2 --resume ../kd/run/step-3.safetensors \
  || bad "resume with another teacher: $(tail -2 "$TMP/kd-other/log")"
w=$(grep "^lstmd: warning: distill.teacher .* is not the model ../kd/run/step-3.safetensors was distilled from (its parameters' CRC-32C is [0-9a-f]\{8\}, the checkpoint's teacher's [0-9a-f]\{8\})" "$TMP/kd-other/run/train.log")
[[ -n $w ]] && ok "a resume with another teacher warns: $w" || bad "another teacher at resume not said: $(grep warning "$TMP/kd-other/log")"

# series: the MSE form of the loss through the binary
"$LSTMD" prepare series --input "$SRC/data/seattle-temps.csv" --target temp --horizon 2 \
  --out "$TMP/s2" 2>/dev/null || bad "prepare series"
"$LSTMD" prepare series --input "$SRC/data/seattle-temps.csv" --target temp --horizon 3 \
  --out "$TMP/s3" 2>/dev/null || bad "prepare series h3"
sbase=("${base[@]}" --set data.path="$TMP/s2" --set data.order=shuffle)
run steacher "$LSTMD" train "${sbase[@]}" --set model.hidden=24 --set train.steps=6 \
  || bad "series teacher: $(tail -2 "$TMP/steacher/log")"
ST=$TMP/steacher/run/step-6.safetensors
run splain "$LSTMD" train "${sbase[@]}" || bad "series plain: $(tail -2 "$TMP/splain/log")"
run skd0 "$LSTMD" train "${sbase[@]}" --set distill.teacher="$ST" --set distill.alpha=0 \
  || bad "series alpha 0: $(tail -2 "$TMP/skd0/log")"
run skd "$LSTMD" train "${sbase[@]}" --set distill.teacher="$ST" --set distill.alpha=1 \
  || bad "series alpha 1: $(tail -2 "$TMP/skd/log")"
a=$("$PY" "$SRC/tests/compare_checkpoints.py" "$TMP/skd0/run/step-8.safetensors" \
  "$TMP/splain/run/step-8.safetensors" --rtol 0 2>&1)
a_rc=$?
b=$("$PY" "$SRC/tests/compare_checkpoints.py" "$TMP/skd/run/step-8.safetensors" \
  "$TMP/splain/run/step-8.safetensors" --rtol 1e-3 2>&1)
b_rc=$?
[[ $a_rc == 0 && $b_rc == 1 ]] && ok "series: alpha 0 = no teacher bitwise ($a); alpha 1 differs ($b)" \
  || bad "series distillation: alpha 0: $a; alpha 1: $b"

# refused NAME TEXT ARGS...: exit 2, an lstmd: line naming NAME and containing TEXT, no checkpoint
refused() {
  local name=$1 text=$2 d=$TMP/refused$((++n_refused))
  shift 2
  run "refused$n_refused" "$LSTMD" train "${base[@]}" "$@"
  local rc=$? msg
  msg=$(grep '^lstmd:' "$d/log" | grep -v -e '^lstmd: effective config' -e '^lstmd: device auto')
  if [[ $rc -eq 2 ]] && grep -qF "$name" <<<"$msg" && grep -qF "$text" <<<"$msg" \
     && ! ls "$d"/run/*.safetensors >/dev/null 2>&1; then
    ok "refused, exit 2: $(head -1 <<<"$msg")"
  else
    bad "$name: exit $rc (want 2), message: ${msg:-none}"
  fi
}
n_refused=0
refused distill.teacher vocabulary --set data.path="$TMP/digits" --set distill.teacher="$T"
refused distill.teacher horizon --set data.path="$TMP/s3" --set distill.teacher="$ST"
# the same CSV split elsewhere: another training split, so another mean and std (named, both values)
"$LSTMD" prepare series --input "$SRC/data/seattle-temps.csv" --target temp --horizon 2 \
  --val-fraction 0.2 --out "$TMP/s2b" 2>/dev/null || bad "prepare series --val-fraction 0.2"
refused distill.teacher "its normalisation differs, column 0 'temp': mean" \
  --set data.path="$TMP/s2b" --set data.order=shuffle --set distill.teacher="$ST"
refused distill.teacher "series model" --set distill.teacher="$ST"
printf 'a\tabab\nb\tbaba\na\taab\nb\tbba\n' > "$TMP/clf.tsv"
"$LSTMD" prepare classify --input "$TMP/clf.tsv" --out "$TMP/clf" --val-fraction 0.5 >/dev/null 2>&1 &&
  "$LSTMD" train --set data.path="$TMP/clf" --set model.hidden=4 --set model.embed=4 --set train.steps=1 \
    --set train.run_dir="$TMP/clf-run" >/dev/null 2>&1 || bad "a classifier to refuse as a teacher"
refused distill.teacher "it is a classifier (model.kind classify), the dataset is text" \
  --set distill.teacher="$TMP/clf-run/latest.safetensors"
# an int8 model as the teacher: the loader's reason printed once, with the key in front, saying
# that distill.teacher needs the fp32 checkpoint (it named train --resume and quantize only)
"$LSTMD" quantize --checkpoint "$T" --out "$TMP/teacher.int8.safetensors" >/dev/null 2>&1 ||
  bad "quantize the teacher"
refused distill.teacher "distill.teacher and quantize need the fp32 checkpoint" --set distill.teacher="$TMP/teacher.int8.safetensors"
n_int8=$(grep -c "an int8 model made by" "$TMP/refused$n_refused/log")
[[ $n_int8 -eq 1 ]] && ok "an int8 teacher's reason printed once" ||
  bad "an int8 teacher's reason printed $n_int8 times, want 1"
refused prune.target_sparsity model.stages "${prune[@]}" --set model.stages=2
refused prune.tensors bias "${prune[@]}" --set prune.tensors=head.weight,lstm.bias_ih_l0
refused prune.end_step begin_step "${prune[@]}" --set prune.end_step=2
refused prune.tensors "a layer-norm gain" "${prune[@]}" --set model.layer_norm=true \
  --set prune.tensors=lstm.weight_hh_l0,lstm.ln_c_weight_l0

# prune.end_step past train.steps: a warning saying where the last mask update leaves the
# sparsity, which the run's own prune line confirms
run p-short "$LSTMD" train "${base[@]}" "${prune[@]}" --set prune.end_step=20 ||
  bad "pruned run with end_step past steps: $(tail -2 "$TMP/p-short/log")"
warned=$(sed -n 's/^lstmd: warning: prune.end_step 20 is past train.steps 8: the last mask update, after step \([0-9]*\), leaves sparsity \([0-9.]*\), not.*/\1 \2/p' "$TMP/p-short/log")
logged=$(sed -n 's/^lstmd: prune step \([0-9]*\): target sparsity \([0-9.]*\),.*/\1 \2/p' "$TMP/p-short/log" | tail -1)
if [[ -n $warned && $warned == "$logged" ]]; then
  ok "prune.end_step past train.steps: warned '$warned', the last update logged '$logged'"
else bad "prune.end_step past train.steps: warned '$warned', last update logged '$logged'"; fi
# said before train.log opened, and written there too (a daemon job's user reads that file)
[[ $(grep -c "^lstmd: warning: prune.end_step 20 is past train.steps 8" "$TMP/p-short/run/train.log") == 1 ]] &&
  ok "the set-up warning is in train.log too" || bad "set-up warning in train.log: $(head -3 "$TMP/p-short/run/train.log")"
# a schedule whose updates miss the ramp's end within the run (user trial: begin_step 0 and a
# frequency past end_step pruned nothing, silently): nothing pruned, or the target not reached
run p-never "$LSTMD" train "${base[@]}" "${prune[@]}" --set prune.begin_step=0 --set prune.frequency=7 ||
  bad "pruned run with no update: $(tail -2 "$TMP/p-never/log")"
grep -q "^lstmd: warning: no mask update of the run prunes anything: .*nothing is pruned" "$TMP/p-never/run/train.log" &&
  ! grep -q "^lstmd: prune step" "$TMP/p-never/log" && ok "no mask update in the run: warned" ||
  bad "no mask update in the run: $(grep -e warning -e 'prune step' "$TMP/p-never/log")"
run p-odd "$LSTMD" train "${base[@]}" "${prune[@]}" --set prune.begin_step=1 ||
  bad "pruned run, end - begin not a multiple: $(tail -2 "$TMP/p-odd/log")"
warned=$(sed -n 's/^lstmd: warning: the last mask update, after step \([0-9]*\), leaves sparsity \([0-9.]*\), not prune.target_sparsity 0.75: prune.end_step − prune.begin_step (5) is not a multiple of prune.frequency 2$/\1 \2/p' "$TMP/p-odd/log")
logged=$(sed -n 's/^lstmd: prune step \([0-9]*\): target sparsity \([0-9.]*\),.*/\1 \2/p' "$TMP/p-odd/log" | tail -1)
[[ -n $warned && $warned == "$logged" ]] && ok "end - begin not a multiple of frequency: warned '$warned'" ||
  bad "end - begin not a multiple of frequency: warned '$warned', last update logged '$logged'"
# settings that do nothing as configured: [distill] without a teacher, [prune] without a target
# (user trial: distill.alpha=0.3 trained plainly without a word); none for a run that prunes
run inert "$LSTMD" train "${base[@]}" --set distill.alpha=0.3 --set prune.end_step=50 --set prune.power=2 ||
  bad "run with inert settings: $(tail -2 "$TMP/inert/log")"
want="lstmd: note: distill.alpha has no effect without distill.teacher; prune.end_step, prune.power have no effect without prune.target_sparsity"
grep -qxF "$want" "$TMP/inert/log" && ! grep -q "no effect without" "$TMP/p-short/log" &&
  ok "inert settings noted: ${want#lstmd: note: }" || bad "inert settings: $(grep -e note -e 'no effect' "$TMP/inert/log")"

# ---- through the daemon ----
S=$TMP/serve
mkdir -p "$S"
"$LSTMD" serve --socket "$S/s.sock" --state-dir "$S/state" --data-root "$TMP" > "$S/log" 2>&1 &
serve_pid=$!
for _ in $(seq 100); do [[ -S $S/s.sock ]] && break; sleep 0.1; done
ctl() { timeout 60 "$LSTMCTL" --socket "$S/s.sock" "$@"; }
job=(--set data.path="$TMP/ds" --set data.seq_len=16 --set data.batch_size=4 --set model.embed=8
     --set model.hidden=8 --set train.threads=1 --set train.steps=8 --set train.eval_every=0)
id=$(ctl submit "${job[@]}" "${prune[@]}" --set distill.teacher="$T" 2>"$S/submit.err" | tail -1)
if ctl watch "$id" > "$S/watch.log" 2>&1 \
   && [[ $(grep -c prune_target "$S/state/runs/job-$id/metrics.jsonl" 2>/dev/null) == 3 ]]; then
  ok "lstmctl submit with [prune] and [distill]: job $id SUCCEEDED, 3 pruning records"
else
  bad "lstmctl job: $(cat "$S/submit.err" "$S/watch.log" | tail -2)"
fi
# model.layer_norm through the daemon, with pruning and a (plain) teacher: the job succeeds, its
# checkpoint is layer-normalised, and only the weight matrices carry pruning masks (no LN gain)
id=$(ctl submit "${job[@]}" "${prune[@]}" --set distill.teacher="$T" --set model.layer_norm=true \
     2>"$S/submit-ln.err" | tail -1)
if ctl watch "$id" > "$S/watch-ln.log" 2>&1 \
   && msg=$("$PY" - "$S/state/runs/job-$id/latest.safetensors" 2>&1 <<'PYEOF'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
(n,) = struct.unpack("<Q", raw[:8])
hdr = json.loads(raw[8:8 + n])
meta = hdr["__metadata__"]
assert meta.get("model.layer_norm") == "1", meta.get("model.layer_norm")
assert json.loads(meta["config"])["model.layer_norm"] == "true"
masks = meta["prune.masks"].split(",")
assert "lstm.ln_c_weight_l0" in hdr and not any("ln_" in m for m in masks), masks
print("layer_norm checkpoint, masks on", ",".join(masks))
PYEOF
); then
  ok "lstmctl submit with model.layer_norm=true, [prune], [distill]: job $id SUCCEEDED, $msg"
else
  bad "lstmctl layer_norm job: ${msg:-} $(cat "$S/submit-ln.err" "$S/watch-ln.log" | tail -2)"
fi
msg=$(ctl submit "${job[@]}" --set distill.temperature=4 2>&1 >/dev/null)
[[ $msg == "lstmctl: note: job "*": distill.temperature has no effect without distill.teacher" ]] &&
  ok "lstmctl submit notes an inert setting: $msg" || bad "lstmctl submit, distill.temperature alone: '$msg'"
msg=$(ctl submit "${job[@]}" --set distill.teacher=/etc/hostname 2>&1)
[[ $? == 2 ]] && grep -q 'distill.teacher:.*outside the data root' <<<"$msg" \
  && ok "lstmctl: a teacher outside --data-root refused: $msg" || bad "teacher outside the root: $msg"
# a teacher that does not fit fails the job before its train.log exists: `lstmctl logs` says the
# job failed and why (it asked "has job N started?", user trial)
id=$(ctl submit "${job[@]}" --set data.path="$TMP/digits" --set distill.teacher="$T" 2>&1 | tail -1)
ctl watch "$id" >/dev/null 2>&1
msg=$(ctl logs "$id" 2>&1)
[[ $msg == "lstmctl: job $id FAILED before it wrote "*"/train.log: "*"distill.teacher: "*"vocabulary"* ]] \
  && ok "lstmctl logs of a job failed before its log: $msg" || bad "logs of a job failed early: $msg"
msg=$(ctl submit "${job[@]}" "${prune[@]}" --set prune.tensors=embed.weight 2>&1)
[[ $? == 2 ]] && grep -q 'prune.tensors' <<<"$msg" && ok "lstmctl: prune.tensors=embed.weight refused" \
  || bad "prune.tensors at submission: $msg"
ctl shutdown >/dev/null 2>&1
wait "$serve_pid"

[[ $fails -eq 0 ]] && echo "test_compress_train: passed" || echo "test_compress_train: $fails FAILED"
exit $((fails > 0))
