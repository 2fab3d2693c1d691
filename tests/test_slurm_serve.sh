#!/usr/bin/env bash
# test_slurm_serve.sh — deploy/slurm/serve.sbatch on a one-node test cluster
# (deploy/slurm/local-cluster.sh): submitted with 2 tasks × 1 CPU, it prints where its socket is;
# a small job submitted with lstmctl reaches SUCCEEDED on a 2-rank world; `lstmctl shutdown`
# ends the Slurm job with exit code 0 (sbatch --wait's status, and scontrol's ExitCode).
# Skipped (77) where Slurm is not installed. Jobs still queued are cancelled and the daemons
# the test started are stopped however it ends.
set -u
LSTMD=$(realpath "${1:?usage: test_slurm_serve.sh LSTMD_BINARY LSTMCTL_BINARY SOURCE_DIR}")
LSTMCTL=$(realpath "${2:?}")
SRC=$(realpath "${3:?}")
TMP=$(mktemp -d)
TEST_NAME=test_slurm_serve
waiter=""
slurm_test_cleanup() { [[ -n $waiter ]] && kill "$waiter" 2>/dev/null; }
source "$SRC/tests/slurm_cluster.sh"

head -c 200000 "$SRC/data/fortunes.txt" > "$TMP/small.txt"
"$LSTMD" prepare text --input "$TMP/small.txt" --out "$TMP/ds" 2>/dev/null
SOCK=$TMP/serve.sock
out=$TMP/serve.out
# sbatch --wait in the background: its exit status is the job's once the daemon has stopped.
LSTMD=$LSTMD STATE_DIR=$TMP/state DATA_ROOT=$TMP SOCKET=$SOCK timeout 240 \
  sbatch --wait --parsable -N 1 --ntasks-per-node=2 --cpus-per-task=1 --time=5 -D "$TMP" -o "$out" \
    "$SRC/deploy/slurm/serve.sbatch" > "$TMP/jobid" &
waiter=$!
for _ in $(seq 600); do grep -q "socket $SOCK on " "$out" 2>/dev/null && break; sleep 0.1; done
if grep -q "socket $SOCK on " "$out" 2>/dev/null && [[ -S $SOCK ]]; then
  ok "serve.sbatch prints where its socket is: $(grep -m1 -o "socket $SOCK on [^;]*" "$out")"
else
  bad "no socket line / no socket after 60 s: $(tail -5 "$out" 2>/dev/null)"
fi
jobid=$(head -1 "$TMP/jobid" 2>/dev/null)

ctl() { timeout 120 "$LSTMCTL" --socket "$SOCK" "$@"; }
id=$(ctl submit --set data.path=ds --set train.steps=6 --set model.hidden=32 --set data.batch_size=4 \
       --set data.seq_len=16 --set train.threads=1 --set train.log_every=2 --name slurm 2>&1 | tail -1)
if ctl watch "$id" > "$TMP/watch.out" 2>&1; then
  ok "job $id through lstmctl: $(tail -1 "$TMP/watch.out")"
else
  bad "job $id did not succeed: $(tail -3 "$TMP/watch.out")"
fi
grep -q "starting on 2 ranks" "$out" && ok "the daemon runs jobs on a 2-rank world" \
  || bad "job output does not mention 2 ranks: $(grep -m2 starting "$out")"
ctl status "$id" | grep -q SUCCEEDED || bad "status $id: $(ctl status "$id" 2>&1)"
ctl shutdown > /dev/null || bad "lstmctl shutdown failed"

wait "$waiter"
rc=$?
waiter=""
if [[ $rc -eq 0 ]] && grep -q "lstmd serve exited with status 0" "$out"; then
  ok "sbatch --wait serve.sbatch: job exit code 0 after lstmctl shutdown"
else
  bad "serve job: sbatch --wait rc=$rc: $(tail -4 "$out")"
fi
info=$(scontrol show job "$jobid" 2>/dev/null | grep -o -e 'JobState=[A-Z]*' -e 'ExitCode=[0-9:]*' | tr '\n' ' ')
[[ $info == *"JobState=COMPLETED"*"ExitCode=0:0"* ]] && ok "scontrol: job $jobid $info" \
  || bad "scontrol: job $jobid: $info"
[[ -S $SOCK ]] && bad "the socket is still there after the shutdown"

[[ $fails -eq 0 ]] && echo "test_slurm_serve: passed" || echo "test_slurm_serve: $fails FAILED"
exit $((fails > 0))
