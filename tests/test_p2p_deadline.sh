#!/bin/bash
# test_p2p_deadline.sh — failures that must end the whole job quickly, under mpirun -np 2:
#  1. `test_p2p --deadline`: rank 0 (stage 1 of a reversed pipeline) stops itself (SIGSTOP)
#     before sending; rank 1's p2p wait (train.comm_timeout_s = 2 s) must end the job within
#     2 + 1 s of the wait's start, naming both by stage and world rank (once each) and the item,
#     and mpirun must exit non-zero.
#  2. `test_p2p --sub-deadline`: the same for a bounded all-reduce on a sub-communicator whose
#     ranks are the world's reversed: the message names the waiting rank by its world rank.
#  3. `test_p2p --f32-deadline`: the same for the bounded float all-reduce (the GPU's
#     host-staged gradient sum) on the world communicator;
#  4. `test_p2p --abort-sub`: lstmd_comm_abort on a one-rank sub-communicator while the other
#     rank sleeps 60 s: mpirun must exit non-zero within a few seconds.
# Each output line is stamped with the time it arrived ($EPOCHREALTIME), so the bound is measured
# from the moment the wait began, not from mpirun's start-up. mpirun's own grace between the
# SIGTERM and the SIGKILL of the other ranks after an abort (odls_base_sigkill_timeout, default
# 1 s) is set to 0, so that the bound measures lstmd and not mpirun's tear-down; with the default
# the job ends that much later.
# Usage: test_p2p_deadline.sh TEST_P2P_BINARY [MPIEXEC]
set -u
BIN=$(realpath "${1:?usage: test_p2p_deadline.sh TEST_P2P_BINARY [MPIEXEC]}")
MPIEXEC=${2:-mpirun}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail=0
export OMPI_MCA_odls_base_sigkill_timeout=0

# run MODE: runs the job, writes "<arrival time> <line>" to $TMP/MODE.log, the exit status to
# $TMP/MODE.rc and mpirun's end time to $TMP/MODE.end.
run() {
  local mode=$1
  { timeout 30 "$MPIEXEC" -np 2 "$BIN" "$mode" 2>&1; echo $? >"$TMP/$mode.rc"; } |
    while IFS= read -r line; do printf '%s %s\n' "$EPOCHREALTIME" "$line"; done >"$TMP/$mode.log"
  echo "$EPOCHREALTIME" >"$TMP/$mode.end"
  sed 's/^/    /' "$TMP/$mode.log"
}

# elapsed MODE PATTERN: seconds from the first line matching PATTERN to mpirun's end.
elapsed() {
  local t0
  t0=$(grep -m1 -- "$2" "$TMP/$1.log" | cut -d' ' -f1)
  [ -n "$t0" ] || { echo 999; return; }
  awk -v a="$t0" -v b="$(cat "$TMP/$1.end")" 'BEGIN { printf "%.2f", b - a }'
}

check() { # check WHAT CONDITION...
  local what=$1
  shift
  if "$@"; then echo "ok    $what"; else echo "FAIL  $what"; fail=1; fi
}

echo "--deadline (timeout 2 s):"
run --deadline
rc=$(cat "$TMP/--deadline.rc")
t=$(elapsed --deadline "deadline: rank 1 waiting")
t_msg=$(awk '/deadline: rank 1 waiting/ && !a { a = $1 } /waited .* s for/ && !b { b = $1 }
             END { printf "%.2f", (a && b) ? b - a : 999 }' "$TMP/--deadline.log")
echo "    message ${t_msg} s and mpirun exit ($rc) ${t} s after rank 1 began waiting"
check "deadline: mpirun exits non-zero" test "$rc" -ne 0
# Not before the timeout: by lstmd's own clock (the "waited N s" it prints; the lines' arrival
# stamps lag by the pipe's delivery, a few ms on a loaded machine, in either direction), and
# within timeout + 1 s by the arrival stamps.
waited=$(grep -m1 -o 'waited [0-9.]* s for' "$TMP/--deadline.log" | cut -d' ' -f2)
check "deadline: message after the timeout (lstmd: waited ${waited:-?} s), within timeout + 1 s" \
  awk -v w="${waited:-0}" -v t="$t_msg" 'BEGIN { exit !(w >= 2.0 && t >= 1.9 && t <= 3.0) }'
check "deadline: the job has ended within timeout + 1 s of the wait's start" \
  awk -v t="$t" 'BEGIN { exit !(t <= 3.0) }'
check "deadline: message names the waiting stage and rank, the item, the peer stage and rank, the time" \
  grep -q "stage 0 (rank 1, [^)]*) waited 2\.[0-9] s for gradients (B) of unit 0 chunk 3 from stage 1 (rank 0) (p2p receive" \
  "$TMP/--deadline.log"
check "deadline: the wait never returned" bash -c "! grep -q 'the wait returned' '$TMP/--deadline.log'"

# bounded_allreduce MODE TITLE WHAT PATTERN: rank 0 stops itself, rank 1's bounded all-reduce
# (timeout 2 s) must end the job within timeout + 1 s with a line matching PATTERN.
bounded_allreduce() {
  local mode=$1 name=${1#--} rc t
  echo "$mode (timeout 2 s, $2):"
  run "$mode"
  rc=$(cat "$TMP/$mode.rc")
  t=$(elapsed "$mode" "$name: rank 1 waiting")
  echo "    mpirun exit $rc, ${t} s after rank 1 began waiting"
  check "$name: mpirun exits non-zero within timeout + 1 s" \
    awk -v rc="$rc" -v t="$t" 'BEGIN { exit !(rc != 0 && t <= 3.0) }'
  check "$name: $3" grep -q "$4" "$TMP/$mode.log"
}
bounded_allreduce --sub-deadline "a sub-communicator ranked in reverse" \
  "the waiting rank names itself by its world rank (1), not its rank there (0)" \
  "rank 1 (.*): the test's all-reduce on a sub-communicator unfinished after 2\.[0-9] s"
bounded_allreduce --f32-deadline "the host-staged gradient all-reduce's bounded sum" \
  "the message names the wait" \
  "rank 1 (.*): the host-staged gradient all-reduce unfinished after 2\.[0-9] s"

echo "--abort-sub:"
run --abort-sub
rc=$(cat "$TMP/--abort-sub.rc")
t=$(elapsed --abort-sub "abort-sub: rank 0 aborts")
echo "    mpirun exit $rc, ${t} s after rank 0 aborted"
check "abort on a sub-communicator: mpirun exits non-zero" test "$rc" -ne 0
check "abort on a sub-communicator: the sleeping rank is ended too, within 5 s" \
  awk -v t="$t" 'BEGIN { exit !(t <= 5.0) }'
exit $fail
