#!/usr/bin/env bash
# bench_cpu.sh LSTMD_BINARY — CPU training throughput of lstmd against PyTorch peers and OpenBLAS.
#
#   bench/bench_cpu.sh build/lstmd            (what `make bench` runs)
#   BENCH_OUT=results.txt bench/bench_cpu.sh build/lstmd
#
# Model (bench/char_lm_h512.ini and bench/torch_lstm_peer.py): char-LM on data/fortunes.txt,
# Embedding(V,64) -> LSTM(64,512, 2 layers) -> Linear(512,V), T=128, B=32, fp32, AdamW, clip 1.
# Measures, interleaved ROUNDS times (the machines are noisy; best of each is reported):
#   lstmd train (steady-state tokens/s from metrics.jsonl, excluding the first log interval, and
#   the overall figure lstmd prints), each torch peer at 1 and 2 threads — Debian's torch 1.13
#   and PyPI's torch 2.15.0 (CPU use of the CUDA wheel; bench/torch2_env.sh makes its virtual
#   environment in bench/.venv-torch2 on first use, ~3 GB, and it is skipped without network);
# and OpenBLAS sgemm at 2048^3 and at the LSTM recurrence shapes (bench/sgemm_rate.c), the
# fastest round's sgemm being the reference.
# Targets: lstmd/torch >= 2.0 against the best peer figure of all (peer, version and threads
#   printed with the ratio); lstmd GFLOP/s >= 0.60 x sgemm 2048^3 GFLOP/s.
#
# Environment:
#   LSTMD_CPU_ISA      avx512|avx2|generic: lstmd's own kernels (kernels/cpu/isa.h) and, unless
#                      OPENBLAS_CORETYPE is set, the OpenBLAS kernels of every measured process
#                      (and, for the PyTorch peers, MKL_ENABLE_INSTRUCTIONS, ONEDNN_MAX_CPU_ISA and
#                      ATEN_CPU_CAPABILITY)
#   OPENBLAS_CORETYPE  kept if set; else chosen from /proc/cpuinfo and LSTMD_CPU_ISA (AVX-512 ->
#                      SkylakeX, AVX2+FMA -> Haswell, generic -> Prescott). Exported before any
#                      measured process starts.
#   BENCH_OUT          also write the whole output to this file
#   ROUNDS (3)  LSTMD_STEPS (30)  TORCH_STEPS (20)  BUILD (dir of LSTMD_BINARY)
#   PYTHON_TORCH (/usr/bin/python3: Debian's python3-torch)
#   PYTHON_TORCH2      a python with torch 2.x to use as is (default: what bench/torch2_env.sh
#                      prints, making the environment if missing; TORCH2_VENV moves it)
#   TORCH2=0           skip the torch 2 peer (no download, no environment)
#   BENCH_STRICT=1     exit 3 when a target is BELOW (default: exit 0 once measured)
#   SWEEP=1            then the weak-spot sweep: H 128, 256, 1024 at B=32 and B 1, 8, 128 at
#                      H=512 (T=128, L=2): lstmd against the best of the torch 2 peer's 1 and 2
#                      threads, one round each, with GFLOP/s against the round's best sgemm
set -euo pipefail

if [[ $# -ne 1 || "$1" == -h || "$1" == --help ]]; then
  sed -n '2,35p' "$0" | sed 's/^# \{0,1\}//'
  [[ $# -eq 1 ]] && exit 0 || exit 2
fi
LSTMD=$1
[[ -x "$LSTMD" ]] || { echo "bench_cpu.sh: $LSTMD: not an executable (run make first)" >&2; exit 2; }
LSTMD=$(cd "$(dirname "$LSTMD")" && pwd)/$(basename "$LSTMD")
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
BUILD=${BUILD:-$(dirname "$LSTMD")}
ROUNDS=${ROUNDS:-3}
LSTMD_STEPS=${LSTMD_STEPS:-30}
TORCH_STEPS=${TORCH_STEPS:-20}
PYTHON_TORCH=${PYTHON_TORCH:-/usr/bin/python3}
PYTHON_TORCH2=${PYTHON_TORCH2:-}
TORCH2=${TORCH2:-1}
LOG_EVERY=5
# Model of bench/char_lm_h512.ini (V is read from `lstmd prepare`).
E=64 H=512 L=2 V=109 T=128 B=32

# flops_per_token H: lstmd_model_flops_per_token (worker/model/model.c) for the text model E, H,
# L, V: 3 x the forward's 2 x multiply-adds. The summary checks it against lstmd's own figure.
flops_per_token() {
  awk -v E=$E -v H="$1" -v L=$L -v V="$V" 'BEGIN {
    f = 2 * V * H; for (k = 0; k < L; k++) f += 2 * 4 * H * ((k == 0 ? E : H) + H); printf "%.0f", 3 * f }'
}

TMP=$(mktemp -d "${TMPDIR:-/tmp}/lstmd-bench.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

main() {
  local t_start=$SECONDS
  echo "== lstmd CPU benchmark: $(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname), $(nproc) cores"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
  echo "lstmd: $LSTMD ($("$LSTMD" --version 2>&1)), commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')"

  # --- OpenBLAS kernels: must be in the environment before lstmd/torch/sgemm_rate start ---
  # The same choice as lstmd's (daemon/blas_setup.c), LSTMD_CPU_ISA included, so that the peers
  # run on the OpenBLAS kernels lstmd runs on.
  local flags want=""
  flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2-) "
  case "${LSTMD_CPU_ISA:-}" in
    "" | avx512 | avx2 | generic) ;;
    *) echo "bench_cpu.sh: LSTMD_CPU_ISA=$LSTMD_CPU_ISA: avx512, avx2 or generic" >&2; return 2 ;;
  esac
  if [[ ${LSTMD_CPU_ISA:-avx512} == generic ]]; then want=Prescott
  elif [[ ${LSTMD_CPU_ISA:-avx512} == avx512 && $flags == *" avx512f "* &&
          $flags == *" avx512bw "* && $flags == *" avx512vl "* && $flags == *" avx512dq "* ]]; then
    want=SkylakeX
  elif [[ $flags == *" avx2 "* && $flags == *" fma "* ]]; then want=Haswell; fi
  echo "LSTMD_CPU_ISA=${LSTMD_CPU_ISA:-unset, the best this CPU has}"
  if [[ -n "${OPENBLAS_CORETYPE:-}" ]]; then
    echo "OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE (from the environment)"
    [[ -n $want && $want != "$OPENBLAS_CORETYPE" ]] &&
      echo "  note: the CPU flags suggest $want; unset OPENBLAS_CORETYPE to use it"
  elif [[ -n $want ]]; then
    export OPENBLAS_CORETYPE=$want
    echo "OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE (from the CPU flags and LSTMD_CPU_ISA)"
  else
    echo "OPENBLAS_CORETYPE unset (no AVX2/AVX-512 in the CPU flags): OpenBLAS detects"
  fi
  # PyTorch 2's MKL and both PyTorches' oneDNN ignore OPENBLAS_CORETYPE: with LSTMD_CPU_ISA they
  # are capped to the same vector width (generic: SSE4.2, the lowest MKL accepts), so a forced
  # path is compared with a peer on the same instructions, not one still on AVX-512.
  if [[ -n "${LSTMD_CPU_ISA:-}" ]]; then
    # ATen's own vectorised kernels (the LSTM cell's elementwise ops) dispatch by
    # ATEN_CPU_CAPABILITY (default: the best the CPU has)
    local mkl onednn aten
    case $LSTMD_CPU_ISA in
      avx512) mkl=AVX512 onednn=AVX512_CORE aten=avx512 ;;
      avx2) mkl=AVX2 onednn=AVX2 aten=avx2 ;;
      generic) mkl=SSE4_2 onednn=SSE41 aten=default ;;
    esac
    export MKL_ENABLE_INSTRUCTIONS=${MKL_ENABLE_INSTRUCTIONS:-$mkl}
    export ONEDNN_MAX_CPU_ISA=${ONEDNN_MAX_CPU_ISA:-$onednn} DNNL_MAX_CPU_ISA=${DNNL_MAX_CPU_ISA:-$onednn}
    export ATEN_CPU_CAPABILITY=${ATEN_CPU_CAPABILITY:-$aten}
    echo "MKL_ENABLE_INSTRUCTIONS=$MKL_ENABLE_INSTRUCTIONS ONEDNN_MAX_CPU_ISA=$ONEDNN_MAX_CPU_ISA ATEN_CPU_CAPABILITY=$ATEN_CPU_CAPABILITY (the peers, as LSTMD_CPU_ISA)"
  fi

  # --- build sgemm_rate (outside the product's CMake) ---
  mkdir -p "$BUILD"
  # shellcheck disable=SC2046
  cc -O2 -Wall "$HERE/sgemm_rate.c" -o "$BUILD/sgemm_rate" $(pkg-config --cflags --libs openblas)

  # --- data ---
  "$LSTMD" prepare text --input "$ROOT/data/fortunes.txt" --out "$TMP/ds" 2>"$TMP/prepare.log" ||
    { cat "$TMP/prepare.log"; return 1; }
  local v
  v=$(sed -n 's/.*vocabulary \([0-9]*\).*/\1/p' "$TMP/prepare.log")
  [[ -n $v ]] && V=$v
  echo "data: $(sed 's/^lstmd: //' "$TMP/prepare.log")"

  # --- peers: a name (torch VERSION) and a python each ---
  local peer_py=() peer_name=() py ver
  if ver=$("$PYTHON_TORCH" -c 'import torch; print(torch.__version__)' 2>/dev/null); then
    peer_py+=("$PYTHON_TORCH"); peer_name+=("torch $ver")
  else
    echo "torch peer: $PYTHON_TORCH cannot import torch (apt-get install python3-torch): skipped"
  fi
  if [[ $TORCH2 == 0 ]]; then
    echo "torch 2 peer: TORCH2=0: skipped"
  else
    py=$PYTHON_TORCH2
    if [[ -z $py ]] && ! py=$("$HERE/torch2_env.sh"); then
      echo "torch 2 peer: bench/torch2_env.sh could not make its environment (see above): skipped"
      py=""
    fi
    if [[ -n $py ]]; then
      if ver=$("$py" -c 'import torch; print(torch.__version__)' 2>"$TMP/torch2.err"); then
        peer_py+=("$py"); peer_name+=("torch $ver")
      else
        echo "torch 2 peer: $py cannot import torch: skipped"; tail -3 "$TMP/torch2.err"
      fi
    fi
  fi
  local p
  for ((p = 0; p < ${#peer_py[@]}; p++)); do echo "peer: ${peer_name[p]} ($(command -v "${peer_py[p]}"))"; done

  # --- interleaved rounds: lstmd, then each peer at 1 and 2 threads ---
  local best_lstmd=0 best_lstmd_overall=0 best_torch=0 best_torch_label="-" r
  local round_lstmd=()
  local peer_best=() peer_best_th=()
  for ((p = 0; p < ${#peer_py[@]}; p++)); do peer_best[p]=0; peer_best_th[p]=-; done
  for ((r = 1; r <= ROUNDS; r++)); do
    local run="$TMP/run-$r" log="$TMP/lstmd-$r.log"
    if ! timeout 300 "$LSTMD" train --config "$HERE/char_lm_h512.ini" --set "data.path=$TMP/ds" \
         --set "train.run_dir=$run" --set "train.steps=$LSTMD_STEPS" \
         --set "train.log_every=$LOG_EVERY" 2>"$log"; then
      echo "lstmd train failed:"; tail -20 "$log"; return 1
    fi
    local overall steady blas own_fpt
    overall=$(sed -n 's/.*trained steps .* (\([0-9.]*\) tokens\/s.*/\1/p' "$log")
    # lstmd's own FLOP/token (its GFLOP/s over its tokens/s), checked against this script's below
    own_fpt=$(sed -n 's/.*trained steps .* (\([0-9.]*\) tokens\/s, \([0-9.]*\) GFLOP\/s).*/\1 \2/p' \
      "$log" | awk '$1 > 0 { printf "%.0f", $2 * 1e9 / $1 }')
    blas=$(sed -n 's/^lstmd: compute: \(.*\)/\1/p' "$log")
    # Steady state: tokens and seconds between the first and the last progress record.
    steady=$(awk -F'[:,}]' '/"tokens_per_s"/ {
        for (i = 1; i < NF; i++) {
          if ($i ~ /"tokens"$/) tok = $(i + 1); if ($i ~ /"elapsed_s"$/) el = $(i + 1) }
        n++; if (n == 1) { t0 = tok; e0 = el } else { t1 = tok; e1 = el } }
      END { if (n >= 2 && e1 > e0) printf "%.0f", (t1 - t0) / (e1 - e0); else print "" }' \
      "$run/metrics.jsonl")
    [[ -n $steady ]] || steady=$overall
    printf 'round %d  lstmd  %7.0f tok/s steady (steps %d..%d), %7.0f overall  [%s]\n' "$r" \
      "$steady" $((LOG_EVERY + 1)) "$LSTMD_STEPS" "$overall" "$blas"
    best_lstmd=$(max "$best_lstmd" "$steady")
    round_lstmd[r]=$steady
    best_lstmd_overall=$(max "$best_lstmd_overall" "$overall")

    local th line rate
    for ((p = 0; p < ${#peer_py[@]}; p++)); do
      for th in 1 2; do
        # 2 threads: passive OpenMP waiting, or libgomp's spinning starves OpenBLAS's threads
        # (torch 1.13); torch 2 (MKL/oneDNN, no OpenBLAS) too on a loaded 2-core VM (measured
        # once: ~3,200 tokens/s passive against ~900 spinning).
        local envs=()
        ((th > 1)) && envs=(OMP_WAIT_POLICY=passive)
        if ! line=$(env "${envs[@]}" timeout 180 "${peer_py[p]}" "$HERE/torch_lstm_peer.py" \
                      --threads "$th" --steps "$TORCH_STEPS" --max-seconds 40 2>"$TMP/torch.err" |
                    grep '^torch_peer'); then
          echo "round $r  ${peer_name[p]}  threads=$th failed:"; tail -5 "$TMP/torch.err"; continue
        fi
        rate=$(sed -n 's/.*tokens_per_s=\([0-9.]*\).*/\1/p' <<<"$line")
        printf 'round %d  %-18s %7.0f tok/s threads=%d  [%s]\n' "$r" "${peer_name[p]}" "$rate" \
          "$th" "${line#* torch=* }"
        if awk -v a="$rate" -v b="${peer_best[p]}" 'BEGIN { exit !(a > b) }'; then
          peer_best[p]=$rate
          peer_best_th[p]=$th
        fi
        if awk -v a="$rate" -v b="$best_torch" 'BEGIN { exit !(a > b) }'; then
          best_torch=$rate
          best_torch_label="${peer_name[p]}, threads=$th"
        fi
      done
    done
    # sgemm in every round too: on a shared VM one measurement can land in a slow moment.
    "$BUILD/sgemm_rate" --reps 3 >"$TMP/sgemm-$r.txt"
    printf 'round %d  sgemm  %7.1f GFLOP/s at 2048^3 (all cores)\n' "$r" \
      "$(awk '$1 == "square_2048" { print $7 }' "$TMP/sgemm-$r.txt")"
  done

  # --- OpenBLAS sgemm ---
  echo
  echo "-- sgemm_rate (all cores), the round with the fastest 2048^3 --"
  local f best_sq=0
  for f in "$TMP"/sgemm-*.txt; do
    local v
    v=$(awk '$1 == "square_2048" { print $7 }' "$f")
    if awk -v a="$v" -v b="$best_sq" 'BEGIN { exit !(a > b) }'; then best_sq=$v; cp "$f" "$TMP/sgemm.txt"; fi
  done
  cat "$TMP/sgemm.txt"
  echo "-- sgemm_rate --threads 1 --"
  "$BUILD/sgemm_rate" --reps 3 --threads 1 | grep -v '^openblas config'
  local sq fwd bwd
  sq=$(awk '$1 == "square_2048" { print $7 }' "$TMP/sgemm.txt")
  fwd=$(awk '$1 == "lstm_fwd_rec" { print $7 }' "$TMP/sgemm.txt")
  bwd=$(awk '$1 == "lstm_bwd_rec" { print $7 }' "$TMP/sgemm.txt")

  # --- summary ---
  local fpt gflops below=0
  fpt=$(flops_per_token "$H")
  gflops=$(awk -v t="$best_lstmd" -v f="$fpt" 'BEGIN { printf "%.1f", t * f / 1e9 }')
  if [[ -z ${own_fpt:-} ]]; then # the check must not switch itself off with the line's format
    echo "bench_cpu.sh: no '(N tokens/s, G GFLOP/s)' in lstmd's 'trained steps' line: cannot check the FLOP model" >&2
    return 1
  fi
  if ! awk -v a="$own_fpt" -v b="$fpt" 'BEGIN { exit !(a > 0.99 * b && a < 1.01 * b) }'; then
    echo "bench_cpu.sh: lstmd counts $own_fpt FLOP/token, this script $fpt: its formula is stale" >&2
    return 1
  fi
  echo
  echo "== summary (best of $ROUNDS rounds; model E=$E H=$H L=$L V=$V, T=$T B=$B, fp32;"
  echo "   $fpt FLOP/token = 3 x forward, as lstmd_model_flops_per_token; lstmd's own: $own_fpt)"
  local peers_tsv=""
  for ((p = 0; p < ${#peer_py[@]}; p++)); do
    peers_tsv+="${peer_name[p]}|${peer_best[p]}|${peer_best_th[p]};"
  done
  awk -v lt="$best_lstmd" -v lo="$best_lstmd_overall" -v tt="$best_torch" -v tl="$best_torch_label" \
      -v peers="$peers_tsv" \
      -v g="$gflops" -v sq="$sq" -v fw="$fwd" -v bw="$bwd" -v core="${OPENBLAS_CORETYPE:-detected}" '
    function verdict(ok) { return ok ? "PASS" : "BELOW" }
    BEGIN {
      ratio = tt > 0 ? lt / tt : 0; frac = sq > 0 ? g / sq : 0
      printf "%-44s %12s  %s\n", "metric", "value", "target"
      printf "%-44s %12.0f\n", "lstmd tokens/s (steady state)", lt
      printf "%-44s %12.0f\n", "lstmd tokens/s (overall, incl. first steps)", lo
      n = split(peers, row, ";")
      for (i = 1; i <= n; i++) {
        if (row[i] == "") continue
        split(row[i], f, "|")
        printf "%-44s %12.0f  (threads=%s)\n", f[1] " tokens/s (best)", f[2], f[3]
      }
      printf "%-44s %12.0f  (%s)\n", "best peer tokens/s", tt, tl
      if (tt > 0) printf "%-44s %12.2f  >= 2.00  %s  (vs %s)\n", "ratio lstmd/best peer", ratio,
                         verdict(ratio >= 2.0), tl
      else        printf "%-44s %12s  >= 2.00  n/a\n", "ratio lstmd/best peer", "-"
      printf "%-44s %12.1f\n", "lstmd GFLOP/s", g
      printf "%-44s %12.1f  (%s)\n", "sgemm 2048^3 GFLOP/s", sq, core
      printf "%-44s %12.1f  (%.2f of 2048^3)\n", "sgemm 32x2048x512 N,T (fwd recurrence)", fw, fw / sq
      printf "%-44s %12.1f  (%.2f of 2048^3)\n", "sgemm 32x512x2048 N,N (bwd recurrence)", bw, bw / sq
      printf "%-44s %12.2f  >= 0.60  %s\n", "lstmd GFLOP/s / sgemm 2048^3", frac, verdict(frac >= 0.60)
      # The targets of "CPU speed on every x86 host" (each ISA path, its own OpenBLAS core type):
      if (tt > 0) printf "%-44s %12.2f  >= 1.30  %s\n", "  every-ISA target: lstmd/best peer", ratio,
                         verdict(ratio >= 1.3)
      printf "%-44s %12.2f  >= 0.90  %s\n", "  every-ISA target: GFLOP/s / sgemm", frac,
             verdict(frac >= 0.90)
      below = (tt > 0 && ratio < 2.0) || frac < 0.60
      exit below ? 3 : 0
    }' || below=$?
  # Information, not a verdict: each round's lstmd against that round's own sgemm, minutes
  # apart. The host's speed drifts between rounds, so the best of each (above) can pair a fast
  # lstmd round with a faster sgemm one, or the other way round.
  local pairs="" ratios=""
  for ((r = 1; r <= ROUNDS; r++)); do
    local rq rr
    rq=$(awk '$1 == "square_2048" { print $7 }' "$TMP/sgemm-$r.txt")
    rr=$(awk -v t="${round_lstmd[r]:-0}" -v f="$fpt" -v q="$rq" 'BEGIN { printf "%.3f", (q > 0 ? t * f / 1e9 / q : 0) }')
    pairs+="${pairs:+, }round $r $rr"
    ratios+="$rr "
  done
  echo "  same-round GFLOP/s / sgemm: $pairs (median $(tr ' ' '\n' <<<"$ratios" | grep . | sort -g |
    awk '{ v[NR] = $1 } END { printf "%.3f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'); information only)"
  [[ ${SWEEP:-0} == 1 ]] && sweep "$sq"
  echo "(total $((SECONDS - t_start)) s)"
  [[ ${BENCH_STRICT:-0} == 1 && $below -ne 0 ]] && return "$below"
  return 0
}

max() { awk -v a="$1" -v b="$2" 'BEGIN { print (a + 0 > b + 0) ? a : b }'; }

# sweep SGEMM_GFLOPS: the weak spots. Small H is where per-step overhead, not FLOPs, decides;
# B=1 is latency-bound; B=128 and H=1024 are where the packed W_hh outgrows the caches.
# Uses main's locals through dynamic scope: peer_py/peer_name (the last peer is torch 2), V, TMP.
sweep() {
  local sq=$1 shape h b steps le run log rate fpt g peer th line best bt
  echo
  echo "== sweep (one round each; T=$T L=$L E=$E V=$V; peer: ${peer_name[-1]:-none}, best of 1 and 2 threads)"
  printf '%-12s %10s %9s %8s %14s %8s\n' shape "lstmd tok/s" GFLOP/s /sgemm "peer tok/s" ratio
  for shape in H128:32:60 H256:32:40 H1024:32:10 H512:1:60 H512:8:40 H512:128:8; do
    IFS=: read -r h b steps <<<"${shape#H}"
    le=$((steps / 4)); ((le < 2)) && le=2
    run="$TMP/sweep-$h-$b" log="$TMP/sweep-$h-$b.log"
    if ! timeout 300 "$LSTMD" train --config "$HERE/char_lm_h512.ini" --set "data.path=$TMP/ds" \
         --set "train.run_dir=$run" --set "train.steps=$steps" --set "train.log_every=$le" \
         --set "model.hidden=$h" --set "data.batch_size=$b" 2>"$log"; then
      echo "H$h B$b: lstmd train failed"; tail -5 "$log"; continue
    fi
    rate=$(awk -F'[:,}]' '/"tokens_per_s"/ {
        for (i = 1; i < NF; i++) {
          if ($i ~ /"tokens"$/) tok = $(i + 1); if ($i ~ /"elapsed_s"$/) el = $(i + 1) }
        n++; if (n == 1) { t0 = tok; e0 = el } else { t1 = tok; e1 = el } }
      END { if (n >= 2 && e1 > e0) printf "%.0f", (t1 - t0) / (e1 - e0); else print 0 }' \
      "$run/metrics.jsonl")
    fpt=$(flops_per_token "$h")
    g=$(awk -v t="$rate" -v f="$fpt" 'BEGIN { printf "%.1f", t * f / 1e9 }')
    best=0 bt=-
    if ((${#peer_py[@]} > 0)); then
      peer=${peer_py[-1]}
      for th in 1 2; do
        local envs=()
        ((th > 1)) && envs=(OMP_WAIT_POLICY=passive)
        line=$(env "${envs[@]}" timeout 180 "$peer" "$HERE/torch_lstm_peer.py" --threads "$th" \
                 --steps "$steps" --max-seconds 30 --hidden "$h" --batch "$b" --vocab "$V" \
                 2>/dev/null | grep '^torch_peer') || continue
        line=$(sed -n 's/.*tokens_per_s=\([0-9.]*\).*/\1/p' <<<"$line")
        if awk -v a="$line" -v c="$best" 'BEGIN { exit !(a > c) }'; then best=$line bt=$th; fi
      done
    fi
    printf '%-12s %10.0f %9.1f %8.2f %9.0f (t=%s) %7.2f\n' "H$h B$b" "$rate" "$g" \
      "$(awk -v g="$g" -v s="$sq" 'BEGIN { print (s > 0 ? g / s : 0) }')" "$best" "$bt" \
      "$(awk -v a="$rate" -v c="$best" 'BEGIN { print (c > 0 ? a / c : 0) }')"
  done
}

if [[ -n "${BENCH_OUT:-}" ]]; then
  mkdir -p "$(dirname "$BENCH_OUT")"
  main 2>&1 | tee "$BENCH_OUT"
  rc=${PIPESTATUS[0]}
else
  main
  rc=$?
fi
exit "$rc"
