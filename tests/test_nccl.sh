#!/usr/bin/env bash
# test_nccl.sh — comm/comm_nccl under mpirun -np 1 and -np 2 (tests/test_nccl.c): skipped (77)
# without a CUDA device; one rank runs NCCL itself; with one GPU the two ranks share it, which
# exercises the host-staged MPI fallback;
# with two or more GPUs, NCCL between two of them, and then the fallback too by giving both
# ranks one device.
set -u
BIN=$1
MPIEXEC=${2:-mpirun}
"$BIN" --probe || exit $?
n=$(nvidia-smi -L 2>/dev/null | wc -l)
echo "test_nccl.sh: nvidia-smi lists $n GPU(s)"
# One rank: NCCL itself on a one-GPU machine (non-blocking init, grouped calls, watchdog).
"$MPIEXEC" -np 1 "$BIN" || exit 1
"$MPIEXEC" -np 2 "$BIN" || exit 1
if [ "$n" -ge 2 ]; then
  echo "test_nccl.sh: both ranks on one GPU (CUDA_VISIBLE_DEVICES=0): the fallback"
  "$MPIEXEC" -np 2 -x CUDA_VISIBLE_DEVICES=0 "$BIN" || exit 1
fi
exit 0
