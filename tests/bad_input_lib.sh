# bad_input_lib.sh — sourced by test_bad_input.sh and test_bad_checkpoints.sh: the arguments
# (LSTMD SOURCE_DIR), a temp dir, check() (one bad-input case and what it must do: see the
# scripts' header), the byte-surgery helpers, the good inputs the cases corrupt (a text and a
# series dataset, a tiny checkpoint of each, shown to work first), and finish (the summary).

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

# finish: the summary line, and the exit status
finish() {
  echo
  echo "$cases cases, $failures failure(s)"
  ((failures == 0)) || exit 1
  exit 0
}
