#!/usr/bin/env bash
# bench_onnx.sh — which to deploy: lstmd itself or onnxruntime on the model `lstmd export onnx`
# writes, on the same checkpoints, in one run (each figure the best of ROUNDS interleaved rounds;
# the machines are shared and noisy):
#   text (E 64, L 2, H in TEXT_HIDDEN): batch-1 greedy sampling, characters/s — `lstmd sample`
#     (start-up excluded: the time of N characters minus that of 1) against onnxruntime stepping
#     one token per session.run from Python with h/c carried; batched, tokens/s — `lstmd eval
#     --batch 64` over the validation split (start-up excluded: minus `sample --length 1`)
#     against onnxruntime on 64 windows of seq_len 128 per call;
#   series (L 2, horizon 24, H in SERIES_HIDDEN, seq_len 48): rows/s of `lstmd predict` at
#     --batch 1 and 64 (start-up excluded: minus a 48-row file) against onnxruntime on one and on
#     64 windows per call.
# onnxruntime runs at 1 and $(nproc) intra-op threads and the better is shown with its count;
# lstmd sample runs one BLAS thread, eval/predict all cores (their defaults). The models are
# trained for 2 steps: speed does not depend on the values of the weights.
#   bench/bench_onnx.sh build/lstmd [OUT_FILE]
# Environment: ROUNDS (3), TEXT_HIDDEN ("256 512"), SERIES_HIDDEN ("256"), ONNX_VENV (the venv
# with onnx and onnxruntime; default build/onnx-venv beside LSTMD, made by tests/onnx_venv.sh).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
LSTMD=$(realpath "${1:?usage: bench_onnx.sh LSTMD [OUT_FILE]}")
OUT_FILE=${2:-}
ROUNDS=${ROUNDS:-3} TEXT_HIDDEN=${TEXT_HIDDEN:-256 512} SERIES_HIDDEN=${SERIES_HIDDEN:-256}
VENV=${ONNX_VENV:-$(dirname "$LSTMD")/onnx-venv}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/lstmd-bench-onnx.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
[[ -n $OUT_FILE ]] && exec > >(tee "$OUT_FILE") 2>&1

PY=$(bash "$ROOT/tests/onnx_venv.sh" "$VENV") || { echo "bench_onnx: no onnxruntime venv: skipped"; exit 0; }
now() { date +%s.%N; }
secs() { # wall seconds of one run (stdout discarded); exits on failure
  local t0 t1
  t0=$(now)
  "$@" >/dev/null 2>"$TMP/err" || { echo "failed: $*"; cat "$TMP/err"; exit 1; }
  t1=$(now)
  echo "$t1 - $t0" | bc -l
}
best() { sort -g | tail -1; }
fmt() { printf "%.${2:-0}f" "$1"; }

echo "bench_onnx: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
"$LSTMD" --version | sed -n '1p;/BLAS/p'
"$PY" -c 'import onnxruntime as o; print("onnxruntime", o.__version__, o.get_available_providers())'

cd "$TMP" || exit 1
"$LSTMD" prepare text --input "$ROOT/data/fortunes.txt" --out text 2>/dev/null
"$LSTMD" prepare series --input "$ROOT/data/seattle-temps.csv" --target temp --horizon 24 --out series 2>/dev/null
train() { "$LSTMD" train "$@" --set train.threads=2 --set train.steps=2 --set train.log_every=1000 \
  >"$TMP/train.log" 2>&1 || { echo "training failed: $*"; tail -5 "$TMP/train.log"; exit 1; }; }
for H in $TEXT_HIDDEN; do
  train --config "$HERE/char_lm_h512.ini" --set data.path=text --set train.run_dir=t$H --set model.hidden=$H
  "$LSTMD" export onnx --checkpoint t$H/latest.safetensors --out t$H.onnx 2>/dev/null
done
for H in $SERIES_HIDDEN; do
  train --config "$ROOT/deploy/examples/series_forecast.ini" --set data.path=series --set train.run_dir=s$H \
    --set model.hidden=$H --set train.eval_every=0 --set train.checkpoint_every=0
  "$LSTMD" export onnx --checkpoint s$H/latest.safetensors --out s$H.onnx 2>/dev/null
done
{ head -1 "$ROOT/data/seattle-temps.csv"; for _ in 1 2 3 4; do tail -n +2 "$ROOT/data/seattle-temps.csv"; echo; done | grep -v '^$'; } >big.csv
head -n 49 "$ROOT/data/seattle-temps.csv" >small.csv
ROWS=$(($(wc -l <big.csv) - 1))
for H in $TEXT_HIDDEN; do
  EVAL_TOKENS=$("$LSTMD" eval --checkpoint t$H/latest.safetensors --data text --batch 64 2>/dev/null |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"])')
done

declare -A sample evalr pred peer_s peer_b
for r in $(seq "$ROUNDS"); do
  echo "round $r/$ROUNDS"
  for H in $TEXT_HIDDEN; do
    f=t$H/latest.safetensors
    n=$((H >= 512 ? 1500 : 4000))
    t1=$(secs "$LSTMD" sample --checkpoint $f --length 1 --temperature 0)
    tn=$(secs "$LSTMD" sample --checkpoint $f --length $n --temperature 0)
    sample[$H]+="$(echo "($n - 1) / ($tn - $t1)" | bc -l)"$'\n'
    te=$(secs "$LSTMD" eval --checkpoint $f --data text --batch 64)
    evalr[$H]+="$(echo "$EVAL_TOKENS / ($te - $t1)" | bc -l)"$'\n'
    STREAM_TOKENS=$((n / 2)) "$PY" "$HERE/onnx_infer_peer.py" t$H.onnx 1 "$(nproc)" >peer.json ||
      { echo "onnxruntime peer failed"; exit 1; }
    while read -r th s b; do
      peer_s[t$H]+="$s $th"$'\n' peer_b[t$H]+="$b $th"$'\n'
    done < <(python3 -c 'import json,sys
for l in open(sys.argv[1]): d=json.loads(l); print(d["threads"], d["stream_per_s"], d["batched_per_s"])' peer.json)
  done
  for H in $SERIES_HIDDEN; do
    f=s$H/latest.safetensors
    for b in 1 64; do
      t1=$(secs "$LSTMD" predict --checkpoint $f --input small.csv --out p.csv --batch $b)
      tn=$(secs "$LSTMD" predict --checkpoint $f --input big.csv --out p.csv --batch $b)
      pred[$H,$b]+="$(echo "($ROWS - 48) / ($tn - $t1)" | bc -l)"$'\n'
    done
    "$PY" "$HERE/onnx_infer_peer.py" s$H.onnx 1 "$(nproc)" >peer.json || { echo "onnxruntime peer failed"; exit 1; }
    while read -r th s b; do
      peer_s[s$H]+="$s $th"$'\n' peer_b[s$H]+="$b $th"$'\n'
    done < <(python3 -c 'import json,sys
for l in open(sys.argv[1]): d=json.loads(l); print(d["threads"], d["stream_per_s"], d["batched_per_s"])' peer.json)
  done
done

peer() { # "rate (threads)" of the best line "rate threads"
  local v t
  read -r v t <<<"$(echo -n "$1" | sort -g -k1 | tail -1)"
  echo "$(fmt "$v") ($t)"
}
echo
echo "== text (E 64, L 2), best of $ROUNDS; onnxruntime (intra-op threads) =="
printf "%-5s %20s %22s %8s %22s %24s %8s\n" H "lstmd sample ch/s" "onnxruntime b1 ch/s" "ratio" \
  "lstmd eval b64 tok/s" "onnxruntime b64 tok/s" "ratio"
for H in $TEXT_HIDDEN; do
  s=$(echo -n "${sample[$H]}" | best) e=$(echo -n "${evalr[$H]}" | best)
  ps=$(echo -n "${peer_s[t$H]}" | sort -g -k1 | tail -1 | cut -d' ' -f1)
  pb=$(echo -n "${peer_b[t$H]}" | sort -g -k1 | tail -1 | cut -d' ' -f1)
  printf "%-5s %20s %22s %8s %22s %24s %8s\n" "$H" "$(fmt "$s")" "$(peer "${peer_s[t$H]}")" \
    "$(fmt "$(echo "$s / $ps" | bc -l)" 2)" "$(fmt "$e")" "$(peer "${peer_b[t$H]}")" \
    "$(fmt "$(echo "$e / $pb" | bc -l)" 2)"
done
echo "(ratio: lstmd / onnxruntime; eval: $EVAL_TOKENS validation tokens, windows of 128)"
echo
echo "== series (L 2, horizon 24, seq_len 48, $ROWS rows), rows/s, best of $ROUNDS =="
printf "%-5s %20s %22s %8s %22s %24s %8s\n" H "lstmd predict b1" "onnxruntime b1" "ratio" \
  "lstmd predict b64" "onnxruntime b64" "ratio"
for H in $SERIES_HIDDEN; do
  p1=$(echo -n "${pred[$H,1]}" | best) p64=$(echo -n "${pred[$H,64]}" | best)
  ps=$(echo -n "${peer_s[s$H]}" | sort -g -k1 | tail -1 | cut -d' ' -f1)
  pb=$(echo -n "${peer_b[s$H]}" | sort -g -k1 | tail -1 | cut -d' ' -f1)
  printf "%-5s %20s %22s %8s %22s %24s %8s\n" "$H" "$(fmt "$p1")" "$(peer "${peer_s[s$H]}")" \
    "$(fmt "$(echo "$p1 / $ps" | bc -l)" 2)" "$(fmt "$p64")" "$(peer "${peer_b[s$H]}")" \
    "$(fmt "$(echo "$p64 / $pb" | bc -l)" 2)"
done
echo "(onnxruntime: from Python, session creation excluded; lstmd: the CLI, start-up excluded)"
