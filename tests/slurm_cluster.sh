# slurm_cluster.sh — sourced by the Slurm tests (test_slurm.sh, test_slurm_serve.sh,
# test_slurm_gpus.sh, which exports LOCAL_CLUSTER_FAKE_GPUS first): starts the
# one-node cluster of deploy/slurm/local-cluster.sh in $TMP/cluster and exports SLURM_CONF, or
# exits 77 (skipped) where Slurm is not installed. However the test ends, its jobs still queued
# are cancelled (so no slurmstepd or lstmd outlives it), the daemons it started are stopped and
# $TMP is removed. Set SRC, TMP and TEST_NAME first; a test may define slurm_test_cleanup, which
# runs before that. Also defines ok/bad and the failure count `fails`.
CLUSTER=$SRC/deploy/slurm/local-cluster.sh
cleanup() {
  trap '' INT TERM # a second signal must not cut the cleanup short
  declare -F slurm_test_cleanup >/dev/null && slurm_test_cleanup
  if [[ -n ${SLURM_CONF-} ]] && jobs=$(timeout 10 squeue -h -o %i 2>/dev/null) && [[ -n $jobs ]]; then
    timeout 10 scancel $jobs 2>/dev/null
    for _ in $(seq 100); do [[ -z $(timeout 5 squeue -h -o %i 2>/dev/null) ]] && break; sleep 0.1; done
  fi
  "$CLUSTER" stop "$TMP/cluster"
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
# start gives up by itself after 3 tries of 30 s; the timeout is a second bound, so that a test
# never spends its ctest timeout silent in the start-up.
conf=$(timeout 150 "$CLUSTER" start "$TMP/cluster")
rc=$?
[[ $rc -eq 77 ]] && exit 77
[[ $rc -ne 0 ]] && { echo "$TEST_NAME: could not start the test cluster (exit $rc)"; exit 1; }
export SLURM_CONF=$conf
fails=0
ok() { echo "ok    $*"; }
bad() { echo "FAIL  $*"; fails=$((fails + 1)); }
# A 6-step job on $TMP/ds (checkpoints at 3 and 6), for the batch scripts; [train] comes last,
# so a test may append more train keys.
small_job_ini() {
  cat <<INI
[data]
path = $TMP/ds
seq_len = 16
batch_size = 4
[model]
hidden = 32
[optim]
algo = sgd
lr = 0.5
[train]
steps = 6
log_every = 1
eval_every = 0
checkpoint_every = 3
INI
}
