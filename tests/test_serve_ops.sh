#!/usr/bin/env bash
# test_serve_ops.sh — operating `mpirun -np 2 lstmd serve` (what deploy/systemd/lstmd.service
# runs), with lstmctl:
#  1. --socket-group G: the socket is mode 0660 and group G; a user in G who is not the daemon's
#     user is served; a user outside G is refused by the socket's mode and, with the mode opened
#     up by hand, by the SO_PEERCRED check (logged) (needs root: a test user and group are
#     created and removed again);
#  2. TCP: a request without a token gets an UNAUTHENTICATED error and the connection is closed;
#     lstmctl with a wrong or empty token exits 5; --listen without --token-file, on a port in
#     use or with a host name is refused at start (exit 2, message, no socket or state dir made);
#  3. a second daemon on the same --state-dir, or on the same --socket, is refused (exit 2, a
#     message saying why) and the first one is unharmed: its socket is there and it answers;
#  4. SIGUSR1 to mpirun (systemd's KillSignal): the running job checkpoints and goes back to
#     QUEUED, the daemon exits 0 and removes its socket; restarted on 1 rank, the daemon keeps
#     the 2-rank job QUEUED saying why; restarted on 2, it resumes the job from that checkpoint
#     (attempt 2); a `logs --follow` of the job exits 3 saying the daemon went away (it said only
#     "sending failed: Broken pipe");
#  5. pipeline stages through the daemon: model.stages=3 on the 2-rank daemon is refused at
#     submission naming the key (exit 2), and so are the settings the dataset rules out, with the
#     trainer's words (samples of a series model, a prime outside the vocabulary, a bidirectional
#     language model); a model.stages=2 job runs to SUCCEEDED and ends with the weights of the
#     same `mpirun -np 2 lstmd train` run (bitwise); cancelling it then exits 2 ("had already
#     ended"), cancelling a cancelled job again exits 0;
#  6. a job submitted into the train.run_dir of a job that has not ended is refused (exit 2,
#     naming that job); once that job has ended (with a checkpoint), a fresh job there is refused
#     and one with --resume accepted; a fresh job whose empty run dir gets a checkpoint while it
#     waits is FAILED at its start; `submit --resume` with no train.run_dir is refused, and into the
#     finished pipeline job's run dir it continues that run from its last step;
#  7. `submit --continue ID`: the drained-then-cancelled job of 4 (run dir in the daemon's state
#     dir) is continued from its last checkpoint with more steps, to SUCCEEDED in the same run
#     dir; continued again, before its first log step status and top show the step it resumed
#     from and no rate; continued with a model.hidden its checkpoint cannot resume, it FAILS at
#     its start and `logs` shows the earlier runs' lines and then why (exit 1); --continue of a
#     job that has not ended, of no job, with another global
#     batch or data.seq_len than its checkpoint's (refused at submission), or with a train.run_dir
#     is refused;
#     a job name with control characters is refused (it would reach other users' terminals), so
#     is a train.run_dir inside the state dir's runs/ (the daemon's own run dirs);
#  8. a daemon older than --resume/--continue (a fake one in Python that, as protobuf does, drops
#     the field it does not know and queues a fresh job): lstmctl cancels that job and exits 2.
set -u
LSTMD=$(realpath "${1:?usage: test_serve_ops.sh LSTMD LSTMCTL SOURCE_DIR}")
CTL=$(realpath "${2:?}")
SRC=$(realpath "${3:?}")
source "$SRC/tests/serve_helpers.sh"
GROUP= MEMBER=
serve_cleanup_extra() {
  [[ -n $MEMBER ]] && userdel "$MEMBER" 2>/dev/null
  [[ -n $GROUP ]] && groupdel "$GROUP" 2>/dev/null
}
running_step() { [[ $(field "$1" state) == RUNNING && $(field "$1" step) -gt 0 ]]; }
# message LOG: the "lstmd:" lines of a refused start (not the ones mpirun adds)
message() { grep '^lstmd:' "$1" | head -2 | tr '\n' ' '; }

text_job 200000 32 1000000 1 0 0
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$TMP/token"; chmod 600 "$TMP/token"
echo wrong-token-of-sufficient-length > "$TMP/wrong"
echo > "$TMP/empty"

# 1. --socket-group: a test group, one member who is not root (the daemon's user)
can_users=0
if [[ $(id -u) == 0 ]] && command -v groupadd >/dev/null && command -v useradd >/dev/null &&
   command -v setpriv >/dev/null && id nobody >/dev/null 2>&1; then
  GROUP=lstmdg$$ && groupadd "$GROUP" || GROUP=
  [[ -n $GROUP ]] && MEMBER=lstmdu$$ && useradd -M -N -s /usr/sbin/nologin -G "$GROUP" "$MEMBER" || MEMBER=
  [[ -n $GROUP && -n $MEMBER ]] && can_users=1
fi
as_user() { # as_user USER COMMAND...: with the user's own groups (initgroups), nothing of root's
  local u=$1
  shift
  setpriv --reuid="$u" --regid="$(id -g "$u")" --init-groups -- "$@"
}
if ((can_users)); then
  start_daemon --socket-group "$GROUP" --listen "127.0.0.1:$port" --token-file "$TMP/token"
  chmod 711 "$TMP"
  perm=$(stat -c '%a %G' "$SOCK")
  [[ $perm == "660 $GROUP" ]] && ok "--socket-group: socket mode 0660, group $GROUP" || bad "--socket-group: socket is '$perm'"
  out=$(as_user "$MEMBER" "$CTL" --socket "$SOCK" list 2>&1); rc=$?
  [[ $rc == 0 ]] && ok "a member of $GROUP (uid $(id -u "$MEMBER"), not the daemon's user) is served" \
    || bad "group member: exit $rc: $out"
  out=$(as_user nobody "$CTL" --socket "$SOCK" list 2>&1); rc=$?
  [[ $rc == 3 && $out == *"Permission denied (the socket is its owner's, and its group's with \`lstmd serve --socket-group\`: ask for that group)"* ]] &&
    ok "a user outside $GROUP cannot connect (exit 3): $out" || bad "non-member: exit $rc: $out"
  chmod 666 "$SOCK"
  as_user nobody "$CTL" --socket "$SOCK" list >/dev/null 2>&1; rc=$?
  chmod 660 "$SOCK"
  # the daemon logs the refusal after closing the connection: give its write a moment
  [[ $rc == 3 ]] && wait_for 5 grep -q "refused a connection: uid $(id -u nobody) .*nor in its socket group" "$TMP/serve.log" \
    && ok "with the mode opened by hand, SO_PEERCRED refuses the non-member (exit 3, logged)" \
    || bad "non-member through a 0666 socket: exit $rc; log: $(grep refused "$TMP/serve.log" | tail -1)"
  chmod 700 "$TMP"
else
  echo "skip  --socket-group (needs root, groupadd, useradd, setpriv and the nobody user)"
  start_daemon --listen "127.0.0.1:$port" --token-file "$TMP/token"
fi

# 1b. before any job has made <state>/runs, a train.run_dir in it is refused as well (the check
# resolved runs/ itself and let it pass while it did not exist)
[[ ! -e $TMP/state/runs ]] || bad "state/runs exists before any job"
out=$(ctl submit --config "$TMP/job.ini" --set train.run_dir=state/runs/job-1 2>&1); rc=$?
[[ $rc == 2 && $out == *"runs/job-1 is inside "*"/runs, where the daemon makes its jobs' own run dirs"* ]] &&
  ok "a train.run_dir inside the state dir's runs/, before runs/ exists: exit 2" ||
  bad "run_dir in state/runs before it exists: exit $rc: $out"

# 2. TCP without a token, with a wrong or an empty one; --listen without --token-file
reply=$(/usr/bin/python3 - "$SRC/tests" "$port" <<'PY'
import socket, struct, sys
sys.path.insert(0, sys.argv[1])
import lstmd_wire as w
s = socket.create_connection(("127.0.0.1", int(sys.argv[2])), timeout=10)
s.sendall(w.frame(w.empty(w.LIST)))  # no token field at all
buf = b""
while True:
    chunk = s.recv(65536)
    if not chunk:
        break
    buf += chunk
n = struct.unpack(">I", buf[:4])[0]
kind, code, msg = w.response_kind(buf[4:4 + n])
print(w.ERROR_CODES.get(code, kind), "closed" if len(buf) == 4 + n else "more", msg)
PY
)
[[ $reply == "UNAUTHENTICATED closed "* ]] && ok "TCP request without a token: $reply" || bad "TCP without a token: '$reply'"
"$CTL" --tcp "127.0.0.1:$port" --token-file "$TMP/wrong" list >/dev/null 2>&1; rc=$?
[[ $rc == 5 ]] && ok "lstmctl with a wrong token: exit 5" || bad "wrong token: exit $rc"
"$CTL" --tcp "127.0.0.1:$port" --token-file "$TMP/empty" list >/dev/null 2>&1; rc=$?
[[ $rc == 5 ]] && ok "lstmctl with an empty token: exit 5" || bad "empty token: exit $rc"
"$CTL" --tcp "127.0.0.1:$port" --token-file "$TMP/token" list >/dev/null 2>&1 && ok "lstmctl with the token is served" \
  || bad "the right token is not served"
timeout 30 "$LSTMD" serve --socket "$TMP/t.sock" --state-dir "$TMP/state-t" --listen 127.0.0.1:1 \
  >/dev/null 2>"$TMP/notoken.log"; rc=$?
[[ $rc == 2 ]] && grep -q "^lstmd: --listen needs --token-file" "$TMP/notoken.log" && [[ ! -e $TMP/t.sock ]] \
  && ok "--listen without --token-file: exit 2, $(message "$TMP/notoken.log")" \
  || bad "--listen without --token-file: exit $rc, $(message "$TMP/notoken.log")"

# --listen at an address that cannot be used: refused before the state dir is made
timeout 30 "$LSTMD" serve --socket "$TMP/t2.sock" --state-dir "$TMP/state-busy" --listen "127.0.0.1:$port" \
  --token-file "$TMP/token" >/dev/null 2>"$TMP/busy.log"; rc=$?
[[ $rc == 2 ]] && grep -q "^lstmd: --listen 127.0.0.1:$port: address already in use" "$TMP/busy.log" &&
  [[ ! -e $TMP/state-busy && ! -e $TMP/t2.sock ]] &&
  ok "--listen on a port in use: exit 2, no --state-dir made: $(message "$TMP/busy.log")" ||
  bad "--listen on a port in use: exit $rc, state dir $([[ -e $TMP/state-busy ]] && echo made || echo absent), $(message "$TMP/busy.log")"
timeout 30 "$LSTMD" serve --socket "$TMP/t2.sock" --state-dir "$TMP/state-badhost" --listen "localhost:7" \
  --token-file "$TMP/token" >/dev/null 2>"$TMP/badhost.log"; rc=$?
[[ $rc == 2 ]] && grep -q "^lstmd: --listen: 'localhost' is not an IPv4 or IPv6 address" "$TMP/badhost.log" &&
  [[ ! -e $TMP/state-badhost ]] &&
  ok "--listen with a host name: exit 2, no --state-dir made: $(message "$TMP/badhost.log")" ||
  bad "--listen localhost: exit $rc, state dir $([[ -e $TMP/state-badhost ]] && echo made || echo absent), $(message "$TMP/badhost.log")"

# 3. a second daemon on the same state dir, or the same socket
timeout 60 mpirun -np 2 "$LSTMD" serve --socket "$TMP/s2.sock" --state-dir "$TMP/state" --data-root "$TMP" \
  >/dev/null 2>"$TMP/second.log"; rc=$?
if [[ $rc == 2 ]] && grep -q "^lstmd: --state-dir .*another lstmd serve is using it" "$TMP/second.log" && [[ ! -e $TMP/s2.sock ]]; then
  ok "a second daemon on the same --state-dir: exit 2, $(message "$TMP/second.log")"
else bad "second daemon on the state dir: exit $rc, $(message "$TMP/second.log")"; fi
timeout 60 mpirun -np 2 "$LSTMD" serve --socket "$SOCK" --state-dir "$TMP/state2" --data-root "$TMP" \
  >/dev/null 2>"$TMP/second2.log"; rc=$?
if [[ $rc == 2 ]] && grep -q "^lstmd: --socket: another daemon is listening on $SOCK" "$TMP/second2.log" &&
   [[ ! -e $TMP/state2 ]]; then
  ok "a second daemon on the same --socket: exit 2, its --state-dir not made, $(message "$TMP/second2.log")"
else bad "second daemon on the socket: exit $rc, $(message "$TMP/second2.log")"; fi
if kill -0 "$SERVE_PID" 2>/dev/null && [[ -S $SOCK ]] && ctl list >/dev/null; then
  ok "the first daemon is unharmed: its socket is there and it answers"
else bad "the first daemon after the second ones: alive=$(kill -0 "$SERVE_PID" 2>/dev/null && echo yes || echo no), socket=$([[ -S $SOCK ]] && echo yes || echo no)"; fi

# 4. SIGUSR1 to mpirun drains: checkpoint, QUEUED, exit 0; a restart resumes the job
j=$(ctl submit --config "$TMP/job.ini" --name drained | tail -1)
wait_for 60 running_step "$j" || bad "job $j did not start: $(ctl status "$j")"
ctl logs "$j" --follow >"$TMP/follow.log" 2>&1 &
FOLLOW=$!
sleep 0.5
kill -USR1 "$SERVE_PID"
stop_daemon; rc=$?
# the follower of a job the daemon drained (still QUEUED) loses the daemon: exit 3, not 0
( sleep 15; kill "$FOLLOW" 2>/dev/null ) &
wait "$FOLLOW" 2>/dev/null; frc=$?
[[ $frc == 3 && $(tail -1 "$TMP/follow.log") == "lstmctl: the daemon went away while following job $j, which had not ended"* ]] &&
  ok "logs --follow when the daemon goes away: exit 3 ($(tail -1 "$TMP/follow.log"))" ||
  bad "logs --follow when the daemon goes away: exit $frc: $(tail -2 "$TMP/follow.log")"
line=$(grep "job $j: QUEUED: interrupted by a shutdown at step" "$TMP/serve.log")
step=$(grep -o "at step [0-9]*" <<<"$line" | grep -o "[0-9]*$")
ck=$(/usr/bin/python3 "$SRC/tests/ckpt_meta.py" "$TMP/state/runs/job-$j/latest.safetensors" 2>/dev/null)
if [[ $rc == 0 && -n $step && $ck == "$step" && ! -e $SOCK ]]; then
  ok "SIGUSR1 to mpirun: job $j checkpointed at step $step and QUEUED again, daemon exit 0, socket removed"
else bad "SIGUSR1 drain: daemon exit $rc, log line '${line}', checkpoint step '${ck}', socket $([[ -e $SOCK ]] && echo left || echo removed)"; fi
# restarted on 1 rank, the 2-rank job waits (QUEUED, saying why) rather than failing for good
SERVE_NP=1 start_daemon
waits_for_ranks() { [[ $(field "$j" state) == QUEUED && $(field "$j" waiting) == *"needs 2 ranks and this daemon has 1"* ]]; }
if wait_for 20 waits_for_ranks; then ok "a 1-rank daemon keeps the 2-rank job QUEUED: $(field "$j" waiting)"
else bad "the 2-rank job on a 1-rank daemon: $(ctl status "$j")"; fi
ctl shutdown >/dev/null; stop_daemon || bad "the 1-rank daemon's shutdown"
start_daemon
if wait_for 60 running_step "$j" && [[ $(field "$j" attempts) == 2 ]] &&
   wait_for 30 grep -q "resumed from .*job-$j/latest.safetensors at step $step" "$TMP/serve.log"; then
  ok "restarted, the daemon resumes job $j from step $step (attempt 2)"
else bad "after the restart: $(ctl status "$j"); $(grep -m1 "resumed from" "$TMP/serve.log")"; fi
ctl cancel "$j" >/dev/null

# 5. pipeline stages through the daemon
pipe=(--set model.layers=2 --set model.stages=2 --set train.time_chunks=4 --set train.steps=6
      --set data.order=stream --set train.checkpoint_every=3)
out=$(ctl submit --config "$TMP/job.ini" --set model.layers=3 --set model.stages=3 2>&1); rc=$?
[[ $rc == 2 ]] && grep -q "model.stages" <<<"$out" && ok "model.stages=3 on 2 ranks refused at submission: $(tail -1 <<<"$out")" ||
  bad "model.stages=3 on 2 ranks: exit $rc: $out"
# settings the dataset rules out are refused at submission with the trainer's words
# (worker/train/dataset_fit.c), not failed at the start
"$LSTMD" prepare series --input "$SRC/data/seattle-temps.csv" --target temp --horizon 2 \
  --out "$TMP/series" >/dev/null 2>&1 || bad "prepare series"
out=$(ctl submit --config "$TMP/job.ini" --set data.path=series --set train.sample_every=2 2>&1); rc=$?
[[ $rc == 2 && $out == *"train.sample_every: samples need a text model; "*"/series is a series dataset"* ]] &&
  ok "a series job with train.sample_every: exit 2 at submission" || bad "series job with samples: exit $rc: $out"
out=$(ctl submit --config "$TMP/job.ini" --set train.sample_every=2 --set train.sample_prime=$'\x01' 2>&1); rc=$?
[[ $rc == 2 && $out == *"train.sample_prime: byte 0 (0x01) is not in the vocabulary of "* ]] &&
  ok "a prime outside the vocabulary: exit 2 at submission" || bad "prime outside the vocabulary: exit $rc: $out"
out=$(ctl submit --config "$TMP/job.ini" --set model.bidirectional=true 2>&1); rc=$?
[[ $rc == 2 && $out == *"model.bidirectional: a bidirectional LSTM would read the future"* ]] &&
  ok "a bidirectional language model: exit 2 at submission" || bad "bidirectional text job: exit $rc: $out"
out=$(ctl submit --config "$TMP/job.ini" --set model.pool=mean 2>&1); rc=$?
[[ $rc == 2 && $out == *"model.pool: pooling belongs to sequence classifiers"* ]] &&
  ok "a pooled language model: exit 2 at submission" || bad "pooled text job: exit $rc: $out"
p=$(ctl submit --config "$TMP/job.ini" "${pipe[@]}" --set train.run_dir=pipe-job --name pipe | tail -1)
if ctl watch "$p" >/dev/null 2>&1 && [[ $(field "$p" state) == SUCCEEDED ]]; then
  ok "a model.stages=2 job: SUCCEEDED"
else bad "pipeline job $p: $(ctl status "$p")"; fi
out=$(ctl cancel "$p" 2>&1 >/dev/null); rc=$?
[[ $rc == 2 && $out == *"job $p had already ended (SUCCEEDED): nothing to cancel"* ]] &&
  ok "cancel of a job that has ended: exit 2, $out" || bad "cancel of an ended job: exit $rc: $out"
# 6. one run dir, one live job: a second submission into the run dir of a job that has not ended
#    is refused naming that job (however the path is spelled), and accepted once it has ended
a=$(ctl submit --config "$TMP/job.ini" --set train.run_dir=shared --name A | tail -1)
for spelled in ./shared shared/; do
  out=$(ctl submit --config "$TMP/job.ini" --set train.run_dir=$spelled --set optim.lr=0.05 2>&1); rc=$?
  [[ $rc == 2 ]] && grep -q "is the run dir of job $a 'A'" <<<"$out" &&
    ok "a second job in job $a's run dir ($spelled) refused: $(tail -1 <<<"$out")" ||
    bad "shared run dir ($spelled): exit $rc: $out"
done
# a fresh job queued behind A into an empty run dir, where a run appears while it waits
c=$(ctl submit --config "$TMP/job.ini" --set train.run_dir=later --name C | tail -1)
mkdir -p "$TMP/later" && cp "$TMP/pipe-job/step-6.safetensors" "$TMP/later/"
wait_for 60 running_step "$a" || bad "job $a did not start: $(ctl status "$a")" # so its cancel checkpoints
ctl cancel "$a" >/dev/null
state_is() { [[ $(field "$1" state) == "$2" ]]; }
if wait_for 30 state_is "$c" FAILED && [[ $(field "$c" reason) == *"now holds a run (step-6.safetensors)"*"--resume"* ]]; then
  ok "a run written into a queued fresh job's run dir: FAILED at its start: $(field "$c" reason | cut -c1-90)..."
else bad "queued job $c whose run dir got a checkpoint: $(ctl status "$c")"; fi
if wait_for 30 state_is "$a" CANCELLED; then
  # A wrote a checkpoint as it stopped: a fresh job there is refused, one that continues it is not
  out=$(ctl submit --config "$TMP/job.ini" --set train.run_dir=shared 2>&1); rc=$?
  [[ $rc == 2 && $out == *"shared already holds a run (step-"*"submit with --resume"* ]] &&
    ok "a fresh job into cancelled job $a's run dir refused (it holds A's checkpoint)" ||
    bad "fresh job into the cancelled job's run dir: exit $rc: $out"
  b=$(ctl submit --config "$TMP/job.ini" --set train.run_dir=shared --name B --resume 2>&1 | tail -1)
  [[ $(field "$b" state) =~ QUEUED|RUNNING ]] && ok "--resume accepted once job $a has ended (job $b)" ||
    bad "after job $a ended: $b"
  ctl cancel "$b" >/dev/null
  ctl cancel "$a" >/dev/null && ok "cancel of a job already cancelled: exit 0" || bad "second cancel of job $a"
else bad "job $a not cancelled: $(ctl status "$a")"; fi
wait_for 30 state_is "$b" CANCELLED || bad "job $b not cancelled: $(ctl status "$b")"
# the finished pipeline job's run dir: fresh refused, --resume continues it
out=$(ctl submit --config "$TMP/job.ini" "${pipe[@]}" --set train.run_dir=pipe-job 2>&1); rc=$?
[[ $rc == 2 && $out == *"pipe-job already holds a run (step-"*"submit with --resume"* ]] &&
  ok "a fresh job into a finished job's run dir refused: $(tail -1 <<<"$out" | cut -c1-100)..." ||
  bad "fresh job into pipe-job: exit $rc: $out"
out=$(ctl submit --config "$TMP/job.ini" --resume 2>&1); rc=$?
[[ $rc == 2 && $out == *"--resume continues the run in the job's train.run_dir, and this job sets none"* ]] &&
  ok "--resume without train.run_dir refused: $(tail -1 <<<"$out")" || bad "--resume without a run dir: exit $rc: $out"
r=$(ctl submit --config "$TMP/job.ini" "${pipe[@]}" --set train.run_dir=pipe-job --set train.steps=9 --resume \
    --name more | tail -1)
if ctl watch "$r" >/dev/null 2>&1 && [[ $(field "$r" state) == SUCCEEDED && -f $TMP/pipe-job/step-9.safetensors ]] &&
   grep -q "resumed from .*pipe-job/latest.safetensors at step 6" "$TMP/serve.log"; then
  ok "submit --resume into the finished job's run dir: resumed at step 6, SUCCEEDED at step 9"
else bad "--resume job $r: $(ctl status "$r"); $(grep -m1 "resumed from .*pipe-job" "$TMP/serve.log")"; fi

# 7. --continue: job j of 4 (cancelled; its run dir is STATE/runs/job-j, which no setting can name)
stop=$(field "$j" step)
k=$(ctl submit --continue "$j" --set train.steps=$((stop + 2)) | tail -1)
if ctl watch "$k" >/dev/null 2>&1 && [[ $(field "$k" state) == SUCCEEDED && $(field "$k" run_dir) == "$TMP/state/runs/job-$j" &&
   -f $TMP/state/runs/job-$j/step-$((stop + 2)).safetensors && $(field "$k" continues) == "$j" ]] &&
   grep -q "resumed from .*runs/job-$j/latest.safetensors at step $stop" "$TMP/serve.log"; then
  ok "submit --continue $j: job $k resumed job $j's run at step $stop, SUCCEEDED at step $((stop + 2)) in its run dir"
else bad "--continue $j (cancelled at step $stop): $(ctl status "$k" 2>&1); $(grep "job $k" "$TMP/serve.log" | tail -2)"; fi
# ... continued again, with no log step to come: status and top show the step it resumed from,
# not step 0, and no rate (the last attempt's rate is not this one's)
m=$(ctl submit --continue "$k" --set train.steps=100000000 --set train.log_every=100000000 | tail -1)
at_step() { [[ $(field "$1" state) == RUNNING && $(field "$1" step) == "$2" ]]; }
if wait_for 60 at_step "$m" $((stop + 2)) && st=$(ctl status "$m") && [[ $st == *"step $((stop + 2)) of 100000000"$'\n'* ]] &&
   [[ $(ctl top --once | awk -v id="$m" '$1 == id {print $5, $6, $7, $8}') == "$((stop + 2))/100000000 - - -" ]] &&
   [[ $(field "$m" loss) == None && $(field "$m" tokens_per_s) == None ]]; then
  ok "a resumed job before its first log step: status and top show step $((stop + 2)), no rate; --json loss and tokens_per_s null"
else bad "job $m resumed at step $((stop + 2)): $(ctl status "$m"); $(ctl top --once | tail -2); $(ctl --json status "$m")"; fi
ctl cancel "$m" >/dev/null
wait_for 60 state_is "$m" CANCELLED || bad "job $m not cancelled: $(ctl status "$m")"
# ... continued with a model its checkpoint cannot resume (another model.hidden: refused by its
# start, not at submission): `logs` showed only the earlier runs' lines, ending in success, exit 0
n=$(ctl submit --continue "$m" --set model.hidden=48 | tail -1)
ctl watch "$n" >/dev/null 2>&1
ctl logs "$n" >"$TMP/logs-n.out" 2>"$TMP/logs-n.err"; rc=$?
if [[ $(field "$n" state) == FAILED && $rc == 1 && -s $TMP/logs-n.out ]] &&
   grep -q "^lstmctl: job $n FAILED before it wrote to .*runs/job-$j/train.log (the lines above are an earlier run's in the same run dir): .*model.hidden" "$TMP/logs-n.err"; then
  ok "logs of a continued job that failed at its start: the earlier run's lines, then why (exit 1)"
else bad "logs of continued job $n: state $(field "$n" state), exit $rc, $(cat "$TMP/logs-n.err")"; fi
l=$(ctl submit --config "$TMP/job.ini" --name long | tail -1)
out=$(ctl submit --continue "$l" 2>&1); rc=$?
[[ $rc == 2 && $out == *"job $l has not ended ("*"): cancel it"* ]] && ok "--continue of a job that has not ended: exit 2: $out" ||
  bad "--continue of live job $l: exit $rc: $out"
ctl cancel "$l" >/dev/null
# a resume that its start would refuse (train_resume.c) is refused at submission: another
# global batch (data.batch_size 4 -> 3), another data.seq_len (16 -> 24)
out=$(ctl submit --continue "$j" --set data.batch_size=3 2>&1); rc=$?
[[ $rc == 2 && $out == *"runs/job-$j/latest.safetensors was trained with a global batch of "*"x data.batch_size 3); a resume needs the same global batch"* ]] &&
  ok "--continue with another global batch: exit 2 at submission: ${out:0:120}..." || bad "--continue with data.batch_size 3: exit $rc: $out"
out=$(ctl submit --continue "$j" --set data.seq_len=24 2>&1); rc=$?
[[ $rc == 2 && $out == *"data.seq_len: "*"was trained with data.seq_len 16, this job has 24"* ]] &&
  ok "--continue with another data.seq_len: exit 2 at submission" || bad "--continue with data.seq_len 24: exit $rc: $out"
out=$(ctl submit --continue 9999 2>&1); rc=$?
[[ $rc == 4 && $out == *"no job 9999 to continue"* ]] && ok "--continue of no job: exit 4: $out" || bad "--continue 9999: exit $rc: $out"
out=$(ctl submit --continue "$j" --set train.run_dir=elsewhere 2>&1); rc=$?
[[ $rc == 2 && $out == *"train.run_dir: a job that continues job $j trains in its run dir"* ]] &&
  ok "--continue with a train.run_dir: exit 2" || bad "--continue with train.run_dir: exit $rc: $out"
out=$(ctl submit --config "$TMP/job.ini" --set train.run_dir=state/runs/job-99 2>&1); rc=$?
[[ $rc == 2 && $out == *"runs/job-99 is inside "*"/runs, where the daemon makes its jobs' own run dirs"* ]] &&
  ok "a train.run_dir inside the state dir's runs/: exit 2" || bad "run_dir in state/runs: exit $rc: $out"
out=$(ctl submit --config "$TMP/job.ini" --name "$(printf 'a\nb\033[31mred')" 2>&1); rc=$?
[[ $rc == 2 && $out == *"job name holds a control character (byte 0x0a at 1)"* ]] &&
  ok "a job name with a line break and an escape sequence: exit 2: $out" || bad "control characters in a name: exit $rc: $out"

# 8. an older daemon: it answers every submit with a fresh job 41 (no resume, no continues)
/usr/bin/python3 - "$SRC/tests" "$TMP/old.sock" >"$TMP/old.log" 2>&1 <<'EOF_PY' &
import os, socket, struct, sys
sys.path.insert(0, sys.argv[1])
import lstmd_wire as w
srv = socket.socket(socket.AF_UNIX)
srv.bind(sys.argv[2]); srv.listen(4); srv.settimeout(30)
print("listening", flush=True)
def recv_exact(c, n):
    b = b""
    while len(b) < n:
        chunk = c.recv(n - len(b))
        if not chunk: return None
        b += chunk
    return b
for _ in range(4):
    try: c, _ = srv.accept()
    except socket.timeout: break
    while True:
        head = recv_exact(c, 4)
        if head is None: break
        req = recv_exact(c, struct.unpack(">I", head)[0])
        kinds = [f for f, _, _ in w.fields(req)]
        state = 5 if w.CANCEL in kinds else 1
        print("request", "cancel" if w.CANCEL in kinds else "submit" if w.SUBMIT in kinds else kinds, flush=True)
        c.sendall(w.frame(w.ld(w.R_JOB, w.vi(1, 41) + w.vi(3, state))))
    c.close()
EOF_PY
OLD=$!
wait_for 10 grep -q listening "$TMP/old.log"
for opt in "--resume" "--continue 3"; do
  # shellcheck disable=SC2086 # the option and its value
  out=$("$CTL" --socket "$TMP/old.sock" submit --set data.path=ds --set train.run_dir=x $opt 2>&1); rc=$?
  [[ $rc == 2 && $out == *"does not know ${opt% *} (it is older than this lstmctl) and queued job 41 as a fresh run; cancelled it"* ]] &&
    ok "an older daemon and submit $opt: exit 2, job cancelled: $out" || bad "older daemon, submit $opt: exit $rc: $out"
done
[[ $(grep -c "request cancel" "$TMP/old.log") == 2 ]] && ok "the older daemon got a cancel for each" ||
  bad "older daemon's requests: $(tr '\n' ' ' <"$TMP/old.log")"
kill "$OLD" 2>/dev/null; wait "$OLD" 2>/dev/null

ctl shutdown >/dev/null; stop_daemon || bad "final shutdown"
( cd "$TMP" && mpirun -np 2 "$LSTMD" train --config job.ini "${pipe[@]}" --set train.run_dir=pipe-job-cli \
    >"$TMP/pipe-cli.log" 2>&1 ) || bad "mpirun -np 2 lstmd train (pipeline): $(tail -2 "$TMP/pipe-cli.log")"
if msg=$(/usr/bin/python3 "$SRC/tests/compare_checkpoints.py" "$TMP/pipe-job/step-6.safetensors" \
         "$TMP/pipe-job-cli/step-6.safetensors" --rtol 0 2>&1); then
  ok "the daemon's pipeline job equals mpirun -np 2 lstmd train: $msg"
else bad "daemon pipeline job vs lstmd train: $msg"; fi

if ((fails)); then echo "--- serve.log (tail)"; tail -20 "$TMP/serve.log"; echo "$fails check(s) failed"; exit 1; fi
echo "all checks passed"
