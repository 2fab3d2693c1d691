#!/usr/bin/env bash
# test_train_cli.sh — end-to-end training behaviour through the lstmd binary:
#  1. determinism: the same config and seed give byte-identical checkpoints;
#  2. bitwise resume: k steps + --resume to n equals n straight steps (shuffle and stream order,
#     dropout, gradient accumulation, SGD and AdamW), each resume saying so and metrics.jsonl
#     holding exactly one record per logged step; the batch split over 2 or 3 threads makes the
#     updates of one thread (within 1e-5 of the update's norm, clip off), and so does the embedding
#     folded into layer 0; one step at lr 0 leaves
#     the initialisation (SGD and AdamW with weight decay): the --initial of the equivalences;
#  3. SIGTERM finishes the step, writes a checkpoint, exits 0, and the run resumes from it (says
#     so, at the step it stopped) to the weights of an uninterrupted run, bitwise; meanwhile a
#     second run in the same run dir exits 2 naming the first one's pid; after a kill -9 the next
#     run in that run dir goes ahead and removes a temp file of a cut-short write; metrics.jsonl on a full disk stops the run with a
#     checkpoint, exit 1; a resume drops metrics.jsonl's torn lines;
#  4. text: eval prints one JSON line; sample prints the prime then N bytes (exit 0), greedy
#     twice gives the same prime + 40 bytes;
#  5. series: prepare → train → eval → predict writes one forecast row per input row;
#  6. --version names lstmd, the MPI library and the GPU backend's state, and exits 0; doctor
#     prints its facts (the libraries' files as loaded, the ISA as forced), --json parses,
#     --device cuda exits 1 without a GPU, a bad argument 2;
#  7. the example job configs (deploy/examples/*.ini) parse and train a few steps.
set -u
LSTMD=$(realpath "${1:?usage: test_train_cli.sh LSTMD_BINARY SOURCE_DIR}")
SRC=$(realpath "${2:?}")
PY=/usr/bin/python3
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fails=0
ok() { echo "ok    $*"; }
bad() { echo "FAIL  $*"; fails=$((fails + 1)); }

head -c 200000 "$SRC/data/fortunes.txt" > "$TMP/small.txt"
"$LSTMD" prepare text --input "$TMP/small.txt" --out "$TMP/ds" 2>/dev/null || bad "prepare text"
common=(--set data.path="$TMP/ds" --set data.seq_len=16 --set data.batch_size=4
        --set model.embed=8 --set model.hidden=16 --set model.layers=2
        --set train.log_every=2 --set train.eval_every=0 --set train.threads=1)

# run DIR STEPS [extra args...]: trains in DIR with run_dir "run" (same config text everywhere).
run() {
  local dir=$1 steps=$2
  shift 2
  mkdir -p "$dir"
  (cd "$dir" && "$LSTMD" train "${common[@]}" --set train.run_dir=run --set train.steps=12 \
     --set train.checkpoint_every=6 "$@" >/dev/null 2>"$dir/log.$steps") || return 1
}

# 1. determinism
run "$TMP/a" 12 && run "$TMP/b" 12 || bad "training runs"
if cmp -s "$TMP/a/run/step-12.safetensors" "$TMP/b/run/step-12.safetensors"; then
  ok "determinism: identical checkpoints from identical runs"
else bad "determinism: checkpoints differ"; fi
cmp -s "$TMP/a/run/latest.safetensors" "$TMP/a/run/step-12.safetensors" \
  && ok "latest.safetensors is the newest checkpoint" || bad "latest.safetensors != step-12"

# 2. bitwise resume, several configurations
variants=("order=shuffle" "order=stream" "dropout" "accum" "sgd")
for v in "${variants[@]}"; do
  case $v in
    order=*) extra=(--set data.order="${v#order=}") ;;
    dropout) extra=(--set data.order=stream --set model.dropout=0.3) ;;
    accum) extra=(--set optim.grad_accum=3 --set data.order=shuffle) ;;
    sgd) extra=(--set optim.algo=sgd --set optim.lr=0.1 --set data.order=stream) ;;
  esac
  d="$TMP/resume-$v"
  run "$d/full" 12 "${extra[@]}" || bad "$v: full run"
  # A run stopped after step 6 (steps=12 in its config, so the LR schedule is the same): take
  # step-6 as the crash point, delete everything after it, then resume.
  run "$d/part" 12 "${extra[@]}" || bad "$v: partial run"
  rm -f "$d/part/run/step-12.safetensors"
  ln -f "$d/part/run/step-6.safetensors" "$d/part/run/latest.safetensors"
  (cd "$d/part" && "$LSTMD" train "${common[@]}" --set train.run_dir=run --set train.steps=12 \
      --set train.checkpoint_every=6 "${extra[@]}" --resume >/dev/null 2>"$d/part/log.resume") \
    || bad "$v: resume failed: $(tail -2 "$d/part/log.resume")"
  grep -q "resumed from run/latest.safetensors at step 6" "$d/part/log.resume" || bad "$v: no resume message"
  # one history: the records the interrupted run logged after step 6 are gone, and those of the
  # resumed run follow: exactly one training record per logged step (log_every=2), in order
  steps=$(/usr/bin/python3 -c 'import json,sys; print(*[json.loads(l)["step"] for l in open(sys.argv[1]) if "\"loss\"" in l])' \
    "$d/part/run/metrics.jsonl" 2>&1)
  [[ $steps == "2 4 6 8 10 12" ]] || bad "$v: metrics.jsonl training records at steps '$steps', want '2 4 6 8 10 12'"
  if cmp -s "$d/full/run/step-12.safetensors" "$d/part/run/step-12.safetensors"; then
    ok "bitwise resume ($v): step 6 + resume = 12 straight steps"
  else bad "bitwise resume ($v): checkpoints differ"; fi
done

# 2b. the batch split across threads computes what one thread computes (SGD: Adam would turn
#     rounding-level differences of near-zero gradients into full-size steps). Clip off (a clip
#     rescales the gradient to a fixed norm, hiding a uniform error in its scale); updates from
#     the initialisation compared against their own norm (compare_checkpoints.py --initial).
run "$TMP/split-init" 1 --set model.hidden=32 --set optim.lr=0 --set train.steps=1 || bad "initialisation run"
for order in shuffle stream; do
  split=(--set optim.algo=sgd --set optim.lr=0.5 --set data.order=$order --set model.dropout=0.2
         --set model.hidden=32 --set optim.clip_norm=0)
  for th in 1 2 3; do
    run "$TMP/split-$order-$th" 12 "${split[@]}" --set train.threads=$th || bad "threads=$th run"
  done
  for th in 2 3; do
    if msg=$(/usr/bin/python3 "$SRC/tests/compare_checkpoints.py" "$TMP/split-$order-1/run/step-12.safetensors" \
             "$TMP/split-$order-$th/run/step-12.safetensors" --rtol 1e-5 \
             --initial "$TMP/split-init/run/step-1.safetensors"); then
      ok "batch split over $th threads = 1 thread ($order, dropout): $msg"
    else bad "batch split over $th threads ($order): $msg"; fi
  done
done

# 2b'. the recurrence split by hidden unit across the threads (kernels/cpu/recur_team.h; forced
#     on with LSTMD_RECUR_TEAM=1, as auto takes it only where W_hh outgrows a core's L2) gives
#     the bits of the slices alone, dropout and carried state included.
team=(--set model.hidden=64 --set model.dropout=0.2 --set data.order=stream --set train.threads=2)
for t in 0 1; do
  LSTMD_RECUR_TEAM=$t run "$TMP/team-$t" 12 "${team[@]}" || bad "LSTMD_RECUR_TEAM=$t run"
done
if ! grep -q "recurrence split by hidden unit" "$TMP/team-1/log.12"; then
  grep -q "lstmd avx\(512\|2\) kernels" "$TMP/team-1/log.12" && bad "LSTMD_RECUR_TEAM=1: no split in the log" \
    || echo "skip  recurrence split: no packed kernels on this ISA"
elif grep -q "recurrence split by hidden unit" "$TMP/team-0/log.12"; then
  bad "LSTMD_RECUR_TEAM=0 still split the recurrence"
elif cmp -s "$TMP/team-0/run/step-12.safetensors" "$TMP/team-1/run/step-12.safetensors"; then
  ok "recurrence split by hidden unit over 2 threads = the slices alone, bitwise"
else bad "recurrence split by hidden unit: checkpoints differ from the slices alone"; fi
# refuses_yes VAR: training with VAR=yes (neither 0, 1 nor auto) exits 2 naming it.
refuses_yes() {
  env "$1=yes" "$LSTMD" train "${common[@]}" --set train.run_dir="$TMP/$1-bad" \
    --set train.steps=1 >/dev/null 2>"$TMP/$1-bad.log"
  local rc=$?
  [[ $rc == 2 ]] && grep -q "$1=yes" "$TMP/$1-bad.log" && ok "$1=yes exits 2 naming it" ||
    bad "$1=yes: exit $rc, $(tail -1 "$TMP/$1-bad.log")"
}
refuses_yes LSTMD_RECUR_TEAM

# 2b''. the embedding folded into layer 0 (kernels/cpu/embed_fold_cpu.h; forced with
#     LSTMD_EMBED_FOLD=1, as auto folds only where a thread's window holds 4 tokens per
#     vocabulary row) makes the updates of the unfolded model, within 1e-5 of the update's norm
#     beyond 1 ulp of the weights (embed.weight's update is ~1e-3 of weights near 1, so a 1-ulp
#     rounding of one element is 1.6e-4 of it: compare_checkpoints.py --ulps):
#     on 1 thread (the plain layer) and on 2 with the recurrence split; the compute line says
#     which it ran; another value exits 2 naming it.
fold=(--set model.hidden=64 --set model.dropout=0.2 --set optim.algo=sgd --set optim.lr=0.5
      --set optim.clip_norm=0)
LSTMD_EMBED_FOLD=0 run "$TMP/fold-init" 1 "${fold[@]}" --set optim.lr=0 --set train.steps=1 ||
  bad "LSTMD_EMBED_FOLD: initialisation run"
for th in 1 2; do
  for f in 0 1; do
    LSTMD_RECUR_TEAM=1 LSTMD_EMBED_FOLD=$f run "$TMP/fold-$th-$f" 8 "${fold[@]}" \
      --set train.threads=$th --set train.steps=8 || bad "LSTMD_EMBED_FOLD=$f run on $th threads"
  done
  if ! grep -q "embedding folded into layer 0" "$TMP/fold-$th-1/log.8" ||
     grep -q "embedding folded" "$TMP/fold-$th-0/log.8"; then
    bad "LSTMD_EMBED_FOLD on $th threads: the compute lines do not say 1 folded and 0 did not"
  elif ((th == 2)) && grep -q "lstmd avx\(512\|2\) kernels" "$TMP/fold-2-1/log.8" &&
       ! grep -q "recurrence split by hidden unit" "$TMP/fold-2-1/log.8"; then
    bad "LSTMD_EMBED_FOLD on 2 threads: the recurrence was not split (LSTMD_RECUR_TEAM=1)"
  elif msg=$(/usr/bin/python3 "$SRC/tests/compare_checkpoints.py" \
             "$TMP/fold-$th-0/run/step-8.safetensors" "$TMP/fold-$th-1/run/step-8.safetensors" --rtol 1e-5 \
             --initial "$TMP/fold-init/run/step-1.safetensors" --ulps 1); then
    ok "embedding folded into layer 0 = unfolded, $th thread(s): $msg"
  else bad "embedding folded into layer 0, $th thread(s): $msg"; fi
done
refuses_yes LSTMD_EMBED_FOLD

# 2c. one step at lr 0 leaves every weight where the initialisation put it, whatever the
#     optimizer: AdamW with decoupled weight decay and SGD with momentum and L2 end on the same
#     model tensors, bitwise (and a step at lr > 0 moves them). The equivalence tests take such a
#     run as the --initial checkpoint of their updates.
run "$TMP/lr0-adamw" 1 --set optim.lr=0 --set train.steps=1 --set optim.weight_decay=0.1 || bad "lr 0 AdamW run"
run "$TMP/lr0-sgd" 1 --set optim.lr=0 --set train.steps=1 --set optim.algo=sgd --set optim.weight_decay=0.1 \
  --set optim.momentum=0.9 || bad "lr 0 SGD run"
run "$TMP/lr-adamw" 1 --set optim.lr=0.01 --set train.steps=1 || bad "lr 0.01 AdamW run"
if msg=$(/usr/bin/python3 "$SRC/tests/compare_checkpoints.py" "$TMP/lr0-adamw/run/step-1.safetensors" \
         "$TMP/lr0-sgd/run/step-1.safetensors" --rtol 0) \
   && ! /usr/bin/python3 "$SRC/tests/compare_checkpoints.py" "$TMP/lr0-adamw/run/step-1.safetensors" \
         "$TMP/lr-adamw/run/step-1.safetensors" --rtol 0 >/dev/null; then
  ok "lr 0: AdamW + decay and SGD + momentum + L2 leave the same weights ($msg); lr 0.01 moves them"
else bad "lr 0 does not leave the initialisation: $msg"; fi

# 3. SIGTERM: finish the step, checkpoint, exit 0, resumable (constant LR, so that train.steps does
#    not shape the run and the resumed run can be compared with an uninterrupted one)
mkdir -p "$TMP/sig"
sig=(--set train.run_dir=run --set optim.schedule=constant --set train.log_every=1 --set train.checkpoint_every=0)
(cd "$TMP/sig" && exec "$LSTMD" train "${common[@]}" "${sig[@]}" --set train.steps=100000 \
   >/dev/null 2>"$TMP/sig/log") &
pid=$!
for _ in $(seq 100); do [[ -s "$TMP/sig/run/metrics.jsonl" ]] && break; sleep 0.1; done
# 3a. one run at a time in a run dir (worker/io/durable.c: lstmd_run_dir_lock)
(cd "$TMP/sig" && "$LSTMD" train "${common[@]}" "${sig[@]}" --set train.steps=3 >/dev/null 2>"$TMP/sig/second")
rc=$?
if [[ $rc -eq 2 ]] && grep -q "train.run_dir run is in use by another run (pid $pid on " "$TMP/sig/second"; then
  ok "a second run in a run dir in use: exit 2, $(grep -o 'in use by .*)' "$TMP/sig/second")"
else bad "second run in the same run dir: rc=$rc: $(tail -2 "$TMP/sig/second")"; fi
kill -TERM $pid
wait $pid
rc=$?
if [[ $rc -eq 0 && -f "$TMP/sig/run/latest.safetensors" ]] && grep -q "stopped at step" "$TMP/sig/log"; then
  ok "SIGTERM: exit 0 with a checkpoint and a resume hint"
else bad "SIGTERM: rc=$rc, log: $(tail -2 "$TMP/sig/log")"; fi
stopped=$(grep -o "stopped at step [0-9]*" "$TMP/sig/log" | grep -o "[0-9]*$")
stopped=${stopped:-0}
n=$((stopped + 2))
(cd "$TMP/sig" && "$LSTMD" train "${common[@]}" "${sig[@]}" --set train.steps=$n --resume >/dev/null 2>"$TMP/sig/log2")
rc=$?
mkdir -p "$TMP/sig-straight"
(cd "$TMP/sig-straight" && "$LSTMD" train "${common[@]}" "${sig[@]}" --set train.steps=$n >/dev/null 2>"$TMP/sig-straight/log") \
  || bad "SIGTERM: uninterrupted run to step $n"
if [[ $rc -eq 0 && $stopped -gt 0 ]] && grep -q "resumed from run/latest.safetensors at step $stopped$" "$TMP/sig/log2" \
   && grep -q "trained steps $((stopped + 1))\.\.$n " "$TMP/sig/log2" \
   && cmp -s "$TMP/sig/run/step-$n.safetensors" "$TMP/sig-straight/run/step-$n.safetensors"; then
  ok "SIGTERM: resumed at step $stopped to step $n = uninterrupted run, bitwise"
else bad "SIGTERM: resume: rc=$rc, stopped at '$stopped': $(grep -e resumed -e trained -e error "$TMP/sig/log2" | tr '\n' ' ')" \
  "$(cmp "$TMP/sig/run/step-$n.safetensors" "$TMP/sig-straight/run/step-$n.safetensors" 2>&1)"; fi

# 3b. a run killed outright leaves its lock file, but not its lock: the next run goes ahead
mkdir -p "$TMP/lock9"
(cd "$TMP/lock9" && exec "$LSTMD" train "${common[@]}" "${sig[@]}" --set train.steps=100000 >/dev/null 2>&1) &
pid=$!
for _ in $(seq 100); do [[ -s "$TMP/lock9/run/metrics.jsonl" ]] && break; sleep 0.1; done
kill -KILL $pid; wait $pid 2>/dev/null
head -c 4096 /dev/urandom > "$TMP/lock9/run/step-9.safetensors.tmp.99999" # a write a kill cut short
if [[ -s "$TMP/lock9/run/.lstmd.lock" ]] &&
   (cd "$TMP/lock9" && "$LSTMD" train "${common[@]}" "${sig[@]}" --set train.steps=2 >/dev/null 2>"$TMP/lock9/log") &&
   [[ ! -e "$TMP/lock9/run/step-9.safetensors.tmp.99999" ]] && grep -q "removed 1 temp file" "$TMP/lock9/log"; then
  ok "after kill -9 of the run holding the run dir, the next run trains there and removes the temp file left"
else bad "after kill -9: $(grep -v '^  ' "$TMP/lock9/log" | tail -2)"; fi

# 3c. metrics.jsonl that cannot be written (a symlink to /dev/full: ENOSPC): the run stops with
#     a checkpoint and exits 1, saying why (worker/io/metrics.c)
mkdir -p "$TMP/full/run" && ln -s /dev/full "$TMP/full/run/metrics.jsonl"
(cd "$TMP/full" && "$LSTMD" train "${common[@]}" "${sig[@]}" --set train.steps=40 >/dev/null 2>"$TMP/full/log")
rc=$?
if [[ $rc -eq 1 ]] && grep -q "metrics.jsonl could not be written (No space left on device); checkpoint" "$TMP/full/log" &&
   [[ -f "$TMP/full/run/latest.safetensors" ]]; then
  ok "metrics.jsonl on a full disk: exit 1 with a checkpoint: $(grep -o 'stopped at step [0-9]*' "$TMP/full/log")"
else bad "metrics.jsonl on a full disk: rc=$rc: $(grep -v '^  ' "$TMP/full/log" | tail -2)"; fi
# 3d. a resume drops metrics.jsonl's torn lines (a record cut short, run on into the next one)
mkdir -p "$TMP/torn"
(cd "$TMP/torn" && "$LSTMD" train "${common[@]}" "${sig[@]}" --set train.steps=4 --set train.checkpoint_every=2 \
   >/dev/null 2>&1) || bad "torn: first run"
m=$TMP/torn/run/metrics.jsonl
$PY - "$m" <<'EOF_PY'
import sys
p = sys.argv[1]
lines = open(p).read().splitlines(True)
lines.insert(1, lines[1][:25])            # a record cut short, running on into the next
open(p, 'w').write(''.join(lines) + '{"step":4,"lo')   # and a torn tail
EOF_PY
(cd "$TMP/torn" && "$LSTMD" train "${common[@]}" "${sig[@]}" --set train.steps=6 --resume run/step-2.safetensors \
   >/dev/null 2>"$TMP/torn/log2")
rc=$?
if [[ $rc -eq 0 ]] && $PY -c "import json,sys; [json.loads(l) for l in open(sys.argv[1])]" "$m" 2>/dev/null &&
   grep -q "torn or overlong lines dropped" "$TMP/torn/log2"; then
  ok "resume: torn metrics.jsonl lines dropped ($(grep -o '[0-9]* torn or overlong lines dropped' "$TMP/torn/log2")), every line a record"
else bad "resume over torn metrics.jsonl: rc=$rc: $(grep -v '^  ' "$TMP/torn/log2" | tail -2)"; fi

# 4. text eval and sample
ck="$TMP/a/run/step-12.safetensors"
out=$("$LSTMD" eval --checkpoint "$ck" --data "$TMP/ds" 2>/dev/null)
if [[ $(wc -l <<<"$out") -eq 1 ]] && /usr/bin/python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert d["loss"]>0 and abs(d["bpc"]-d["loss"]/0.6931471805599453)<1e-3 and d["tokens"]>0' "$out"; then
  ok "eval: one JSON line ($out)"
else bad "eval output: $out"; fi
# Outputs to files, so that every exit status is seen and bytes are compared as bytes.
"$LSTMD" sample --checkpoint "$ck" --prime "The " --length 40 --temperature 0 >"$TMP/g1" 2>"$TMP/g1.log"; r1=$?
"$LSTMD" sample --checkpoint "$ck" --prime "The " --length 40 --temperature 0 >"$TMP/g2" 2>"$TMP/g2.log"; r2=$?
"$LSTMD" sample --checkpoint "$ck" --prime "The " --length 40 --seed 3 >"$TMP/s3" 2>"$TMP/s3.log"; r3=$?
n=$(wc -c <"$TMP/s3"); p=$(head -c 4 "$TMP/s3")
[[ $r3 -eq 0 && $n -eq 44 && "$p" == "The " ]] && ok "sample: exit 0, prime + 40 bytes" \
  || bad "sample: exit $r3, $n bytes, prime '$p': $(tail -1 "$TMP/s3.log")"
if [[ $r1 -eq 0 && $r2 -eq 0 && $(wc -c <"$TMP/g1") -eq 44 && $(head -c 4 "$TMP/g1") == "The " ]] \
   && cmp -s "$TMP/g1" "$TMP/g2"; then
  ok "sample: greedy (temperature 0) twice: exit 0, the same prime + 40 bytes"
else bad "sample: greedy: exits $r1/$r2, $(wc -c <"$TMP/g1")/$(wc -c <"$TMP/g2") bytes: $(tail -1 "$TMP/g1.log")"; fi

# 5. series end to end
"$LSTMD" prepare series --input "$SRC/data/seattle-temps.csv" --target temp --horizon 3 --out "$TMP/sds" 2>/dev/null \
  || bad "prepare series"
(cd "$TMP" && "$LSTMD" train --set data.path=sds --set data.seq_len=24 --set data.batch_size=8 \
   --set model.hidden=16 --set model.layers=1 --set train.steps=30 --set train.run_dir=srun \
   --set train.log_every=0 --set train.eval_every=0 >/dev/null 2>"$TMP/slog") || bad "series train: $(tail -1 "$TMP/slog")"
sout=$("$LSTMD" eval --checkpoint "$TMP/srun/step-30.safetensors" --data "$TMP/sds" 2>/dev/null)
/usr/bin/python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert d["loss"]>0 and d["tokens"]>0 and "bpc" not in d' "$sout" \
  && ok "series eval: $sout" || bad "series eval: $sout"
head -101 "$SRC/data/seattle-temps.csv" > "$TMP/in.csv"
"$LSTMD" predict --checkpoint "$TMP/srun/step-30.safetensors" --input "$TMP/in.csv" --out "$TMP/pred.csv" 2>/dev/null \
  || bad "predict"
if [[ $(head -1 "$TMP/pred.csv") == "row,temp+1,temp+2,temp+3" && $(wc -l < "$TMP/pred.csv") -eq 101 ]] &&
   awk -F, 'NR>1 && (NF!=4 || $1!=NR-2 || $2<0 || $2>120) {exit 1}' "$TMP/pred.csv"; then
  ok "predict: 100 rows of 3-step forecasts in a plausible range"
else bad "predict output: $(head -3 "$TMP/pred.csv")"; fi

# 6. --version (no mpirun: MPI_Get_library_version needs no MPI_Init)
if ver=$("$LSTMD" --version 2>&1) && grep -q "^lstmd [0-9]" <<<"$ver" && grep -q "MPI" <<<"$ver" \
   && grep -q "OpenBLAS" <<<"$ver" && grep -q "^GPU backend: " <<<"$ver"; then
  ok "--version: $(head -1 <<<"$ver"), $(grep -m1 '^MPI' <<<"$ver" | cut -c14-50)…"
else bad "--version output: $ver"; fi

# 6b. doctor: one line per fact, the libraries' files as loaded, --json, the verdict's exit code
doc=$("$LSTMD" doctor 2>&1); rc=$?
blas_file=$(grep '^blas ' <<<"$doc" | grep -o '/[^ ]*libopenblas[^ ]*')
mpi_file=$(grep '^mpi ' <<<"$doc" | grep -o '/[^ ]*libmpi[^ ]*')
if [[ $rc -eq 0 ]] && grep -q '^isa  *\(avx512\|avx2\|generic\) (this CPU has' <<<"$doc" &&
   [[ -f "$blas_file" && -f "$mpi_file" ]] && grep -q '^launcher  *none: one rank' <<<"$doc" &&
   grep -q '^train.device  *auto -> \(cpu\|cuda\)' <<<"$doc"; then
  ok "doctor: exit 0; $(grep '^isa' <<<"$doc" | tr -s ' '); $(grep '^train.device' <<<"$doc" | cut -c15-40)…"
else bad "doctor (exit $rc): $doc"; fi
# lstmd's own choice of OpenBLAS kernels: without a preset OPENBLAS_CORETYPE (some hosts set one)
if json=$(env -u OPENBLAS_CORETYPE LSTMD_CPU_ISA=generic "$LSTMD" doctor --json 2>/dev/null) &&
   "$PY" -c 'import json,sys; d=json.loads(sys.argv[1]); assert d["isa"].startswith("generic ("), d["isa"]
assert "LSTMD_CPU_ISA=generic" in d["isa"] and "Prescott" in d["blas"] and d["can_train"] is True
assert isinstance(d["gpus"], list) if "gpus" in d else "no GPU backend" in d["gpu"]' "$json"; then
  ok "doctor --json: parses; LSTMD_CPU_ISA=generic shows in isa and blas (Prescott)"
else bad "doctor --json: $json"; fi
# a preset OPENBLAS_CORETYPE weaker than the CPU (a module or job script set it): doctor says so;
# one that is the CPU's own kernels: no note
note=$(OPENBLAS_CORETYPE=Prescott "$LSTMD" doctor 2>&1 | grep '^blas note')
best=$(env -u OPENBLAS_CORETYPE "$LSTMD" doctor 2>&1 | sed -n 's/^blas *OpenBLAS \([A-Za-z]*\) kernels.*/\1/p')
same=$(OPENBLAS_CORETYPE=$best "$LSTMD" doctor 2>&1 | grep -c '^blas note')
if [[ $best == Prescott ]]; then ok "doctor: blas note not checked (this CPU runs generic OpenBLAS kernels)"
elif [[ $note == *"OPENBLAS_CORETYPE=Prescott is set, but this CPU has"*"picks $best"* && $same == 0 ]]; then
  ok "doctor with OPENBLAS_CORETYPE=Prescott: $(tr -s ' ' <<<"$note" | cut -c1-120); with $best: none"
else bad "doctor: weak preset kernels: note '$note', best '$best', notes with $best: $same"; fi
gpus=$("$PY" -c 'import json,sys; print(len(json.loads(sys.argv[1]).get("gpus", [])))' "$json" 2>/dev/null)
"$LSTMD" doctor --device cuda >"$TMP/doc_cuda" 2>&1; rc=$?
if [[ $gpus == 0 && $rc -eq 1 ]] && grep -q '^train.device  *cuda: cannot: ' "$TMP/doc_cuda" ||
   [[ $gpus != 0 && $rc -eq 0 ]]; then
  ok "doctor --device cuda: exit $rc with $gpus GPU(s)"
else bad "doctor --device cuda: exit $rc with '$gpus' GPU(s): $(cat "$TMP/doc_cuda")"; fi
"$LSTMD" doctor --device gpu >/dev/null 2>&1
[[ $? -eq 2 ]] && ok "doctor --device gpu: exit 2" || bad "doctor --device gpu: not exit 2"

# 7. example configs
for ex in char_lm:ds series_forecast:sds; do
  name=${ex%%:*}
  if "$LSTMD" train --config "$SRC/deploy/examples/$name.ini" --set data.path="$TMP/${ex#*:}" \
       --set train.steps=2 --set train.run_dir="$TMP/ex_$name" --set train.threads=1 \
       >/dev/null 2>"$TMP/ex_$name.log" && [[ -f "$TMP/ex_$name/step-2.safetensors" ]]; then
    ok "deploy/examples/$name.ini trains"
  else bad "deploy/examples/$name.ini: $(tail -2 "$TMP/ex_$name.log")"; fi
done

# Keys that are valid but change nothing here are said once; a plain run says neither.
"$LSTMD" train "${common[@]}" --set model.layers=1 --set model.dropout=0.2 \
  --set prune.tensors=lstm.weight_hh_l0 --set train.steps=1 --set train.run_dir="$TMP/noop" \
  >/dev/null 2>"$TMP/noop.log"
rc=$?
if [[ $rc -eq 0 ]] && [[ $(grep -c "^lstmd: note: prune.tensors has no effect without prune.target_sparsity$" "$TMP/noop.log") -eq 1 ]] &&
   [[ $(grep -c "^lstmd: warning: model.dropout acts between LSTM layers; with model.layers = 1" "$TMP/noop.log") -eq 1 ]] &&
   ! grep -q "no effect without\|warning: model.dropout" "$TMP/ex_"*.log 2>/dev/null; then
  ok "no-op keys (prune.tensors without sparsity, dropout with 1 layer): one line each"
else bad "no-op keys: rc=$rc: $(grep -e warning -e note "$TMP/noop.log")"; fi
# the pipeline's keys without model.stages > 1 (train.micro_batches=4 trained data-parallel,
# without a word)
"$LSTMD" train "${common[@]}" --set train.schedule=1f1b --set train.micro_batches=4 \
  --set train.steps=1 --set train.run_dir="$TMP/noop-pipe" >/dev/null 2>"$TMP/noop-pipe.log"
rc=$?
note="^lstmd: note: train.schedule, train.micro_batches have no effect without model.stages > 1$"
if [[ $rc -eq 0 && $(grep -c "$note" "$TMP/noop-pipe.log") -eq 1 ]]; then
  ok "pipeline keys without stages: one line: $(grep "$note" "$TMP/noop-pipe.log")"
else bad "pipeline keys without stages: rc=$rc: $(grep -e warning -e note "$TMP/noop-pipe.log")"; fi

[[ $fails -eq 0 ]] && echo "test_train_cli: passed" || echo "test_train_cli: $fails FAILED"
exit $((fails > 0))
