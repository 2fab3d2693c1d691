# serve_helpers.sh — sourced by the daemon tests (test_serve.sh, test_serve_ops.sh,
# test_serve_sched.sh, test_forecast.sh): the MPI environment, a fresh $TMP with the daemon's
# socket $SOCK and state in $TMP/state, a cleanup on exit (the daemon's ranks killed, $TMP
# removed; a test with more to undo defines serve_cleanup_extra), running `mpirun -np 2 lstmd
# serve` and lstmctl against it, the small text job most of them submit (text_job), and the ok/bad
# failure count `fails`. Set LSTMD, CTL and SRC first.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_plm=isolated
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
TMP=$(mktemp -d)
SOCK=$TMP/s.sock
SERVE_PID=
serve_cleanup() {
  [[ -n $SERVE_PID ]] && kill -9 "$SERVE_PID" 2>/dev/null
  pkill -9 -f "$TMP/state" 2>/dev/null
  declare -F serve_cleanup_extra >/dev/null && serve_cleanup_extra
  rm -rf "$TMP"
}
trap serve_cleanup EXIT
fails=0
ok() { echo "ok    $*"; }
bad() { echo "FAIL  $*"; fails=$((fails + 1)); }
ctl() { "$CTL" --socket "$SOCK" "$@"; }
field() { ctl --json status "$1" | /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['$2'])"; }
wait_for() { # wait_for SECONDS COMMAND...: polls until the command succeeds
  local end=$((SECONDS + $1)); shift
  until "$@" 2>/dev/null; do ((SECONDS < end)) || return 1; sleep 0.2; done
}
start_daemon() { # start_daemon [serve options...]: returns once it answers (or fails the test);
  # on SERVE_NP ranks (default 2)
  mpirun -np "${SERVE_NP:-2}" "$LSTMD" serve --socket "$SOCK" --state-dir "$TMP/state" --data-root "$TMP" "$@" \
    >>"$TMP/serve.log" 2>&1 &
  SERVE_PID=$!
  wait_for 30 test -S "$SOCK" && wait_for 10 ctl list >/dev/null || { bad "daemon did not start: $(tail -5 "$TMP/serve.log")"; exit 1; }
}
stop_daemon() { # waits for the daemon to exit; returns its status
  local end=$((SECONDS + 60))
  while kill -0 "$SERVE_PID" 2>/dev/null && ((SECONDS < end)); do sleep 0.2; done
  wait "$SERVE_PID"; local rc=$?; SERVE_PID=; return $rc
}
text_job() { # text_job BYTES HIDDEN STEPS LOG_EVERY EVAL_EVERY CHECKPOINT_EVERY [INI LINE...]:
  # $TMP/ds from the corpus' first BYTES, and $TMP/job.ini, a small text model on it
  head -c "$1" "$SRC/data/fortunes.txt" > "$TMP/small.txt"
  "$LSTMD" prepare text --input "$TMP/small.txt" --out "$TMP/ds" 2>/dev/null || bad "prepare"
  printf '[data]\npath = ds\nseq_len = 16\nbatch_size = 4\n[model]\nembed = 8\nhidden = %s\n[train]\nsteps = %s\nlog_every = %s\neval_every = %s\ncheckpoint_every = %s\nthreads = 1\n' \
    "$2" "$3" "$4" "$5" "$6" > "$TMP/job.ini"
  shift 6
  local line
  for line in "$@"; do echo "$line" >> "$TMP/job.ini"; done
}
