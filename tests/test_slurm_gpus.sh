#!/usr/bin/env bash
# test_slurm_gpus.sh — what Slurm hands each rank of deploy/slurm/train.sbatch when GPUs are
# requested, on a one-node test cluster (deploy/slurm/local-cluster.sh) with 2 fake GPUs declared
# as GRES (LOCAL_CLUSTER_FAKE_GPUS=2; no real GPU is involved, the training runs on the CPU):
#  1. sbatch --ntasks=2 --gpus-per-task=1: each rank sees exactly one device in
#     CUDA_VISIBLE_DEVICES, a different one per rank (lstmd then uses device 0 on every rank);
#  2. sbatch --ntasks=2 --gpus=2 (no per-task binding): both ranks see "0,1" (lstmd then maps
#     local rank mod 2).
# Both jobs exit 0 with their checkpoint. The ranks' environment is recorded by a wrapper given
# to train.sbatch as LSTMD, which writes SLURM_PROCID, SLURM_LOCALID and CUDA_VISIBLE_DEVICES to a
# file per rank and execs lstmd, so the ranks are the ones train.sbatch's own srun line starts.
# lstmd's mapping from what a rank sees to a device (lstmd_gpu_for_rank) is unit-tested in
# test_gpu_logic. Skipped (77) where Slurm is not installed.
set -u
LSTMD=$(realpath "${1:?usage: test_slurm_gpus.sh LSTMD_BINARY SOURCE_DIR}")
SRC=$(realpath "${2:?}")
TMP=$(mktemp -d)
TEST_NAME=test_slurm_gpus
export LOCAL_CLUSTER_FAKE_GPUS=2
unset CUDA_VISIBLE_DEVICES # whatever the ranks see comes from Slurm
source "$SRC/tests/slurm_cluster.sh"

gres=$(timeout 10 sinfo -h -o %G 2>/dev/null)
[[ $gres == gpu:2 ]] && ok "the node offers 2 fake GPUs (sinfo GRES: $gres)" \
  || bad "sinfo GRES is '$gres', not gpu:2"

head -c 200000 "$SRC/data/fortunes.txt" > "$TMP/small.txt"
"$LSTMD" prepare text --input "$TMP/small.txt" --out "$TMP/ds" 2>/dev/null
{ small_job_ini; echo "device = cpu"; } > "$TMP/job.ini" # [train] is the last section
# train.sbatch runs "$LSTMD --version" in the batch shell, then srun "$LSTMD" train ... per rank.
cat > "$TMP/lstmd-env" <<SH
#!/bin/bash
[[ \${1-} == train ]] && echo "\${SLURM_PROCID-?} \${SLURM_LOCALID-?} \${CUDA_VISIBLE_DEVICES-unset}" \\
  > "\$ENV_DUMP/rank.\${SLURM_PROCID-x}"
exec "$LSTMD" "\$@"
SH
chmod +x "$TMP/lstmd-env"

# run_job NAME [sbatch options...]: train.sbatch with 2 tasks × 1 CPU; the ranks' environment
# lands in $TMP/NAME.env/rank.<SLURM_PROCID>, checkpoints in $TMP/NAME, the output in NAME.out.
run_job() {
  local name=$1
  shift
  mkdir -p "$TMP/$name.env"
  ENV_DUMP=$TMP/$name.env LSTMD=$TMP/lstmd-env CONFIG=$TMP/job.ini RUN=$TMP/$name timeout 180 \
    sbatch --wait --quiet -N 1 --ntasks=2 --ntasks-per-node=2 --cpus-per-task=1 --time=5 "$@" \
      -D "$TMP" -o "$TMP/$name.out" "$SRC/deploy/slurm/train.sbatch"
  local rc=$?
  if [[ $rc -eq 0 ]] && grep -q "2 ranks" "$TMP/$name.out" && [[ -f $TMP/$name/step-6.safetensors ]]; then
    ok "$name ($*): job exit code 0, a 2-rank world, checkpoint at step 6"
  else bad "$name ($*): rc=$rc $(tail -4 "$TMP/$name.out" 2>/dev/null)"; fi
  # Each line: SLURM_PROCID SLURM_LOCALID CUDA_VISIBLE_DEVICES, rank 0 first.
  seen=()
  local f
  for f in "$TMP/$name.env"/rank.*; do [[ -f $f ]] && seen+=("$(cat "$f")"); done
  if [[ ${#seen[@]} -ne 2 || ${seen[0]% *} != "0 0" || ${seen[1]% *} != "1 1" ]]; then
    bad "$name: expected ranks 0 and 1 (local 0 and 1), got: $(printf '[%s] ' "${seen[@]}")"
    return 1
  fi
}
shown() { printf 'CUDA_VISIBLE_DEVICES of rank %s (local %s) = %s, of rank %s (local %s) = %s' $1 $2 $3 $4 $5 $6; }

# 1. One GPU per task: one id each, distinct, among the node's two.
if run_job per-task --gpus-per-task=1; then
  a=${seen[0]##* } b=${seen[1]##* }
  if [[ $a =~ ^[01]$ && $b =~ ^[01]$ && $a != "$b" ]]; then
    ok "--gpus-per-task=1: one device per rank, distinct: $(shown ${seen[0]} ${seen[1]})"
  else bad "--gpus-per-task=1: $(shown ${seen[0]} ${seen[1]})"; fi
fi
# 2. Two GPUs for the job, not bound to tasks: both ranks see both.
if run_job whole-job --gpus=2; then
  if [[ ${seen[0]##* } == 0,1 && ${seen[1]##* } == 0,1 ]]; then
    ok "--gpus=2: every rank sees both devices: $(shown ${seen[0]} ${seen[1]})"
  else bad "--gpus=2: $(shown ${seen[0]} ${seen[1]})"; fi
fi

[[ $fails -eq 0 ]] && echo "test_slurm_gpus: passed" || echo "test_slurm_gpus: $fails FAILED"
exit $((fails > 0))
