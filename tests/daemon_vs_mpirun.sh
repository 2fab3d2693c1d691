# daemon_vs_mpirun.sh — sourced by tests that check a model kind through the daemon
# (test_classify_train.sh, test_classify_series.sh). daemon_vs_mpirun WHAT STEPS JOB_ARGS...:
# starts `mpirun -np 2 lstmd serve` with --data-root $TMP, submits the job with lstmctl, waits
# for it, shuts the daemon down, runs the same job under `mpirun -np 2 lstmd train`, and calls
# ok/bad on whether the job SUCCEEDED with step-STEPS weights equal to mpirun's bit for bit, and
# whether `lstmctl status` (text and --json) shows the validation accuracy of mpirun's last
# evaluation (metrics.jsonl keeps 6 digits; these are classifiers: the final evaluation always
# runs), and whether `submit --continue` of the job is accepted and runs 2 steps more.
# Needs LSTMD, SRC, PY, TMP (the working folder: the daemon's state goes to $TMP/state) and ok/bad.
daemon_vs_mpirun() {
  local what=$1 steps=$2; shift 2
  local ctl sock=$TMP/s.sock serve_pid id state="" msg=""
  ctl=$(dirname "$LSTMD")/lstmctl
  mpirun -np 2 "$LSTMD" serve --socket "$sock" --state-dir "$TMP/state" --data-root "$TMP" \
    >"$TMP/serve.log" 2>&1 &
  serve_pid=$!
  for _ in $(seq 150); do [[ -S $sock ]] && "$ctl" --socket "$sock" list >/dev/null 2>&1 && break; sleep 0.2; done
  [[ -S $sock ]] || bad "$what: the daemon did not start: $(tail -3 "$TMP/serve.log")"
  id=$(timeout 30 "$ctl" --socket "$sock" submit "$@" 2>"$TMP/submit.err" | tail -1)
  for _ in $(seq 300); do
    state=$(timeout 10 "$ctl" --socket "$sock" status "$id" 2>/dev/null | head -1)
    grep -q -e SUCCEEDED -e FAILED <<<"$state" && break
    sleep 0.2
  done
  timeout 10 "$ctl" --socket "$sock" status "$id" >"$TMP/status.txt" 2>&1
  timeout 10 "$ctl" --socket "$sock" --json status "$id" >"$TMP/status.json" 2>&1
  # --continue: a classifier's checkpoint holds its longest sequence as data.seq_len, which the
  # submission compared with the key it does not use, and refused every such continue
  local more cstate=""
  more=$(timeout 30 "$ctl" --socket "$sock" submit --continue "$id" --set train.steps=$((steps + 2)) \
    2>"$TMP/continue.err" | tail -1)
  for _ in $(seq 300); do
    [[ -n $more ]] || break
    cstate=$(timeout 10 "$ctl" --socket "$sock" status "$more" 2>/dev/null | head -1)
    grep -q -e SUCCEEDED -e FAILED <<<"$cstate" && break
    sleep 0.2
  done
  if grep -q SUCCEEDED <<<"$cstate" && [[ -f $TMP/state/runs/job-$id/step-$((steps + 2)).safetensors ]]; then
    ok "$what: submit --continue $id accepted, SUCCEEDED at step $((steps + 2))"
  else bad "$what: --continue $id: '$cstate' $(cat "$TMP/continue.err")"; fi
  timeout 30 "$ctl" --socket "$sock" shutdown >/dev/null 2>&1
  for _ in $(seq 300); do kill -0 "$serve_pid" 2>/dev/null || break; sleep 0.2; done
  kill -0 "$serve_pid" 2>/dev/null && { bad "$what: the daemon did not stop within 60 s"; kill -9 "$serve_pid"; }
  wait "$serve_pid"
  timeout 120 mpirun -np 2 "$LSTMD" train "$@" --set train.run_dir="$TMP/dref" >/dev/null 2>"$TMP/dref.err" \
    || bad "mpirun reference: $(tail -3 "$TMP/dref.err")"
  if grep -q SUCCEEDED <<<"$state" \
     && msg=$($PY "$SRC/tests/compare_checkpoints.py" "$TMP/state/runs/job-$id/step-$steps.safetensors" \
              "$TMP/dref/step-$steps.safetensors" --rtol 0); then
    ok "$what through lstmd serve + lstmctl: $state; weights = mpirun's: $msg"
  else bad "$what through the daemon: '$state' $(cat "$TMP/submit.err") $msg $(tail -3 "$TMP/serve.log")"; fi
  if msg=$($PY - "$TMP/dref/metrics.jsonl" "$TMP/status.json" "$TMP/status.txt" 2>&1 <<'PYEOF'
import json, sys
acc = [json.loads(l)['val_accuracy'] for l in open(sys.argv[1]) if '"val_accuracy"' in l][-1]
job = json.load(open(sys.argv[2]))
text = open(sys.argv[3]).read()
assert job['val_accuracy'] is not None and abs(job['val_accuracy'] - acc) < 1e-6, (job['val_accuracy'], acc)
assert ('val accuracy %.4f' % acc) in text, text
print('val accuracy %.4f' % acc)
PYEOF
  ); then
    ok "$what: lstmctl status shows mpirun's last $msg (text and --json)"
  else bad "$what: lstmctl status lacks the validation accuracy: $msg $(cat "$TMP/status.txt" "$TMP/status.json")"; fi
}
