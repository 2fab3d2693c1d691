#!/usr/bin/env bash
# gpu_profile.sh [LSTMD] — where a GPU training step's time goes, without Nsight Systems (not
# usable on the lent machines): bench_gpu.sh's large shape (H2048 L4 T128 B256, E64, bf16, AdamW)
# trained with --trace and train.log_every=1, so every step waits for its scalars and the
# trace's host spans bracket the device work; then the median per span name over the steps after
# the first 5, the step time from metrics.jsonl, and the cuDNN forward+backward time lstmd
# measured at start ("ms per forward+backward"). What is left of the step beyond cuDNN is the
# embedding, head, loss, gradient conversion, optimizer and weight conversion.
#   SHAPE="H L T B" (default "2048 4 128 256"), PRECISION (bf16), STEPS (30), DEVICE (cuda),
#   NP (1: ranks under mpirun; each rank's spans apart, B windows a rank)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LSTMD=${1:-$ROOT/build/lstmd}
read -r H L T B <<<"${SHAPE:-2048 4 128 256}"
PRECISION=${PRECISION:-bf16}
STEPS=${STEPS:-30}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/lstmd-gpu-profile.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
data=$ROOT/data/fortunes.txt
[[ -f $data ]] || data=$(dirname "$LSTMD")/../share/lstmd/data/fortunes.txt
"$LSTMD" prepare text --input "$data" --out "$TMP/data" --val-fraction 0.002 >/dev/null 2>&1
NP=${NP:-1}
launch=()
((NP > 1)) && launch=(mpirun -np "$NP")
"${launch[@]}" "$LSTMD" train --set data.path="$TMP/data" --set train.device="${DEVICE:-cuda}" --set train.precision="$PRECISION" \
  --set model.embed=64 --set model.hidden="$H" --set model.layers="$L" --set data.seq_len="$T" \
  --set data.batch_size="$B" --set train.steps="$STEPS" --set train.log_every=1 --set train.eval_every=0 \
  --set train.checkpoint_every=0 --set optim.warmup=0 --set train.run_dir="$TMP/run" \
  --trace "$TMP/trace.json" 2>"$TMP/train.log" >/dev/null || { cat "$TMP/train.log"; exit 1; }
grep -m1 'compute:' "$TMP/train.log"
python3 - "$TMP/trace.json" "$TMP/run/metrics.jsonl" "$T" "$B" "$NP" <<'EOF'
import json, statistics, sys
spans = [e for e in json.load(open(sys.argv[1])) if e.get("ph") == "X"]
steps = [json.loads(l) for l in open(sys.argv[2]) if '"tokens_per_s"' in l]
np_ = int(sys.argv[5])
tok = int(sys.argv[3]) * int(sys.argv[4]) * np_  # tokens_per_s is the global batch's
late = [s for s in steps if s["step"] > 5] or steps
step_ms = statistics.median(tok / s["tokens_per_s"] * 1e3 for s in late)
print("step time (median of steps 6..%d, from tokens/s): %.2f ms" % (steps[-1]["step"], step_ms))
names = {}
for e in spans:
    key = e["name"] if np_ == 1 else "rank %d: %s" % (e["pid"], e["name"])
    names.setdefault(key, []).append(e["dur"] / 1e3)
print("%-44s %6s %10s %10s" % ("span", "count", "median ms", "max ms"))
for n, d in sorted(names.items(), key=lambda kv: -statistics.median(kv[1])):
    d_late = d[5:] if len(d) > 10 else d
    print("%-44s %6d %10.3f %10.3f" % (n, len(d), statistics.median(d_late), max(d_late)))
EOF
