#!/usr/bin/env bash
# test_rank_faults.sh — faults of one rank under `mpirun lstmd train` that the other tests of
# failures (test_mpi_train, test_pipeline, test_checkpoint_fail) do not reach:
#  1. a rank stopped (SIGSTOP) after the run's last collective, as it begins MPI_Finalize
#     (LSTMD_FAULT=finalize_freeze@1:1; 2 pipeline stages; MPI_Finalize's bound, the set-up's,
#     shortened to 3 s by LSTMD_SETUP_WAIT_S): rank 0 had
#     written the final checkpoint and printed "done", then waited in MPI_Finalize forever (user
#     trial). Now it ends within seconds naming the stopped rank, no process is left, and the
#     final checkpoint is whole.
#  2. but a rank that comes to MPI_Finalize late in a healthy run, past train.comm_timeout_s
#     (LSTMD_FAULT=finalize_slow@1:0: rank 0 6 s late with comm_timeout_s 3, as a slow close of
#     train.log on NFS made it in a review), is waited for: exit 0 (the bound was comm_timeout_s,
#     and the finished run failed);
#  3. a rank stopped before MPI_Init (LSTMD_FAULT=init_freeze@1:1; the set-up bound shortened to
#     3 s by LSTMD_SETUP_WAIT_S): rank 0 waited in MPI_Init forever (user trial: SIGSTOP 0.25 s
#     after mpirun started). Now it ends at the set-up bound, naming MPI_Init, none left.
#  4. the last of 3 pipeline stages stopped as an evaluation begins (LSTMD_FAULT=eval_freeze@2:2,
#     comm_timeout_s 3): a rank names it stopped, and no rank calls another "gone". The first
#     rank past its deadline ends the job; the others, and the stopped rank once the launcher
#     continued it to end it, found that rank's process gone and blamed it ("rank 0 (pid N on
#     vm) is gone while waiting for ..."; 4 such lines of 6 in a user trial of 2 x 3 stages).
#     Now a rank that ends the job tells its host's ranks first (comm/peers.h), and they say
#     that it "ended the job".
set -u
LSTMD=$(realpath "${1:?usage: test_rank_faults.sh LSTMD_BINARY SOURCE_DIR}")
SRC=$(realpath "${2:?}")
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_plm=isolated
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
TMP=$(mktemp -d)
trap 'pkill -CONT -f "$TMP" 2>/dev/null; pkill -9 -f "$TMP" 2>/dev/null; rm -rf "$TMP"' EXIT
fails=0
ok() { echo "ok    $*"; }
bad() { echo "FAIL  $*"; fails=$((fails + 1)); }

head -c 100000 "$SRC/data/fortunes.txt" > "$TMP/small.txt"
"$LSTMD" prepare text --input "$TMP/small.txt" --out "$TMP/ds" 2>/dev/null || bad "prepare"
args=(train --set data.path="$TMP/ds" --set data.seq_len=16 --set data.batch_size=4 --set model.embed=8
      --set model.hidden=16 --set model.layers=2 --set train.threads=1 --set train.eval_every=0
      --set train.log_every=0 --set train.steps=4 --set train.checkpoint_every=2
      --set train.comm_timeout_s=3 --set train.run_dir="$TMP/run")

# 1. rank 1 frozen as MPI_Finalize begins
t0=$SECONDS
LSTMD_FAULT=finalize_freeze@1:1 LSTMD_SETUP_WAIT_S=3 timeout 40 mpirun -np 2 "$LSTMD" "${args[@]}" --set model.stages=2 \
  >/dev/null 2>"$TMP/err.log"
rc=$? took=$((SECONDS - t0))
left=$(pgrep -f "$TMP" | wc -l)
if [[ $rc -ne 124 && $took -le 20 && $left -eq 0 ]]; then ok "finalize_freeze: every rank ended in ${took}s, none left"
else bad "finalize_freeze: rc=$rc after ${took}s, $left process(es) left (a hang in MPI_Finalize?)"; fi
msg=$(grep -m1 '^lstmd: rank 0 .*MPI_Finalize unfinished after .*rank 1 (pid [0-9]* on .*) is stopped' "$TMP/err.log")
[[ -n $msg ]] && ok "finalize_freeze: ${msg#lstmd: }" \
  || bad "finalize_freeze: no line naming the stopped rank 1: $(grep '^lstmd:' "$TMP/err.log" | tail -2)"
grep -q '^lstmd: done: ' "$TMP/err.log" && s=$(/usr/bin/python3 "$SRC/tests/ckpt_meta.py" "$TMP/run/latest.safetensors" 2>&1) \
  && [[ $s == 4 ]] && "$LSTMD" eval --checkpoint "$TMP/run/latest.safetensors" --data "$TMP/ds" >/dev/null 2>&1 \
  && ok "finalize_freeze: the run finished and latest.safetensors is the whole step 4" \
  || bad "finalize_freeze: the run did not finish, or latest.safetensors is not a whole step 4 ($s)"

# 2. rank 0 late to MPI_Finalize, within the bound
LSTMD_FAULT=finalize_slow@1:0 LSTMD_SETUP_WAIT_S=30 timeout 60 mpirun -np 2 "$LSTMD" "${args[@]}" \
  --set train.run_dir="$TMP/run3" >/dev/null 2>"$TMP/err3.log"
rc=$?
[[ $rc == 0 ]] && ! grep -q "MPI_Finalize unfinished" "$TMP/err3.log" &&
  ok "finalize_slow: rank 0 6 s late to MPI_Finalize (comm_timeout_s 3): waited for, exit 0" ||
  bad "finalize_slow: exit $rc: $(grep '^lstmd:' "$TMP/err3.log" | tail -2)"

# 3. rank 1 frozen before MPI_Init
t0=$SECONDS
LSTMD_FAULT=init_freeze@1:1 LSTMD_SETUP_WAIT_S=3 timeout 40 mpirun -np 2 "$LSTMD" "${args[@]}" \
  --set train.run_dir="$TMP/run2" >/dev/null 2>"$TMP/err2.log"
rc=$? took=$((SECONDS - t0))
left=$(pgrep -f "$TMP" | wc -l)
if [[ $rc -ne 124 && $rc -ne 0 && $took -le 20 && $left -eq 0 ]]; then ok "init_freeze: every rank ended in ${took}s, none left"
else bad "init_freeze: rc=$rc after ${took}s, $left process(es) left (a hang in MPI_Init?)"; fi
msg=$(grep -m1 "^lstmd: rank 0 .*MPI_Init unfinished after .*(its limit: 3 s, the set-up's: max(train.comm_timeout_s, LSTMD_SETUP_WAIT_S))" "$TMP/err2.log")
[[ -n $msg ]] && ok "init_freeze: ${msg#lstmd: }" \
  || bad "init_freeze: no MPI_Init line from rank 0: $(grep '^lstmd:' "$TMP/err2.log" | tail -2)"

# 4. stage 2 of 3 frozen as the evaluation after step 2 begins
t0=$SECONDS
LSTMD_FAULT=eval_freeze@2:2 timeout 60 mpirun -np 3 "$LSTMD" "${args[@]}" --set model.layers=3 \
  --set model.stages=3 --set train.eval_every=2 --set train.run_dir="$TMP/run4" >/dev/null 2>"$TMP/err4.log"
rc=$? took=$((SECONDS - t0))
stopped=$(grep -m1 '^lstmd: rank [01] .*rank 2 (pid [0-9]* on [^)]*) is stopped' "$TMP/err4.log")
gone=$(grep '^lstmd: .* is gone' "$TMP/err4.log")
if [[ $rc -ne 0 && $rc -ne 124 && $took -le 20 && -n $stopped && -z $gone ]]; then
  ok "eval_freeze of stage 2 of 3: ended in ${took}s, no rank called gone: $(cut -c1-150 <<<"${stopped#lstmd: }")"
else bad "eval_freeze of stage 2 of 3: rc=$rc after ${took}s; named stopped: '${stopped:0:80}'; gone: $(head -2 <<<"$gone" | cut -c1-200)"; fi

[[ $fails -eq 0 ]] && echo "test_rank_faults: passed" || echo "test_rank_faults: $fails FAILED"
exit $((fails > 0))
