#!/usr/bin/env bash
# test_bad_input.sh — lstmd on bad data and settings: missing/empty/malformed data files, CSV
# dialects (byte order mark, quotes, CRLF, spaced column names) that must give the plain file's
# dataset, corrupt prepared datasets, bad configs, and every subcommand's --help.
# (Checkpoints, and the commands that read them: test_bad_checkpoints.sh.)
# Every case must: exit with exactly 2 (no crash, no 1; a few cases say otherwise: an unwritable
# output exits 1, a warning 0), print nothing on stdout, print a message
# on stderr that names the offending file (and CSV line / config key where given), and, for
# prepare, leave nothing half-written in the output directory. "The message" is lstmd's own lines
# ("lstmd: ...") without the effective-config dump that `train` prints first: the dump echoes
# data.path and the other settings, so a match there would pass with no error message at all.
#
# usage: test_bad_input.sh LSTMD SOURCE_DIR        (ctest passes both)
# The arguments, check() and the good inputs are bad_input_lib.sh's.
source "$(dirname "${BASH_SOURCE[0]}")/bad_input_lib.sh"

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

# A file rewritten between prepare text's two passes (the vocabulary, then the ids) with its size
# unchanged: the new bytes became id 0 of the old vocabulary, exit 0 ('zzzz' in a file of 'a's
# read as 'aaaa'), and a refusal left the --out folder it had made. strace holds the second
# pass's rewind for 3 s while the file changes.
if strace -f -o /dev/null true 2>/dev/null; then
  head -c 100000 /dev/zero | tr '\0' a >"$TMP/race.txt"
  (sleep 1; printf zzzz | dd of="$TMP/race.txt" bs=1 seek=99000 conv=notrunc status=none) &
  check "prepare text: the file rewritten between the two passes" --file "$TMP/race.txt" \
    --has "changed while reading" --clean-dir "$TMP/o-race" -- \
    strace -f -o /dev/null -e trace=lseek -e inject=lseek:delay_exit=3000000 \
    "$LSTMD" prepare text --input "$TMP/race.txt" --out "$TMP/o-race"
  wait
  [[ ! -e $TMP/o-race ]] || fail "prepare text: rewritten between passes" "left the --out it made: $TMP/o-race"
else
  echo "skip [prepare text: the file rewritten between the two passes]: strace cannot trace here"
fi
# Past a file size limit (ulimit -f): SIGXFSZ ended lstmd mid-write (exit 153, no message, the
# temp files left); now the write fails, is named, exit 1, nothing left
check "prepare text: past a file size limit (ulimit -f 50)" --has "File too large" --exit 1 \
  --clean-dir "$TMP/o-fsize" -- \
  bash -c 'ulimit -f 50 && exec "$@"' lstmd "$LSTMD" prepare text --input "$DATA/fortunes.txt" \
  --out "$TMP/o-fsize"
[[ ! -e $TMP/o-fsize ]] || fail "prepare text: past a file size limit" "left the --out it made: $(ls -A "$TMP/o-fsize")"

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

# A NUL byte inside a field (libcsv counts it; a C string stops there: "2\x0099" was read as 2),
# in a value and in a header name
printf 'date,load\nd1,1\nd2,2\x0099\nd3,3\nd4,4\n' >"$TMP/nul.csv"
check "prepare series: a NUL byte inside a value" --file "$TMP/nul.csv" --has "nul.csv:3" \
  --has "field 2 holds a NUL byte" --clean-dir "$TMP/o-nul" -- \
  "$LSTMD" prepare series --input "$TMP/nul.csv" --target load --out "$TMP/o-nul"
printf 'date,lo\x00zz\nd1,1\nd2,2\nd3,3\n' >"$TMP/nulhead.csv"
check "prepare series: a NUL byte inside a header name" --file "$TMP/nulhead.csv" \
  --has "nulhead.csv:1" --has "NUL byte" --clean-dir "$TMP/o-nulhead" -- \
  "$LSTMD" prepare series --input "$TMP/nulhead.csv" --target lo --out "$TMP/o-nulhead"
# a finite value past lstmd's 3e38: the message says the range (it said "not a finite number")
printf 'date,load\nd1,1\nd2,3.1e38\nd3,3\nd4,4\n' >"$TMP/big.csv"
check "prepare series: 3.1e38, past lstmd's range" --file "$TMP/big.csv" --has "big.csv:3" \
  --has "at most 3e38 in magnitude" --clean-dir "$TMP/o-big" -- \
  "$LSTMD" prepare series --input "$TMP/big.csv" --target load --out "$TMP/o-big"
# a folder as --input (it said "read failed")
check "prepare series: --input a folder" --has "$TMP/good-series: is a directory" \
  --clean-dir "$TMP/o-dirin" -- \
  "$LSTMD" prepare series --input "$TMP/good-series" --target load --out "$TMP/o-dirin"
# A column name that is not UTF-8: checkpoints keep the names as JSON text, which dropped it, and
# no command could read the run's checkpoints; refused at prepare (labels too: test below).
printf 'date,load,t\xe9mp\nd1,1,2\nd2,2,3\nd3,3,4\n' >"$TMP/latin1.csv"
check "prepare series: a column name that is not UTF-8" --has "--features: the column name 't\\xe9mp' is not UTF-8" \
  --clean-dir "$TMP/o-latin1" -- \
  "$LSTMD" prepare series --input "$TMP/latin1.csv" --target load --features $'t\xe9mp' \
  --out "$TMP/o-latin1"
check "prepare series: a --target that is not UTF-8" --has "--target: the column name 't\\xe9mp' is not UTF-8" \
  --clean-dir "$TMP/o-latin1t" -- \
  "$LSTMD" prepare series --input "$TMP/latin1.csv" --target $'t\xe9mp' --out "$TMP/o-latin1t"
check "prepare classify: --input a folder" --has "$TMP/good-text: read failed: Is a directory" \
  --clean-dir "$TMP/o-dirtsv" -- \
  "$LSTMD" prepare classify --input "$TMP/good-text" --out "$TMP/o-dirtsv"
printf 'caf\xe9\tsome text\nbar\tother text\n' >"$TMP/latin1.tsv"
check "prepare classify: a label that is not UTF-8" --file "$TMP/latin1.tsv" --has "latin1.tsv:1" \
  --has "not UTF-8" --clean-dir "$TMP/o-latin1c" -- \
  "$LSTMD" prepare classify --input "$TMP/latin1.tsv" --out "$TMP/o-latin1c"

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

finish
