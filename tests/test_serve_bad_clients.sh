#!/usr/bin/env bash
# test_serve_bad_clients.sh — `mpirun -np 2 lstmd serve` under a storm of bad clients
# (tests/throw_frames.py: ≥ 10,000 malformed, unknown, oversized, lying, partial and silent frames,
# hundreds of connections at once, clients that never read), while a good client keeps being
# answered; rank 0's memory stays flat; afterwards a job submitted with lstmctl SUCCEEDS and the
# daemon shuts down cleanly; a client past the connection limit is told so. Only processes this
# test started are killed, by PID.
set -u
LSTMD=$(realpath "${1:?usage: test_serve_bad_clients.sh LSTMD LSTMCTL SOURCE_DIR}")
LSTMCTL=$(realpath "${2:?}")
SRC=$(realpath "${3:?}")
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_plm=isolated
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
TMP=$(mktemp -d)
MPIRUN=
cleanup() {
  if [ -n "$MPIRUN" ]; then
    local ranks
    ranks=$(ps -o pid= --ppid "$MPIRUN" 2>/dev/null)
    kill -TERM "$MPIRUN" 2>/dev/null
    for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$MPIRUN" 2>/dev/null || break; sleep 0.5; done
    kill -KILL "$MPIRUN" $ranks 2>/dev/null
  fi
  rm -rf "$TMP"
}
trap cleanup EXIT
fails=0
ok() { echo "ok    $*"; }
bad() { echo "FAIL  $*"; fails=$((fails + 1)); }
ctl() { timeout 60 "$LSTMCTL" --socket "$TMP/s.sock" "$@"; }

cd "$TMP" || exit 1
head -c 200000 "$SRC/data/fortunes.txt" > small.txt
"$LSTMD" prepare text --input small.txt --out data 2>/dev/null || { echo "FAIL  prepare"; exit 1; }
IDLE=2
MAX_FRAME=65536
mpirun -np 2 "$LSTMD" serve --socket "$TMP/s.sock" --state-dir "$TMP/state" --idle-timeout $IDLE \
  --max-frame $MAX_FRAME > serve.log 2>&1 &
MPIRUN=$!
for _ in $(seq 100); do [ -S s.sock ] && break; sleep 0.2; done
[ -S s.sock ] || { bad "the daemon did not come up: $(tail -5 serve.log)"; exit 1; }

if out=$(timeout 100 /usr/bin/python3 "$SRC/tests/throw_frames.py" --socket "$TMP/s.sock" \
           --lstmctl "$LSTMCTL" --idle-timeout $IDLE --max-frame $MAX_FRAME --frames 10000 2>&1); then
  ok "$out"
else
  bad "storm: $out"
fi

kill -0 "$MPIRUN" 2>/dev/null && ok "the daemon survived" || bad "the daemon is gone: $(tail -5 serve.log)"
if id=$(ctl submit --set data.path=data --set train.steps=30 --set model.hidden=32 --set data.batch_size=4 \
          --set data.seq_len=32 --set train.threads=1 --set train.eval_every=0 2>&1 | tail -1) &&
   [[ "$id" =~ ^[0-9]+$ ]]; then
  if watch=$(ctl watch "$id" 2>&1); then ok "job $id after the storm: $(echo "$watch" | tail -1)"
  else bad "job $id did not succeed: $(echo "$watch" | tail -3)"; fi
else
  bad "submit after the storm: $id"
fi

ctl shutdown > /dev/null || bad "lstmctl shutdown"
for _ in $(seq 60); do kill -0 "$MPIRUN" 2>/dev/null || break; sleep 0.5; done
if kill -0 "$MPIRUN" 2>/dev/null; then bad "the daemon did not stop after shutdown"
else
  wait "$MPIRUN"; rc=$?
  [ $rc -eq 0 ] && ok "daemon stopped (exit 0)" || bad "daemon exit $rc: $(tail -5 serve.log)"
  MPIRUN=
fi
# At the connection limit (ulimit -n 300: 172 connections), a new client is told why before the
# daemon closes it: lstmctl exits 1 with the daemon's message, not "Broken pipe"
( ulimit -n 300 && exec "$LSTMD" serve --socket "$TMP/c.sock" --state-dir "$TMP/cstate" \
    --idle-timeout 60 > cserve.log 2>&1 ) &
CSERVE=$!
for _ in $(seq 100); do [ -S c.sock ] && break; sleep 0.1; done
/usr/bin/python3 - "$TMP/c.sock" > holder.log 2>&1 <<'EOF_PY' &
import socket, sys, time
held = []
for _ in range(172):
    s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); held.append(s)
print("holding", len(held), flush=True)
time.sleep(30)
EOF_PY
HOLDER=$!
for _ in $(seq 100); do grep -q holding holder.log 2>/dev/null && break; sleep 0.1; done
sleep 0.5
out=$(timeout 20 "$LSTMCTL" --socket "$TMP/c.sock" list 2>&1); rc=$?
if [ $rc -eq 1 ] && grep -q "at its limit of 172 open connections" <<<"$out"; then
  ok "at the connection limit: exit 1, $out"
else bad "at the connection limit: exit $rc: $out"; fi
kill "$HOLDER" 2>/dev/null; wait "$HOLDER" 2>/dev/null
kill -TERM "$CSERVE" 2>/dev/null; wait "$CSERVE" 2>/dev/null

[ $fails -eq 0 ] || { echo "--- serve.log (tail)"; tail -20 serve.log; }
exit $((fails > 0))
