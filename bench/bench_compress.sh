#!/usr/bin/env bash
# bench_compress.sh — what pruning and distillation cost or buy on the demo corpus
# (data/fortunes.txt, deploy/demo.ini's model and optimizer; one rank, train.threads 2):
#   pruning: validation bpc of the demo model (E 64, H 256, L 2) after STEPS steps at a target
#     sparsity of 0, 50, 75 and 90% (every LSTM and head matrix; the polynomial ramp from step
#     STEPS/10 to 3·STEPS/5, a mask update every STEPS/30 steps), with the sparsity eval reports;
#   distillation: an H 128 student trained alone and distilled (alpha 0.5; T = 1 and T = 2) from
#     an H 512 teacher (TEACHER_STEPS steps), each STEPS steps: validation bpc and training time
#     (the distilled runs' time is mostly the teacher's forward).
# Every bpc is `lstmd eval` of the final checkpoint (the plain cross-entropy, not the KD loss).
#   bench/bench_compress.sh build/lstmd [OUT_FILE]
# Environment: STEPS (600), TEACHER_STEPS (600), TEACHER (an H 512 teacher checkpoint to reuse
# instead of training one: this script's own teacher command, `lstmd train --config
# deploy/demo.ini --set model.hidden=512 --set train.steps=TEACHER_STEPS --set train.threads=2`),
# KEEP (a folder to keep the runs in).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
LSTMD=$(realpath "${1:?usage: bench_compress.sh LSTMD [OUT_FILE]}")
OUT_FILE=${2:-}
STEPS=${STEPS:-600} TEACHER_STEPS=${TEACHER_STEPS:-600}
TMP=${KEEP:-$(mktemp -d "${TMPDIR:-/tmp}/lstmd-bench-compress.XXXXXX")}
mkdir -p "$TMP"
[[ -z ${KEEP:-} ]] && trap 'rm -rf "$TMP"' EXIT
[[ -n $OUT_FILE ]] && exec > >(tee "$OUT_FILE") 2>&1

echo "bench_compress.sh on $(hostname), $(nproc) cores (shared host: other jobs ran beside it), $(date -u +%F)"
"$LSTMD" --version | head -3
"$LSTMD" prepare text --input "$ROOT/data/fortunes.txt" --out "$TMP/data" 2>&1 | tail -1

# train NAME SET... : trains deploy/demo.ini with the overrides into $TMP/NAME; prints seconds.
train() {
  local name=$1
  shift
  local args=(--config "$ROOT/deploy/demo.ini" --set data.path="$TMP/data"
              --set train.run_dir="$TMP/$name" --set train.steps="$STEPS"
              --set train.checkpoint_every=0 --set train.eval_every=0 --set train.log_every=100
              --set train.threads=2)
  local t0=$(date +%s.%N)
  if ! "$LSTMD" train "${args[@]}" "$@" > "$TMP/$name.log" 2>&1; then
    echo "training $name failed:" >&2
    tail -5 "$TMP/$name.log" >&2
    exit 1
  fi
  echo "$(date +%s.%N) - $t0" | bc
}
# bpc NAME: the eval JSON of $TMP/NAME's last checkpoint
evaljson() { "$LSTMD" eval --checkpoint "$TMP/$1/latest.safetensors" --data "$TMP/data"; }
bpc_of() { sed -n 's/.*"bpc":\([0-9.]*\).*/\1/p' <<<"$1"; }

echo
echo "== pruning: demo model (H 256), $STEPS steps, ramp steps $((STEPS / 10))..$((3 * STEPS / 5)) every $((STEPS / 30))"
printf "%-8s %-9s %-10s %s\n" target val_bpc train_s "sparsity reached (lstmd eval)"
for s in 0 0.5 0.75 0.9; do
  sets=()
  [[ $s != 0 ]] && sets=(--set prune.target_sparsity=$s --set prune.begin_step=$((STEPS / 10))
                         --set prune.end_step=$((3 * STEPS / 5)) --set prune.frequency=$((STEPS / 30)))
  secs=$(train "prune-$s" "${sets[@]}")
  j=$(evaljson "prune-$s")
  sp=$(sed -n 's/.*"sparsity":\(.*\)}$/\1/p' <<<"$j")
  printf "%-8s %-9s %-10.0f %s\n" "$s" "$(bpc_of "$j")" "$secs" "${sp:-none}"
done

echo
echo "== distillation: H 128 student, $STEPS steps, alone vs from an H 512 teacher (alpha 0.5)"
if [[ -n ${TEACHER:-} ]]; then
  teacher=$(realpath "$TEACHER")
  echo "teacher: reused $teacher"
else
  STEPS=$TEACHER_STEPS train teacher --set model.hidden=512 --set train.steps="$TEACHER_STEPS" >/dev/null
  teacher=$TMP/teacher/latest.safetensors
  echo "teacher: H 512, $TEACHER_STEPS steps"
fi
tj=$("$LSTMD" eval --checkpoint "$teacher" --data "$TMP/data")
printf "%-22s %-9s %s\n" run val_bpc train_s
printf "%-22s %-9s %s\n" "teacher H512" "$(bpc_of "$tj")" "-"
secs=$(train student-alone --set model.hidden=128)
printf "%-22s %-9s %.0f\n" "student H128 alone" "$(bpc_of "$(evaljson student-alone)")" "$secs"
for t in 1 2; do
  secs=$(train student-kd-t$t --set model.hidden=128 --set distill.teacher="$teacher" \
    --set distill.temperature=$t --set distill.alpha=0.5)
  printf "%-22s %-9s %.0f\n" "student H128 KD T=$t" "$(bpc_of "$(evaljson student-kd-t$t)")" "$secs"
done
