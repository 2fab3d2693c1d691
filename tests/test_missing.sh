#!/usr/bin/env bash
# test_missing.sh — gaps in a series CSV (`--missing` of prepare series and predict):
#  1. the default refuses an empty or NA field naming FILE:LINE and the column, with the
#     --missing hint, and leaves nothing behind; a bad --missing value exits 2 naming it;
#  2. --missing previous and linear: both splits read back hold exactly the values filled by
#     hand (every token: empty, NA, N/A, NaN, nan, null in any case; runs at both ends), stderr
#     one line with the count per column, the fill record ("FILL", method, count) after the
#     statistics in both headers; a file without gaps: no line, and without --missing no record;
#     blank lines are skipped with one warning naming the first (none for trailing ones);
#  3. a column that is all gaps exits 2 naming it; a token that is neither a number nor a gap
#     exits 2 naming its line and column, under every method, and so does a hexadecimal (0x10,
#     which strtod reads as 16, with a hint) or infinite value;
#  4. predict: the checkpoint of a run on data prepared with --missing linear records it
#     (series.missing) and so does its int8 model; predict of a CSV with gaps fills it that way
#     by default (output = predict of the same CSV filled by hand), --missing previous overrides
#     it, --missing error refuses with the hint; a model of data prepared without --missing
#     refuses gaps as before.
set -u
LSTMD=$(realpath "${1:?usage: test_missing.sh LSTMD SOURCE_DIR}")
SRC=$(realpath "${2:?}")
export CUDA_VISIBLE_DEVICES=
PY=/usr/bin/python3
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fails=0
ok() { echo "ok    $*"; }
bad() { echo "FAIL  $*"; fails=$((fails + 1)); }

# read_rows DIR: every row of train.bin then val.bin, one line each, values as Python prints floats
read_rows() {
$PY - "$1" <<'PYEOF'
import struct, sys
for split in ("train", "val"):
    raw = open(f"{sys.argv[1]}/{split}.bin", "rb").read()
    hb, count, width = struct.unpack_from("<I", raw, 20)[0], *struct.unpack_from("<QI", raw, 24)
    for r in range(count):
        print(" ".join(repr(v) for v in struct.unpack_from(f"<{width}f", raw, hb + 4 * width * r)))
PYEOF
}
# fill_record FILE: "METHOD COUNT" of its header's fill record, or "none" (tests/dataset_crc.py)
fill_record() {
  PYTHONPATH=$SRC/tests $PY -c 'import sys, dataset_crc
print(dataset_crc.fill_record(open(sys.argv[1], "rb").read()))' "$1"
}
prep() { "$LSTMD" prepare series --target y --features x --horizon 1 --val-fraction 0.25 "$@"; }

# Eight rows, gaps of every token in both columns (the last row's x an empty last field).
cat >"$TMP/gaps.csv" <<'EOF'
t,y,x
0,,1
1,2,NA
2,N/A,na
3,NaN,7
4,8, null
5,nan,11
6,12,13
7,NULL,
EOF

# 1. the default refuses, pointing at the option
prep --input "$TMP/gaps.csv" --out "$TMP/d-default" 2>"$TMP/err"; rc=$?
[[ $rc == 2 && ! -e $TMP/d-default ]] && grep -q "gaps.csv:2: column 'y': a missing value (an empty field); --missing previous" "$TMP/err" \
  && ok "default: the gap refused, exit 2: $(head -1 "$TMP/err")" || bad "default on gaps: exit $rc, $(cat "$TMP/err")"
printf 't,y,x\n0,1,2\n1,2,3\n2,NA,4\n3,4,5\n4,5,6\n' >"$TMP/na.csv"
prep --input "$TMP/na.csv" --out "$TMP/d-na" --missing error 2>"$TMP/err"; rc=$?
[[ $rc == 2 && ! -e $TMP/d-na ]] && grep -q "na.csv:4: column 'y': a missing value ('NA'); --missing previous (the last value before it) or --missing linear (interpolated) fills such gaps" "$TMP/err" \
  && ok "--missing error: NA refused, exit 2: $(head -1 "$TMP/err")" || bad "--missing error on NA: exit $rc, $(cat "$TMP/err")"
prep --input "$TMP/na.csv" --out "$TMP/d-bad" --missing zero 2>"$TMP/err"; rc=$?
[[ $rc == 2 && ! -e $TMP/d-bad ]] && grep -q -- "--missing 'zero' is not one of error previous linear" "$TMP/err" \
  && ok "--missing zero refused: $(head -1 "$TMP/err")" || bad "--missing zero: exit $rc, $(cat "$TMP/err")"

# 2. the fills, exactly: y has gaps on rows 0 2 3 5 7, x on rows 1 2 4 7
check_fill() { # METHOD EXPECTED_ROWS (y x per row, ';' between rows)
  local m=$1 want=$2 got line
  prep --input "$TMP/gaps.csv" --out "$TMP/d-$m" --missing "$m" 2>"$TMP/err-$m" \
    || { bad "--missing $m: $(cat "$TMP/err-$m")"; return; }
  got=$(read_rows "$TMP/d-$m" | tr '\n' ';' | sed 's/;$//')
  [[ $got == "$want" ]] && ok "--missing $m: train.bin + val.bin rows $got" || bad "--missing $m: rows '$got', want '$want'"
  line=$(grep filled "$TMP/err-$m")
  [[ $(grep -c filled "$TMP/err-$m") == 1 && \
     $line == "lstmd: $TMP/gaps.csv: filled 9 missing values (--missing $m): 'y' 5, 'x' 4" ]] \
    && ok "--missing $m: one line on stderr: $line" || bad "--missing $m: stderr $(cat "$TMP/err-$m")"
  local id=2 rec_t rec_v
  [[ $m == previous ]] && id=1
  rec_t=$(fill_record "$TMP/d-$m/train.bin"); rec_v=$(fill_record "$TMP/d-$m/val.bin")
  [[ $rec_t == "$id 9" && $rec_v == "$id 9" ]] && ok "--missing $m: both headers record method $id, 9 values filled" \
    || bad "--missing $m: fill records '$rec_t' / '$rec_v', want '$id 9'"
}
check_fill previous "2.0 1.0;2.0 1.0;2.0 1.0;2.0 7.0;8.0 7.0;8.0 11.0;12.0 13.0;12.0 13.0"
check_fill linear "2.0 1.0;2.0 3.0;4.0 5.0;6.0 7.0;8.0 9.0;10.0 11.0;12.0 13.0;12.0 13.0"
prep --input "$TMP/na.csv" --out "$TMP/d-plain" 2>/dev/null; sed 's/NA/3/' "$TMP/na.csv" >"$TMP/full.csv"
prep --input "$TMP/full.csv" --out "$TMP/d-full" --missing linear 2>"$TMP/err"
prep --input "$TMP/full.csv" --out "$TMP/d-none" 2>/dev/null
[[ $(fill_record "$TMP/d-full/train.bin") == "2 0" && $(fill_record "$TMP/d-none/val.bin") == none ]] \
  && ! grep -q filled "$TMP/err" && ok "no gaps: no fill line; the method recorded with 0 filled; without --missing no record" \
  || bad "no gaps: records '$(fill_record "$TMP/d-full/train.bin")' / '$(fill_record "$TMP/d-none/val.bin")', stderr $(cat "$TMP/err")"

# blank lines are skipped (as pandas does), with a warning when data follows them: in a
# one-column file they are where values are missing; none for a blank line at the end
printf 'y\n1\n2\n\n4\n5\n\n\n7\n8\n\n' >"$TMP/blank.csv"
"$LSTMD" prepare series --target y --horizon 1 --val-fraction 0.25 --input "$TMP/blank.csv" --out "$TMP/d-blank" 2>"$TMP/err"; rc=$?
[[ $rc == 0 && $(grep -c "blank line" "$TMP/err") == 1 ]] &&
  grep -q "blank.csv: 3 blank lines skipped (the first: line 4), as pandas does; where a value is missing in a one-column file, write NA" "$TMP/err" &&
  grep -q "prepared series .*: 6 rows" "$TMP/err" &&
  ok "blank lines: skipped, one warning naming the first" ||
  bad "blank lines: exit $rc, $(cat "$TMP/err")"

# 3. a column with no value at all; a token that is not a gap
awk -F, 'NR > 1 { $3 = "NA" } { print }' OFS=, "$TMP/gaps.csv" | sed 's/^0,,/0,5,/' >"$TMP/allx.csv"
for m in previous linear; do
  prep --input "$TMP/allx.csv" --out "$TMP/d-allx" --missing "$m" 2>"$TMP/err"; rc=$?
  [[ $rc == 2 && ! -e $TMP/d-allx ]] && grep -q "allx.csv: column 'x' is missing in every one of its 8 rows" "$TMP/err" \
    && ok "--missing $m, x all gaps: exit 2, $(head -1 "$TMP/err")" || bad "--missing $m, x all gaps: exit $rc, $(cat "$TMP/err")"
done
printf 't,y,x\n0,1,2\n1,2,3\n2,3,n.a.\n3,NA,5\n4,5,6\n5,6,7\n' >"$TMP/token.csv" # n.a. is not a gap
for m in error previous linear; do
  prep --input "$TMP/token.csv" --out "$TMP/d-token" --missing "$m" 2>"$TMP/err"; rc=$?
  [[ $rc == 2 && ! -e $TMP/d-token ]] && grep -q "token.csv:4: column 'x': 'n.a.' is not a finite number" "$TMP/err" \
    && ok "--missing $m, a token that is no gap: exit 2, $(head -1 "$TMP/err")" \
    || bad "--missing $m, a token that is no gap: exit $rc, $(cat "$TMP/err")"
done
# hexadecimal (strtod reads 0x10 as 16) and non-finite values are refused, not read
for v in 0x10 ' -0X1p3' inf Infinity; do
  printf 't,y,x\n0,1,2\n1,2,3\n2,3,"%s"\n3,4,5\n4,5,6\n5,6,7\n' "$v" >"$TMP/hex.csv"
  want="hex.csv:4: column 'x': '$v' is not a finite number"
  [[ $v == *[xX]* ]] && want+=" (hexadecimal is not read: write the value in decimal)"
  rm -rf "$TMP/d-hex"
  prep --input "$TMP/hex.csv" --out "$TMP/d-hex" --missing linear 2>"$TMP/err"; rc=$?
  [[ $rc == 2 && ! -e $TMP/d-hex ]] && grep -qF "$want" "$TMP/err" \
    && ok "'$v' refused: $(head -1 "$TMP/err")" || bad "'$v' not refused: exit $rc, $(cat "$TMP/err")"
done

# 4. predict: 60 rows of a wave with gaps; the same rows filled by hand (as each method fills)
$PY - "$TMP" <<'PYEOF'
import math, sys
d = sys.argv[1]
y = [round(10 + 3 * math.sin(i / 4), 3) for i in range(60)]
x = [round(math.cos(i / 5), 3) for i in range(60)]
gy, gx = {0, 7, 8, 9, 30, 59}, {3, 20, 21, 44}
def fill(v, gaps, linear):
    out = list(v)
    known = [i for i in range(len(v)) if i not in gaps]
    for i in sorted(gaps):
        lo = max((k for k in known if k < i), default=None)
        hi = min((k for k in known if k > i), default=None)
        if lo is None: out[i] = v[hi]
        elif hi is None or not linear: out[i] = v[lo]
        else: out[i] = v[lo] + (v[hi] - v[lo]) * ((i - lo) / (hi - lo))
    return out
def write(name, ys, xs):
    with open(f"{d}/{name}", "w") as f:
        f.write("t,y,x\n")
        for i in range(60): f.write(f"{i},{ys[i]},{xs[i]}\n")
write("wave-gaps.csv", ["NA" if i in gy else y[i] for i in range(60)], ["" if i in gx else x[i] for i in range(60)])
write("wave.csv", y, x)
# the fills as lstmd computes them (float32 of the double), printed with 9 digits: read back the same
import struct
f32 = lambda v: struct.unpack("<f", struct.pack("<f", v))[0]
for name, lin in (("wave-linear.csv", True), ("wave-previous.csv", False)):
    write(name, ["%.9g" % f32(v) for v in fill([f32(a) for a in y], gy, lin)],
          ["%.9g" % f32(v) for v in fill([f32(a) for a in x], gx, lin)])
PYEOF
tiny=(--set data.seq_len=8 --set data.batch_size=2 --set train.steps=3 --set train.eval_every=0
      --set train.threads=1 --set model.hidden=4 --set model.layers=1 --set train.log_every=0)
prep --input "$TMP/wave-gaps.csv" --out "$TMP/w-lin" --missing linear 2>/dev/null || bad "prepare the wave, linear"
prep --input "$TMP/wave.csv" --out "$TMP/w-plain" 2>/dev/null || bad "prepare the wave"
"$LSTMD" train --set data.path="$TMP/w-lin" --set train.run_dir="$TMP/r-lin" "${tiny[@]}" >/dev/null 2>"$TMP/err" \
  || bad "train on the linear wave: $(tail -2 "$TMP/err")"
"$LSTMD" train --set data.path="$TMP/w-plain" --set train.run_dir="$TMP/r-plain" "${tiny[@]}" >/dev/null 2>"$TMP/err" \
  || bad "train on the plain wave: $(tail -2 "$TMP/err")"
CK=$TMP/r-lin/step-3.safetensors
"$LSTMD" quantize --checkpoint "$CK" --out "$TMP/lin.int8" >/dev/null 2>&1 || bad "quantize"
meta() { $PY "$SRC/tests/ckpt_meta.py" "$@" 2>/dev/null; }
[[ $(meta "$CK" series.missing) == linear && $(meta "$TMP/lin.int8" series.missing) == linear && \
   -z $(meta "$TMP/r-plain/step-3.safetensors" series.missing) ]] \
  && ok "series.missing = linear in the checkpoint and its int8 model; absent for data prepared without --missing" \
  || bad "series.missing: '$(meta "$CK" series.missing)', int8 '$(meta "$TMP/lin.int8" series.missing)'"
for model in "$CK" "$TMP/lin.int8"; do
  "$LSTMD" predict --checkpoint "$model" --input "$TMP/wave-gaps.csv" --out "$TMP/p-gaps.csv" 2>"$TMP/err" \
    && "$LSTMD" predict --checkpoint "$model" --input "$TMP/wave-linear.csv" --out "$TMP/p-hand.csv" 2>/dev/null \
    && cmp -s "$TMP/p-gaps.csv" "$TMP/p-hand.csv" \
    && grep -q "filled 10 missing values (--missing linear, as the model's data was prepared): 'y' 6, 'x' 4" "$TMP/err" \
    && ok "predict $(basename "$model") of the gaps, by default linear: = of the CSV filled by hand; $(cat "$TMP/err")" \
    || bad "predict $(basename "$model") default: $(cat "$TMP/err"); $(cmp "$TMP/p-gaps.csv" "$TMP/p-hand.csv" 2>&1)"
done
"$LSTMD" predict --checkpoint "$CK" --input "$TMP/wave-gaps.csv" --out "$TMP/p-prev.csv" --missing previous 2>"$TMP/err" \
  && "$LSTMD" predict --checkpoint "$CK" --input "$TMP/wave-previous.csv" --out "$TMP/p-hand.csv" 2>/dev/null \
  && cmp -s "$TMP/p-prev.csv" "$TMP/p-hand.csv" && ! cmp -s "$TMP/p-prev.csv" "$TMP/p-gaps.csv" \
  && ok "predict --missing previous overrides the checkpoint's linear: = of the CSV filled by hand" \
  || bad "predict --missing previous: $(cat "$TMP/err"); $(cmp "$TMP/p-prev.csv" "$TMP/p-hand.csv" 2>&1)"
"$LSTMD" predict --checkpoint "$CK" --input "$TMP/wave-gaps.csv" --out "$TMP/p-err.csv" --missing error 2>"$TMP/err"; rc=$?
[[ $rc == 2 && ! -e $TMP/p-err.csv ]] && grep -q "wave-gaps.csv:2: column 'y': a missing value ('NA'); --missing previous" "$TMP/err" \
  && ok "predict --missing error: exit 2, $(head -1 "$TMP/err")" || bad "predict --missing error: exit $rc, $(cat "$TMP/err")"
"$LSTMD" predict --checkpoint "$TMP/r-plain/step-3.safetensors" --input "$TMP/wave-gaps.csv" --out "$TMP/p-plain.csv" 2>"$TMP/err"; rc=$?
[[ $rc == 2 && ! -e $TMP/p-plain.csv ]] && grep -q "column 'y': a missing value ('NA'); --missing previous" "$TMP/err" \
  && ok "predict with a model of unfilled data refuses gaps by default: $(head -1 "$TMP/err")" \
  || bad "predict, plain model: exit $rc, $(cat "$TMP/err")"
"$LSTMD" predict --checkpoint "$CK" --input "$TMP/wave.csv" --out "$TMP/p-x.csv" --missing nearest 2>"$TMP/err"; rc=$?
[[ $rc == 2 ]] && grep -q -- "--missing 'nearest' is not one of error previous linear" "$TMP/err" \
  && ok "predict --missing nearest refused: $(head -1 "$TMP/err")" || bad "predict --missing nearest: exit $rc, $(cat "$TMP/err")"

if ((fails)); then echo "$fails check(s) failed"; exit 1; fi
echo "all checks passed"
