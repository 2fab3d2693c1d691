#!/usr/bin/env bash
# test_serve_frozen.sh — a rank frozen (SIGSTOP) while `lstmd serve` is idle does not hang the
# others (daemon/serve_start.c's bounded start handshake), on `mpirun -np 3` with
# --start-timeout 2:
#  1. rank 2 stopped; a 3-rank job is started on 0-2, rank 2 does not answer: the start is
#     abandoned after the deadline, the job QUEUED again (attempts 0, "only 2 usable"), a line
#     names rank 2 and its host, top lists it unresponsive; the 2-rank job submitted behind it
#     starts on 0-1 within the deadline + a few seconds and SUCCEEDS;
#  2. rank 2 continued (SIGCONT): it answers its stale start, is usable again, and the 3-rank job
#     runs on 0-2 and SUCCEEDS; shutdown ends in bounded time with exit 0;
#  3. a new daemon, rank 2 stopped and marked unresponsive, a 2-rank job running: shutdown ends
#     within a bound (non-zero: the world is aborted, rank 2 named), and a restarted daemon lists
#     both jobs and runs them to SUCCEEDED;
#  4. on `mpirun -np 4`, rank 2 frozen right after answering a start (a test hook): that job waits
#     at step 0 while a 1-rank job beside it SUCCEEDS (the scheduler is not held by its "go").
set -u
LSTMD=$(realpath "${1:?usage: test_serve_frozen.sh LSTMD LSTMCTL SOURCE_DIR}")
CTL=$(realpath "${2:?}")
SRC=$(realpath "${3:?}")
source "$SRC/tests/serve_helpers.sh"
PY=/usr/bin/python3
STOPPED=
serve_cleanup_extra() { [[ -n $STOPPED ]] && kill -CONT "$STOPPED" 2>/dev/null; }
DEADLINE=2
start_np3() {
  mpirun -np 3 "$LSTMD" serve --socket "$SOCK" --state-dir "$TMP/state" --data-root "$TMP" \
    --start-timeout "$DEADLINE" >>"$TMP/serve.log" 2>&1 &
  SERVE_PID=$!
  wait_for 40 test -S "$SOCK" && wait_for 20 ctl list >/dev/null || { bad "daemon did not start: $(tail -5 "$TMP/serve.log")"; exit 1; }
}
rank_pid() { # rank_pid R: the pid of the daemon's world rank R (a child of mpirun)
  local p
  for p in $(pgrep -P "$SERVE_PID"); do
    tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1" && { echo "$p"; return 0; }
  done
  return 1
}
ends_within() { # ends_within SECONDS: the daemon exits within the bound; its status in $RC
  local end=$((SECONDS + $1))
  while kill -0 "$SERVE_PID" 2>/dev/null; do
    ((SECONDS < end)) || { kill -9 "$SERVE_PID"; wait "$SERVE_PID" 2>/dev/null; SERVE_PID=; return 1; }
    sleep 0.2
  done
  wait "$SERVE_PID"; RC=$?; SERVE_PID=; return 0
}
sub() { ctl submit --config "$TMP/job.ini" "$@" | tail -1; }
state_is() { [[ $(field "$1" state) == "$2" ]]; }
logged() { grep -q -- "$1" "$TMP/serve.log"; }
now_ms() { date +%s%3N; }

text_job 100000 16 300 100 0 100
host=$(hostname)

# 1. rank 2 frozen while idle
start_np3
STOPPED=$(rank_pid 2) || { bad "no rank 2 among mpirun's children"; exit 1; }
kill -STOP "$STOPPED"
t0=$(now_ms)
wide=$(sub --set resources.ranks=3 --name wide)
pair=$(sub --set resources.ranks=2 --name pair)
wait_for $((DEADLINE + 30)) state_is "$pair" SUCCEEDED || bad "job $pair did not succeed beside frozen rank 2: $(ctl list)"
started=$(field "$pair" started_ms); delay=$((started - t0))
[[ $(field "$pair" state) == SUCCEEDED && $(field "$pair" ranks_text) == 0-1 ]] && ((delay <= (DEADLINE + 5) * 1000)) \
  && ok "rank 2 stopped: job $pair ran on ranks 0-1, started $delay ms after submission (deadline ${DEADLINE} s), SUCCEEDED" \
  || bad "job $pair: $(field "$pair" state) on '$(field "$pair" ranks_text)', started $delay ms after submission"
line="lstmd: job $wide: start abandoned: rank 2 ($host) did not answer the start command within $DEADLINE s"
logged "$line" && ok "the daemon named the rank: $(grep -- "$line" "$TMP/serve.log")" \
  || bad "no line '$line': $(grep -i 'abandon\|unresponsive' "$TMP/serve.log")"
w=$(field "$wide" waiting)
[[ $(field "$wide" state) == QUEUED && $(field "$wide" attempts) == 0 && $w == "needs 3 ranks, only 2 usable (1 unresponsive)" ]] \
  && ok "job $wide queued again, not counted as an attempt: waits: $w" \
  || bad "job $wide: $(field "$wide" state), attempts $(field "$wide" attempts), waits '$w'"
top=$(ctl top --once | head -1)
[[ $top == "world 3 ranks: 0 busy, 2 free, 1 unresponsive (2); 1 job queued" ]] && ok "top --once: $top" || bad "top: '$top'"

# 2. rank 2 continued: usable again
kill -CONT "$STOPPED"; STOPPED=
wait_for 30 state_is "$wide" SUCCEEDED && [[ $(field "$wide" ranks_text) == 0-2 ]] \
  && ok "rank 2 continued: job $wide ran on ranks 0-2 and SUCCEEDED" \
  || bad "job $wide after SIGCONT: $(field "$wide" state) on '$(field "$wide" ranks_text)'"
logged "lstmd: rank 2 ($host) answered again" && ok "$(grep 'answered again' "$TMP/serve.log")" \
  || bad "no 'answered again' line"
top=$(ctl top --once | head -1)
[[ $top == "world 3 ranks: 0 busy, 3 free; 0 jobs queued" ]] && ok "top --once: $top" || bad "top after SIGCONT: '$top'"
ctl shutdown >/dev/null
if ends_within 20; then
  [[ $RC == 0 ]] && ok "shutdown with every rank answering: exit 0" || bad "shutdown: exit $RC"
else bad "shutdown did not end within 20 s"; fi

# 3. shutdown while rank 2 is still stopped
rm -rf "$TMP/state"
start_np3
STOPPED=$(rank_pid 2) || { bad "no rank 2 among mpirun's children"; exit 1; }
kill -STOP "$STOPPED"
wide=$(sub --set resources.ranks=3 --name wide)
wait_for $((DEADLINE + 20)) logged "lstmd: job $wide: start abandoned: rank 2" || bad "job $wide: no abandon: $(ctl list)"
long=$(sub --set resources.ranks=2 --set train.steps=100000 --set train.checkpoint_every=50 --name long)
wait_for 30 state_is "$long" RUNNING
wait_for 30 test -f "$(field "$long" run_dir)/latest.safetensors"
t0=$SECONDS
ctl shutdown >/dev/null
if ends_within $((DEADLINE + 30)); then
  ok "shutdown with rank 2 stopped ended after $((SECONDS - t0)) s (exit $RC)"
  [[ $RC != 0 ]] && logged "lstmd: serve: rank 2 ($host) did not answer the exit command" && logged "the world is aborted rather than finalized" \
    && ok "$(grep 'did not answer the exit' "$TMP/serve.log")" || bad "shutdown: exit $RC; $(tail -5 "$TMP/serve.log")"
else bad "shutdown with rank 2 stopped did not end within $((DEADLINE + 30)) s"; fi
kill -CONT "$STOPPED" 2>/dev/null; STOPPED=
gone() { ! pgrep -f "$TMP/state" >/dev/null; }
wait_for 10 gone || bad "ranks left behind: $(pgrep -af "$TMP/state")"
start_np3
n=$(ctl --json list | $PY -c "import json,sys; print(len(json.load(sys.stdin)))")
[[ $n == 2 ]] && ok "the restarted daemon lists both jobs: $(ctl list | tail -2 | cut -c1-60 | tr '\n' ';')" || bad "restart lists $n jobs: $(ctl list)"
resumed() { grep -q "^lstmd: resumed from .*latest.safetensors at step" "$(field "$long" run_dir)/train.log"; }
wait_for 30 resumed && ok "job $long resumed from its checkpoint: $(grep '^lstmd: resumed' "$(field "$long" run_dir)/train.log")" \
  || bad "job $long did not resume: $(ctl status "$long")"
ctl cancel "$long" >/dev/null
wait_for 30 state_is "$wide" SUCCEEDED && wait_for 30 state_is "$long" CANCELLED \
  && ok "after the restart job $wide SUCCEEDED and job $long (attempt $(field "$long" attempts)) was cancelled" \
  || bad "after restart: $wide $(field "$wide" state), $long $(field "$long" state)"
ctl shutdown >/dev/null
ends_within 20 && [[ $RC == 0 ]] || bad "final shutdown: exit ${RC:-timeout}"

# 4. a member frozen right after it answered (the window of serve_start.c's rationale 5, by the
#    test hook LSTMD_SERVE_FREEZE_AFTER_READY): its job stays at step 0, but the scheduler goes
#    on. The config is made larger than Open MPI's 4 KiB eager limit (long paths), so that the
#    "go" goes by rendezvous and a blocking send of it would hold the scheduler: a 1-rank job
#    beside it must run and SUCCEED. After SIGCONT the stuck job runs too.
rm -rf "$TMP/state"
deep=$(printf 'd%.0s' $(seq 200)); deep="$deep/$deep/$deep/$deep"
mkdir -p "$TMP/$deep" && cp -r "$TMP/ds" "$TMP/$deep/ds"
LSTMD_SERVE_FREEZE_AFTER_READY=2 mpirun -np 4 "$LSTMD" serve --socket "$SOCK" --state-dir "$TMP/state" \
  --data-root "$TMP" --start-timeout "$DEADLINE" >>"$TMP/serve.log" 2>&1 &
SERVE_PID=$!
wait_for 40 test -S "$SOCK" && wait_for 20 ctl list >/dev/null || { bad "np 4 daemon did not start"; exit 1; }
big=(--set data.path="$deep/ds" --set train.run_dir="$deep/run")
stuck=$(sub "${big[@]}" --set resources.ranks=3 --name stuck)
wait_for 20 state_is "$stuck" RUNNING
STOPPED=$(rank_pid 2)
beside=$(sub "${big[@]}" --set train.run_dir="$deep/run2" --set train.steps=50 --set resources.ranks=1 --name beside)
if wait_for 30 state_is "$beside" SUCCEEDED && [[ $(field "$stuck" state) == RUNNING ]] &&
   [[ -n $STOPPED && $(awk '/^State:/ {print $2}' "/proc/$STOPPED/status") == T ]]; then
  ok "rank 2 frozen after its answer: job $stuck waits at step $(field "$stuck" step), job $beside beside it SUCCEEDED"
else bad "a member frozen after its answer: $stuck $(field "$stuck" state), $beside $(field "$beside" state), rank 2 pid '$STOPPED'"; fi
[[ -n $STOPPED ]] && kill -CONT "$STOPPED"; STOPPED=
wait_for 30 state_is "$stuck" SUCCEEDED && ok "after SIGCONT job $stuck SUCCEEDED" \
  || bad "job $stuck after SIGCONT: $(field "$stuck" state)"
ctl shutdown >/dev/null
ends_within 20 && [[ $RC == 0 ]] || bad "np 4 shutdown: exit ${RC:-timeout}"

if ((fails)); then echo "--- serve.log (tail)"; tail -40 "$TMP/serve.log"; echo "$fails check(s) failed"; exit 1; fi
echo "all checks passed"
