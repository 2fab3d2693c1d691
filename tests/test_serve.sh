#!/usr/bin/env bash
# test_serve.sh — `lstmd serve` under `mpirun -np 2`, driven by lstmctl, end to end:
#  1. the socket is mode 0600; submit two jobs, watch one to SUCCEEDED (exit 0, progress lines),
#     cancel the other while it runs (the reply says the cancel is requested; CANCELLED within
#     seconds, with a checkpoint); list;
#  2. refusals: a path outside the data root, an unknown key, an unknown job id, no daemon,
#     extra arguments (exit 2, before the daemon is asked) and a missing config file; --json
#     and --socket after the command;
#  3. a failing job (not a dataset) is FAILED with its reason, and the next job still runs; a
#     dataset truncated under a running job (a read error on the ranks) fails it on every rank
#     together, and the daemon goes on;
#  4. TCP with a token: the right token is served, a wrong one refused; another uid is refused
#     by the SO_PEERCRED check even when the socket mode is opened up by hand;
#  5. idle CPU of the daemon (all ranks and mpirun) from /proc: < 1% of a core; the control
#     thread may run on the CPUs of all the job's ranks, not only rank 0's;
#  6. `lstmctl shutdown` during a job: exit 0; a restarted daemon lists every record and resumes
#     the job from its checkpoint, ending bitwise equal to an uninterrupted `lstmd train` run;
#     the same after SIGKILL of a rank (a crash; the other rank's line says the daemon ends and
#     how its jobs come back): the journal requeues the job, the restarted
#     daemon's log says it found the job running and resumes it from that checkpoint's step, and
#     the trainer that it resumed from the job's last checkpoint at that step, and
#     the job ends bitwise equal to an uninterrupted run; a job drained by two shutdowns and
#     then crashed once resumes (only crashes count toward the 3 that fail a job).
set -u
LSTMD=$(realpath "${1:?usage: test_serve.sh LSTMD LSTMCTL SOURCE_DIR}")
CTL=$(realpath "${2:?}")
SRC=$(realpath "${3:?}")
source "$SRC/tests/serve_helpers.sh"
state_is() { [[ $(field "$1" state) == "$2" ]]; }
meta_step() { # the step a checkpoint holds
  /usr/bin/python3 "$SRC/tests/ckpt_meta.py" "$1"
}
running_step() { [[ $(field "$1" state) == RUNNING && $(field "$1" step) -gt 0 ]]; }

text_job 400000 32 40 10 20 10
long=(--config "$TMP/job.ini" --set train.steps=1000000 --set train.checkpoint_every=0)

# 1. submit, watch, cancel, list
start_daemon
mode=$(stat -c %a "$SOCK")
[[ $mode == 600 ]] && ok "socket mode 0600" || bad "socket mode is $mode"
a=$(ctl submit --config "$TMP/job.ini" --name short | tail -1)
b=$(ctl submit "${long[@]}" --name long | tail -1)
[[ $a == 1 && $b == 2 ]] && ok "submit prints the job id last ($a, $b)" || bad "submit ids: '$a' '$b'"
ctl watch "$a" > "$TMP/watch.txt"; rc=$?
if [[ $rc == 0 ]] && grep -q "step 40/40" "$TMP/watch.txt" && tail -1 "$TMP/watch.txt" | grep -q SUCCEEDED; then
  ok "watch follows job $a to SUCCEEDED (exit 0, $(grep -c 'loss' "$TMP/watch.txt") progress lines)"
else bad "watch $a: rc=$rc $(tail -3 "$TMP/watch.txt")"; fi
wait_for 30 running_step "$b" || bad "job $b did not start"
t0=$SECONDS
msg=$(ctl cancel "$b") || bad "cancel exit status"
# the reply comes before the job stops: it says RUNNING, and that the cancel is on its way
[[ $msg == "job $b long: RUNNING (cancel requested: it stops after its current step, with a checkpoint)"* ]] &&
  ok "cancel of a running job says the cancel is requested" || bad "cancel of running job $b said: '${msg%%$'\n'*}'"
wait_for 15 state_is "$b" CANCELLED && ok "job $b CANCELLED within $((SECONDS - t0)) s of the request" \
  || bad "job $b not cancelled: $(ctl status "$b")"
step=$(field "$b" step); run_dir=$(field "$b" run_dir)
eta=$(field "$b" eta_s)
[[ $eta == 0.0 ]] && ok "the cancelled job has no ETA (--json eta_s 0)" || bad "cancelled job $b: --json eta_s $eta"
ck=$(meta_step "$run_dir/latest.safetensors" 2>/dev/null)
[[ -n $ck && $ck == "$step" ]] && ok "the cancelled job's checkpoint is at its last step ($step)" || bad "checkpoint step '$ck' vs job step '$step'"
ctl watch "$b" >/dev/null; [[ $? == 1 ]] && ok "watch of a cancelled job exits 1" || bad "watch of a cancelled job"
n=$(ctl --json list | /usr/bin/python3 -c "import json,sys; print(len(json.load(sys.stdin)))")
[[ $n == 2 ]] && ok "list shows both jobs" || bad "list: $n jobs"

# 2. refusals
msg=$(ctl submit --config "$TMP/job.ini" --set data.path=/etc 2>&1); rc=$?
[[ $rc == 2 && $msg == *"outside the data root"* ]] && ok "a dataset outside --data-root is refused (exit 2)" || bad "outside root: rc=$rc $msg"
msg=$(ctl submit --config "$TMP/job.ini" --set train.run_dir=../elsewhere 2>&1); rc=$?
[[ $rc == 2 && $msg == *"outside the data root"* ]] && ok "a run dir escaping with .. is refused" || bad "run dir: rc=$rc $msg"
msg=$(ctl submit --config "$TMP/job.ini" --set model.hiddn=3 2>&1); rc=$?
[[ $rc == 2 && $msg == *"model.hiddn"* ]] && ok "an unknown key is refused, named" || bad "unknown key: rc=$rc $msg"
ctl status 999 >/dev/null 2>&1; [[ $? == 4 ]] && ok "unknown job id: exit 4" || bad "unknown id"
# --json names the protocol's code and the exit status (the code's number, 2, is not an exit)
j=$(ctl --json status 999 2>/dev/null); rc=$?
[[ $rc == 4 ]] && /usr/bin/python3 -c 'import json,sys; d=json.loads(sys.argv[1]); sys.exit(not (d["code"] == "NOT_FOUND" and d["exit"] == 4 and "999" in d["error"]))' "$j" &&
  ok "unknown job id --json: exit 4, $j" || bad "unknown job id --json: exit $rc, $j"
"$CTL" --socket "$TMP/nobody.sock" list >/dev/null 2>&1; [[ $? == 3 ]] && ok "no daemon: exit 3" || bad "no daemon"
# the global options anywhere on the line (README: `status ID | list ... [--json]`)
py_id='import json,sys; print(json.load(sys.stdin)["id"])'
py_len='import json,sys; print(len(json.load(sys.stdin)))'
py_world='import json,sys; print(json.load(sys.stdin)["world"])'
[[ $(ctl status "$a" --json | /usr/bin/python3 -c "$py_id" 2>&1) == "$a" ]] &&
  ok "status $a --json: one JSON job" || bad "status $a --json: $(ctl status "$a" --json | head -2)"
[[ $(ctl list --json | /usr/bin/python3 -c "$py_len" 2>&1) == 2 ]] &&
  ok "list --json: the JSON list" || bad "list --json: $(ctl list --json | head -2)"
[[ $(ctl top --once --json | /usr/bin/python3 -c "$py_world" 2>&1) == 2 ]] &&
  ok "top --once --json: the JSON snapshot" || bad "top --once --json: $(ctl top --once --json 2>&1 | head -2)"
[[ $("$CTL" list --socket "$SOCK" --json | /usr/bin/python3 -c "$py_len" 2>&1) == 2 ]] &&
  ok "list --socket S --json: options after the command" || bad "list --socket S --json"
# extra or unknown arguments: exit 2 naming them, before the daemon is asked anything
for line in "list junk|junk" "shutdown now|now" "status $a 7|7" "watch $a x|x" "top --every 2|--every" \
    "logs $a 3|3" "logs $a --json|--json" "cancel|cancel" "status|status" \
    "submit --config x.ini --config y.ini|--config given twice ('x.ini', then 'y.ini')" \
    "status 99999999999999999999|expected a job id (a positive number), got '99999999999999999999'" \
    "cancel +1|expected a job id (a positive number), got '+1'" \
    "submit --continue 18446744073709551616|--continue 18446744073709551616: expected a job id"; do
  IFS='|' read -r args want <<<"$line"
  msg=$(ctl $args 2>&1 >/dev/null); rc=$?
  [[ $rc == 2 && $msg == "lstmctl: "*"$want"* ]] && ok "lstmctl $args: exit 2: $msg" || bad "lstmctl $args: rc=$rc '$msg'"
done
msg=$("$CTL" --socket "$SOCK" --tcp 127.0.0.1:1 list 2>&1); rc=$?
[[ $rc == 2 && $msg == "lstmctl: --socket $SOCK and --tcp 127.0.0.1:1 name two daemons; give one" ]] &&
  ok "--socket and --tcp together: exit 2: $msg" || bad "--socket with --tcp: rc=$rc '$msg'"
msg=$("$CTL" --socket "$TMP/nobody.sock" list junk 2>&1); rc=$?
[[ $rc == 2 && $msg == *junk* ]] && ok "a usage error needs no daemon (exit 2, not 3)" || bad "usage error without a daemon: rc=$rc $msg"
ctl list >/dev/null && ok "the daemon still answers after 'shutdown now' was refused" || bad "daemon gone after 'shutdown now'"
msg=$(ctl submit --config "$TMP/no-such.ini" 2>&1); rc=$?
[[ $rc == 2 && $msg == "lstmctl: $TMP/no-such.ini: cannot read config file: No such file or directory" ]] &&
  ok "submit of a missing config: exit 2, lstmctl's message with the reason" || bad "missing config: rc=$rc '$msg'"
# a bad value or key in the job file: named with FILE:LINE, as `lstmd train` names it (lstmctl
# checks each pair as it reads the file; the daemon's refusal had no location)
printf '[data]\npath = ds\nseq_len = 24x\n' >"$TMP/badval.ini"
msg=$(ctl submit --config "$TMP/badval.ini" 2>&1); rc=$?
[[ $rc == 2 && $msg == "lstmctl: $TMP/badval.ini:3: data.seq_len: '24x' is not a valid integer"* ]] &&
  ok "submit of a job file with a bad value: exit 2, $msg" || bad "bad value in the job file: rc=$rc '$msg'"
printf '[data]\npath = ds\n[modl]\nhidden = 8\n' >"$TMP/badkey.ini"
msg=$(ctl submit --config "$TMP/badkey.ini" 2>&1); rc=$?
[[ $rc == 2 && $msg == "lstmctl: $TMP/badkey.ini:4: "*"modl.hidden"* ]] &&
  ok "submit of a job file with an unknown key: exit 2, $msg" || bad "unknown key in the job file: rc=$rc '$msg'"

# 3. failures
mkdir -p "$TMP/notdata"
f=$(ctl submit --config "$TMP/job.ini" --set data.path=notdata --name broken | tail -1)
g=$(ctl submit --config "$TMP/job.ini" --name after-broken | tail -1)
ctl watch "$f" >/dev/null; rc=$?
reason=$(field "$f" reason)
[[ $rc == 1 && $(field "$f" state) == FAILED && $reason == *notdata* ]] && ok "a bad dataset fails its job: $reason" \
  || bad "broken job: rc=$rc $(ctl status "$f")"
ctl watch "$g" >/dev/null && ok "the next job still SUCCEEDED" || bad "job after a failure: $(ctl status "$g")"
cp -r "$TMP/ds" "$TMP/ds2"
h=$(ctl submit "${long[@]}" --set data.path=ds2 --set data.order=shuffle --name truncated | tail -1)
wait_for 30 running_step "$h" || bad "job $h did not start"
truncate -s 100000 "$TMP/ds2/train.bin"
wait_for 30 state_is "$h" FAILED && ok "a dataset truncated under a running job fails it on all ranks: $(field "$h" reason)" \
  || bad "truncated dataset: $(ctl status "$h")"
# its logs are its own (written after it started): printed as they are, exit 0, with no note
# that they are an earlier run's (that note is for a job that failed before writing any)
ctl logs "$h" >"$TMP/logs-h.out" 2>"$TMP/logs-h.err"; rc=$?
[[ $rc == 0 && -s $TMP/logs-h.out && ! -s $TMP/logs-h.err ]] &&
  ok "logs of a job that failed mid-run: its own lines, exit 0" || bad "logs of job $h: exit $rc, $(cat "$TMP/logs-h.err")"
i=$(ctl submit --config "$TMP/job.ini" | tail -1)
ctl watch "$i" >/dev/null && ok "and the daemon runs the next job" || bad "after truncation: $(ctl status "$i")"

# 5. idle CPU: utime + stime (clock ticks) of mpirun and its ranks over 10 s
pids="$SERVE_PID $(pgrep -P "$SERVE_PID" | tr '\n' ' ')"
ticks() { local t=0; for p in $pids; do t=$((t + $(awk '{print $14 + $15}' /proc/$p/stat 2>/dev/null || echo 0))); done; echo $t; }
t1=$(ticks); sleep 10; t2=$(ticks)
pct=$(awk -v d=$((t2 - t1)) -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.2f", 100 * d / hz / 10 }')
awk -v p="$pct" 'BEGIN { exit !(p < 1.0) }' && ok "idle daemon: $pct% of one core (mpirun + 2 ranks, 10 s)" || bad "idle CPU $pct%"
# The control thread is not held to rank 0's binding: it may use the CPUs of all the job's
# ranks on the node (the union of their affinity lists), and no others.
allowed() { awk '/^Cpus_allowed_list/ {print $2}' "$1"; }
cpu_union() { /usr/bin/python3 -c '
import sys
cpus = set()
for spec in sys.argv[1:]:
    for part in spec.split(","):
        a, _, b = part.partition("-")
        cpus.update(range(int(a), int(b or a) + 1))
print(",".join(map(str, sorted(cpus))))' "$@"; }
ranks=$(pgrep -P "$SERVE_PID" | tr '\n' ' ')
control=$(for r in $ranks; do grep -lx lstmd-control /proc/"$r"/task/*/comm 2>/dev/null; done | head -1)
rank_lists=$(for r in $ranks; do allowed /proc/"$r"/status; done | tr '\n' ' ')
if [[ -n $control && $(cpu_union "$(allowed "${control%/comm}/status")") == "$(cpu_union $rank_lists)" ]]; then
  ok "control thread may run on CPUs $(allowed "${control%/comm}/status"), the ranks' CPUs ($rank_lists)"
else
  bad "control thread: ${control:-not found (no thread named lstmd-control)}; ranks on $rank_lists"
fi

# 6a. shutdown during a job; restart; resume bitwise. serve.log accumulates the output of every
#     start, so the resume line is looked for only in what the restart wrote (the lines after
#     the count taken before it), and its step must be the one of the checkpoint left behind.
resume_line_since() { tail -n +$(($1 + 1)) "$TMP/serve.log" | grep "resumed from"; }
c=$(ctl submit --config "$TMP/job.ini" --set train.steps=300 --set train.checkpoint_every=25 --name resumed | tail -1)
wait_for 30 running_step "$c" || bad "job $c did not start"
c_dir=$(field "$c" run_dir)
ctl shutdown >/dev/null || bad "shutdown exit status"
stop_daemon && ok "shutdown drains and the daemon exits 0" || bad "daemon exit status after shutdown"
[[ -S $SOCK ]] && bad "socket left behind" || ok "socket removed"
kc=$(meta_step "$c_dir/latest.safetensors" 2>/dev/null)
before=$(wc -l < "$TMP/serve.log")
start_daemon
states=$(ctl --json list | /usr/bin/python3 -c "import json,sys; print(' '.join(j['state'] for j in json.load(sys.stdin)))")
[[ $states == "SUCCEEDED CANCELLED FAILED SUCCEEDED FAILED SUCCEEDED "* ]] && ok "restarted daemon lists every record: $states" || bad "records after restart: $states"
ctl watch "$c" >/dev/null && [[ $(field "$c" attempts) == 2 ]] && ok "job $c resumed after the restart and SUCCEEDED" \
  || bad "resume: $(ctl status "$c")"
this_start=$(resume_line_since "$before")
if [[ -n $kc && $kc -gt 0 && $kc -lt 300 && $this_start == "lstmd: resumed from $c_dir/latest.safetensors at step $kc" ]]; then
  ok "the restart resumed it from the shutdown's checkpoint at step $kc"
else bad "shutdown resume: checkpoint at step '$kc'; the restart's log says: '$this_start'"; fi
mpirun -np 2 "$LSTMD" train --config "$TMP/job.ini" --set data.path="$TMP/ds" --set train.steps=300 \
  --set train.checkpoint_every=25 --set train.run_dir="$TMP/straight" >/dev/null 2>&1 || bad "straight run"
if msg=$(/usr/bin/python3 "$SRC/tests/compare_checkpoints.py" "$(field "$c" run_dir)/step-300.safetensors" \
         "$TMP/straight/step-300.safetensors" --rtol 0); then
  ok "resumed job == uninterrupted run, bitwise ($msg)"
else bad "resumed job differs: $msg"; fi

# 6b. a crash (SIGKILL of rank 1) while a job runs, after its first checkpoint; restart; the
#     journal requeues it. As in 6a, only the lines this restart wrote count (6a's restart wrote
#     a "resumed from" line too), and the step is the one of the checkpoint the crash left. A
#     fresh start would end on the same weights; the resume line tells the two apart.
d=$(ctl submit --config "$TMP/job.ini" --set train.steps=400 --set train.checkpoint_every=20 --name crashed | tail -1)
d_dir=$(field "$d" run_dir)
# a tight poll: the job makes about a thousand steps a second, and must be killed well before 400
for _ in $(seq 3000); do [[ -f $d_dir/latest.safetensors ]] && break; sleep 0.01; done
[[ -f $d_dir/latest.safetensors ]] || bad "job $d wrote no checkpoint in 30 s (run dir '$d_dir')"
kill -9 "$(pgrep -P "$SERVE_PID" | tail -1)"
stop_daemon; rc=$?
[[ $rc != 0 ]] && ok "a rank killed: the daemon ends (status $rc)" || bad "daemon survived a lost rank?"
# the survivor's line says that the daemon ends and how its jobs come back (it said "ending the job")
if line=$(grep -m1 "is gone while waiting for .*; ending the daemon (MPI ends the whole world when a rank is lost): restart it with the same --state-dir" "$TMP/serve.log"); then
  ok "the lost rank's line says the daemon ends: ${line:0:100}..."
else bad "no line says the daemon ends: $(grep -m1 'is gone' "$TMP/serve.log")"; fi
k=$(meta_step "$d_dir/latest.safetensors" 2>/dev/null)
before=$(wc -l < "$TMP/serve.log")
start_daemon
ctl watch "$d" >/dev/null && [[ $(field "$d" attempts) == 2 ]] && ok "the crashed job resumed after the restart and SUCCEEDED" \
  || bad "crash resume: $(ctl status "$d")"
this_start=$(resume_line_since "$before")
if [[ -n $k && $k -gt 0 && $k -lt 400 ]] && [[ $this_start == "lstmd: resumed from $d_dir/latest.safetensors at step $k" ]]; then
  ok "this restart resumed it from its checkpoint at step $k"
else bad "crash resume: the crash left a checkpoint at step '${k}'; this restart's log says: '${this_start}'"; fi
# the restart says which job it found running and the step it resumes from (also its record's step)
requeued="lstmd: job $d (crashed) was running when the daemon stopped: queued again, resumes from its checkpoint of step $k"
if tail -n +$((before + 1)) "$TMP/serve.log" | grep -qxF "$requeued"; then
  ok "the restart logs the requeued job at its checkpoint's step: ${requeued#lstmd: }"
else bad "no '$requeued' in this restart's log: $(tail -n +$((before + 1)) "$TMP/serve.log" | grep -m1 'was running')"; fi
mpirun -np 2 "$LSTMD" train --config "$TMP/job.ini" --set data.path="$TMP/ds" --set train.steps=400 \
  --set train.checkpoint_every=20 --set train.run_dir="$TMP/straight-crash" >/dev/null 2>&1 || bad "straight run (400)"
if msg=$(/usr/bin/python3 "$SRC/tests/compare_checkpoints.py" "$d_dir/step-400.safetensors" \
         "$TMP/straight-crash/step-400.safetensors" --rtol 0); then
  ok "crashed and resumed job == uninterrupted run, bitwise ($msg)"
else bad "crashed and resumed job differs from an uninterrupted run: $msg"; fi

# 6c. only crashes count toward the 3 that fail a job: a job drained by two shutdowns (each
#     checkpoints it) and then crashed once resumes (attempt 4), not "not retried again".
e=$(ctl submit "${long[@]}" --set train.checkpoint_every=20 --name restarted | tail -1)
for _ in 1 2; do
  wait_for 30 running_step "$e" || bad "job $e did not start"
  ctl shutdown >/dev/null; stop_daemon || bad "shutdown with job $e running"
  start_daemon
done
wait_for 30 running_step "$e" || bad "job $e did not start (3rd attempt)"
kill -9 "$(pgrep -P "$SERVE_PID" | tail -1)"
stop_daemon
start_daemon
if wait_for 30 running_step "$e" && [[ $(field "$e" attempts) == 4 ]]; then
  ok "two shutdowns and one crash: job $e resumed (attempt 4), not failed"
else bad "two shutdowns and one crash: $(ctl status "$e")"; fi
ctl cancel "$e" >/dev/null; wait_for 15 state_is "$e" CANCELLED || bad "cancel job $e"

# 4. TCP with a token
ctl shutdown >/dev/null; stop_daemon
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$TMP/token"; chmod 600 "$TMP/token"
echo wrong-token-of-sufficient-length > "$TMP/wrong"
start_daemon --listen "127.0.0.1:$port" --token-file "$TMP/token"
"$CTL" --tcp "127.0.0.1:$port" --token-file "$TMP/token" list >/dev/null && ok "TCP with the token is served" || bad "TCP with token"
"$CTL" --tcp "127.0.0.1:$port" --token-file "$TMP/wrong" list >/dev/null 2>&1; rc=$?
[[ $rc == 5 ]] && ok "TCP with a wrong token: refused (exit 5)" || bad "wrong token: rc=$rc"
# SO_PEERCRED: even with the socket's mode opened up by hand, another user is turned away.
if id nobody >/dev/null 2>&1 && command -v runuser >/dev/null && [[ $(id -u) == 0 ]]; then
  chmod 711 "$TMP"; chmod 666 "$SOCK"
  runuser -u nobody -- "$CTL" --socket "$SOCK" list >/dev/null 2>&1; rc=$?
  chmod 700 "$TMP"
  [[ $rc == 3 ]] && grep -q "refused a connection: uid $(id -u nobody)" "$TMP/serve.log" \
    && ok "another uid is refused by the SO_PEERCRED check (exit 3, logged)" || bad "peer check: rc=$rc"
else
  echo "skip  SO_PEERCRED check (needs root, runuser and the nobody user)"
fi
ctl shutdown >/dev/null; stop_daemon || bad "final shutdown"

if ((fails)); then echo "--- serve.log (tail)"; tail -30 "$TMP/serve.log"; echo "$fails check(s) failed"; exit 1; fi
echo "all checks passed"
