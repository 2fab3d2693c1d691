#!/usr/bin/env bash
# bench_infer.sh — int8 inference (`lstmd quantize`) against fp32 lstmd and against PyTorch 2.x
# (fp32, and torch.ao.quantization.quantize_dynamic of the same nn.LSTM + Linear, weights loaded
# from the same checkpoint: bench/torch_infer_peer.py), in one run, each figure the best of
# ROUNDS interleaved rounds (the machines are shared and noisy):
#   batch-1 `sample` characters/s at H 256, 512, 1024 (E 64, L 2; start-up excluded: the time of
#     N characters minus that of 1), targets int8 >= 2x fp32 lstmd and >= 2x the PyTorch int8 peer
#     (its best thread count, one character per call as a sampling loop runs);
#   beside each, the host's read ceiling: the int8 weights one character reads (every weight
#     byte once a step) over the rate this host's threads read that many bytes in the same round
#     (bench/read_rate.c; the threads lstmd samples with: 1 below H 512, else every core);
#   start-up (load + first character) and the wall time of sampling 100 characters;
#   batched `predict` rows/s (series, H 256 and 512, batch 64, 35,036 rows; start-up excluded),
#     target int8 >= 1.5x fp32 lstmd;
#   quality: eval bpc of the int8 model within 0.02 of fp32 for the demo model (deploy/demo.ini,
#     DEMO_STEPS steps) and the benchmark text model (H 512, TEXT_STEPS steps); series MSE within
#     2% (deploy/examples/series_forecast.ini, SERIES_STEPS steps).
# Prints a table with each target and PASS/MISS.
#   bench/bench_infer.sh build/lstmd [OUT_FILE]
# Environment: LSTMD_CPU_ISA (lstmd's kernels; the peer's MKL/oneDNN, and FBGEMM for its int8,
# are capped to match, as in bench_cpu.sh), ROUNDS (3), DEMO_STEPS (300), TEXT_STEPS (100), SERIES_STEPS (300),
# PYTHON_TORCH2 (a python with torch 2.x; default what bench/torch2_env.sh prints), TORCH2=0.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
LSTMD=$(realpath "${1:?usage: bench_infer.sh LSTMD [OUT_FILE]}")
OUT_FILE=${2:-}
ROUNDS=${ROUNDS:-3} DEMO_STEPS=${DEMO_STEPS:-300} TEXT_STEPS=${TEXT_STEPS:-100}
SERIES_STEPS=${SERIES_STEPS:-300} TORCH2=${TORCH2:-1}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/lstmd-bench-infer.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
[[ -n $OUT_FILE ]] && exec > >(tee "$OUT_FILE") 2>&1

now() { date +%s.%N; }
# secs CMD...: wall seconds of one run (stdout discarded); exits on failure.
secs() {
  local t0 t1
  t0=$(now)
  "$@" >/dev/null 2>"$TMP/err" || { echo "failed: $*"; cat "$TMP/err"; exit 1; }
  t1=$(now)
  echo "$t1 - $t0" | bc -l
}
best() { sort -g | tail -1; } # the largest of the lines on stdin
fmt() { printf "%.${2:-0}f" "$1"; }
verdict() { if (($(echo "$1 >= $2" | bc -l))); then echo PASS; else echo MISS; fi; }

echo "bench_infer: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
"$LSTMD" --version | sed -n '1p;/BLAS/p'
if [[ -n ${LSTMD_CPU_ISA:-} ]]; then
  # The peer's int8 kernels are FBGEMM's (quantize_dynamic's linear_dynamic), which pick their
  # own ISA: without FBGEMM_ENABLE_INSTRUCTIONS=AVX2 a forced-AVX2 run compared lstmd's AVX2
  # kernel against FBGEMM's AVX-512 VNNI one (H1024 batch-1 int8 on the 2-core EPYC: 6,240-6,400
  # characters/s uncapped, 5,160-5,290 capped). FBGEMM has no path below AVX2.
  case $LSTMD_CPU_ISA in
    avx512) mkl=AVX512 onednn=AVX512_CORE fbgemm="" aten=avx512 ;;
    avx2) mkl=AVX2 onednn=AVX2 fbgemm=AVX2 aten=avx2 ;;
    *) mkl=SSE4_2 onednn=SSE41 fbgemm=AVX2 aten=default ;;
  esac
  export ATEN_CPU_CAPABILITY=${ATEN_CPU_CAPABILITY:-$aten} # ATen's own vectorised kernels
  export MKL_ENABLE_INSTRUCTIONS=${MKL_ENABLE_INSTRUCTIONS:-$mkl}
  export ONEDNN_MAX_CPU_ISA=${ONEDNN_MAX_CPU_ISA:-$onednn} DNNL_MAX_CPU_ISA=${DNNL_MAX_CPU_ISA:-$onednn}
  [[ -n $fbgemm ]] && export FBGEMM_ENABLE_INSTRUCTIONS=${FBGEMM_ENABLE_INSTRUCTIONS:-$fbgemm}
  echo "LSTMD_CPU_ISA=$LSTMD_CPU_ISA; the peer: MKL_ENABLE_INSTRUCTIONS=$MKL_ENABLE_INSTRUCTIONS ONEDNN_MAX_CPU_ISA=$ONEDNN_MAX_CPU_ISA FBGEMM_ENABLE_INSTRUCTIONS=${FBGEMM_ENABLE_INSTRUCTIONS:-(its own choice)} ATEN_CPU_CAPABILITY=$ATEN_CPU_CAPABILITY"
fi

PY=${PYTHON_TORCH2:-}
if [[ $TORCH2 == 0 ]]; then
  PY=""
elif [[ -z $PY ]] && ! PY=$("$HERE/torch2_env.sh"); then
  echo "torch 2 peer: bench/torch2_env.sh could not make its environment: skipped"
  PY=""
fi

# ---------------------------------------------------------------- models
cd "$TMP" || exit 1
"$LSTMD" prepare text --input "$ROOT/data/fortunes.txt" --out text 2>/dev/null
"$LSTMD" prepare series --input "$ROOT/data/seattle-temps.csv" --target temp --horizon 24 --out series 2>/dev/null
train() { "$LSTMD" train "$@" --set train.threads=2 --set train.log_every=1000 >"$TMP/train.log" 2>&1 ||
  { echo "training failed: $*"; tail -5 "$TMP/train.log"; exit 1; }; }
for H in 256 512 1024; do # speed only: the values of the weights do not change the time
  train --config "$HERE/char_lm_h512.ini" --set data.path=text --set train.run_dir=t$H --set model.hidden=$H --set train.steps=2
  "$LSTMD" quantize --checkpoint t$H/latest.safetensors --out t$H.int8 >/dev/null
done
for H in 256 512; do
  train --config "$ROOT/deploy/examples/series_forecast.ini" --set data.path=series --set train.run_dir=s$H \
    --set model.hidden=$H --set train.steps=2
  "$LSTMD" quantize --checkpoint s$H/latest.safetensors --out s$H.int8 >/dev/null
done
cc -O3 -march=native -pthread "$HERE/read_rate.c" -o read_rate || { echo "cannot build bench/read_rate.c"; exit 1; }
# weight_bytes FILE: bytes of the int8 weights one batch-1 step reads (layer 0's input weights
# are a table lookup for a text model: lstmd_qmodel_finish folds them into the embedding).
weight_bytes() {
  python3 -c 'import json,struct,sys
f = open(sys.argv[1], "rb"); n = struct.unpack("<Q", f.read(8))[0]
h = json.loads(f.read(n))
print(sum(v["data_offsets"][1] - v["data_offsets"][0] for k, v in h.items()
          if k != "__metadata__" and v["dtype"] == "I8" and k != "lstm.weight_ih_l0"))' "$1"
}
{ head -1 "$ROOT/data/seattle-temps.csv"; for _ in 1 2 3 4; do tail -n +2 "$ROOT/data/seattle-temps.csv"; echo; done | grep -v '^$'; } >big.csv
head -n 49 "$ROOT/data/seattle-temps.csv" >small.csv
ROWS=$(($(wc -l <big.csv) - 1))

# ---------------------------------------------------------------- speed, interleaved rounds
declare -A rate start hundred prate peer ceiling
chars_for() { # characters to time: ~1-3 s each
  case $1 in 256) echo 20000 ;; 512) echo 6000 ;; *) echo 2000 ;; esac
}
for r in $(seq "$ROUNDS"); do
  echo "round $r/$ROUNDS"
  for H in 256 512 1024; do
    for p in fp32 int8; do
      f=t$H/latest.safetensors
      [[ $p == int8 ]] && f=t$H.int8
      n=$(chars_for "$H")
      [[ $p == fp32 ]] && n=$((n / (H == 1024 ? 20 : 5)))
      t1=$(secs "$LSTMD" sample --checkpoint "$f" --length 1 --temperature 0)
      tn=$(secs "$LSTMD" sample --checkpoint "$f" --length "$n" --temperature 0)
      t100=$(secs "$LSTMD" sample --checkpoint "$f" --length 100 --temperature 0)
      rate[$H,$p]+="$(echo "($n - 1) / ($tn - $t1)" | bc -l)"$'\n'
      start[$H,$p]+="$(echo "-($t1)" | bc -l)"$'\n' # best() takes the largest: negate
      hundred[$H,$p]+="$(echo "-($t100)" | bc -l)"$'\n'
    done
    wb=$(weight_bytes t$H.int8) rt=$((H < 512 ? 1 : $(nproc)))
    gbps=$(./read_rate --bytes "$wb" --threads "$rt" --reps 3 --seconds 0.2 | awk '{print $NF}')
    ceiling[$H]+="$(echo "$gbps * 1000000000 / $wb" | bc -l) $rt $wb"$'\n'
    if [[ -n $PY ]]; then
      "$PY" "$HERE/torch_infer_peer.py" t$H/latest.safetensors "$(chars_for "$H" | awk '{print int($1/10)}')" 1 2 \
        >"$TMP/peer.json" 2>"$TMP/peer.err" || { echo "torch peer failed:"; tail -3 "$TMP/peer.err"; PY=""; }
      while read -r line; do
        prec=$(echo "$line" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["precision"], d["threads"], d["chars_per_s"], d["peer"])')
        read -r pp th cps name <<<"$prec"
        peer[$H,$pp]+="$cps $th"$'\n'
        PEER_NAME=$name
      done <"$TMP/peer.json"
    fi
  done
  for H in 256 512; do
    for p in fp32 int8; do
      f=s$H/latest.safetensors
      [[ $p == int8 ]] && f=s$H.int8
      t1=$(secs "$LSTMD" predict --checkpoint "$f" --input small.csv --out p.csv --batch 64)
      tn=$(secs "$LSTMD" predict --checkpoint "$f" --input big.csv --out p.csv --batch 64)
      prate[$H,$p]+="$(echo "($ROWS - 48) / ($tn - $t1)" | bc -l)"$'\n'
    done
  done
done

# ---------------------------------------------------------------- quality
echo "quality: training the demo model ($DEMO_STEPS steps), the H512 text model ($TEXT_STEPS steps), the series model ($SERIES_STEPS steps)"
train --config "$ROOT/deploy/demo.ini" --set data.path=text --set train.run_dir=demo --set train.steps="$DEMO_STEPS" --set train.eval_every=0
train --config "$HERE/char_lm_h512.ini" --set data.path=text --set train.run_dir=q512 --set train.steps="$TEXT_STEPS"
train --config "$ROOT/deploy/examples/series_forecast.ini" --set data.path=series --set train.run_dir=qs --set train.steps="$SERIES_STEPS" --set train.eval_every=0
"$LSTMD" quantize --checkpoint demo/latest.safetensors --out demo.int8 --calibrate text >demo.json
"$LSTMD" quantize --checkpoint q512/latest.safetensors --out q512.int8 --calibrate text >q512.json
"$LSTMD" quantize --checkpoint qs/latest.safetensors --out qs.int8 --calibrate series >qs.json
js() { python3 -c 'import json,sys; print("%.6f" % json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }

# ---------------------------------------------------------------- report
echo
echo "== batch-1 sample, characters/s (best of $ROUNDS; start-up excluded) =="
printf "%-6s %11s %11s %18s %18s %16s %16s\n" H "lstmd fp32" "lstmd int8" "torch fp32 (thr)" "torch int8 (thr)" "int8/fp32 >=2" "int8/torch >=2"
for H in 256 512 1024; do
  f=$(echo -n "${rate[$H,fp32]}" | best) i=$(echo -n "${rate[$H,int8]}" | best)
  tf="-" ti="-" vt="n/a"
  if [[ -n ${peer[$H,int8]:-} ]]; then
    read -r tfv tft <<<"$(echo -n "${peer[$H,fp32]}" | sort -g -k1 | tail -1)"
    read -r tiv tit <<<"$(echo -n "${peer[$H,int8]}" | sort -g -k1 | tail -1)"
    tf="$(fmt "$tfv") ($tft)" ti="$(fmt "$tiv") ($tit)"
    vt="$(fmt "$(echo "$i / $tiv" | bc -l)" 2) $(verdict "$i / $tiv" 2)"
  fi
  printf "%-6s %11s %11s %18s %18s %16s %16s\n" "$H" "$(fmt "$f")" "$(fmt "$i")" "$tf" "$ti" \
    "$(fmt "$(echo "$i / $f" | bc -l)" 2) $(verdict "$i / $f" 2)" "$vt"
done
[[ -n ${PEER_NAME:-} ]] && echo "peer: $PEER_NAME (quantize_dynamic qint8 of nn.LSTM + nn.Linear; best of 1 and 2 threads)"
echo
echo "== the host's read ceiling for batch-1 int8 sampling (bench/read_rate.c, best of $ROUNDS) =="
printf "%-6s %16s %8s %20s %18s\n" H "weights/char MB" threads "ceiling chars/s" "lstmd int8 of it"
for H in 256 512 1024; do
  read -r cv ct cb <<<"$(echo -n "${ceiling[$H]}" | sort -g -k1 | tail -1)"
  i=$(echo -n "${rate[$H,int8]}" | best)
  printf "%-6s %16s %8s %20s %18s\n" "$H" "$(fmt "$(echo "$cb / 1000000" | bc -l)" 2)" "$ct" "$(fmt "$cv")" \
    "$(fmt "$(echo "$i / $cv" | bc -l)" 2)"
done
echo
echo "== start-up: load + first character, and sampling 100 characters, wall s (best of $ROUNDS) =="
printf "%-6s %12s %12s %14s %14s\n" H "fp32 start" "int8 start" "fp32 100 ch" "int8 100 ch"
for H in 256 512 1024; do
  printf "%-6s %12s %12s %14s %14s\n" "$H" \
    "$(fmt "$(echo "-($(echo -n "${start[$H,fp32]}" | best))" | bc -l)" 3)" \
    "$(fmt "$(echo "-($(echo -n "${start[$H,int8]}" | best))" | bc -l)" 3)" \
    "$(fmt "$(echo "-($(echo -n "${hundred[$H,fp32]}" | best))" | bc -l)" 3)" \
    "$(fmt "$(echo "-($(echo -n "${hundred[$H,int8]}" | best))" | bc -l)" 3)"
done
echo
echo "== batched predict (series, L 2, horizon 24, batch 64, $ROWS rows), rows/s (best of $ROUNDS; start-up excluded) =="
printf "%-6s %11s %11s %18s\n" H "lstmd fp32" "lstmd int8" "int8/fp32 >=1.5"
for H in 256 512; do
  f=$(echo -n "${prate[$H,fp32]}" | best) i=$(echo -n "${prate[$H,int8]}" | best)
  printf "%-6s %11s %11s %18s\n" "$H" "$(fmt "$f")" "$(fmt "$i")" "$(fmt "$(echo "$i / $f" | bc -l)" 2) $(verdict "$i / $f" 1.5)"
done
echo
echo "== quality: eval on the validation split, int8 against fp32 =="
for m in demo q512; do
  d=$(js $m.json delta_bpc)
  printf "%-44s fp32 bpc %.4f  int8 bpc %.4f  delta %+.4f  (|delta| <= 0.02) %s\n" \
    "$([[ $m == demo ]] && echo "demo model (deploy/demo.ini, $DEMO_STEPS steps)" || echo "benchmark text model (H512, $TEXT_STEPS steps)")" \
    "$(js $m.json fp32_bpc)" "$(js $m.json int8_bpc)" "$d" "$(verdict "0.02 - ${d#-}" 0)"
done
d=$(js qs.json mse_change)
printf "%-44s fp32 MSE %.5f  int8 MSE %.5f  change %+.2f%% (|change| <= 2%%) %s\n" \
  "series model (series_forecast.ini, $SERIES_STEPS steps)" "$(js qs.json fp32_mse)" "$(js qs.json int8_mse)" \
  "$(echo "$d * 100" | bc -l)" "$(verdict "0.02 - ${d#-}" 0)"
echo "model files: demo fp32 $(stat -c %s demo/latest.safetensors) B (with optimizer state), int8 $(stat -c %s demo.int8) B"
