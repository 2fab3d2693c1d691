#!/usr/bin/env bash
# test_slurm.sh — lstmd under Slurm on a one-node test cluster (deploy/slurm/local-cluster.sh):
#  1. `srun --mpi=pmix -n 2` trains data-parallel and makes the updates of one rank with the
#     global batch (within 1e-5 of the update's norm, from the initialisation: a 1-step lr-0 run;
#     clip off, since a clip would hide a uniform error in the gradient's scale);
#     `srun -n 2` with model.stages=2 (the layers in two pipeline stages) does too, and so does a
#     series model with model.target=delta, data.window_norm=mean;
#  2. `scancel -s TERM` stops the job cleanly: exit 0 and a checkpoint;
#  3. `sbatch --wait deploy/slurm/train.sbatch` with 2 tasks × 1 CPU: the job's exit code is 0,
#     its output names a 2-rank world, the checkpoint exists and `lstmd eval` reads it; a second
#     submission with more steps resumes from that checkpoint (what a requeued job does); a job
#     with [prune] and [distill] keys as extra arguments trains (eval reports its sparsity); one
#     with train.early_stop_patience (scripted val losses) stops early with its best and samples,
#     and its resubmission trains nothing and exits 0; one with model.layer_norm=true writes a
#     layer-normalised checkpoint that eval reads;
#     a series classifier (prepare classify --series) trains through train.sbatch too, its
#     evaluations logging val_accuracy, and eval reads its checkpoint;
#  4. `scancel JOBID` of a running train.sbatch job (SIGTERM to the batch shell and the tasks, as
#     at the time limit): checkpoint, lstmd exit 0 with the script waiting for it, and a
#     resubmission resumes from that checkpoint.
# Skipped (77) where Slurm is not installed. The daemons are stopped however the test ends
# (jobs still queued are cancelled first, so no slurmstepd or lstmd outlives the test).
set -u
LSTMD=$(realpath "${1:?usage: test_slurm.sh LSTMD_BINARY SOURCE_DIR}")
SRC=$(realpath "${2:?}")
TMP=$(mktemp -d)
TEST_NAME=test_slurm
source "$SRC/tests/slurm_cluster.sh"

head -c 200000 "$SRC/data/fortunes.txt" > "$TMP/small.txt"
"$LSTMD" prepare text --input "$TMP/small.txt" --out "$TMP/ds" 2>/dev/null
# model.embed=8 (as in test_mpi_train): 6 steps move the default 64-wide embedding by ~1e-4 of its
# norm, and there the float32 rounding of the stored weights alone reaches half of 1e-5 of the
# update; with 8 the worst tensor is an LSTM weight at ~1e-6.
common=(--set data.path="$TMP/ds" --set data.seq_len=16 --set model.embed=8 --set model.hidden=32
        --set train.threads=1 --set train.log_every=0 --set train.eval_every=0 --set optim.algo=sgd
        --set optim.lr=0.5 --set optim.clip_norm=0)
"$LSTMD" train "${common[@]}" --set data.batch_size=8 --set train.steps=1 --set optim.lr=0 \
  --set train.run_dir="$TMP/init" 2>/dev/null || bad "initialisation run (lr 0, 1 step)"
"$LSTMD" train "${common[@]}" --set data.batch_size=8 --set train.steps=6 --set train.run_dir="$TMP/one" \
  2>/dev/null || bad "one rank"
timeout 120 srun --mpi=pmix -n 2 "$LSTMD" train "${common[@]}" --set data.batch_size=4 --set train.steps=6 \
  --set train.run_dir="$TMP/two" >/dev/null 2>"$TMP/srun.log" || bad "srun -n 2: $(tail -3 "$TMP/srun.log")"
grep -q "2 ranks" "$TMP/srun.log" || bad "srun did not start a 2-rank world: $(grep compute "$TMP/srun.log")"
if msg=$(/usr/bin/python3 "$SRC/tests/compare_checkpoints.py" "$TMP/one/step-6.safetensors" \
         "$TMP/two/step-6.safetensors" --rtol 1e-5 --initial "$TMP/init/step-1.safetensors"); then
  ok "srun --mpi=pmix -n 2 × batch 4 = 1 rank × batch 8: $msg"
else bad "srun equivalence: $msg"; fi
# A series model with the forecasting keys (model.target, data.window_norm) the same way.
python3 "$SRC/bench/make_trend_series.py" "$TMP/trend.csv" 600
"$LSTMD" prepare series --input "$TMP/trend.csv" --target co2 --horizon 4 --season 52 \
  --out "$TMP/series" 2>/dev/null
fc=(--set data.path="$TMP/series" --set data.seq_len=26 --set data.order=stream --set model.hidden=16
    --set model.layers=1 --set model.target=delta --set data.window_norm=mean --set train.threads=1
    --set train.log_every=0 --set train.eval_every=0 --set optim.algo=sgd --set optim.lr=0.5
    --set optim.clip_norm=0)
"$LSTMD" train "${fc[@]}" --set data.batch_size=8 --set train.steps=1 --set optim.lr=0 \
  --set train.run_dir="$TMP/fc-init" 2>/dev/null || bad "series initialisation run"
"$LSTMD" train "${fc[@]}" --set data.batch_size=8 --set train.steps=6 --set train.run_dir="$TMP/fc-one" \
  2>/dev/null || bad "series, one rank"
timeout 120 srun --mpi=pmix -n 2 "$LSTMD" train "${fc[@]}" --set data.batch_size=4 --set train.steps=6 \
  --set train.run_dir="$TMP/fc-two" >/dev/null 2>"$TMP/srun-fc.log" || bad "srun -n 2, series: $(tail -3 "$TMP/srun-fc.log")"
if msg=$(/usr/bin/python3 "$SRC/tests/compare_checkpoints.py" "$TMP/fc-one/step-6.safetensors" \
         "$TMP/fc-two/step-6.safetensors" --rtol 1e-5 --initial "$TMP/fc-init/step-1.safetensors") &&
   [[ $(/usr/bin/python3 "$SRC/tests/ckpt_meta.py" "$TMP/fc-two/step-6.safetensors" series.target) == delta ]]; then
  ok "srun --mpi=pmix -n 2 with model.target=delta, data.window_norm=mean = 1 rank: $msg"
else bad "srun series equivalence: $msg"; fi
timeout 120 srun --mpi=pmix -n 2 "$LSTMD" train "${common[@]}" --set data.batch_size=8 --set train.steps=6 \
  --set model.stages=2 --set train.time_chunks=4 --set train.run_dir="$TMP/stages" >/dev/null \
  2>"$TMP/srun-stages.log" || bad "srun -n 2, 2 stages: $(tail -3 "$TMP/srun-stages.log")"
if msg=$(/usr/bin/python3 "$SRC/tests/compare_checkpoints.py" "$TMP/stages/step-6.safetensors" \
         "$TMP/one/step-6.safetensors" --rtol 1e-5 --initial "$TMP/init/step-1.safetensors"); then
  ok "srun --mpi=pmix -n 2 with model.stages=2 = 1 rank: $msg"
else bad "srun, 2 stages: $msg"; fi

timeout 120 srun --mpi=pmix -n 2 -J lstmd-stop "$LSTMD" train "${common[@]}" --set data.batch_size=4 \
  --set train.steps=1000000 --set train.log_every=1 --set train.run_dir="$TMP/stop" >/dev/null 2>"$TMP/stop.log" &
job=$!
for _ in $(seq 200); do [[ -s "$TMP/stop/metrics.jsonl" ]] && break; sleep 0.1; done
timeout 10 scancel -s TERM "$(timeout 10 squeue -h -n lstmd-stop -o %i)"
wait $job
rc=$?
if [[ $rc -eq 0 ]] && grep -q "stopped at step" "$TMP/stop.log" && [[ -f "$TMP/stop/latest.safetensors" ]]; then
  ok "scancel -s TERM: exit 0 with a checkpoint"
else bad "scancel: rc=$rc $(tail -2 "$TMP/stop.log")"; fi

# 3. the batch script, as a user would submit it (CONFIG/RUN/LSTMD from the environment).
small_job_ini > "$TMP/job.ini"
sbatch_job() { # sbatch_job OUTFILE [lstmd train args...]: sbatch --wait's status (the job's)
  local out=$1
  shift
  LSTMD=$LSTMD CONFIG=$TMP/job.ini RUN=${RUN_DIR:-$TMP/sb} timeout 180 \
    sbatch --wait --quiet -N 1 --ntasks-per-node=2 --cpus-per-task=1 --time=5 -D "$TMP" \
      -o "$out" "$SRC/deploy/slurm/train.sbatch" "$@"
}
sbatch_job "$TMP/sbatch1.out"
rc=$?
if [[ $rc -eq 0 ]]; then ok "sbatch --wait train.sbatch: job exit code 0"
else bad "sbatch --wait train.sbatch: rc=$rc: $(tail -5 "$TMP/sbatch1.out" 2>/dev/null)"; fi
grep -q "2 ranks" "$TMP/sbatch1.out" 2>/dev/null && ok "job output names a 2-rank world" \
  || bad "job output does not mention 2 ranks: $(grep -m2 -e rank -e world "$TMP/sbatch1.out" 2>/dev/null)"
grep -q "^  train.threads = 1$" "$TMP/sbatch1.out" 2>/dev/null \
  || bad "job output does not show train.threads from SLURM_CPUS_PER_TASK"
if [[ -f "$TMP/sb/step-6.safetensors" ]] \
   && ev=$("$LSTMD" eval --checkpoint "$TMP/sb/latest.safetensors" --data "$TMP/ds" 2>&1) \
   && grep -q '"loss"' <<<"$ev"; then
  ok "checkpoint written by the job; lstmd eval: $ev"
else bad "checkpoint/eval after sbatch: $(ls "$TMP/sb" 2>&1) $ev"; fi
sbatch_job "$TMP/sbatch2.out" --set train.steps=9
rc=$?
if [[ $rc -eq 0 ]] && grep -q "resumed from .* at step 6" "$TMP/sbatch2.out" \
   && [[ -f "$TMP/sb/step-9.safetensors" ]]; then
  ok "second submission resumed from step 6 and reached step 9"
else bad "resubmission: rc=$rc $(grep -m3 -e resum -e error "$TMP/sbatch2.out" 2>/dev/null)"; fi

# [prune] and [distill] reach the ranks of the batch script like every other key.
RUN_DIR=$TMP/sbp sbatch_job "$TMP/sbatch5.out" --set prune.target_sparsity=0.5 \
  --set prune.begin_step=2 --set prune.end_step=4 --set prune.frequency=2 \
  --set distill.teacher="$TMP/one/step-6.safetensors"
rc=$?
ev=$("$LSTMD" eval --checkpoint "$TMP/sbp/latest.safetensors" --data "$TMP/ds" 2>&1)
if [[ $rc -eq 0 ]] && grep -q '"sparsity":{"lstm.weight_ih_l0":0.5' <<<"$ev" \
   && grep -q "^  distill.teacher = $TMP/one/step-6.safetensors$" "$TMP/sbatch5.out"; then
  ok "train.sbatch with [prune] and [distill]: exit 0, eval: $ev"
else bad "train.sbatch with [prune] and [distill]: rc=$rc $ev $(tail -3 "$TMP/sbatch5.out" 2>/dev/null)"; fi

# A series classifier through the batch script (prepare classify --series data; the job's
# evaluations log val_accuracy; lstmd eval reads its checkpoint: accuracy and confusion).
/usr/bin/python3 "$SRC/deploy/examples/wave_shapes.py" 120 --length 16 --seed 3 > "$TMP/waves.csv"
"$LSTMD" prepare classify --series --input "$TMP/waves.csv" --out "$TMP/wds" --val-fraction 0.25 2>/dev/null
RUN_DIR=$TMP/sbclf sbatch_job "$TMP/sbatch8.out" --set data.path="$TMP/wds" --set data.batch_size=4 \
  --set model.bidirectional=true --set model.pool=max --set train.eval_every=3
rc=$?
ev=$("$LSTMD" eval --checkpoint "$TMP/sbclf/latest.safetensors" --data "$TMP/wds" 2>&1)
if [[ $rc -eq 0 ]] && grep -q '"accuracy":.*"sequences":30,.*"confusion"' <<<"$ev" \
   && grep -q "2 ranks" "$TMP/sbatch8.out" && grep -q "eval step 6: .*val_accuracy" "$TMP/sbatch8.out"; then
  ok "train.sbatch with a series classifier: exit 0, $(grep -m1 -o 'eval step 6: .*' "$TMP/sbatch8.out"); eval: $ev"
else bad "train.sbatch classifier: rc=$rc $ev $(tail -3 "$TMP/sbatch8.out" 2>/dev/null)"; fi

# Early stopping and samples (scripted validation losses: 2 is the best, 4 and 6 are not, so
# patience 2 stops at 6 of 20) through the batch script; a resubmission, as a requeue makes,
# resumes the early-stopped run, trains nothing and exits 0.
export LSTMD_VAL_LOSSES=2.0,2.1,2.2
leave=(--set train.steps=20 --set train.eval_every=2 --set train.early_stop_patience=2
       --set train.sample_every=2 --set train.sample_length=20 --set train.keep_checkpoints=1)
RUN_DIR=$TMP/sbe sbatch_job "$TMP/sbatch6.out" "${leave[@]}"
rc=$?
if [[ $rc -eq 0 ]] && grep -q "stopped early at step 6" "$TMP/sbatch6.out" \
   && [[ $(/usr/bin/python3 "$SRC/tests/ckpt_meta.py" "$TMP/sbe/best.safetensors") == 2 ]] \
   && [[ $(grep -c '^=== step' "$TMP/sbe/samples.txt") == 6 ]]; then
  ok "train.sbatch with train.early_stop_patience=2: exit 0, stopped early at step 6, best step 2, 6 samples"
else bad "train.sbatch early stop: rc=$rc $(grep -m2 -e stopped -e error "$TMP/sbatch6.out" 2>/dev/null)"; fi
RUN_DIR=$TMP/sbe sbatch_job "$TMP/sbatch7.out" "${leave[@]}"
rc=$?
if [[ $rc -eq 0 ]] && grep -q "this run stopped early" "$TMP/sbatch7.out"; then
  ok "resubmitted: $(grep -o 'this run stopped early.*' "$TMP/sbatch7.out" | head -1)"
else bad "resubmission of the early-stopped job: rc=$rc $(tail -2 "$TMP/sbatch7.out" 2>/dev/null)"; fi
unset LSTMD_VAL_LOSSES
# model.layer_norm likewise: the job's checkpoint is layer-normalised and eval reads it.
RUN_DIR=$TMP/sbln sbatch_job "$TMP/sbatch8.out" --set model.layer_norm=true
rc=$?
ev=$("$LSTMD" eval --checkpoint "$TMP/sbln/latest.safetensors" --data "$TMP/ds" 2>&1)
if [[ $rc -eq 0 ]] && grep -q '"bpc"' <<<"$ev" && grep -q "^  model.layer_norm = true$" "$TMP/sbatch8.out" \
   && grep -q '"model.layer_norm":"1"' "$TMP/sbln/latest.safetensors"; then
  ok "train.sbatch with model.layer_norm=true: exit 0, layer-normalised checkpoint, eval: $ev"
else bad "train.sbatch with model.layer_norm: rc=$rc $ev $(tail -3 "$TMP/sbatch8.out" 2>/dev/null)"; fi

# 4. the batch script stopped as the time limit stops it: `scancel JOBID` sends SIGTERM to the
#    batch shell and to the job step's tasks (SIGKILL after KillWait): the ranks checkpoint and
#    exit 0, the script waits for them; a resubmission resumes from that checkpoint.
job=$(LSTMD=$LSTMD CONFIG=$TMP/job.ini RUN=$TMP/sbc sbatch --parsable -N 1 --ntasks-per-node=2 \
        --cpus-per-task=1 --time=5 -D "$TMP" -o "$TMP/sbatch3.out" "$SRC/deploy/slurm/train.sbatch" \
        --set train.steps=1000000 --set train.checkpoint_every=0)
for _ in $(seq 600); do [[ -s "$TMP/sbc/metrics.jsonl" ]] && break; sleep 0.1; done
[[ -s "$TMP/sbc/metrics.jsonl" ]] || bad "the cancelled job did not start: $(tail -3 "$TMP/sbatch3.out" 2>/dev/null)"
timeout 10 scancel "$job"
for _ in $(seq 600); do [[ -z $(timeout 5 squeue -h -j "$job" -o %i 2>/dev/null) ]] && break; sleep 0.1; done
stopped=$(grep -o "stopped at step [0-9]*" "$TMP/sbatch3.out" 2>/dev/null | grep -o "[0-9]*$")
ck=$(/usr/bin/python3 "$SRC/tests/ckpt_meta.py" "$TMP/sbc/latest.safetensors" 2>/dev/null)
if [[ -n $stopped && $ck == "$stopped" ]] && grep -q "train.sbatch: SIGTERM; waiting for lstmd" "$TMP/sbatch3.out" \
   && grep -q "train.sbatch: lstmd exited with status 0" "$TMP/sbatch3.out"; then
  ok "scancel of the train.sbatch job: checkpoint at step $stopped, lstmd exit 0, the script waited for it"
else
  bad "scancel of the batch job: stopped at '${stopped}', checkpoint step '${ck}': $(grep -e 'train.sbatch:' -e 'stopped' -e error "$TMP/sbatch3.out" 2>/dev/null | tail -4)"
fi
if [[ -n $stopped ]]; then
  RUN_DIR=$TMP/sbc sbatch_job "$TMP/sbatch4.out" --set train.steps=$((stopped + 2))
  rc=$?
  if [[ $rc -eq 0 ]] && grep -q "resumed from .* at step $stopped" "$TMP/sbatch4.out" \
     && [[ -f "$TMP/sbc/step-$((stopped + 2)).safetensors" ]]; then
    ok "the resubmission resumed from step $stopped and reached step $((stopped + 2))"
  else bad "resubmission after scancel: rc=$rc $(grep -m3 -e resum -e error "$TMP/sbatch4.out" 2>/dev/null)"; fi
fi

[[ $fails -eq 0 ]] && echo "test_slurm: passed" || echo "test_slurm: $fails FAILED"
exit $((fails > 0))
