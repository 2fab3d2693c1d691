#!/usr/bin/env bash
# test_resume_guards.sh — `lstmd train --resume CKPT` refuses a checkpoint that does not belong to
# the run: trained on another dataset (prepare run on other data: another pair id), with another
# data.seq_len, another global batch (data.batch_size, or the same batch_size on 2 ranks under
# mpirun), or another model shape (model.hidden, model.layers, model.embed, model.layer_norm
# either way: a plain checkpoint into a layer-normalised run and back), or in stream order one
# written in shuffle order (no carried state to go on with). Each refusal exits 2
# with an "lstmd:" message line (not the effective-config dump, which echoes every key) that names
# the field that differs and no other guarded field, and writes no checkpoint. The same checkpoint
# resumes with the config it was written with; a resume names the settings it changed (a
# changed train.seed goes on, but says so; an empty one is written ""); one at or past
# train.steps says there is nothing to train. A fresh run (no --resume) into a run dir that holds
# a run is refused. Numbers in the effective config are printed shortest-first, and a checkpoint
# with the older %.9g texts of the same values resumes without naming them as changed.
set -u
LSTMD=$(realpath "${1:?usage: test_resume_guards.sh LSTMD_BINARY SOURCE_DIR}")
SRC=$(realpath "${2:?}")
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_plm=isolated
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fails=0
ok() { echo "ok    $*"; }
bad() { echo "FAIL  $*"; fails=$((fails + 1)); }

head -c 4000 "$SRC/data/fortunes.txt" > "$TMP/a.txt"
tail -c 4000 "$SRC/data/fortunes.txt" > "$TMP/b.txt"
"$LSTMD" prepare text --input "$TMP/a.txt" --out "$TMP/ds" 2>/dev/null || bad "prepare ds"
"$LSTMD" prepare text --input "$TMP/b.txt" --out "$TMP/other" 2>/dev/null || bad "prepare other"
base=(--set data.path="$TMP/ds" --set data.seq_len=16 --set data.batch_size=4 --set model.embed=8
      --set model.hidden=16 --set model.layers=1 --set train.threads=1 --set train.eval_every=0
      --set train.log_every=0 --set train.steps=4)
"$LSTMD" train "${base[@]}" --set train.steps=2 --set train.run_dir="$TMP/base" >/dev/null \
  2>"$TMP/base.log" || bad "base run: $(tail -2 "$TMP/base.log")"
CK=$TMP/base/step-2.safetensors

# The guarded fields, as the messages name them (the key, or the thing for the dataset and the
# global batch, which are not one key each).
names=("dataset" "data.seq_len" "global batch" "model.hidden" "model.layers" "model.embed"
       "model.layer_norm" "data.order")

# refused NAME LAUNCH... -- ARGS...: runs `LAUNCH lstmd train base ARGS --resume CK` in a fresh run
# dir and checks the refusal and its message.
refused() {
  local name=$1 launch=() run="$TMP/r$((++n_runs))"
  shift
  while [[ $1 != -- ]]; do launch+=("$1"); shift; done
  shift
  timeout 120 "${launch[@]}" "$LSTMD" train "${base[@]}" "$@" --set train.run_dir="$run" \
    --resume "$CK" >/dev/null 2>"$run.log"
  local rc=$?
  # the message: "lstmd:" lines other than the dump's header and the device choice
  local msg
  msg=$(grep '^lstmd:' "$run.log" | grep -v -e '^lstmd: effective config:' -e '^lstmd: device auto:')
  local others=() o
  for o in "${names[@]}"; do [[ $o != "$name" ]] && grep -qF "$o" <<<"$msg" && others+=("$o"); done
  local ckpts
  ckpts=$(ls "$run"/*.safetensors 2>/dev/null | wc -l)
  if [[ $rc -eq 2 ]] && grep -qF "$name" <<<"$msg" && ((${#others[@]} == 0)) && ((ckpts == 0)); then
    ok "$name differs: exit 2, $(head -1 <<<"$msg")"
  else
    local named=named
    grep -qF "$name" <<<"$msg" || named="NOT named"
    bad "$name differs: exit $rc (want 2), $name $named${others[*]:+, also names ${others[*]}}, $ckpts checkpoint(s) written; message: ${msg:-none}"
  fi
}
n_runs=0

refused "dataset" -- --set data.path="$TMP/other"
refused "data.seq_len" -- --set data.seq_len=8
refused "global batch" -- --set data.batch_size=8
refused "global batch" mpirun -np 2 -- # 2 ranks × data.batch_size 4 = 8 windows, not 4
refused "model.hidden" -- --set model.hidden=32
refused "model.layers" -- --set model.layers=2
refused "model.embed" -- --set model.embed=16
refused "model.layer_norm" -- --set model.layer_norm=true
refused "data.order" -- --set data.order=stream # a shuffle checkpoint has no carried state

"$LSTMD" train "${base[@]}" --set train.run_dir="$TMP/same" --resume "$CK" >/dev/null 2>"$TMP/same.log" \
  && grep -q "resumed from .* at step 2" "$TMP/same.log" && [[ -f $TMP/same/step-4.safetensors ]] \
  && ok "the same config resumes from it (step 2 → 4)" || bad "resume with the same config: $(tail -2 "$TMP/same.log")"

# Accepted changes are named (resume_changes.h): the same config but train.steps says exactly
# that (train.run_dir, which differs too, cannot change the weights and is left out); a changed
# train.seed is named with its values.
changes() { sed -n 's/^lstmd: settings changed since that checkpoint was written: \(.*\) (a resumed.*/\1/p' "$1"; }
if [[ $(changes "$TMP/same.log") == "train.steps 2 → 4" ]]; then
  ok "a resume names the settings it changed: '$(changes "$TMP/same.log")'"
else bad "the same config's resume: changed settings '$(changes "$TMP/same.log")', want 'train.steps 2 → 4'"; fi
"$LSTMD" train "${base[@]}" --set train.seed=7 --set train.run_dir="$TMP/seed" --resume "$CK" \
  >/dev/null 2>"$TMP/seed.log"
rc=$?
if [[ $rc -eq 0 && $(changes "$TMP/seed.log") == "train.steps 2 → 4, train.seed 1 → 7" ]] &&
   grep -q "train.seed 1 → 7" "$TMP/seed/train.log"; then
  ok "a resume with another train.seed goes on and says so (also in train.log): '$(changes "$TMP/seed.log")'"
else bad "a resume with another train.seed: exit $rc, changed settings '$(changes "$TMP/seed.log")'"; fi

# The effective config prints each number as its shortest exact text (0.002, not 0.00200000009)
grep -qx "  optim.lr = 0.002" "$TMP/same.log" && grep -qx "  optim.eps = 1e-08" "$TMP/same.log" &&
  ok "the effective config prints optim.lr = 0.002, optim.eps = 1e-08" ||
  bad "effective config numbers: $(grep -e '  optim.lr =' -e '  optim.eps =' "$TMP/same.log" | tr '\n' ' ')"
# A checkpoint written before numbers were printed shortest-first holds float settings as
# "0.00200000009" (%.9g): the same settings, so again only train.steps is named.
python3 - "$CK" "$TMP/old-style.safetensors" <<'EOF2' || bad "rewriting the config as %.9g"
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
(n,) = struct.unpack("<Q", raw[:8])
head = json.loads(raw[8:8 + n])
cfg = json.loads(head["__metadata__"]["config"])
for k in ("optim.lr", "optim.beta1", "optim.beta2", "optim.eps", "optim.momentum"):
    cfg[k] = "%.9g" % struct.unpack("<f", struct.pack("<f", float(cfg[k])))[0]
assert cfg["optim.lr"] != "0.002" and "." in cfg["optim.beta1"], cfg["optim.lr"]
head["__metadata__"]["config"] = json.dumps(cfg, separators=(",", ":"))
h = json.dumps(head, separators=(",", ":")).encode()
h += b" " * (-len(h) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(h)) + h + raw[8 + n:])
EOF2
"$LSTMD" train "${base[@]}" --set train.run_dir="$TMP/old-style" --resume "$TMP/old-style.safetensors" \
  >/dev/null 2>"$TMP/old-style.log"
rc=$?
if [[ $rc -eq 0 && $(changes "$TMP/old-style.log") == "train.steps 2 → 4" ]]; then
  ok "a checkpoint with %.9g numbers (optim.lr 0.00200000009) resumes naming only train.steps"
else bad "%.9g checkpoint: exit $rc, changed settings '$(changes "$TMP/old-style.log")', want 'train.steps 2 → 4'"; fi

# Whole numbers are compared as they are written: a seed 1 apart at 1.7e9 (one float) is a change
"$LSTMD" train "${base[@]}" --set train.seed=1732690000 --set train.steps=2 \
  --set train.run_dir="$TMP/bigseed" >/dev/null 2>"$TMP/bigseed.log" || bad "big seed run: $(tail -2 "$TMP/bigseed.log")"
"$LSTMD" train "${base[@]}" --set train.seed=1732690001 --set train.run_dir="$TMP/bigseed2" \
  --resume "$TMP/bigseed/step-2.safetensors" >/dev/null 2>"$TMP/bigseed2.log"
if [[ $(changes "$TMP/bigseed2.log") == "train.steps 2 → 4, train.seed 1732690000 → 1732690001" ]]; then
  ok "a seed changed by 1 at 1.7e9 is named: '$(changes "$TMP/bigseed2.log")'"
else bad "seed 1732690000 → 1732690001: changed settings '$(changes "$TMP/bigseed2.log")'"; fi

# An empty setting is named as "": model.stage_layers (empty: the even split) set on a resume into
# 2 pipeline stages read "model.stage_layers  → 1,1"
"$LSTMD" train "${base[@]}" --set model.layers=2 --set train.steps=2 --set train.run_dir="$TMP/l2" \
  >/dev/null 2>"$TMP/l2.log" || bad "2-layer base run: $(tail -2 "$TMP/l2.log")"
timeout 120 mpirun -np 2 "$LSTMD" train "${base[@]}" --set model.layers=2 --set model.stages=2 \
  --set model.stage_layers=1,1 --set data.batch_size=4 --set train.run_dir="$TMP/l2s" \
  --resume "$TMP/l2/step-2.safetensors" >/dev/null 2>"$TMP/l2s.log"
rc=$?
if [[ $rc -eq 0 && $(changes "$TMP/l2s.log") == 'model.stages 1 → 2, model.stage_layers "" → 1,1, train.steps 2 → 4' ]]; then
  ok "an empty setting is named as \"\": '$(changes "$TMP/l2s.log")'"
else bad "resume into stage_layers 1,1: exit $rc, changed settings '$(changes "$TMP/l2s.log")'"; fi

# A layer-normalised checkpoint: refused by the plain config, resumed by its own.
"$LSTMD" train "${base[@]}" --set model.layer_norm=true --set train.steps=2 \
  --set train.run_dir="$TMP/base_ln" >/dev/null 2>"$TMP/base_ln.log" \
  || bad "layer_norm base run: $(tail -2 "$TMP/base_ln.log")"
CK=$TMP/base_ln/step-2.safetensors
refused "model.layer_norm" --
"$LSTMD" train "${base[@]}" --set model.layer_norm=true --set train.run_dir="$TMP/same_ln" \
  --resume "$CK" >/dev/null 2>"$TMP/same_ln.log" \
  && grep -q "resumed from .* at step 2" "$TMP/same_ln.log" && [[ -f $TMP/same_ln/step-4.safetensors ]] \
  && ok "a layer_norm checkpoint resumes with model.layer_norm=true (step 2 → 4)" \
  || bad "layer_norm resume: $(tail -2 "$TMP/same_ln.log")"

# A fresh run (no --resume) into a run dir that holds a run is refused (cli_train.c): it would
# mix its metrics with that run's and replace its best.safetensors. Nothing there changes.
sums() { (cd "$1" && md5sum best.safetensors latest.safetensors metrics.jsonl | md5sum); }
before=$(sums "$TMP/base")
"$LSTMD" train "${base[@]}" --set train.run_dir="$TMP/base" >/dev/null 2>"$TMP/reuse.log"
rc=$?
msg=$(grep "^lstmd: train.run_dir .* already holds a run (.*): .* add --resume" "$TMP/reuse.log")
if [[ $rc -eq 2 && -n $msg && $(sums "$TMP/base") == "$before" ]]; then
  ok "a fresh run into a used run dir: exit 2, nothing changed: ${msg:0:120}..."
else bad "a fresh run into a used run dir: exit $rc, files changed: $([[ $(sums "$TMP/base") != "$before" ]] && echo yes || echo no): $(grep '^lstmd' "$TMP/reuse.log" | tail -2)"; fi

# --resume with no latest.safetensors: the newest step file (a crash between writing the first
# one and naming it latest), not a fresh run over them; only a best.safetensors: refused
"$LSTMD" train "${base[@]}" --set train.checkpoint_every=2 --set train.run_dir="$TMP/nolatest" \
  >/dev/null 2>"$TMP/nolatest.log" || bad "nolatest run: $(tail -2 "$TMP/nolatest.log")"
rm -f "$TMP/nolatest/latest.safetensors"
"$LSTMD" train "${base[@]}" --set train.steps=6 --set train.run_dir="$TMP/nolatest" --resume \
  >/dev/null 2>"$TMP/nolatest2.log"
rc=$?
if [[ $rc -eq 0 ]] && grep -q "resuming from the newest step checkpoint there, .*nolatest/step-4.safetensors" "$TMP/nolatest2.log" &&
   grep -q "resumed from .*nolatest/step-4.safetensors at step 4" "$TMP/nolatest2.log" && [[ -f $TMP/nolatest/step-6.safetensors ]]; then
  ok "--resume without latest.safetensors goes on from the newest step file (step 4 → 6)"
else bad "--resume without latest: exit $rc: $(grep '^lstmd' "$TMP/nolatest2.log" | grep -v 'effective config\|device auto' | head -3)"; fi
mkdir -p "$TMP/bestonly" && cp "$TMP/nolatest/best.safetensors" "$TMP/bestonly/" 2>/dev/null ||
  cp "$TMP/nolatest/step-4.safetensors" "$TMP/bestonly/best.safetensors"
"$LSTMD" train "${base[@]}" --set train.run_dir="$TMP/bestonly" --resume >/dev/null 2>"$TMP/bestonly.log"
rc=$?
if [[ $rc -eq 2 ]] && grep -q "^lstmd: train.run_dir .*bestonly holds best.safetensors but no latest.safetensors or step checkpoint to resume from" "$TMP/bestonly.log" &&
   [[ $(ls "$TMP/bestonly") == best.safetensors ]]; then
  ok "--resume into a run dir with only best.safetensors: exit 2, nothing written"
else bad "--resume with only best: exit $rc, files '$(ls "$TMP/bestonly" | tr '\n' ' ')': $(grep '^lstmd' "$TMP/bestonly.log" | grep -v 'effective config\|device auto' | head -2)"; fi

# --resume CKPT of another directory into a run dir that holds a run is refused the same way (it
# appended to that run's metrics and replaced its best.safetensors); nothing there changes. A
# checkpoint of the run dir itself still resumes there.
cp -a "$TMP/base" "$TMP/held"
"$LSTMD" train "${base[@]}" --set train.steps=2 --set train.seed=9 --set train.run_dir="$TMP/mine" \
  >/dev/null 2>"$TMP/mine.log" || bad "second run: $(tail -2 "$TMP/mine.log")"
before=$(sums "$TMP/held")
"$LSTMD" train "${base[@]}" --set train.run_dir="$TMP/held" --resume "$TMP/mine/step-2.safetensors" \
  >/dev/null 2>"$TMP/mix.log"
rc=$?
msg=$(grep "^lstmd: train.run_dir .*held already holds a run (.*), and --resume .* is not one of its checkpoints" "$TMP/mix.log")
if [[ $rc -eq 2 && -n $msg && $(sums "$TMP/held") == "$before" ]]; then
  ok "--resume of another dir's checkpoint into a used run dir: exit 2, nothing changed: ${msg:0:120}..."
else bad "--resume of another dir's checkpoint into a used run dir: exit $rc, files changed: $([[ $(sums "$TMP/held") != "$before" ]] && echo yes || echo no): $(grep '^lstmd' "$TMP/mix.log" | tail -2)"; fi
"$LSTMD" train "${base[@]}" --set train.run_dir="$TMP/held" --resume "$TMP/held/step-2.safetensors" \
  >/dev/null 2>"$TMP/own.log" && [[ -f $TMP/held/step-4.safetensors ]] \
  && ok "--resume of the run dir's own step file goes on there (step 2 → 4)" \
  || bad "--resume of the run dir's own step file: $(grep '^lstmd' "$TMP/own.log" | tail -2)"

# A checkpoint at or past train.steps: exit 0, saying there is nothing to train, and no new step
"$LSTMD" train "${base[@]}" --set train.steps=1 --set train.run_dir="$TMP/past" --resume "$TMP/base/step-2.safetensors" \
  >/dev/null 2>"$TMP/past.log"
rc=$?
if [[ $rc -eq 0 ]] && grep -q "step 2: the checkpoint is at or past train.steps 1; nothing to train" "$TMP/past.log" &&
   [[ ! -e $TMP/past/step-3.safetensors ]]; then
  ok "resume past train.steps: exit 0, 'nothing to train'"
else bad "resume past train.steps: rc=$rc: $(grep -v "^  " "$TMP/past.log" | tail -3)"; fi

# ... and of the run dir's own checkpoint: it evaluates (the README says so), and the checkpoint
# resumed from is kept as it was (it used to be rewritten with train.steps 1 recorded in it)
cp "$TMP/base/step-2.safetensors" "$TMP/step-2.before"
"$LSTMD" train "${base[@]}" --set train.steps=1 --set train.run_dir="$TMP/base" --resume \
  >/dev/null 2>"$TMP/past-own.log"
rc=$?
if [[ $rc -eq 0 ]] && grep -q "nothing to train" "$TMP/past-own.log" &&
   grep -q "^lstmd: eval step 2: val_loss" "$TMP/past-own.log" &&
   cmp -s "$TMP/step-2.before" "$TMP/base/step-2.safetensors"; then
  ok "resume of the run dir's own checkpoint past train.steps: evaluates, step-2 byte for byte kept"
else bad "resume own past train.steps: rc=$rc, cmp $(cmp -s "$TMP/step-2.before" "$TMP/base/step-2.safetensors" && echo same || echo differs): $(grep '^lstmd' "$TMP/past-own.log" | tail -3)"; fi

# ... and that evaluation reports only: the validation watch judged that step when the checkpoint
# was written, and judging the same model again counted one more evaluation without a new best
# (with train.early_stop_patience 1, an early stop at a step that had just been the best)
es=(--set train.eval_every=2 --set train.early_stop_patience=1 --set train.steps=4
    --set train.run_dir="$TMP/es")
"$LSTMD" train "${base[@]}" "${es[@]}" >/dev/null 2>"$TMP/es1.log" ||
  bad "early-stop run: $(grep '^lstmd' "$TMP/es1.log" | tail -2)"
"$LSTMD" train "${base[@]}" "${es[@]}" --resume >/dev/null 2>"$TMP/es2.log"
rc=$?
if [[ $rc -eq 0 ]] && grep -q "nothing to train" "$TMP/es2.log" && ! grep -q "early stop:" "$TMP/es2.log" &&
   [[ $(grep -c "early stop:" "$TMP/es1.log") == $(grep -c "early stop:" "$TMP/es/train.log") ]]; then
  ok "resume past train.steps re-scores without judging: no early stop added"
else bad "resume past train.steps judged again: rc=$rc: $(grep '^lstmd' "$TMP/es2.log" | tail -3)"; fi

[[ $fails -eq 0 ]] && echo "test_resume_guards: passed" || echo "test_resume_guards: $fails FAILED"
exit $((fails > 0))
