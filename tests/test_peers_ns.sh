#!/usr/bin/env bash
# test_peers_ns.sh — the lost-peer check (comm/peers.c) must not take a live rank for a dead one
# when the ranks share a host name but not a PID namespace (containers with the host's name:
# docker --network host, Kubernetes hostNetwork). mpirun -np 1 lstmd : -np 1 unshare -pf lstmd
# puts rank 1 in a PID namespace of its own, where rank 0's pid does not exist; rank 1 then waits
# (with the lost-peer check) for rank 0, made slow (LSTMD_FAULT=slow@1:0: every step's compute
# three times as long), far longer than the check's 50 ms: in the data-parallel layout the trace
# must show a wait of at least 60 ms on rank 1, or the test did not test: the slowed rank sleeps
# after its gradients' all-reduce, so rank 1 waits in the step's all-reduce of the loss and votes
# ("wait for the loss and votes" in the trace). (Rank 0 evaluating alone, then writing its best
# checkpoint alone, used to make a wait for the gradients' all-reduce: on a host with a fast disk
# rank 1's longest such wait was 9-37 ms, and the test failed as not exercised.)
# Before the fix rank 1 said "rank 0 (pid N on HOST) is gone" and aborted a healthy job.
# Exit 77 (skipped) where unshare cannot make a PID namespace (no CAP_SYS_ADMIN).
set -u
LSTMD=$(realpath "${1:?usage: test_peers_ns.sh LSTMD_BINARY SOURCE_DIR [MPIEXEC]}")
SRC=$(realpath "${2:?}")
MPIEXEC=${3:-mpirun}
if ! unshare -pf --mount-proc true 2>/dev/null; then
  echo "test_peers_ns: skipped (unshare cannot make a PID namespace here)"
  exit 77
fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cd "$TMP" || exit 1
head -c 300000 "$SRC/data/fortunes.txt" > text.txt
"$LSTMD" prepare text --input text.txt --out text >/dev/null 2>&1 || { echo "FAIL prepare"; exit 1; }
: >cfg.ini
args=(train --config cfg.ini --set data.path=text --set model.layers=2 --set model.hidden=256
      --set data.seq_len=128 --set data.batch_size=16 --set train.steps=4 --set train.threads=1
      --set train.eval_every=2 --set train.checkpoint_every=0 --set train.run_dir=run
      --trace "$TMP/trace.json")
for layout in "--set model.stages=1" "--set model.stages=2"; do
  rm -rf run "$TMP/trace.json"
  # shellcheck disable=SC2086
  LSTMD_FAULT=slow@1:0 timeout 300 "$MPIEXEC" -np 1 "$LSTMD" "${args[@]}" $layout : \
    -np 1 unshare -pf --mount-proc "$LSTMD" "${args[@]}" $layout >log 2>&1
  rc=$?
  if [[ $rc -ne 0 ]] || grep -q 'is gone while waiting' log || [[ ! -e run/step-4.safetensors ]]; then
    echo "FAIL ($layout): rank 1 in its own PID namespace: exit $rc: $(grep '^lstmd: ' log | grep -v 'effective\|device' | tail -2)"
    exit 1
  fi
  waited=$(/usr/bin/python3 - "$TMP/trace.json" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1]))
ev = d["traceEvents"] if isinstance(d, dict) else d
print("%.0f" % max([e["dur"] / 1e3 for e in ev if e.get("pid") == 1 and "dur" in e and
                    e.get("name") in ("wait for all-reduce", "wait for the loss and votes")] or [0]))
PYEOF
)
  if [[ $layout == *stages=1 && ${waited:-0} -lt 60 ]]; then
    echo "FAIL ($layout): rank 1 waited at most ${waited:-?} ms for rank 0: the check was not exercised"
    exit 1
  fi
  echo "ok    ($layout) ranks in two PID namespaces, rank 0 slowed (rank 1's longest wait for it ${waited} ms): no peer taken for lost"
done
echo "test_peers_ns: all passed"
