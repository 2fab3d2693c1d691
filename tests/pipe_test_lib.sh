# pipe_test_lib.sh — sourced by the pipeline tests (test_pipeline.sh, test_pipe_balance.sh) once
# they have set LSTMD, SRC and MPIEXEC: a working folder $TMP (the cwd; removed, with any rank
# still running from it, on exit), ok/bad counting $fails, the text and series datasets, the
# shared small-model settings $common (whole layers per stage: model.stage_split=layers, which a
# later --set overrides), and:
#   run NAME NP DATA [--set ...]  trains in run-NAME on NP ranks (a config file named after the
#                                 run puts NAME into every rank's argv, for pgrep); log in log-NAME
#   equal NAME REF INIT TOL       run-NAME's step-6 against run-REF's, as updates from INIT, one
#                                 float32 ulp per element allowed (compare_checkpoints.py --ulps)
#   clip_equal NAME INIT          run-NAME = run-clip-ref (updates from INIT, 1e-5), and its logged
#                                 grad_norm values those of clip-ref (tests/pipe_checks.py)
#   layout_matches LABEL          run-wave4-stream's step-6 checkpoint has run-ref-stream's layout
#   trace_checks [--set ...]      2 stages, batch 16, H 256 (compute, not per-step overhead, fills
#                                 the step), 4 chunks, traced: tests/check_pipe_trace.py on it
#   same_layout_resume LABEL [--set ...]  2 ranks, stream order, global batch 8: a run, and one
#                                 resumed from its step 3 in another folder, equal byte for byte
#   refused LABEL NAME NP KEY [--set ...]  run bad-NAME must exit 2 with an "lstmd:" line naming
#                                 KEY (a pattern) and write no checkpoint
PY=/usr/bin/python3
TMP=$(mktemp -d)
cleanup() {
  pkill -KILL -f -- "$TMP/" 2>/dev/null
  rm -rf "$TMP"
}
trap cleanup EXIT
cd "$TMP" || exit 1
fails=0
ok() { echo "ok    $*"; }
bad() { echo "FAIL  $*"; fails=$((fails + 1)); }
compare() { "$PY" "$SRC/tests/compare_checkpoints.py" "$@"; }

head -c 300000 "$SRC/data/fortunes.txt" > text.txt
"$LSTMD" prepare text --input text.txt --out text >/dev/null 2>&1 || bad "prepare text"
"$LSTMD" prepare series --input "$SRC/data/seattle-temps.csv" --target temp --horizon 4 \
  --out series >/dev/null 2>&1 || bad "prepare series"
common=(--set model.layers=4 --set model.embed=8 --set model.hidden=32 --set data.seq_len=16
        --set optim.algo=sgd --set optim.lr=0.5 --set optim.schedule=constant --set optim.clip_norm=0
        --set model.dropout=0.2 --set train.steps=6 --set train.threads=1 --set train.bucket_mb=0.01
        --set model.stage_split=layers
        --set train.log_every=1 --set train.eval_every=0 --set train.checkpoint_every=3)

run() {
  local name=$1 np=$2 data=$3
  shift 3
  : >"cfg-$name.ini"
  timeout 300 "$MPIEXEC" -np "$np" "$LSTMD" train --config "cfg-$name.ini" "${common[@]}" \
    --set data.path="$data" --set train.run_dir="run-$name" "$@" >"log-$name" 2>&1
}
equal() {
  local msg
  if msg=$(compare "run-$1/step-6.safetensors" "run-$2/step-6.safetensors" --initial "$3" \
           --rtol "$4" --ulps 1 2>&1); then
    ok "$1 = $2: $msg"
  else bad "$1 vs $2: $msg"; tail -3 "log-$1"; fi
}
same_layout_resume() {
  local label=$1
  shift
  local args=(train "${common[@]}" --set data.path=../text --set data.order=stream
              --set data.batch_size=8 --set train.run_dir=run "$@")
  mkdir -p same-a same-b
  (cd same-a && timeout 120 "$MPIEXEC" -np 2 "$LSTMD" "${args[@]}" >log 2>&1) || bad "$label: same-layout run"
  (cd same-b && timeout 120 "$MPIEXEC" -np 2 "$LSTMD" "${args[@]}" \
    --resume ../same-a/run/step-3.safetensors >log 2>&1) || bad "$label: same-layout resume"
  if cmp -s same-a/run/step-6.safetensors same-b/run/step-6.safetensors; then
    ok "$label resume from step 3 on the same layout: step 6 byte for byte"
  else bad "$label same-layout resume differs: $(compare same-b/run/step-6.safetensors same-a/run/step-6.safetensors --rtol 0 2>&1)"; fi
}
refused() {
  local label=$1 name=$2 np=$3 key=$4
  shift 4
  run "bad-$name" "$np" text --set data.batch_size=8 "$@"
  local rc=$?
  if [[ $rc -eq 2 ]] && grep -q "^lstmd: .*$key" "log-bad-$name" && ! ls "run-bad-$name"/*.safetensors >/dev/null 2>&1; then
    ok "$label: exit 2: $(grep -m1 "^lstmd: .*$key" "log-bad-$name" | cut -c1-110)"
  else bad "$label: exit $rc: $(grep '^lstmd:' "log-bad-$name" | grep -v 'effective\|device' | head -2)"; fi
}
clip_equal() {
  local msg
  equal "$1" clip-ref "$2" 1e-5
  if msg=$("$PY" "$SRC/tests/pipe_checks.py" clip-norms "run-$1/metrics.jsonl" \
           run-clip-ref/metrics.jsonl); then ok "$1: $msg"; else bad "$1: $msg"; fi
}
layout_matches() {
  local msg
  if msg=$("$PY" "$SRC/tests/pipe_checks.py" same-layout run-wave4-stream/step-6.safetensors \
           run-ref-stream/step-6.safetensors); then ok "$1 checkpoint vs one rank's: $msg"
  else bad "$1 checkpoint layout: $msg"; fi
}
trace_checks() {
  local msg
  run trace 2 text --set data.batch_size=16 --set model.hidden=256 --set model.stages=2 "$@" \
    --set train.time_chunks=4 --set train.checkpoint_every=0 --trace "$TMP/trace.json"
  if msg=$("$PY" "$SRC/tests/check_pipe_trace.py" trace.json 2 4 run-trace/metrics.jsonl 2>&1); then
    ok "trace: $msg"
  else bad "trace: $msg"; fi
}
