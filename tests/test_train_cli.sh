#!/usr/bin/env bash
# test_train_cli.sh — end-to-end training behaviour through the lstmd binary:
#  1. determinism: the same config and seed give byte-identical checkpoints;
#  2. bitwise resume: k steps + --resume to n equals n straight steps (shuffle and stream order,
#     dropout, gradient accumulation, SGD and AdamW); the batch split over 2 or 3 threads gives
#     the weights of one thread (within 1e-5);
#  3. SIGTERM finishes the step, writes a checkpoint, exits 0, and the run resumes from it;
#  4. text: eval prints one JSON line; sample prints the prime then N bytes, greedy is repeatable;
#  5. series: prepare → train → eval → predict writes one forecast row per input row;
#  6. --version names lstmd, the MPI library and the GPU backend's state, and exits 0;
#  7. the example job configs (deploy/examples/*.ini) parse and train a few steps.
set -u
LSTMD=$(realpath "${1:?usage: test_train_cli.sh LSTMD_BINARY SOURCE_DIR}")
SRC=$(realpath "${2:?}")
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
  # one history: the records the interrupted run logged after step 6 are gone
  /usr/bin/python3 -c 'import json,sys; s=[json.loads(l)["step"] for l in open(sys.argv[1]) if "\"loss\"" in l]; sys.exit(s != sorted(set(s)))' \
    "$d/part/run/metrics.jsonl" || bad "$v: metrics.jsonl has repeated steps after the resume"
  if cmp -s "$d/full/run/step-12.safetensors" "$d/part/run/step-12.safetensors"; then
    ok "bitwise resume ($v): step 6 + resume = 12 straight steps"
  else bad "bitwise resume ($v): checkpoints differ"; fi
done

# 2b. the batch split across threads computes what one thread computes (SGD: Adam would turn
#     rounding-level differences of near-zero gradients into full-size steps)
for order in shuffle stream; do
  split=(--set optim.algo=sgd --set optim.lr=0.5 --set data.order=$order --set model.dropout=0.2
         --set model.hidden=32)
  for th in 1 2 3; do
    run "$TMP/split-$order-$th" 12 "${split[@]}" --set train.threads=$th || bad "threads=$th run"
  done
  for th in 2 3; do
    if msg=$(/usr/bin/python3 "$SRC/tests/compare_checkpoints.py" "$TMP/split-$order-1/run/step-12.safetensors" \
             "$TMP/split-$order-$th/run/step-12.safetensors" --rtol 1e-5); then
      ok "batch split over $th threads = 1 thread ($order, dropout): $msg"
    else bad "batch split over $th threads ($order): $msg"; fi
  done
done

# 3. SIGTERM: finish the step, checkpoint, exit 0, resumable
mkdir -p "$TMP/sig"
(cd "$TMP/sig" && exec "$LSTMD" train "${common[@]}" --set train.run_dir=run --set train.steps=100000 \
   --set train.log_every=1 --set train.checkpoint_every=0 >/dev/null 2>"$TMP/sig/log") &
pid=$!
for _ in $(seq 100); do [[ -s "$TMP/sig/run/metrics.jsonl" ]] && break; sleep 0.1; done
kill -TERM $pid
wait $pid
rc=$?
if [[ $rc -eq 0 && -f "$TMP/sig/run/latest.safetensors" ]] && grep -q "stopped at step" "$TMP/sig/log"; then
  ok "SIGTERM: exit 0 with a checkpoint and a resume hint"
else bad "SIGTERM: rc=$rc, log: $(tail -2 "$TMP/sig/log")"; fi
stopped=$(grep -o "stopped at step [0-9]*" "$TMP/sig/log" | grep -o "[0-9]*$")
(cd "$TMP/sig" && "$LSTMD" train "${common[@]}" --set train.run_dir=run --set train.steps=$((stopped + 2)) \
   --resume >/dev/null 2>"$TMP/sig/log2") && [[ -f "$TMP/sig/run/step-$((stopped + 2)).safetensors" ]] \
  && ok "SIGTERM: resumed to step $((stopped + 2))" || bad "SIGTERM: resume failed"

# 4. text eval and sample
ck="$TMP/a/run/step-12.safetensors"
out=$("$LSTMD" eval --checkpoint "$ck" --data "$TMP/ds" 2>/dev/null)
if [[ $(wc -l <<<"$out") -eq 1 ]] && /usr/bin/python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert d["loss"]>0 and abs(d["bpc"]-d["loss"]/0.6931471805599453)<1e-3 and d["tokens"]>0' "$out"; then
  ok "eval: one JSON line ($out)"
else bad "eval output: $out"; fi
s1=$("$LSTMD" sample --checkpoint "$ck" --prime "The " --length 40 --temperature 0 2>/dev/null | od -An -c)
s2=$("$LSTMD" sample --checkpoint "$ck" --prime "The " --length 40 --temperature 0 2>/dev/null | od -An -c)
n=$("$LSTMD" sample --checkpoint "$ck" --prime "The " --length 40 --seed 3 2>/dev/null | wc -c)
p=$("$LSTMD" sample --checkpoint "$ck" --prime "The " --length 40 --seed 3 2>/dev/null | head -c 4)
[[ "$s1" == "$s2" && $n -eq 44 && "$p" == "The " ]] && ok "sample: prime + 40 bytes, greedy repeatable" \
  || bad "sample: n=$n prime='$p'"

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

# 7. example configs
for ex in char_lm:ds series_forecast:sds; do
  name=${ex%%:*}
  if "$LSTMD" train --config "$SRC/deploy/examples/$name.ini" --set data.path="$TMP/${ex#*:}" \
       --set train.steps=2 --set train.run_dir="$TMP/ex_$name" --set train.threads=1 \
       >/dev/null 2>"$TMP/ex_$name.log" && [[ -f "$TMP/ex_$name/step-2.safetensors" ]]; then
    ok "deploy/examples/$name.ini trains"
  else bad "deploy/examples/$name.ini: $(tail -2 "$TMP/ex_$name.log")"; fi
done

[[ $fails -eq 0 ]] && echo "test_train_cli: passed" || echo "test_train_cli: $fails FAILED"
exit $((fails > 0))
