#!/usr/bin/env bash
# bench_serve.sh LSTMD_BINARY — the control daemon: status latency under 64 clients, idle CPU.
#
#   bench/bench_serve.sh build/lstmd                 (part of `make bench`; `make bench-serve`)
#   BENCH_OUT=results.txt bench/bench_serve.sh build/lstmd
#
# Starts `mpirun -np 2 lstmd serve` in a temp dir, runs a few small jobs through it (so the job
# table is not empty: 4 that succeed, one cancelled while queued), then
#  1. idle CPU: utime+stime (/proc/PID/stat) of mpirun and every rank process over IDLE_S
#     seconds, as % of one core (target: < 1% in total);
#  2. bench_serve (bench/bench_serve.c): CLIENTS clients (64) on their own connections send
#     GetJob/ListJobs in a closed loop for DURATION s (10), against the daemon and against a
#     trivial raw-frame peer in the same run (target: p99 < 2 ms); then the same with 1 client;
#  3. submit -> RUNNING latency on idle ranks: LATENCY_JOBS (30) one-rank jobs submitted one at a
#     time, each after the last ended; the daemon's own submitted_ms and started_ms of each
#     (target: p99 < 100 ms);
#  4. throughput: two 1-rank jobs at once against one 2-rank job of the same settings (the same
#     global batch per step as the pair together), aggregate tokens/s from each job's train.log
#     ("trained steps ... tokens/s"); the pair should reach >= 90% of the 2-rank job;
# and shuts the daemon down with `lstmctl shutdown` (its exit status must be 0).
#
# Environment: BENCH_OUT (also write the output there), IDLE_S (20), DURATION (10), CLIENTS
# (64), LATENCY_JOBS (30), TPUT_STEPS (400), BENCH_SERVE (default: bench_serve beside LSTMD_BINARY), LSTMCTL (likewise).
set -euo pipefail

if [[ $# -ne 1 || $1 == -h || $1 == --help ]]; then
  sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'
  [[ $# -eq 1 ]] && exit 0 || exit 2
fi
LSTMD=$(realpath "$1")
BUILD=$(dirname "$LSTMD")
BENCH_SERVE=${BENCH_SERVE:-$BUILD/bench_serve}
LSTMCTL=${LSTMCTL:-$BUILD/lstmctl}
for b in "$LSTMD" "$BENCH_SERVE" "$LSTMCTL"; do
  [[ -x $b ]] || { echo "bench_serve.sh: $b: not an executable (run make first)" >&2; exit 2; }
done
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
IDLE_S=${IDLE_S:-20}
DURATION=${DURATION:-10}
CLIENTS=${CLIENTS:-64}
LATENCY_JOBS=${LATENCY_JOBS:-30}
TPUT_STEPS=${TPUT_STEPS:-400}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/lstmd-bench-serve.XXXXXX")
export OMPI_MCA_plm=${OMPI_MCA_plm:-isolated} OMPI_MCA_rmaps_base_oversubscribe=1
[[ $(id -u) -eq 0 ]] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
SOCK=$TMP/lstmd.sock
ctl() { "$LSTMCTL" --socket "$SOCK" "$@"; }

# Sum of utime+stime (clock ticks) of the given PIDs (fields 14 and 15 of /proc/PID/stat,
# counted after the "(comm)" field, which may hold spaces).
ticks() {
  local sum=0 pid f
  for pid in "$@"; do
    read -r -a f < <(sed 's/^.*) //' /proc/"$pid"/stat 2>/dev/null) || continue
    sum=$((sum + f[11] + f[12]))
  done
  echo "$sum"
}

{
  echo "== lstmd serve: control latency and idle CPU, $(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname), $(nproc) cores"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'); lstmd commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')"
  echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"

  head -c 200000 "$ROOT/data/fortunes.txt" > "$TMP/small.txt"
  "$LSTMD" prepare text --input "$TMP/small.txt" --out "$TMP/data" 2>/dev/null
  daemon=""
  cleanup() { # the daemon we started, if it is still there: drain it, then mpirun's teardown
    if [[ -n $daemon ]] && kill -0 "$daemon" 2>/dev/null; then
      ctl shutdown >/dev/null 2>&1 || kill -USR1 "$daemon" 2>/dev/null
      for _ in $(seq 100); do kill -0 "$daemon" 2>/dev/null || break; sleep 0.1; done
      kill -TERM "$daemon" 2>/dev/null || true
    fi
    rm -rf "$TMP"
  }
  trap cleanup EXIT # inside the block: it runs in a subshell (| tee)
  (cd "$TMP" && exec mpirun -np 2 "$LSTMD" serve --socket "$SOCK" --state-dir "$TMP/state" \
     >"$TMP/serve.log" 2>&1) &
  daemon=$!
  for _ in $(seq 300); do [[ -S $SOCK ]] && break; sleep 0.1; done
  [[ -S $SOCK ]] || { echo "bench_serve.sh: the daemon did not start:"; tail -5 "$TMP/serve.log"; exit 1; }

  job=(--set data.path=data --set train.steps=20 --set model.hidden=32 --set data.batch_size=4
       --set data.seq_len=32 --set train.threads=1 --set train.log_every=5)
  for i in 1 2 3 4; do ctl submit "${job[@]}" --name "bench-$i" >/dev/null; done
  last=$(ctl submit "${job[@]}" --name bench-cancelled | tail -1)
  ctl cancel "$last" >/dev/null
  ctl watch 4 >/dev/null || { echo "bench_serve.sh: job 4 did not succeed"; ctl list; exit 1; }
  echo "job table:"
  ctl list | sed 's/^/    /'

  # --- 1. idle CPU ---
  sleep 2 # let the last job's threads wind down
  ranks=$(ps -o pid= --ppid "$daemon" | tr -s ' \n' ' ')
  pids=("$daemon" $ranks)
  declare -A before
  for pid in "${pids[@]}"; do before[$pid]=$(ticks "$pid"); done
  read -r -a cpu0 < <(head -1 /proc/stat)
  s0=$(date +%s.%N)
  sleep "$IDLE_S"
  s1=$(date +%s.%N)
  read -r -a cpu1 < <(head -1 /proc/stat)
  secs=$(awk -v a="$s0" -v b="$s1" 'BEGIN { print b - a }')
  hz=$(getconf CLK_TCK)
  echo "idle CPU over $IDLE_S s (utime+stime from /proc/PID/stat, $hz ticks/s; % of one core):"
  total=0
  for pid in "${pids[@]}"; do
    d=$(($(ticks "$pid") - before[$pid]))
    total=$((total + d))
    awk -v d="$d" -v hz="$hz" -v s="$secs" -v what="$(cat /proc/"$pid"/comm) $pid" \
      'BEGIN { printf "    %-22s %5.2f%% (%d ticks)\n", what, 100 * d / hz / s, d }'
  done
  awk -v d="$total" -v hz="$hz" -v s="$secs" 'BEGIN { pct = 100 * d / hz / s
    printf "    %-22s %5.2f%% (%d ticks in %.1f s); target < 1%%: %s\n", "total", pct, d, s,
      pct < 1 ? "met" : "NOT MET" }'
  # The whole machine in the same window (user+nice+system+irq+softirq+steal over all fields
  # but idle and iowait): what other work was running meanwhile.
  busy=0 all=0
  for i in 1 2 3 4 5 6 7 8; do
    d=$((cpu1[i] - cpu0[i]))
    all=$((all + d))
    [[ $i -ne 4 && $i -ne 5 ]] && busy=$((busy + d))
  done
  awk -v b="$busy" -v a="$all" -v n="$(nproc)" 'BEGIN {
    printf "    whole machine meanwhile: %.0f%% of one core busy (of %d cores; other users'"'"' work)\n",
      100 * n * b / a, n }'

  # --- 2. latency ---
  echo "-- $CLIENTS clients --"
  "$BENCH_SERVE" --socket "$SOCK" --clients "$CLIENTS" --duration "$DURATION" --warmup 1 \
    || echo "bench_serve: some requests failed (see above)"
  echo "-- 1 client (no queueing: the round trip itself) --"
  "$BENCH_SERVE" --socket "$SOCK" --clients 1 --duration 3 --warmup 0.5 --rows lstmd,peer \
    || echo "bench_serve: some requests failed (see above)"
  echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

  # --- 3. submit -> RUNNING latency on idle ranks ---
  tiny=(--set data.path=data --set train.steps=1 --set model.hidden=32 --set data.batch_size=4
        --set data.seq_len=32 --set train.threads=1 --set resources.ranks=1)
  lat=()
  for i in $(seq "$LATENCY_JOBS"); do
    id=$(ctl submit "${tiny[@]}" --name "latency-$i" | tail -1)
    ctl watch "$id" >/dev/null || { echo "bench_serve.sh: latency job $id failed"; ctl status "$id"; exit 1; }
    lat+=("$(ctl --json status "$id" | python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["started_ms"] - j["submitted_ms"])')")
  done
  printf '%s\n' "${lat[@]}" | sort -n | awk -v n="$LATENCY_JOBS" '{ v[NR] = $1 } END {
    p50 = v[int(0.5 * (NR - 1)) + 1]; p99 = v[int(0.99 * (NR - 1)) + 1];
    printf "submit -> RUNNING on idle ranks, %d jobs (daemon clock, ms): p50 %d, p99 %d, max %d; target p99 < 100 ms: %s\n",
      n, p50, p99, v[NR], p99 < 100 ? "met" : "NOT MET" }'

  # --- 4. two 1-rank jobs at once against one 2-rank job ---
  big=(--set data.path=data --set train.steps="$TPUT_STEPS" --set model.hidden=128 --set model.embed=32
       --set data.batch_size=16 --set data.seq_len=64 --set train.threads=1 --set train.log_every=100
       --set train.eval_every=0 --set train.checkpoint_every=0)
  rate() { grep -o 'trained steps [0-9.]* in [0-9.]* s of training ([0-9]* tokens/s' "$(ctl --json status "$1" |
           python3 -c 'import json,sys; print(json.load(sys.stdin)["run_dir"])')/train.log" | tail -1 | grep -o '([0-9]*' | tr -d '(' ; }
  two=$(ctl submit "${big[@]}" --set resources.ranks=2 --name tput-2rank | tail -1)
  ctl watch "$two" >/dev/null
  a=$(ctl submit "${big[@]}" --set resources.ranks=1 --name tput-a | tail -1)
  b=$(ctl submit "${big[@]}" --set resources.ranks=1 --set train.seed=2 --name tput-b | tail -1)
  ctl watch "$a" >/dev/null; ctl watch "$b" >/dev/null
  r2=$(rate "$two"); ra=$(rate "$a"); rb=$(rate "$b")
  awk -v r2="$r2" -v ra="$ra" -v rb="$rb" -v s="$TPUT_STEPS" 'BEGIN {
    printf "throughput, %d steps (H 128, batch 16 x 64 per rank, 1 thread per rank):\n", s
    printf "    one 2-rank job:        %8.0f tokens/s\n", r2
    printf "    two 1-rank jobs:       %8.0f + %.0f = %.0f tokens/s (%.0f%% of the 2-rank job; target >= 90%%: %s)\n",
      ra, rb, ra + rb, 100 * (ra + rb) / r2, (ra + rb >= 0.9 * r2) ? "met" : "NOT MET" }'

  # --- shut down ---
  ctl shutdown >/dev/null
  rc=0
  wait "$daemon" || rc=$?
  daemon=""
  echo "lstmctl shutdown: the daemon exited with status $rc"
} | tee ${BENCH_OUT:+"$BENCH_OUT"}
