#!/usr/bin/env bash
# test_slurm.sh — lstmd under Slurm on a one-node test cluster (tests/slurm_cluster.sh):
#  1. `srun --mpi=pmix -n 2` trains data-parallel and matches one rank with the global batch
#     (within 1e-5);
#  2. `scancel -s TERM` stops the job cleanly: exit 0 and a checkpoint.
# Skipped (77) where Slurm is not installed.
set -u
LSTMD=$(realpath "${1:?usage: test_slurm.sh LSTMD_BINARY SOURCE_DIR}")
SRC=$(realpath "${2:?}")
TMP=$(mktemp -d)
cleanup() { "$SRC/tests/slurm_cluster.sh" stop "$TMP/cluster"; rm -rf "$TMP"; }
trap cleanup EXIT
conf=$("$SRC/tests/slurm_cluster.sh" start "$TMP/cluster")
rc=$?
[[ $rc -eq 77 ]] && exit 77
[[ $rc -ne 0 ]] && { echo "test_slurm: could not start the test cluster"; exit 1; }
export SLURM_CONF=$conf
fails=0
ok() { echo "ok    $*"; }
bad() { echo "FAIL  $*"; fails=$((fails + 1)); }

head -c 200000 "$SRC/data/fortunes.txt" > "$TMP/small.txt"
"$LSTMD" prepare text --input "$TMP/small.txt" --out "$TMP/ds" 2>/dev/null
common=(--set data.path="$TMP/ds" --set data.seq_len=16 --set model.hidden=32 --set train.threads=1
        --set train.log_every=0 --set train.eval_every=0 --set optim.algo=sgd --set optim.lr=0.5)
"$LSTMD" train "${common[@]}" --set data.batch_size=8 --set train.steps=6 --set train.run_dir="$TMP/one" \
  2>/dev/null || bad "one rank"
timeout 120 srun --mpi=pmix -n 2 "$LSTMD" train "${common[@]}" --set data.batch_size=4 --set train.steps=6 \
  --set train.run_dir="$TMP/two" >/dev/null 2>"$TMP/srun.log" || bad "srun -n 2: $(tail -3 "$TMP/srun.log")"
grep -q "2 ranks" "$TMP/srun.log" || bad "srun did not start a 2-rank world: $(grep compute "$TMP/srun.log")"
if msg=$(/usr/bin/python3 "$SRC/tests/compare_checkpoints.py" "$TMP/one/step-6.safetensors" \
         "$TMP/two/step-6.safetensors" --rtol 1e-5); then
  ok "srun --mpi=pmix -n 2 × batch 4 = 1 rank × batch 8: $msg"
else bad "srun equivalence: $msg"; fi

timeout 120 srun --mpi=pmix -n 2 -J lstmd-stop "$LSTMD" train "${common[@]}" --set data.batch_size=4 \
  --set train.steps=1000000 --set train.log_every=1 --set train.run_dir="$TMP/stop" >/dev/null 2>"$TMP/stop.log" &
job=$!
for _ in $(seq 200); do [[ -s "$TMP/stop/metrics.jsonl" ]] && break; sleep 0.1; done
scancel -s TERM "$(squeue -h -n lstmd-stop -o %i)"
wait $job
rc=$?
if [[ $rc -eq 0 ]] && grep -q "stopped at step" "$TMP/stop.log" && [[ -f "$TMP/stop/latest.safetensors" ]]; then
  ok "scancel -s TERM: exit 0 with a checkpoint"
else bad "scancel: rc=$rc $(tail -2 "$TMP/stop.log")"; fi

[[ $fails -eq 0 ]] && echo "test_slurm: passed" || echo "test_slurm: $fails FAILED"
exit $((fails > 0))
