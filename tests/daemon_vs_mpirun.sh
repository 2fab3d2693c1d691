# daemon_vs_mpirun.sh — sourced by tests that check a model kind through the daemon
# (test_classify_train.sh, test_classify_series.sh). daemon_vs_mpirun WHAT STEPS JOB_ARGS...:
# starts `mpirun -np 2 lstmd serve` with --data-root $TMP, submits the job with lstmctl, waits
# for it, shuts the daemon down, runs the same job under `mpirun -np 2 lstmd train`, and calls
# ok/bad on whether the job SUCCEEDED with step-STEPS weights equal to mpirun's bit for bit.
# Needs LSTMD, SRC, PY, TMP (the working folder: the daemon's state goes to $TMP/state) and ok/bad.
daemon_vs_mpirun() {
  local what=$1 steps=$2; shift 2
  local ctl sock=$TMP/s.sock serve_pid id state="" msg=""
  ctl=$(dirname "$LSTMD")/lstmctl
  mpirun -np 2 "$LSTMD" serve --socket "$sock" --state-dir "$TMP/state" --data-root "$TMP" \
    >"$TMP/serve.log" 2>&1 &
  serve_pid=$!
  for _ in $(seq 150); do [[ -S $sock ]] && "$ctl" --socket "$sock" list >/dev/null 2>&1 && break; sleep 0.2; done
  id=$(timeout 30 "$ctl" --socket "$sock" submit "$@" 2>"$TMP/submit.err" | tail -1)
  for _ in $(seq 300); do
    state=$(timeout 10 "$ctl" --socket "$sock" status "$id" 2>/dev/null | head -1)
    grep -q -e SUCCEEDED -e FAILED <<<"$state" && break
    sleep 0.2
  done
  timeout 30 "$ctl" --socket "$sock" shutdown >/dev/null 2>&1
  wait "$serve_pid"
  timeout 120 mpirun -np 2 "$LSTMD" train "$@" --set train.run_dir="$TMP/dref" >/dev/null 2>"$TMP/dref.err" \
    || bad "mpirun reference: $(tail -3 "$TMP/dref.err")"
  if grep -q SUCCEEDED <<<"$state" \
     && msg=$($PY "$SRC/tests/compare_checkpoints.py" "$TMP/state/runs/job-$id/step-$steps.safetensors" \
              "$TMP/dref/step-$steps.safetensors" --rtol 0); then
    ok "$what through lstmd serve + lstmctl: $state; weights = mpirun's: $msg"
  else bad "$what through the daemon: '$state' $(cat "$TMP/submit.err") $msg $(tail -3 "$TMP/serve.log")"; fi
}
