#!/usr/bin/env bash
# bench_onnx.sh — which to deploy: lstmd itself or onnxruntime on the model `lstmd export onnx`
# writes, on the same checkpoints, fp32 and int8 (`lstmd quantize` against `export --int8`), in
# one run (each figure the best of ROUNDS interleaved rounds; the machines are shared and noisy):
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
# trained for 2 steps: speed does not depend on the values of the weights. Last, the int8 text
# models in both ONNX forms (bench/onnx_int8_forms.py): DynamicQuantizeLSTM, which --int8 writes,
# and QDQ (DequantizeLinear + LSTM) with the same weights.
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
done
for H in $SERIES_HIDDEN; do
  train --config "$ROOT/deploy/examples/series_forecast.ini" --set data.path=series --set train.run_dir=s$H \
    --set model.hidden=$H --set train.eval_every=0 --set train.checkpoint_every=0
done
for m in $(for H in $TEXT_HIDDEN; do echo t$H; done) $(for H in $SERIES_HIDDEN; do echo s$H; done); do
  "$LSTMD" quantize --checkpoint $m/latest.safetensors --out $m.int8 >/dev/null 2>&1
  "$LSTMD" export onnx --checkpoint $m/latest.safetensors --out $m-fp32.onnx 2>/dev/null
  "$LSTMD" export onnx --checkpoint $m/latest.safetensors --out $m-int8.onnx --int8 2>/dev/null
done
{ head -1 "$ROOT/data/seattle-temps.csv"; for _ in 1 2 3 4; do tail -n +2 "$ROOT/data/seattle-temps.csv"; echo; done | grep -v '^$'; } >big.csv
head -n 49 "$ROOT/data/seattle-temps.csv" >small.csv
ROWS=$(($(wc -l <big.csv) - 1))
for H in $TEXT_HIDDEN; do
  EVAL_TOKENS=$("$LSTMD" eval --checkpoint t$H/latest.safetensors --data text --batch 64 2>/dev/null |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"])')
done

declare -A sample evalr pred peer_s peer_b
lstmd_file() { if [[ $2 == fp32 ]]; then echo $1/latest.safetensors; else echo $1.int8; fi; }
run_peer() { # run_peer MODEL PRECISION: onnxruntime's figures into peer_s/peer_b
  "$PY" "$HERE/onnx_infer_peer.py" $1-$2.onnx 1 "$(nproc)" >peer.json || { echo "onnxruntime peer failed"; exit 1; }
  while read -r th s b; do
    peer_s[$1,$2]+="$s $th"$'\n' peer_b[$1,$2]+="$b $th"$'\n'
  done < <(python3 -c 'import json,sys
for l in open(sys.argv[1]): d=json.loads(l); print(d["threads"], d["stream_per_s"], d["batched_per_s"])' peer.json)
}
for r in $(seq "$ROUNDS"); do
  echo "round $r/$ROUNDS"
  for H in $TEXT_HIDDEN; do
    for p in fp32 int8; do
      f=$(lstmd_file t$H $p)
      n=$((H >= 512 ? 1500 : 4000))
      [[ $p == int8 ]] && n=6000
      t1=$(secs "$LSTMD" sample --checkpoint $f --length 1 --temperature 0)
      tn=$(secs "$LSTMD" sample --checkpoint $f --length $n --temperature 0)
      sample[$H,$p]+="$(echo "($n - 1) / ($tn - $t1)" | bc -l)"$'\n'
      te=$(secs "$LSTMD" eval --checkpoint $f --data text --batch 64)
      evalr[$H,$p]+="$(echo "$EVAL_TOKENS / ($te - $t1)" | bc -l)"$'\n'
      STREAM_TOKENS=$((n / 4)) run_peer t$H $p
    done
  done
  for H in $SERIES_HIDDEN; do
    for p in fp32 int8; do
      f=$(lstmd_file s$H $p)
      for b in 1 64; do
        t1=$(secs "$LSTMD" predict --checkpoint $f --input small.csv --out p.csv --batch $b)
        tn=$(secs "$LSTMD" predict --checkpoint $f --input big.csv --out p.csv --batch $b)
        pred[$H,$p,$b]+="$(echo "($ROWS - 48) / ($tn - $t1)" | bc -l)"$'\n'
      done
      run_peer s$H $p
    done
  done
done

peer() { # "rate (threads)" of the best line "rate threads"
  local v t
  read -r v t <<<"$(echo -n "$1" | sort -g -k1 | tail -1)"
  echo "$(fmt "$v") ($t)"
}
top() { echo -n "$1" | sort -g -k1 | tail -1 | cut -d' ' -f1; }
cells() { # cells LSTMD_RATE PEER_LINES: lstmd, onnxruntime (threads), lstmd / onnxruntime
  printf " %14s %18s %7s" "$(fmt "$1")" "$(peer "$2")" "$(fmt "$(echo "$1 / $(top "$2")" | bc -l)" 2)"
}
echo
echo "== text (E 64, L 2), best of $ROUNDS; onnxruntime (intra-op threads); ratio lstmd / onnxruntime =="
printf "%-10s %14s %18s %7s %14s %18s %7s\n" "H weights" "sample ch/s" "onnxruntime b1" "ratio" \
  "eval b64 tok/s" "onnxruntime b64" "ratio"
for H in $TEXT_HIDDEN; do
  for p in fp32 int8; do
    printf "%-10s" "$H $p"
    cells "$(echo -n "${sample[$H,$p]}" | best)" "${peer_s[t$H,$p]}"
    cells "$(echo -n "${evalr[$H,$p]}" | best)" "${peer_b[t$H,$p]}"
    echo
  done
done
echo "(eval: $EVAL_TOKENS validation tokens in windows of 128; int8: lstmd quantize's file against export --int8)"
echo
echo "== series (L 2, horizon 24, seq_len 48, $ROWS rows), rows/s, best of $ROUNDS =="
printf "%-10s %14s %18s %7s %14s %18s %7s\n" "H weights" "predict b1" "onnxruntime b1" "ratio" \
  "predict b64" "onnxruntime b64" "ratio"
for H in $SERIES_HIDDEN; do
  for p in fp32 int8; do
    printf "%-10s" "$H $p"
    cells "$(echo -n "${pred[$H,$p,1]}" | best)" "${peer_s[s$H,$p]}"
    cells "$(echo -n "${pred[$H,$p,64]}" | best)" "${peer_b[s$H,$p]}"
    echo
  done
done
echo "(onnxruntime: from Python, session creation excluded; lstmd: the CLI, start-up excluded)"
echo
echo "== int8 in ONNX: DynamicQuantizeLSTM (what --int8 writes) against QDQ, the same weights =="
printf "%-5s %-20s %8s %12s %14s %12s\n" H form threads "b1 ch/s" "b64 tok/s" "max|diff|"
for H in $TEXT_HIDDEN; do
  STREAM_TOKENS=1000 "$PY" "$HERE/onnx_int8_forms.py" t$H-int8.onnx 1 "$(nproc)" >forms.json ||
    { echo "onnx_int8_forms.py failed"; exit 1; }
  python3 -c 'import json,sys
for l in open(sys.argv[1]):
    d = json.loads(l)
    print("%-5s %-20s %8d %12.0f %14.0f %12.2g" % (sys.argv[2], d["form"], d["threads"], d["stream_per_s"],
          d["batched_per_s"], d["max_diff_from_dynamic"]))' forms.json $H
done
