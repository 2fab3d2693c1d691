#!/usr/bin/env bash
# test_checkpoint_fail.sh — rank 0 cannot write a checkpoint, under `mpirun -np 2 lstmd train`:
#  a. the checkpoint of step 4 cannot be written (a directory holds its name, refused before its
#     temp file is written; the rename onto it would fail for root too), after the one of step 2
#     was written;
#  b. latest.safetensors cannot be replaced (an immutable file, chattr +i; skipped where chattr
#     does not work): the first checkpoint's link fails.
# Every rank stops within seconds (no hang, no process left), rank 0 names the file and why, the
# other rank says that rank 0 did not write the checkpoint and why, the exit status is 1 (a write that
# fails is not bad input: 2 is for bad usage or input), and the last good checkpoint is whole.
set -u
LSTMD=$(realpath "${1:?usage: test_checkpoint_fail.sh LSTMD_BINARY SOURCE_DIR}")
SRC=$(realpath "${2:?}")
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_plm=isolated
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
TMP=$(mktemp -d)
trap 'chattr -i "$TMP"/b/run/latest.safetensors 2>/dev/null; pkill -9 -f "$TMP" 2>/dev/null; rm -rf "$TMP"' EXIT
fails=0
ok() { echo "ok    $*"; }
bad() { echo "FAIL  $*"; fails=$((fails + 1)); }
meta_step() {
  /usr/bin/python3 "$SRC/tests/ckpt_meta.py" "$1"
}

head -c 100000 "$SRC/data/fortunes.txt" > "$TMP/small.txt"
"$LSTMD" prepare text --input "$TMP/small.txt" --out "$TMP/ds" 2>/dev/null || bad "prepare"
args=(train --set data.path="$TMP/ds" --set data.seq_len=16 --set data.batch_size=2 --set model.embed=8
      --set model.hidden=16 --set model.layers=1 --set train.threads=1 --set train.eval_every=0
      --set train.log_every=1 --set train.steps=8 --set train.checkpoint_every=2 --set train.run_dir=run)

# check CASE BAD_PATH LAST_GOOD_STEP: runs the 2-rank job in $TMP/CASE and checks what it left.
check() {
  local d=$TMP/$1 what=$2 good=$3
  local t0=$SECONDS
  (cd "$d" && timeout 60 mpirun -np 2 "$LSTMD" "${args[@]}" >/dev/null 2>err.log)
  local rc=$? took=$((SECONDS - t0)) left
  left=$(pgrep -f "$d" | wc -l)
  if [[ $rc -ne 124 && $took -le 30 && $left -eq 0 ]]; then
    ok "$1: every rank stopped in ${took}s, none left"
  else bad "$1: rc=$rc after ${took}s, $left process(es) left (a hang?)"; fi
  local msg0 msg1
  msg0=$(grep -m1 "^lstmd: .*$what" "$d/err.log")
  msg1=$(grep -m1 "^lstmd: rank 1: stopping: rank 0 did not write the checkpoint of step [0-9]* (cannot write output)" "$d/err.log")
  if [[ -n $msg0 && -n $msg1 ]]; then ok "$1: rank 0 says why ($msg0); rank 1: ${msg1#lstmd: }"
  else bad "$1: messages: $(grep '^lstmd:' "$d/err.log" | grep -v -e 'effective config' -e 'device auto' -e ' compute: ' -e ' data: ' | tail -4)"; fi
  [[ $rc -eq 1 ]] && ok "$1: exit status 1" \
    || bad "$1: exit status $rc, want 1 (a checkpoint that cannot be written is not bad input)"
  if [[ $good -gt 0 ]]; then
    local s
    s=$(meta_step "$d/run/latest.safetensors" 2>/dev/null)
    [[ $s == "$good" ]] && "$LSTMD" eval --checkpoint "$d/run/latest.safetensors" --data "$TMP/ds" >/dev/null 2>&1 \
      && ok "$1: latest.safetensors is still the whole checkpoint of step $good" \
      || bad "$1: latest.safetensors is at step '${s}', not a whole step $good"
  fi
}

# a. a directory where step-4.safetensors goes: refused (the rename onto it would fail, EISDIR)
mkdir -p "$TMP/a/run/step-4.safetensors/x"
check a "step-4.safetensors: is a directory, not a file" 2

# b. latest.safetensors immutable: replacing it fails (EPERM), even for root
mkdir -p "$TMP/b/run"
echo old > "$TMP/b/run/latest.safetensors"
if chattr +i "$TMP/b/run/latest.safetensors" 2>/dev/null && ! (echo x >> "$TMP/b/run/latest.safetensors") 2>/dev/null; then
  check b "latest.safetensors.*Operation not permitted" 0
  chattr -i "$TMP/b/run/latest.safetensors"
else
  echo "skip  b: chattr +i does not work here"
fi

[[ $fails -eq 0 ]] && echo "test_checkpoint_fail: passed" || echo "test_checkpoint_fail: $fails FAILED"
exit $((fails > 0))
