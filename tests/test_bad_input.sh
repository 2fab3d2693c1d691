#!/usr/bin/env bash
# test_bad_input.sh — lstmd on bad input: missing/empty/malformed data files, corrupt prepared
# datasets, bad configs, corrupt or foreign checkpoints, a prime outside the vocabulary; CSV
# dialects (byte order mark, quotes, CRLF, spaced column names) that must give the plain file's
# dataset, predict --out naming its --input, and --out - (stdout for predict's CSV, refused for
# datasets and models).
# Every case must: exit with exactly 2 (no crash, no 1; a few cases say otherwise: an unwritable
# output exits 1, a warning 0), print nothing on stdout, print a message
# on stderr that names the offending file (and CSV line / config key where given), and, for
# prepare, leave nothing half-written in the output directory. "The message" is lstmd's own lines
# ("lstmd: ...") without the effective-config dump that `train` prints first: the dump echoes
# data.path and the other settings, so a match there would pass with no error message at all.
#
# usage: test_bad_input.sh LSTMD SOURCE_DIR        (ctest passes both)
# Byte surgery on checkpoint headers uses python3 (standard library only).
set -u

if (($# != 2)); then
  echo "usage: $0 LSTMD SOURCE_DIR" >&2
  exit 2
fi
LSTMD=$(realpath -- "$1") || exit 1
SRC=$(realpath -- "$2") || exit 1
DATA=$SRC/data
[[ -x $LSTMD ]] || { echo "FAIL: $LSTMD is not executable" >&2; exit 1; }

TMP=$(mktemp -d "${TMPDIR:-/tmp}/lstmd-badinput.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
cd "$TMP" || exit 1

# A corrupt file must never make lstmd allocate the machine away: cap the address space so that
# a runaway allocation fails (and shows up as a wrong exit code) instead of summoning the OOM killer.
MEM_LIMIT_KB=4194304
TIMEOUT_S=120

failures=0
cases=0

fail() {
  echo "FAIL [$1]: $2"
  failures=$((failures + 1))
}

# check NAME [--file PATH] [--has TEXT] [--clean-dir DIR] [--same-dir DIR COPY] [--no-ckpt DIR]
#       [--exit N] -- COMMAND ARGS...
#   --file PATH      a message line must contain PATH (the file the message is about)
#   --has TEXT       a message line must contain TEXT (a line number, a config key, ...)
#   --clean-dir DIR  afterwards DIR is absent or empty (no train.bin, val.bin, *.tmp.*)
#   --same-dir D C   afterwards D has exactly the contents of the copy C (an older dataset survives)
#   --no-ckpt DIR    afterwards DIR holds no checkpoint (*.safetensors*)
#   --exit N         the exit status expected instead of 2: 1 for an output that cannot be
#                    written, 0 for a warning (the message checks still apply)
check() {
  local name=$1
  shift
  local -a files=() has=() clean=() same=() nockpt=()
  local want_rc=2
  while (($#)); do
    case $1 in
      --file) files+=("$2"); shift 2 ;;
      --has) has+=("$2"); shift 2 ;;
      --clean-dir) clean+=("$2"); shift 2 ;;
      --same-dir) same+=("$2" "$3"); shift 3 ;;
      --no-ckpt) nockpt+=("$2"); shift 2 ;;
      --exit) want_rc=$2; shift 2 ;;
      --) shift; break ;;
      *) echo "check: bad option $1" >&2; exit 2 ;;
    esac
  done
  cases=$((cases + 1))
  local out=$TMP/case.out err=$TMP/case.err rc
  (
    [[ ${LSTMD_SANITIZED:-0} == 1 ]] || ulimit -v "$MEM_LIMIT_KB" # ASan: terabytes of shadow
    exec timeout "$TIMEOUT_S" "$@"
  ) >"$out" 2>"$err"
  rc=$?
  local ok=1
  if ((rc == 124)); then
    fail "$name" "timed out after ${TIMEOUT_S}s"; ok=0
  elif ((rc >= 128)); then
    fail "$name" "crashed: exit $rc (signal $((rc - 128)))"; ok=0
  elif ((rc != want_rc)); then
    fail "$name" "exit code $rc, expected $want_rc"; ok=0
  fi
  if [[ -s $out ]]; then
    fail "$name" "stdout is not empty: $(head -c 200 "$out" | tr -c '[:print:]\n' '?')"; ok=0
  fi
  if [[ ! -s $err ]]; then
    fail "$name" "stderr is empty (no message)"; ok=0
  fi
  # lstmd's message lines: "lstmd: ..." but not the dump's header, nor its "  key = value" lines
  local msg=$TMP/case.msg
  grep '^lstmd: ' "$err" | grep -v '^lstmd: effective config:$' >"$msg"
  local s
  for s in ${files[@]+"${files[@]}"}; do
    grep -qF -- "$s" "$msg" || { fail "$name" "no message line (lstmd: ...) names the file '$s'"; ok=0; }
  done
  for s in ${has[@]+"${has[@]}"}; do
    grep -qF -- "$s" "$msg" || { fail "$name" "no message line (lstmd: ...) contains '$s'"; ok=0; }
  done
  for s in ${clean[@]+"${clean[@]}"}; do
    if [[ -e $s ]]; then
      local left
      left=$(ls -A "$s" 2>&1)
      if [[ -n $left ]]; then
        fail "$name" "left files in $s: $(echo $left)"; ok=0
      fi
    fi
  done
  local i
  for ((i = 0; i < ${#same[@]}; i += 2)); do
    if ! diff -r "${same[i]}" "${same[i + 1]}" >/dev/null 2>&1; then
      fail "$name" "changed the existing contents of ${same[i]}: $(ls -A "${same[i]}" | tr '\n' ' ')"
      ok=0
    fi
  done
  for s in ${nockpt[@]+"${nockpt[@]}"}; do
    if compgen -G "$s/*.safetensors*" >/dev/null; then
      fail "$name" "wrote a checkpoint into $s: $(ls "$s" | tr '\n' ' ')"; ok=0
    fi
  done
  if ((ok)); then
    echo "ok   [$name] exit $rc: $(grep -v '^  ' "$err" | grep -v 'effective config' | head -n 2 |
      tr -c '[:print:]\n' '?' | paste -sd'|')"
  else
    echo "     command: $(printf '%q ' "$@")"
    echo "     exit $rc; stderr (without the config listing):"
    grep -v '^  ' "$err" | head -n 8 | tr -c '[:print:]\n' '?' | sed 's/^/       /'
  fi
}

# setup CMD...: a step that must succeed for the cases below to mean anything.
setup() {
  if ! "$@" >"$TMP/setup.log" 2>&1; then
    echo "FAIL [setup] $*"
    sed 's/^/       /' "$TMP/setup.log" | tail -n 20
    exit 1
  fi
}

# flip_byte FILE OFFSET: xor one byte with 0x5a in place.
flip_byte() {
  local v
  v=$(od -An -tu1 -j "$2" -N1 "$1" | tr -d ' ')
  [[ -n $v ]] || { echo "flip_byte: $1 has no byte at $2" >&2; exit 1; }
  printf "\\$(printf '%03o' $((v ^ 0x5a)))" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}

# u32 FILE OFFSET: little-endian u32 at OFFSET.
u32() {
  od -An -tu4 --endian=little -j "$2" -N4 "$1" | tr -d ' '
}

# st_edit SRC DST OLD NEW: replaces the first OLD with NEW in a safetensors JSON header, fixing up
# the 8-byte header length (padding with spaces to a multiple of 8). Fails if OLD is absent.
st_edit() {
  python3 - "$@" <<'EOF'
import struct, sys
src, dst, old, new = sys.argv[1], sys.argv[2], sys.argv[3].encode(), sys.argv[4].encode()
raw = open(src, "rb").read()
(n,) = struct.unpack("<Q", raw[:8])
head = raw[8:8 + n]
if old not in head:
    sys.exit("st_edit: %r not in the header of %s" % (old, src))
head = head.replace(old, new, 1).rstrip(b" ")
head += b" " * (-len(head) % 8)
open(dst, "wb").write(struct.pack("<Q", len(head)) + head + raw[8 + n:])
EOF
  [[ $? == 0 ]] || exit 1
}

# st_set_hlen SRC DST VALUE: rewrites the 8-byte header length prefix only.
st_set_hlen() {
  python3 -c '
import struct, sys
raw = open(sys.argv[1], "rb").read()
open(sys.argv[2], "wb").write(struct.pack("<Q", int(sys.argv[3])) + raw[8:])' "$1" "$2" "$3" || exit 1
}

# st_poke SRC DST TENSOR VALUE: writes float VALUE (nan, inf, ...) over element 0 of TENSOR's data.
st_poke() {
  python3 -c '
import json, struct, sys
src, dst, name, value = sys.argv[1:5]
raw = bytearray(open(src, "rb").read())
(n,) = struct.unpack("<Q", raw[:8])
begin = json.loads(raw[8:8 + n])[name]["data_offsets"][0]
raw[8 + n + begin:8 + n + begin + 4] = struct.pack("<f", float(value))
open(dst, "wb").write(raw)' "$@" || exit 1
}

st_hlen() {
  python3 -c 'import struct,sys; print(struct.unpack("<Q", open(sys.argv[1],"rb").read(8))[0])' "$1"
}

echo "lstmd: $LSTMD"
echo "temp:  $TMP"

# ---------------------------------------------------------------- good inputs to corrupt
setup "$LSTMD" prepare text --input "$DATA/fortunes.txt" --out "$TMP/good-text"
setup "$LSTMD" prepare series --input "$DATA/seattle-temps.csv" --target temp --horizon 2 \
  --out "$TMP/good-series"
TINY=(--set model.hidden=16 --set model.embed=8 --set model.layers=2 --set data.seq_len=16
  --set data.batch_size=4 --set train.steps=2 --set train.eval_every=0 --set train.threads=1)
setup "$LSTMD" train --set data.path="$TMP/good-text" --set train.run_dir="$TMP/run-text" "${TINY[@]}"
setup "$LSTMD" train --set data.path="$TMP/good-series" --set train.run_dir="$TMP/run-series" \
  "${TINY[@]}"
CKPT=$TMP/run-text/step-2.safetensors
SCKPT=$TMP/run-series/step-2.safetensors
[[ -f $CKPT && -f $SCKPT ]] || { echo "FAIL [setup] no checkpoints: $(ls "$TMP"/run-*)"; exit 1; }
# The good ones work (otherwise every case below would pass for the wrong reason).
setup "$LSTMD" eval --checkpoint "$CKPT" --data "$TMP/good-text"
setup "$LSTMD" sample --checkpoint "$CKPT" --prime "The " --length 10
setup "$LSTMD" predict --checkpoint "$SCKPT" --input "$DATA/seattle-temps.csv" --out "$TMP/pred-ok.csv"

# ---------------------------------------------------------------- model.layer_norm checkpoints
# A layer-normalised model trains, evaluates, samples and predicts; what has no layer-normalised
# path yet (int8, ONNX) refuses it naming the key, and a checkpoint whose layer_norm metadata or
# LN tensors are wrong is refused naming them.
setup "$LSTMD" train --set data.path="$TMP/good-text" --set train.run_dir="$TMP/run-ln" \
  --set model.layer_norm=true "${TINY[@]}"
setup "$LSTMD" train --set data.path="$TMP/good-series" --set train.run_dir="$TMP/run-sln" \
  --set model.layer_norm=true "${TINY[@]}"
LNCKPT=$TMP/run-ln/step-2.safetensors
setup "$LSTMD" eval --checkpoint "$LNCKPT" --data "$TMP/good-text"
setup "$LSTMD" sample --checkpoint "$LNCKPT" --prime "The " --length 10
setup "$LSTMD" predict --checkpoint "$TMP/run-sln/step-2.safetensors" --input "$DATA/seattle-temps.csv" \
  --out "$TMP/pred-ln.csv"
mkdir "$TMP/q-ln" "$TMP/x-ln"
check "quantize: a layer_norm checkpoint" --file "$LNCKPT" --has "model.layer_norm" \
  --clean-dir "$TMP/q-ln" -- "$LSTMD" quantize --checkpoint "$LNCKPT" --out "$TMP/q-ln/m.int8"
check "export onnx: --out in a missing folder" --has "$TMP/no-dir/m.onnx: cannot create" \
  --has "No such file or directory" --exit 1 -- \
  "$LSTMD" export onnx --checkpoint "$CKPT" --out "$TMP/no-dir/m.onnx"
check "quantize: --out in a missing folder" --has "$TMP/no-dir/m.int8: cannot create" --exit 1 -- \
  "$LSTMD" quantize --checkpoint "$CKPT" --out "$TMP/no-dir/m.int8"
# An --out that is a FIFO (as /dev/null is a device): the temp file renamed over it replaced it
# with a regular file (user trial: `export onnx --out /dev/full` left /dev/full a 250 kB file).
mkfifo "$TMP/fifo-out"
check "export onnx: --out a FIFO" --has "$TMP/fifo-out: is a FIFO" --exit 1 -- \
  "$LSTMD" export onnx --checkpoint "$CKPT" --out "$TMP/fifo-out"
check "predict: --out a FIFO" --has "$TMP/fifo-out: is a FIFO" --exit 1 -- \
  "$LSTMD" predict --checkpoint "$SCKPT" --input "$DATA/seattle-temps.csv" --out "$TMP/fifo-out"
[[ -p $TMP/fifo-out ]] || fail "--out a FIFO" "$TMP/fifo-out is no longer a FIFO: $(stat -c %F "$TMP/fifo-out")"
check "export onnx: a layer_norm checkpoint" --file "$LNCKPT" --has "model.layer_norm" \
  --clean-dir "$TMP/x-ln" -- "$LSTMD" export onnx --checkpoint "$LNCKPT" --out "$TMP/x-ln/m.onnx"
st_edit "$LNCKPT" "$TMP/ln-meta.safetensors" '"model.layer_norm":"1"' '"model.layer_norm":"7"'
check "eval: layer_norm metadata 7" --file "$TMP/ln-meta.safetensors" --has "model.layer_norm" -- \
  "$LSTMD" eval --checkpoint "$TMP/ln-meta.safetensors" --data "$TMP/good-text"
st_edit "$LNCKPT" "$TMP/ln-tensor.safetensors" '"lstm.ln_c_bias_l1"' '"lstm.xx_c_bias_l1"'
check "eval: layer_norm checkpoint without lstm.ln_c_bias_l1" --file "$TMP/ln-tensor.safetensors" \
  --has "lstm.ln_c_bias_l1" -- \
  "$LSTMD" eval --checkpoint "$TMP/ln-tensor.safetensors" --data "$TMP/good-text"
check "train: model.layer_norm=1 (false|true)" --has "model.layer_norm" -- \
  "$LSTMD" train --set data.path="$TMP/good-text" --set model.layer_norm=1 "${TINY[@]}"

# ---------------------------------------------------------------- prepare text
check "prepare text: missing input" --file "$TMP/no-such.txt" --clean-dir "$TMP/o-missing" -- \
  "$LSTMD" prepare text --input "$TMP/no-such.txt" --out "$TMP/o-missing"

: >"$TMP/empty.txt"
mkdir "$TMP/o-empty" # an existing, empty output directory must stay empty
check "prepare text: empty input" --file "$TMP/empty.txt" --clean-dir "$TMP/o-empty" -- \
  "$LSTMD" prepare text --input "$TMP/empty.txt" --out "$TMP/o-empty"

check "prepare text: input is a directory" --file "$TMP/good-text" --clean-dir "$TMP/o-dir" -- \
  "$LSTMD" prepare text --input "$TMP/good-text" --out "$TMP/o-dir"

cp -r "$TMP/good-text" "$TMP/o-keep-text"
cp -r "$TMP/good-text" "$TMP/o-keep-text.orig"
check "prepare text: empty input over an existing dataset" --file "$TMP/empty.txt" \
  --same-dir "$TMP/o-keep-text" "$TMP/o-keep-text.orig" -- \
  "$LSTMD" prepare text --input "$TMP/empty.txt" --out "$TMP/o-keep-text"

# SIGTERM while prepare writes its splits: the temp files go, and so does the output directory
# when prepare made it (it used to stay, empty); one that existed before stays. The process is
# stopped once a temp file is seen and signalled only while one is there.
head -c 64000000 /dev/urandom >"$TMP/big.bin"
if python3 - "$LSTMD" "$TMP" <<'PYEOF'; then :; else failures=$((failures + 1)); fi
import os, signal, subprocess, sys
lstmd, tmp = sys.argv[1:3]
bad = 0
for name, out, premade in (("prepare made --out", tmp + "/o-term", False),
                           ("--out existed, empty", tmp + "/o-term-kept", True)):
    for attempt in range(50):
        if premade: os.makedirs(out, exist_ok=True)
        def writing(): return os.path.isdir(out) and any(".tmp." in f for f in os.listdir(out))
        p = subprocess.Popen([lstmd, "prepare", "text", "--input", tmp + "/big.bin", "--out", out],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while p.poll() is None and not writing(): pass
        if p.poll() is None: os.kill(p.pid, signal.SIGSTOP)
        if p.poll() is None and writing():
            os.kill(p.pid, signal.SIGTERM); os.kill(p.pid, signal.SIGCONT); p.wait()
            there = os.path.isdir(out)
            left = os.listdir(out) if there else []
            if p.returncode == -signal.SIGTERM and not left and there == premade:
                print(f"ok   [SIGTERM during prepare, {name}: try {attempt + 1}, "
                      f"{'the empty directory kept' if premade else 'no directory left'}]")
            else:
                print(f"FAIL [SIGTERM during prepare, {name}]: exit {p.returncode}, directory "
                      f"{'there' if there else 'gone'}, holding {left}"); bad += 1
            break
        if p.poll() is None: os.kill(p.pid, signal.SIGCONT)
        p.wait()
        subprocess.run(["rm", "-rf", out])
    else:
        print(f"FAIL [SIGTERM during prepare, {name}]: no temp file seen in 50 tries"); bad += 1
sys.exit(bad > 0)
PYEOF
rm -f "$TMP/big.bin"

# Too short to train with defaults: prepared (exit 0), with warnings saying what will happen.
printf 'ab' >"$TMP/two.txt"
check "prepare text: 2 bytes (warns: empty val.bin, short train.bin)" --exit 0 \
  --has "$TMP/o-two/val.bin is empty: lstmd train will not evaluate" \
  --has "$TMP/o-two/train.bin: 2 tokens hold no window of the default data.seq_len 128" -- \
  "$LSTMD" prepare text --input "$TMP/two.txt" --out "$TMP/o-two"
head -c 2000 "$DATA/fortunes.txt" >"$TMP/2k.txt"
check "prepare text: 2000 bytes (warns: val.bin of 100 tokens)" --exit 0 \
  --has "$TMP/o-2k/val.bin: 100 tokens hold no window" --has "unless data.seq_len <= 99" -- \
  "$LSTMD" prepare text --input "$TMP/2k.txt" --out "$TMP/o-2k"

# ---------------------------------------------------------------- prepare series
printf 'a,b\n1,2\n3\n4,5\n' >"$TMP/ragged.csv"
check "prepare series: ragged CSV (short row)" --file "$TMP/ragged.csv" --has "ragged.csv:3" \
  --clean-dir "$TMP/o-ragged" -- \
  "$LSTMD" prepare series --input "$TMP/ragged.csv" --target a --out "$TMP/o-ragged"

printf 'a,b\n1,2\n3,4\n5,6,7\n8,9\n' >"$TMP/ragged2.csv"
check "prepare series: ragged CSV (long row)" --file "$TMP/ragged2.csv" --has "ragged2.csv:4" \
  --clean-dir "$TMP/o-ragged2" -- \
  "$LSTMD" prepare series --input "$TMP/ragged2.csv" --target a --out "$TMP/o-ragged2"

printf 'x,a,b\n0,1,2\n1,3,4\n2,oops,6\n3,7,8\n' >"$TMP/nonnum.csv"
check "prepare series: non-numeric target value" --file "$TMP/nonnum.csv" --has "nonnum.csv:4" \
  --has "oops" --clean-dir "$TMP/o-nonnum" -- \
  "$LSTMD" prepare series --input "$TMP/nonnum.csv" --target a --out "$TMP/o-nonnum"

check "prepare series: non-numeric feature column" --file "$DATA/seattle-temps.csv" \
  --has "seattle-temps.csv:2" --clean-dir "$TMP/o-date" -- \
  "$LSTMD" prepare series --input "$DATA/seattle-temps.csv" --target temp --features date \
  --out "$TMP/o-date"

# A bad row near the end of a long file: the writers are well under way when it is found.
{ cat "$DATA/seattle-temps.csv"; printf '\n2011/01/01 00:00,NaNish\n2011/01/01 01:00,40\n'; } \
  | grep -v '^$' >"$TMP/late.csv"
late_line=$(grep -n 'NaNish' "$TMP/late.csv" | cut -d: -f1)
mkdir "$TMP/o-late"
check "prepare series: bad value on line $late_line of a long file" --file "$TMP/late.csv" \
  --has "late.csv:$late_line" --clean-dir "$TMP/o-late" -- \
  "$LSTMD" prepare series --input "$TMP/late.csv" --target temp --out "$TMP/o-late"

cp -r "$TMP/good-series" "$TMP/o-keep-series"
cp -r "$TMP/good-series" "$TMP/o-keep-series.orig"
check "prepare series: late bad value over an existing dataset" --file "$TMP/late.csv" \
  --same-dir "$TMP/o-keep-series" "$TMP/o-keep-series.orig" -- \
  "$LSTMD" prepare series --input "$TMP/late.csv" --target temp --out "$TMP/o-keep-series"

check "prepare series: unknown --target column" --file "$DATA/seattle-temps.csv" --has "nope" \
  --clean-dir "$TMP/o-target" -- \
  "$LSTMD" prepare series --input "$DATA/seattle-temps.csv" --target nope --out "$TMP/o-target"

check "prepare series: unknown --features column" --file "$DATA/seattle-temps.csv" \
  --has "humidity" --clean-dir "$TMP/o-feat" -- \
  "$LSTMD" prepare series --input "$DATA/seattle-temps.csv" --target temp --features humidity \
  --out "$TMP/o-feat"

check "prepare series: empty file" --file "$TMP/empty.txt" --clean-dir "$TMP/o-sempty" -- \
  "$LSTMD" prepare series --input "$TMP/empty.txt" --target a --out "$TMP/o-sempty"

printf 'a,b\n' >"$TMP/header-only.csv"
check "prepare series: header only" --file "$TMP/header-only.csv" --clean-dir "$TMP/o-hdr" -- \
  "$LSTMD" prepare series --input "$TMP/header-only.csv" --target a --out "$TMP/o-hdr"

check "prepare series: missing file" --file "$TMP/no-such.csv" --clean-dir "$TMP/o-smissing" -- \
  "$LSTMD" prepare series --input "$TMP/no-such.csv" --target a --out "$TMP/o-smissing"

# ---------------------------------------------------------------- CSV dialects and column options
# Excel's "CSV UTF-8" (a byte order mark, quoted cells, CRLF) and spaces around the names in
# --target/--features give the plain file's dataset, byte for byte.
awk -F, 'NR == 1 { print "date,temp,x,y"; next } { printf "%s,%s,%d,%d\n", $1, $2, NR % 7, NR % 5 }' \
  "$DATA/seattle-temps.csv" | head -n 2001 >"$TMP/plain.csv"
{ printf '\xef\xbb\xbf'; sed 's/^\([^,]*\),\([^,]*\)/"\1","\2"/; 1s/,x,y$/,"x","y"/' "$TMP/plain.csv"; } |
  sed 's/$/\r/' >"$TMP/excel.csv"
setup "$LSTMD" prepare series --input "$TMP/plain.csv" --target temp --features x,y --out "$TMP/d-plain"
cases=$((cases + 1))
if "$LSTMD" prepare series --input "$TMP/excel.csv" --target temp --features x,y --out "$TMP/d-excel" \
    2>"$TMP/excel.err" && cmp -s "$TMP/d-plain/train.bin" "$TMP/d-excel/train.bin" &&
    cmp -s "$TMP/d-plain/val.bin" "$TMP/d-excel/val.bin"; then
  echo "ok   [prepare series: byte order mark + quoted cells + CRLF give the plain file's bytes]"
else
  fail "prepare series: BOM + quoted + CRLF" "not the plain file's dataset: $(head -2 "$TMP/excel.err")"
fi
cases=$((cases + 1))
if "$LSTMD" prepare series --input "$TMP/plain.csv" --target ' temp' --features 'x, y ' \
    --out "$TMP/d-spaced" 2>"$TMP/spaced.err" && cmp -s "$TMP/d-plain/train.bin" "$TMP/d-spaced/train.bin"; then
  echo "ok   [prepare series: --target ' temp' --features 'x, y ' are temp and x,y]"
else
  fail "prepare series: spaced --features" "$(head -2 "$TMP/spaced.err")"
fi

tr ',' ';' <"$TMP/plain.csv" >"$TMP/semi.csv"
check "prepare series: a ';'-delimited file" --file "$TMP/semi.csv" --has "semi.csv:1: no column named" \
  --has "looks ';'-delimited" --clean-dir "$TMP/o-semi" -- \
  "$LSTMD" prepare series --input "$TMP/semi.csv" --target temp --out "$TMP/o-semi"
printf 'a,b\n1,2\n3,4"5\n' >"$TMP/quote-in.csv"
check "prepare series: a quote inside an unquoted field" --file "$TMP/quote-in.csv" \
  --has "quote-in.csv:3: malformed CSV in field 2, byte 4" --has "quote the whole field" \
  --clean-dir "$TMP/o-quote-in" -- \
  "$LSTMD" prepare series --input "$TMP/quote-in.csv" --target a --out "$TMP/o-quote-in"
printf 'a,b\n1,2\n3,"4\n5,6\n' >"$TMP/quote-open.csv"
check "prepare series: a quote never closed" --file "$TMP/quote-open.csv" \
  --has "record after line 2 opens a quote that is never closed" --clean-dir "$TMP/o-quote-open" -- \
  "$LSTMD" prepare series --input "$TMP/quote-open.csv" --target a --out "$TMP/o-quote-open"
check "prepare series: an empty name in --features" --has "--features 'x,,y'" \
  --clean-dir "$TMP/o-empty-name" -- \
  "$LSTMD" prepare series --input "$TMP/plain.csv" --target temp --features x,,y --out "$TMP/o-empty-name"
check "prepare series: the target in --features (a warning)" --exit 0 \
  --has "--features names 'temp', the --target" -- \
  "$LSTMD" prepare series --input "$TMP/plain.csv" --target temp --features temp --out "$TMP/o-tf"

# ---------------------------------------------------------------- corrupt prepared datasets
# train.bin cut short by 100 bytes.
cp -r "$TMP/good-text" "$TMP/d-trunc"
truncate -s -100 "$TMP/d-trunc/train.bin"
check "train: truncated train.bin" --file "$TMP/d-trunc/train.bin" --no-ckpt "$TMP/run-trunc" -- \
  "$LSTMD" train --set data.path="$TMP/d-trunc" --set train.run_dir="$TMP/run-trunc" "${TINY[@]}"
# eval reads val.bin only (README "eval"): a broken train.bin does not matter to it, and a
# folder of just val.bin is scored
setup "$LSTMD" eval --checkpoint "$CKPT" --data "$TMP/d-trunc"
mkdir "$TMP/d-onlyval"
cp "$TMP/good-text/val.bin" "$TMP/d-onlyval/"
setup "$LSTMD" eval --checkpoint "$CKPT" --data "$TMP/d-onlyval"
cp -r "$TMP/good-text" "$TMP/d-trunc-val"
truncate -s -100 "$TMP/d-trunc-val/val.bin"
check "eval: truncated val.bin" --file "$TMP/d-trunc-val/val.bin" -- \
  "$LSTMD" eval --checkpoint "$CKPT" --data "$TMP/d-trunc-val"
# what users give instead of a checkpoint: an exported ONNX model, a dataset split
"$LSTMD" export onnx --checkpoint "$CKPT" --out "$TMP/model.onnx" >/dev/null 2>&1 || fail "export onnx" "for the wrong-kind checks"
check "eval: an ONNX model as --checkpoint" --file "$TMP/model.onnx" \
  --has "it looks like an ONNX model (lstmd export onnx writes those from a checkpoint)" -- \
  "$LSTMD" eval --checkpoint "$TMP/model.onnx" --data "$TMP/good-text"
check "eval: a dataset split as --checkpoint" --file "$TMP/good-text/val.bin" \
  --has "it is an lstmd dataset split (lstmd prepare's)" -- \
  "$LSTMD" eval --checkpoint "$TMP/good-text/val.bin" --data "$TMP/good-text"
# a dataset of another kind: the message says which is which ("a different kind of dataset
# (text, series or classify)" left the user to guess)
check "eval: a text checkpoint on a series dataset" --file "$TMP/good-series/val.bin" \
  --has "it is a series dataset, the checkpoint a text model" -- \
  "$LSTMD" eval --checkpoint "$CKPT" --data "$TMP/good-series"
mkdir "$TMP/d-onlytrain"
cp "$TMP/good-text/train.bin" "$TMP/d-onlytrain/"
check "eval: data dir without val.bin" --file "$TMP/d-onlytrain/val.bin" -- \
  "$LSTMD" eval --checkpoint "$CKPT" --data "$TMP/d-onlytrain"

# train.bin cut inside its header.
cp -r "$TMP/good-text" "$TMP/d-trunc-hdr"
truncate -s 40 "$TMP/d-trunc-hdr/train.bin"
check "train: train.bin cut inside the header" --file "$TMP/d-trunc-hdr/train.bin" \
  --no-ckpt "$TMP/run-trunc-hdr" -- \
  "$LSTMD" train --set data.path="$TMP/d-trunc-hdr" --set train.run_dir="$TMP/run-trunc-hdr" "${TINY[@]}"

# One flipped payload byte: only the CRC can tell.
cp -r "$TMP/good-text" "$TMP/d-flip"
hb=$(u32 "$TMP/d-flip/train.bin" 20)
[[ $hb =~ ^[0-9]+$ ]] && ((hb >= 64)) || { echo "FAIL [setup] bad header_bytes '$hb'"; exit 1; }
flip_byte "$TMP/d-flip/train.bin" $((hb + 123457))
check "train: flipped payload byte in train.bin (CRC)" --file "$TMP/d-flip/train.bin" \
  --no-ckpt "$TMP/run-flip" -- \
  "$LSTMD" train --set data.path="$TMP/d-flip" --set train.run_dir="$TMP/run-flip" "${TINY[@]}"

cp -r "$TMP/good-series" "$TMP/d-flip-val"
hb=$(u32 "$TMP/d-flip-val/val.bin" 20)
flip_byte "$TMP/d-flip-val/val.bin" $((hb + 7))
check "train: flipped payload byte in series val.bin (CRC)" --file "$TMP/d-flip-val/val.bin" \
  --no-ckpt "$TMP/run-flip-val" -- \
  "$LSTMD" train --set data.path="$TMP/d-flip-val" --set train.run_dir="$TMP/run-flip-val" "${TINY[@]}"
check "eval: flipped payload byte in series val.bin (CRC)" --file "$TMP/d-flip-val/val.bin" -- \
  "$LSTMD" eval --checkpoint "$SCKPT" --data "$TMP/d-flip-val"

# A flipped header byte (inside the vocabulary table): the header CRC.
cp -r "$TMP/good-text" "$TMP/d-flip-hdr"
flip_byte "$TMP/d-flip-hdr/train.bin" 70
check "train: flipped header byte in train.bin" --file "$TMP/d-flip-hdr/train.bin" \
  --no-ckpt "$TMP/run-flip-hdr" -- \
  "$LSTMD" train --set data.path="$TMP/d-flip-hdr" --set train.run_dir="$TMP/run-flip-hdr" "${TINY[@]}"

mkdir "$TMP/d-none"
check "train: data dir without train.bin" --file "$TMP/d-none" -- \
  "$LSTMD" train --set data.path="$TMP/d-none" --set train.run_dir="$TMP/run-none" "${TINY[@]}"

# ---------------------------------------------------------------- bad configs
GOOD=(--set data.path="$TMP/good-text" --set train.run_dir="$TMP/run-cfg")
printf '[data]\npath = %s\n[model]\nhidden = 16\nbogus = 3\n' "$TMP/good-text" >"$TMP/unknown.ini"
check "train: unknown key in config file" --file "$TMP/unknown.ini" --has "bogus" --has "unknown.ini:5" \
  --no-ckpt "$TMP/run-cfg" -- \
  "$LSTMD" train --config "$TMP/unknown.ini" --set train.run_dir="$TMP/run-cfg"
printf '[data]\npath = %s\n[model\nhidden = 16\n' "$TMP/good-text" >"$TMP/noclose.ini"
check "train: a [section] header without ']'" --file "$TMP/noclose.ini" --has "noclose.ini:3" \
  --has "without its closing ']'" -- \
  "$LSTMD" train --config "$TMP/noclose.ini" --set train.run_dir="$TMP/run-cfg"
printf '[data]\npath = %s\n[model]]\nhidden = 16\n' "$TMP/good-text" >"$TMP/twoclose.ini"
check "train: text after a [section] header" --file "$TMP/twoclose.ini" --has "twoclose.ini:3" \
  --has "after a [section] header" -- \
  "$LSTMD" train --config "$TMP/twoclose.ini" --set train.run_dir="$TMP/run-cfg"
check "train: unknown key in --set" --has "model.bogus" --no-ckpt "$TMP/run-cfg" -- \
  "$LSTMD" train "${GOOD[@]}" --set model.bogus=1
check "train: unknown section in --set" --has "nosuch.hidden" -- \
  "$LSTMD" train "${GOOD[@]}" --set nosuch.hidden=1
check "train: --set without '='" --has "model.layers" -- \
  "$LSTMD" train "${GOOD[@]}" --set model.layers
echo not-a-dir >"$TMP/run-is-a-file"
check "train: train.run_dir names a file" --file "$TMP/run-is-a-file" --has "train.run_dir" \
  --has "not a directory" -- \
  "$LSTMD" train --set data.path="$TMP/good-text" --set train.run_dir="$TMP/run-is-a-file"
check "train: train.run_dir under a file" --file "$TMP/run-is-a-file/sub" --has "Not a directory" -- \
  "$LSTMD" train --set data.path="$TMP/good-text" --set train.run_dir="$TMP/run-is-a-file/sub"

printf '[data]\npath = %s\n[model]\nlayers = 0\n' "$TMP/good-text" >"$TMP/layers0.ini"
check "train: model.layers=0 in config file" --file "$TMP/layers0.ini" --has "model.layers" \
  --has "layers0.ini:4" -- \
  "$LSTMD" train --config "$TMP/layers0.ini" --set train.run_dir="$TMP/run-cfg"
check "train: model.layers=0 in --set" --has "model.layers" --no-ckpt "$TMP/run-cfg" -- \
  "$LSTMD" train "${GOOD[@]}" --set model.layers=0
check "train: model.layers=17 (above the maximum)" --has "model.layers" -- \
  "$LSTMD" train "${GOOD[@]}" --set model.layers=17
check "train: model.stage_layers 3,1 for model.layers 2" --has "model.stage_layers" \
  --has "must add up to model.layers (2)" -- \
  "$LSTMD" train "${GOOD[@]}" --set model.layers=2 --set model.stages=2 --set model.stage_layers=3,1
check "train: model.stage_layers 1,1 for model.layers 3" --has "adds up to 2 layers" \
  --has "must add up to model.layers (3)" -- \
  "$LSTMD" train "${GOOD[@]}" --set model.layers=3 --set model.stages=2 --set model.stage_layers=1,1
check "train: model.dropout=1.5" --has "model.dropout" -- \
  "$LSTMD" train "${GOOD[@]}" --set model.dropout=1.5
check "train: train.steps=-1" --has "train.steps" -- \
  "$LSTMD" train "${GOOD[@]}" --set train.steps=-1

printf '[data]\npath = %s\n[optim]\nlr = fast\n' "$TMP/good-text" >"$TMP/nonnum.ini"
check "train: non-numeric value in config file" --file "$TMP/nonnum.ini" --has "optim.lr" \
  --has "nonnum.ini:4" -- \
  "$LSTMD" train --config "$TMP/nonnum.ini" --set train.run_dir="$TMP/run-cfg"
check "train: non-numeric value in --set" --has "model.hidden" --has "abc" -- \
  "$LSTMD" train "${GOOD[@]}" --set model.hidden=abc
check "train: integer key given a fraction" --has "data.seq_len" -- \
  "$LSTMD" train "${GOOD[@]}" --set data.seq_len=12.5
check "train: integer key overflowing" --has "train.steps" -- \
  "$LSTMD" train "${GOOD[@]}" --set train.steps=99999999999999999999999
check "train: NaN learning rate" --has "optim.lr" -- \
  "$LSTMD" train "${GOOD[@]}" --set optim.lr=nan
check "train: negative seed" --has "train.seed" -- \
  "$LSTMD" train "${GOOD[@]}" --set train.seed=-3
check "train: bad enum value" --has "data.order" -- \
  "$LSTMD" train "${GOOD[@]}" --set data.order=random

printf 'this is not an ini file\n' >"$TMP/garbage.ini"
check "train: config file with a syntax error" --file "$TMP/garbage.ini" \
  --has "garbage.ini:1: syntax error (expected [section], key = value" -- \
  "$LSTMD" train --config "$TMP/garbage.ini"
printf 'hidden = 8\n[data]\nseq_len = 4\n' >"$TMP/nosection.ini"
check "train: a key before any [section]" --file "$TMP/nosection.ini" \
  --has "nosection.ini:1: 'hidden' comes before any [section] header (under [model] it would be a key)" -- \
  "$LSTMD" train --config "$TMP/nosection.ini"
# inih's line buffer (200 bytes): a longer line is refused as itself, not cut and misread
printf '[data]\nseq_len = 4\npath = /%0230d\n[train]\nsteps = 1\n' 0 >"$TMP/longline.ini"
check "train: a config line longer than inih's buffer" --file "$TMP/longline.ini" \
  --has "longline.ini:3: the line is 238 characters long, and config files take lines of at most 199" -- \
  "$LSTMD" train --config "$TMP/longline.ini"
printf '[data]\nseq_len = 4%188s\nbogus = 1\n' '' >"$TMP/fullline.ini" # line 2: 199 characters
check "train: a config line of 199 characters is read" --file "$TMP/fullline.ini" \
  --has "fullline.ini:3: unknown config key 'data.bogus'" -- "$LSTMD" train --config "$TMP/fullline.ini"
printf '[data]\r\nseq_len = 4%188s\r\nbogus = 1\r\n' '' >"$TMP/crlfline.ini" # 199 + '\r'
check "train: a 199-character line with a Windows line end is read" --file "$TMP/crlfline.ini" \
  --has "crlfline.ini:3: unknown config key 'data.bogus'" -- "$LSTMD" train --config "$TMP/crlfline.ini"
printf '[data]\nseq_len = 4\000%0230d\n' 0 >"$TMP/nulline.ini"
check "train: a config line with a NUL byte" --file "$TMP/nulline.ini" \
  --has "nulline.ini:2: the line holds a NUL byte" -- "$LSTMD" train --config "$TMP/nulline.ini"
check "train: nonexistent config file" --file "$TMP/no-such.ini" \
  --has "no-such.ini: cannot read config file: No such file or directory" -- \
  "$LSTMD" train --config "$TMP/no-such.ini"
mkdir -p "$TMP/cfgdir.ini"
check "train: a directory as config file" --file "$TMP/cfgdir.ini" \
  --has "cfgdir.ini: cannot read config file: Is a directory" -- \
  "$LSTMD" train --config "$TMP/cfgdir.ini"
check "train: missing distill.teacher" --has "distill.teacher: $TMP/no-such.safetensors" \
  --no-ckpt "$TMP/run-cfg" -- \
  "$LSTMD" train "${GOOD[@]}" "${TINY[@]}" --set distill.teacher="$TMP/no-such.safetensors"
head -c 20000 "$DATA/fortunes.txt" > "$TMP/noval.txt"
setup "$LSTMD" prepare text --input "$TMP/noval.txt" --out "$TMP/noval" --val-fraction 0
for key in train.early_stop_patience=2 optim.schedule=plateau; do
  check "train: $key with no validation windows" --has "${key%%=*}: needs evaluations" \
    --has "too short to evaluate" --no-ckpt "$TMP/run-cfg" -- \
    "$LSTMD" train "${TINY[@]}" --set data.path="$TMP/noval" --set train.run_dir="$TMP/run-cfg" --set "$key" \
    --set train.eval_every=1
done
check "train: no data.path" --has "data.path" -- \
  "$LSTMD" train --set train.run_dir="$TMP/run-cfg"
check "train: data.path does not exist" --file "$TMP/no-such-dir" --no-ckpt "$TMP/run-cfg" -- \
  "$LSTMD" train --set data.path="$TMP/no-such-dir" --set train.run_dir="$TMP/run-cfg" "${TINY[@]}"

# ---------------------------------------------------------------- bad checkpoints
size=$(stat -c %s "$CKPT")
hlen=$(st_hlen "$CKPT")
for cut in 0 5 100 $((8 + hlen / 2)) $((8 + hlen + 1000)) $((size / 2)) $((size - 1)); do
  head -c "$cut" "$CKPT" >"$TMP/trunc-$cut.safetensors"
  check "eval: checkpoint truncated to $cut of $size bytes" --file "$TMP/trunc-$cut.safetensors" -- \
    "$LSTMD" eval --checkpoint "$TMP/trunc-$cut.safetensors" --data "$TMP/good-text"
  check "sample: checkpoint truncated to $cut of $size bytes" --file "$TMP/trunc-$cut.safetensors" -- \
    "$LSTMD" sample --checkpoint "$TMP/trunc-$cut.safetensors" --length 5
done
check "train --resume: truncated checkpoint" --file "$TMP/trunc-$((size / 2)).safetensors" -- \
  "$LSTMD" train --set data.path="$TMP/good-text" --set train.run_dir="$TMP/run-resume" "${TINY[@]}" \
  --set train.steps=4 --resume "$TMP/trunc-$((size / 2)).safetensors"

# non-finite numbers: lstmd never saves them (a non-finite step stops first), so a corrupt file
st_poke "$CKPT" "$TMP/nan-weight.safetensors" lstm.weight_hh_l1 nan
check "eval: NaN in lstm.weight_hh_l1" --file "$TMP/nan-weight.safetensors" \
  --has "lstm.weight_hh_l1' holds a non-finite value" -- \
  "$LSTMD" eval --checkpoint "$TMP/nan-weight.safetensors" --data "$TMP/good-text"
st_poke "$CKPT" "$TMP/inf-moment.safetensors" optim.exp_avg_sq inf
check "train --resume: Inf in optim.exp_avg_sq" --file "$TMP/inf-moment.safetensors" \
  --has "optim.exp_avg_sq' holds a non-finite value" --no-ckpt "$TMP/run-inf" -- \
  "$LSTMD" train --set data.path="$TMP/good-text" --set train.run_dir="$TMP/run-inf" "${TINY[@]}" \
  --set train.steps=4 --resume "$TMP/inf-moment.safetensors"

# a data cursor beyond the dataset's windows (a damaged or hand-edited checkpoint)
st_edit "$CKPT" "$TMP/cursor.safetensors" '"train.position":"' '"train.position":"99999999'
check "train --resume: data cursor beyond the dataset" --file "$TMP/cursor.safetensors" \
  --has "data cursor" --no-ckpt "$TMP/run-cursor" -- \
  "$LSTMD" train --set data.path="$TMP/good-text" --set train.run_dir="$TMP/run-cursor" "${TINY[@]}" \
  --set train.steps=4 --resume "$TMP/cursor.safetensors"

for foreign in "$DATA/fortunes.txt" "$TMP/good-text/train.bin" "$DATA/seattle-temps.csv"; do
  check "eval: not a checkpoint ($(basename "$foreign"))" --file "$foreign" -- \
    "$LSTMD" eval --checkpoint "$foreign" --data "$TMP/good-text"
  check "sample: not a checkpoint ($(basename "$foreign"))" --file "$foreign" -- \
    "$LSTMD" sample --checkpoint "$foreign" --length 5
done
check "sample: checkpoint is a directory" --file "$TMP/run-text" -- \
  "$LSTMD" sample --checkpoint "$TMP/run-text" --length 5
check "sample: nonexistent checkpoint" --file "$TMP/no-such.safetensors" -- \
  "$LSTMD" sample --checkpoint "$TMP/no-such.safetensors" --length 5

# Corrupted headers: the JSON itself, the length prefix, tensor entries, lstmd's metadata.
# Each entry: name | text to replace | replacement.
corruptions=(
  "JSON syntax|{\"|x\""
  "tensor shape disagrees with data_offsets|\"shape\":[|\"shape\":[3,"
  "tensor dtype F16|\"dtype\":\"F32\"|\"dtype\":\"F16\""
  "tensor dtype unknown|\"dtype\":\"F32\"|\"dtype\":\"Q99\""
  "data_offsets shifted|\"data_offsets\":[0,|\"data_offsets\":[4,"
  "format tag|\"format\":\"lstmd-checkpoint-1\"|\"format\":\"lstmd-checkpoint-7\""
  "model.kind unknown|\"model.kind\":\"text\"|\"model.kind\":\"txt\""
  "model.hidden disagrees with the tensors|\"model.hidden\":\"16\"|\"model.hidden\":\"17\""
  "model.hidden huge|\"model.hidden\":\"16\"|\"model.hidden\":\"60000\""
  "model.hidden negative|\"model.hidden\":\"16\"|\"model.hidden\":\"-16\""
  "model.layers=0|\"model.layers\":\"2\"|\"model.layers\":\"0\""
  "model.layers=3 (tensors missing)|\"model.layers\":\"2\"|\"model.layers\":\"3\""
  "model.vocab disagrees with vocab list|\"model.vocab\":\"|\"model.vocab\":\"1"
  "vocab list not ascending|\"vocab\":\"[|\"vocab\":\"[255,"
  "vocab list malformed|\"vocab\":\"[|\"vocab\":\"[x"
  "data.seq_len=0|\"data.seq_len\":\"16\"|\"data.seq_len\":\"0\""
)
i=0
for c in "${corruptions[@]}"; do
  IFS='|' read -r what old new <<<"$c"
  i=$((i + 1))
  f=$TMP/hdr-$i.safetensors
  st_edit "$CKPT" "$f" "$old" "$new"
  check "eval: corrupted header: $what" --file "$f" -- \
    "$LSTMD" eval --checkpoint "$f" --data "$TMP/good-text"
  check "sample: corrupted header: $what" --file "$f" -- \
    "$LSTMD" sample --checkpoint "$f" --length 5
done
st_set_hlen "$CKPT" "$TMP/hlen-big.safetensors" $((1 << 62))
check "sample: header length prefix 2^62" --file "$TMP/hlen-big.safetensors" -- \
  "$LSTMD" sample --checkpoint "$TMP/hlen-big.safetensors" --length 5
st_set_hlen "$CKPT" "$TMP/hlen-small.safetensors" $((hlen - 8))
check "eval: header length prefix 8 bytes short" --file "$TMP/hlen-small.safetensors" -- \
  "$LSTMD" eval --checkpoint "$TMP/hlen-small.safetensors" --data "$TMP/good-text"
st_set_hlen "$CKPT" "$TMP/hlen-zero.safetensors" 0
check "sample: header length prefix 0" --file "$TMP/hlen-zero.safetensors" -- \
  "$LSTMD" sample --checkpoint "$TMP/hlen-zero.safetensors" --length 5

# ---------------------------------------------------------------- checkpoint vs data / command
check "sample: prime byte 0x01 outside the vocabulary" --file "$CKPT" --has "0x01" -- \
  "$LSTMD" sample --checkpoint "$CKPT" --prime $'The\x01' --length 5
check "sample: prime byte 0xff outside the vocabulary" --file "$CKPT" --has "0xff" -- \
  "$LSTMD" sample --checkpoint "$CKPT" --prime $'\xff' --length 5
check "sample: series checkpoint" --file "$SCKPT" -- \
  "$LSTMD" sample --checkpoint "$SCKPT" --length 5
# pipe-predict's options are checked before any GPU is looked for
check "pipe-predict: more stages than layers" --has "--stages 9" -- \
  "$LSTMD" pipe-predict --layers 8 --stages 2,9
# a run dir given as the checkpoint: the file to name (it said only "not a regular file")
check "eval: a run dir as the checkpoint" \
  --has "$TMP/run-text/: a directory, not a checkpoint file: name one in it (a run dir's newest is $TMP/run-text/latest.safetensors)" -- \
  "$LSTMD" eval --checkpoint "$TMP/run-text/" --data "$TMP/good-text"
# a FIFO where a file belongs: refused at once, not a wait for a writer that never comes
mkfifo "$TMP/fifo.safetensors"
check "eval: a FIFO as the checkpoint" --has "fifo.safetensors: not a regular file" -- \
  "$LSTMD" eval --checkpoint "$TMP/fifo.safetensors" --data "$TMP/good-text"
mkdir -p "$TMP/fifo-data" && cp "$TMP/good-text"/* "$TMP/fifo-data/" && rm "$TMP/fifo-data/val.bin" &&
  mkfifo "$TMP/fifo-data/val.bin"
check "eval: a FIFO as val.bin" --has "fifo-data/val.bin: not a regular file" -- \
  "$LSTMD" eval --checkpoint "$CKPT" --data "$TMP/fifo-data"
check "train --resume: a FIFO as the checkpoint" --has "fifo.safetensors: not a regular file" -- \
  "$LSTMD" train --set data.path="$TMP/good-text" --set train.run_dir="$TMP/run-cfg" "${TINY[@]}" \
  --resume "$TMP/fifo.safetensors"
# a truncated latest.safetensors (and its step file, the same file): the message names the newest
# whole checkpoint beside it to go on from
setup "$LSTMD" train --set data.path="$TMP/good-text" --set train.run_dir="$TMP/run-trunc" "${TINY[@]}" \
  --set train.steps=4 --set train.checkpoint_every=2
truncate -s 100 "$TMP/run-trunc/latest.safetensors"
check "train --resume: latest.safetensors truncated" --has "not a safetensors file or truncated" \
  --has "the newest other checkpoint beside it is $TMP/run-trunc/step-2.safetensors: to go on from there, --resume $TMP/run-trunc/step-2.safetensors" -- \
  "$LSTMD" train --set data.path="$TMP/good-text" --set train.run_dir="$TMP/run-trunc" "${TINY[@]}" \
  --set train.steps=6 --resume
mkdir -p "$TMP/run-loop" && ln -s loop "$TMP/run-loop/latest.safetensors" && ln -s latest.safetensors "$TMP/run-loop/loop"
check "train --resume: latest.safetensors a symlink loop (not a fresh start)" \
  --has "run-loop/latest.safetensors: cannot open checkpoint: Too many levels of symbolic links" -- \
  "$LSTMD" train --set data.path="$TMP/good-text" --set train.run_dir="$TMP/run-loop" "${TINY[@]}" --resume
check "selftest: --out a folder that does not exist" --has "--out $TMP/no-such-out: no such folder" -- \
  "$LSTMD" selftest --only cpu --out "$TMP/no-such-out"
# a second report the same day goes beside the first, not over it
mkdir -p "$TMP/st-out"
for i in 1 2; do "$LSTMD" selftest --only kernels --out "$TMP/st-out" >/dev/null 2>&1; done
cases=$((cases + 1))
st=$(cd "$TMP/st-out" && ls)
[[ $(wc -l <<<"$st") == 2 && $st == *"-2.txt"* ]] || fail "selftest --out twice the same day" "left: $st"
check "pipe-predict: --stages 0" --has "--stages '0' must be an integer in [1, 16]" -- \
  "$LSTMD" pipe-predict --stages 0
check "pipe-predict: 9 stage counts" --has "at most 8 stage counts" -- \
  "$LSTMD" pipe-predict --stages 1,2,3,4,5,6,7,8,2
check "pipe-predict: seq-len not a multiple of chunks" --has "--chunks 16" -- \
  "$LSTMD" pipe-predict --seq-len 100 --chunks 16
check "pipe-predict: unknown precision" --has "--precision fp8" -- \
  "$LSTMD" pipe-predict --precision fp8
cases=$((cases + 1))
out=$("$LSTMD" pipe-predict --help 2>&1) && grep -q "usage: lstmd pipe-predict" <<<"$out" ||
  fail "pipe-predict --help" "not exit 0 with the usage: $out"
check "eval: text checkpoint on series data" --file "$TMP/good-series" -- \
  "$LSTMD" eval --checkpoint "$CKPT" --data "$TMP/good-series"
# --data naming the split file instead of its folder: the message says what is wanted
check "eval: --data is val.bin, not its folder" --file "$TMP/good-series/val.bin" \
  --has "name the folder \`lstmd prepare --out\` wrote" -- \
  "$LSTMD" eval --checkpoint "$SCKPT" --data "$TMP/good-series/val.bin"

# ---------------------------------------------------------------- predict on bad CSVs
check "predict: text checkpoint" --file "$CKPT" --clean-dir "$TMP/p1" -- \
  "$LSTMD" predict --checkpoint "$CKPT" --input "$DATA/seattle-temps.csv" --out "$TMP/p1/out.csv"
mkdir "$TMP/p2"
check "predict: input without the target column" --file "$TMP/ragged2.csv" --clean-dir "$TMP/p2" -- \
  "$LSTMD" predict --checkpoint "$SCKPT" --input "$TMP/ragged2.csv" --out "$TMP/p2/out.csv"
printf 'date,temp\nx,1\ny,2\nz,warm\n' >"$TMP/pred-bad.csv"
mkdir "$TMP/p3"
check "predict: non-numeric value" --file "$TMP/pred-bad.csv" --has "pred-bad.csv:4" \
  --clean-dir "$TMP/p3" -- \
  "$LSTMD" predict --checkpoint "$SCKPT" --input "$TMP/pred-bad.csv" --out "$TMP/p3/out.csv"
mkdir "$TMP/p4"
check "predict: missing input" --file "$TMP/no-such.csv" --clean-dir "$TMP/p4" -- \
  "$LSTMD" predict --checkpoint "$SCKPT" --input "$TMP/no-such.csv" --out "$TMP/p4/out.csv"
# --out naming the input: refused before anything is read or written, however it is spelled
cp "$DATA/seattle-temps.csv" "$TMP/same.csv"
ln -s same.csv "$TMP/same-link.csv"
for o in "$TMP/same.csv" "$TMP/./same.csv" "$TMP/same-link.csv"; do
  check "predict: --out $(basename "$o") is the --input" --file "$TMP/same.csv" --has "--out '$o'" -- \
    "$LSTMD" predict --checkpoint "$SCKPT" --input "$TMP/same.csv" --out "$o"
done
cases=$((cases + 1))
cmp -s "$DATA/seattle-temps.csv" "$TMP/same.csv" && [[ -L $TMP/same-link.csv ]] ||
  fail "predict: --out the --input" "the input file was changed"
# ... and quantize/export onnx with --out naming the --checkpoint
cp "$CKPT" "$TMP/same.safetensors"
for cmd in quantize "export onnx"; do
  # shellcheck disable=SC2086
  check "$cmd: --out is the --checkpoint" --file "$TMP/same.safetensors" \
    --has "--out '$TMP/./same.safetensors' is the --checkpoint file" -- \
    "$LSTMD" $cmd --checkpoint "$TMP/same.safetensors" --out "$TMP/./same.safetensors"
done
cases=$((cases + 1))
cmp -s "$CKPT" "$TMP/same.safetensors" || fail "quantize/export: --out the --checkpoint" "the checkpoint was changed"
# ... and predict with --out naming the --checkpoint (a swapped argument wrote the CSV over it)
cp "$SCKPT" "$TMP/same-series.safetensors"
check "predict: --out is the --checkpoint" --file "$TMP/same-series.safetensors" \
  --has "--out '$TMP/./same-series.safetensors' is the --checkpoint file" -- \
  "$LSTMD" predict --checkpoint "$TMP/same-series.safetensors" --input "$DATA/seattle-temps.csv" \
  --out "$TMP/./same-series.safetensors"
cases=$((cases + 1))
cmp -s "$SCKPT" "$TMP/same-series.safetensors" || fail "predict: --out the --checkpoint" "the checkpoint was changed"
# --out -: stdout for predict's CSV (the same bytes as its --out FILE); refused with exit 2 where
# the output is a folder or binary, which made a folder or file called '-' in the working folder
# ($TMP here)
printf 'a\thello\nb\tworld\n' >"$TMP/two.tsv"
check "prepare text: --out -" --has "prepare text: --out -: '-' means stdout only for text" -- \
  "$LSTMD" prepare text --input "$DATA/fortunes.txt" --out -
check "prepare series: --out -" --has "prepare series writes a dataset folder" -- \
  "$LSTMD" prepare series --input "$DATA/seattle-temps.csv" --target temp --out -
check "prepare classify: --out -" --has "prepare classify writes a dataset folder" -- \
  "$LSTMD" prepare classify --input "$TMP/two.tsv" --val-fraction 0 --out -
check "quantize: --out -" --has "quantize writes an int8 model (binary)" -- \
  "$LSTMD" quantize --checkpoint "$CKPT" --out -
check "export onnx: --out -" --has "export onnx writes an ONNX model (binary protobuf)" -- \
  "$LSTMD" export onnx --checkpoint "$CKPT" --out -
cases=$((cases + 1))
[[ ! -e $TMP/- ]] || fail "--out - of a binary output" "made '$TMP/-': $(ls -ld "$TMP/-")"
cases=$((cases + 1))
"$LSTMD" predict --checkpoint "$SCKPT" --input "$DATA/seattle-temps.csv" --out "$TMP/pred-file.csv" \
  2>"$TMP/pred.err" && "$LSTMD" predict --checkpoint "$SCKPT" --input "$DATA/seattle-temps.csv" \
  --out - >"$TMP/pred-stdout.csv" 2>>"$TMP/pred.err"; rc=$?
if ((rc != 0)) || [[ -e $TMP/- ]] || ! cmp -s "$TMP/pred-file.csv" "$TMP/pred-stdout.csv" ||
   [[ ! -s $TMP/pred-file.csv ]]; then
  fail "predict --out -" "exit $rc, file '-' $([[ -e $TMP/- ]] && echo made || echo not made), \
stdout $(wc -c <"$TMP/pred-stdout.csv") bytes vs --out FILE $(wc -c <"$TMP/pred-file.csv"): $(head -2 "$TMP/pred.err")"
else
  echo "ok   [predict --out -] the CSV on stdout, $(wc -l <"$TMP/pred-stdout.csv") lines = --out FILE's"
fi
# --config given twice: the second file silently replaced the first (user trial: `train --config
# base.ini --config distill.ini` trained without base.ini's data.path and said only that it was
# missing). Other options given twice: the last wins (test_classify_train overrides --device).
printf '[data]\npath = %s\n' "$TMP/good-text" >"$TMP/a.ini"
printf '[distill]\nalpha = 0.3\n' >"$TMP/b.ini"
check "train: --config twice" --has "--config given twice ('$TMP/a.ini', then '$TMP/b.ini')" -- \
  "$LSTMD" train --config "$TMP/a.ini" --config "$TMP/b.ini"

# ---------------------------------------------------------------- usage
# Every subcommand's --help and -h: its usage on stdout, exit 0 (the subcommands are read from
# `lstmd --help`, so a new one is covered).
subcommands=$("$LSTMD" --help | sed -n 's/^  lstmd \([a-z][a-z-]*\).*/\1/p' | sort -u)
[[ $subcommands == *train* && $subcommands == *selftest* ]] ||
  fail "lstmd --help" "no subcommands found in: $("$LSTMD" --help | head -5)"
for c in $subcommands "prepare text" "prepare series" "prepare classify" "export onnx"; do
  for h in --help -h; do
    cases=$((cases + 1))
    out=$("$LSTMD" $c $h 2>"$TMP/help.err"); rc=$?
    if ((rc != 0)) || [[ $out != "usage: "*"lstmd $c"* || -s $TMP/help.err ]]; then
      fail "lstmd $c $h" "exit $rc, stdout '$(head -1 <<<"$out")', stderr '$(head -1 "$TMP/help.err")'"
    fi
  done
done
# README's "Command line" block is the usage lines of `lstmd --help`.
cases=$((cases + 1))
"$LSTMD" --help | sed -n '/^usage:$/,/^$/p' | sed '1d;$d;s/^  //' >"$TMP/usage.help"
awk '/^## Command line/ {s = 1} s == 1 && /^```/ {if (in_block) exit; in_block = 1; next}
     in_block' "$SRC/README.md" >"$TMP/usage.readme"
if [[ ! -s $TMP/usage.help ]] || ! diff -u "$TMP/usage.readme" "$TMP/usage.help" >"$TMP/usage.diff"; then
  fail "README vs lstmd --help" "the usage lines differ (- README.md, + lstmd --help):"
  sed 's/^/       /' "$TMP/usage.diff" | head -20
fi

echo
echo "$cases cases, $failures failure(s)"
((failures == 0)) || exit 1
exit 0
