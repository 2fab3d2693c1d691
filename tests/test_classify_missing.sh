#!/usr/bin/env bash
# test_classify_missing.sh — gaps in a series classification CSV (`--missing` of `prepare classify
# --series` and `classify`), where each row is one sequence:
#  1. the default refuses an empty or NA value naming FILE:LINE and the column, with the
#     --missing hint, and leaves nothing behind; a bad --missing value, and --missing without
#     --series, exit 2 naming it;
#  2. --missing previous and linear: the records of both splits read back hold exactly the rows
#     filled by hand, each row from its own values only (a leading gap takes its row's first
#     value, never the row before's last); stderr one line with the count per row; the fill
#     record ("FILL", method, count) after the statistics in both headers; a file without gaps:
#     no line, and without --missing no record; a first line of numbers and gaps is data, not a
#     header (nor "mixes numbers and names");
#  3. a row whose values are all gaps exits 2 naming its line and columns; a token that is
#     neither a number nor a gap exits 2 naming its line and column, under every method;
#  4. classify: the checkpoint of a run on data prepared with --missing linear records it
#     (classify.missing); classify of a CSV with gaps fills it that way by default (output =
#     classify of the same CSV filled by hand), --missing previous overrides it, --missing error
#     refuses with the hint, an all-gap row exits 2 naming its line; a model of data prepared
#     without --missing refuses gaps as before; --missing on a text classifier exits 2.
set -u
LSTMD=$(realpath "${1:?usage: test_classify_missing.sh LSTMD SOURCE_DIR}")
SRC=$(realpath "${2:?}")
export CUDA_VISIBLE_DEVICES=
PY=/usr/bin/python3
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fails=0
ok() { echo "ok    $*"; }
bad() { echo "FAIL  $*"; fails=$((fails + 1)); }

# read_records DIR: "label v1 v2 ..." of every record of train.bin and val.bin, sorted (the
# preparation shuffles), values as Python prints floats
read_records() {
$PY - "$1" <<'PYEOF'
import struct, sys
out = []
for split in ("train", "val"):
    raw = open(f"{sys.argv[1]}/{split}.bin", "rb").read()
    hb, count, width, classes = (struct.unpack_from("<I", raw, 20)[0], struct.unpack_from("<Q", raw, 24)[0],
                                 struct.unpack_from("<I", raw, 32)[0], struct.unpack_from("<I", raw, 40)[0])
    n, labels = 64, []
    for _ in range(classes):
        labels.append(raw[n + 1:n + 1 + raw[n]].decode()); n += 1 + raw[n]
    for r in range(count):
        at = hb + r * (8 + 4 * width)
        label, length = struct.unpack_from("<II", raw, at)
        out.append(" ".join([labels[label]] + [repr(v) for v in struct.unpack_from(f"<{length}f", raw, at + 8)]))
print(";".join(sorted(out)))
PYEOF
}
# fill_record FILE: "METHOD COUNT" of its header's fill record, or "none" (tests/dataset_crc.py)
fill_record() {
  PYTHONPATH=$SRC/tests $PY -c 'import sys, dataset_crc
print(dataset_crc.fill_record(open(sys.argv[1], "rb").read()))' "$1"
}
prep() { "$LSTMD" prepare classify --series --val-fraction 0.34 "$@"; }

# Six rows of five values; gaps of every token, at the start, inside and at the end of rows.
# Row 4 (line 5) starts with a gap: its own first value (8) fills it, where a fill across rows
# would take row 3's last (9, or a line from it).
cat >"$TMP/gaps.csv" <<'EOF'
label,t0,t1,t2,t3,t4
a,,2,NA,6,7
b,1,2,3,4,5
a,5,n/a,null,NaN,9
b, nan ,8,9,10,N/A
a,3,NULL,1,Na,
b,20,21,22,23,24
EOF

# 1. the default refuses, pointing at the option
prep --input "$TMP/gaps.csv" --out "$TMP/d-default" 2>"$TMP/err"; rc=$?
[[ $rc == 2 && ! -e $TMP/d-default ]] && grep -q "gaps.csv:2: column 2: a missing value (an empty field); --missing previous (the last value before it) or --missing linear (interpolated) fills such gaps" "$TMP/err" \
  && ok "default: the gap refused, exit 2: $(head -1 "$TMP/err")" || bad "default on gaps: exit $rc, $(cat "$TMP/err")"
printf 'a,1,2,3\nb,2,3,4\na,3,NA,5\n' >"$TMP/na.csv"
prep --input "$TMP/na.csv" --out "$TMP/d-na" --missing error 2>"$TMP/err"; rc=$?
[[ $rc == 2 && ! -e $TMP/d-na ]] && grep -q "na.csv:3: column 3: a missing value ('NA'); --missing previous (the last value before it) or --missing linear (interpolated) fills such gaps" "$TMP/err" \
  && ok "--missing error: NA refused, exit 2: $(head -1 "$TMP/err")" || bad "--missing error on NA: exit $rc, $(cat "$TMP/err")"
prep --input "$TMP/na.csv" --out "$TMP/d-bad" --missing zero 2>"$TMP/err"; rc=$?
[[ $rc == 2 && ! -e $TMP/d-bad ]] && grep -q -- "prepare classify: --missing 'zero' is not one of error previous linear" "$TMP/err" \
  && ok "--missing zero refused: $(head -1 "$TMP/err")" || bad "--missing zero: exit $rc, $(cat "$TMP/err")"
printf 'a\tx\nb\ty\n' >"$TMP/text.tsv"
"$LSTMD" prepare classify --input "$TMP/text.tsv" --out "$TMP/d-text" --missing linear 2>"$TMP/err"; rc=$?
[[ $rc == 2 && ! -e $TMP/d-text ]] && grep -q -- "--missing belong to --series" "$TMP/err" \
  && ok "--missing without --series refused: $(head -1 "$TMP/err")" || bad "--missing without --series: exit $rc, $(cat "$TMP/err")"

# 2. the fills, exactly, each row along its own values
check_fill() { # METHOD EXPECTED_RECORDS (sorted, ';' between records)
  local m=$1 want=$2 got line
  prep --input "$TMP/gaps.csv" --out "$TMP/d-$m" --missing "$m" 2>"$TMP/err-$m" \
    || { bad "--missing $m: $(cat "$TMP/err-$m")"; return; }
  got=$(read_records "$TMP/d-$m")
  [[ $got == "$want" ]] && ok "--missing $m: the records of train.bin + val.bin: $got" || bad "--missing $m: records '$got', want '$want'"
  line=$(grep filled "$TMP/err-$m")
  [[ $(grep -c filled "$TMP/err-$m") == 1 && \
     $line == "lstmd: $TMP/gaps.csv: filled 10 missing values (--missing $m) in 4 of 6 rows: line 2: 2, line 4: 3, line 5: 2, line 6: 3" ]] \
    && ok "--missing $m: one line on stderr: $line" || bad "--missing $m: stderr $(cat "$TMP/err-$m")"
  local id=2 rec_t rec_v
  [[ $m == previous ]] && id=1
  rec_t=$(fill_record "$TMP/d-$m/train.bin"); rec_v=$(fill_record "$TMP/d-$m/val.bin")
  [[ $rec_t == "$id 10" && $rec_v == "$id 10" ]] && ok "--missing $m: both headers record method $id, 10 values filled" \
    || bad "--missing $m: fill records '$rec_t' / '$rec_v', want '$id 10'"
}
check_fill previous "a 2.0 2.0 2.0 6.0 7.0;a 3.0 3.0 1.0 1.0 1.0;a 5.0 5.0 5.0 5.0 9.0;b 1.0 2.0 3.0 4.0 5.0;b 20.0 21.0 22.0 23.0 24.0;b 8.0 8.0 9.0 10.0 10.0"
check_fill linear "a 2.0 2.0 4.0 6.0 7.0;a 3.0 2.0 1.0 1.0 1.0;a 5.0 6.0 7.0 8.0 9.0;b 1.0 2.0 3.0 4.0 5.0;b 20.0 21.0 22.0 23.0 24.0;b 8.0 8.0 9.0 10.0 10.0"
sed 's/NA/3/' "$TMP/na.csv" >"$TMP/full.csv"
prep --input "$TMP/full.csv" --out "$TMP/d-full" --missing linear 2>"$TMP/err"
prep --input "$TMP/full.csv" --out "$TMP/d-none" 2>/dev/null
[[ $(fill_record "$TMP/d-full/train.bin") == "2 0" && $(fill_record "$TMP/d-none/val.bin") == none ]] \
  && ! grep -q filled "$TMP/err" && ok "no gaps: no fill line; the method recorded with 0 filled; without --missing no record" \
  || bad "no gaps: records '$(fill_record "$TMP/d-full/train.bin")' / '$(fill_record "$TMP/d-none/val.bin")', stderr $(cat "$TMP/err")"
printf 'a,1,NA,3\nb,2,3,4\na,3,4,5\n' >"$TMP/first.csv" # --header auto: numbers and a gap are data
prep --input "$TMP/first.csv" --out "$TMP/d-first" --missing linear 2>"$TMP/err"; rc=$?
[[ $rc == 0 && $(read_records "$TMP/d-first") == "a 1.0 2.0 3.0;a 3.0 4.0 5.0;b 2.0 3.0 4.0" ]] && grep -q "3 rows of 3 values, 2 classes" "$TMP/err" \
  && ok "a first line of numbers and a gap is a data row (--header auto): $(grep prepared "$TMP/err")" \
  || bad "first line with a gap: exit $rc, $(cat "$TMP/err"), records $(read_records "$TMP/d-first" 2>&1)"

# 3. a row with no value at all; a token that is not a gap
printf 'label,t0,t1,t2\na,1,2,3\nb,NA,,null\na,4,5,6\nb,7,8,9\n' >"$TMP/allrow.csv"
for m in previous linear; do
  prep --input "$TMP/allrow.csv" --out "$TMP/d-allrow" --missing "$m" 2>"$TMP/err"; rc=$?
  [[ $rc == 2 && ! -e $TMP/d-allrow ]] && grep -q "allrow.csv:3: every one of the row's 3 values (columns 2-4) is missing: there is no value to fill its gaps from" "$TMP/err" \
    && ok "--missing $m, a row all gaps: exit 2, $(head -1 "$TMP/err")" || bad "--missing $m, a row all gaps: exit $rc, $(cat "$TMP/err")"
done
printf 't0,t1,t2,label\n1,2,3,a\n4,5,6,b\n,,NA,a\n' >"$TMP/allrow-last.csv"
prep --input "$TMP/allrow-last.csv" --out "$TMP/d-allrow" --missing linear --label-column last 2>"$TMP/err"; rc=$?
[[ $rc == 2 && ! -e $TMP/d-allrow ]] && grep -q "allrow-last.csv:4: every one of the row's 3 values (columns 1-3) is missing" "$TMP/err" \
  && ok "--label-column last, a row all gaps: exit 2, $(head -1 "$TMP/err")" || bad "label last, a row all gaps: exit $rc, $(cat "$TMP/err")"
printf 'a,1,2,3\nb,2,n.a.,4\na,NA,4,5\nb,5,6,7\n' >"$TMP/token.csv" # n.a. is not a gap
for m in error previous linear; do
  prep --input "$TMP/token.csv" --out "$TMP/d-token" --missing "$m" 2>"$TMP/err"; rc=$?
  [[ $rc == 2 && ! -e $TMP/d-token ]] && grep -q "token.csv:2: column 3: 'n.a.' is not a finite number" "$TMP/err" \
    && ok "--missing $m, a token that is no gap: exit 2, $(head -1 "$TMP/err")" \
    || bad "--missing $m, a token that is no gap: exit $rc, $(cat "$TMP/err")"
done

# 4. classify: 40 rows of two shapes, then rows to classify with gaps and filled by hand
$PY - "$TMP" <<'PYEOF'
import math, struct, sys
d = sys.argv[1]
with open(f"{d}/train.csv", "w") as f:
    for i in range(40):
        up = i % 2 == 0
        v = [round((k if up else 7 - k) + 0.1 * math.sin(i + k), 3) for k in range(8)]
        if i % 5 == 0: v[i % 8] = "NA"
        f.write(("up" if up else "down") + "," + ",".join(str(x) for x in v) + "\n")
rows = [[0, None, None, None, None, None, None, 70], [None, 3, 1, None, 2, 9, None, None],
        [5, 4, 3, 2, 1, 0, -1, -2], [None, None, 10, 20, None, None, None, 0]]
tokens = ["NA", "", "null", "NaN", "N/A", "nan"]
f32 = lambda v: struct.unpack("<f", struct.pack("<f", v))[0]
def fill(v, linear):
    known = [i for i, x in enumerate(v) if x is not None]
    out = []
    for i, x in enumerate(v):
        if x is not None: out.append(x); continue
        lo = max((k for k in known if k < i), default=None)
        hi = min((k for k in known if k > i), default=None)
        if lo is None: out.append(v[hi])
        elif hi is None or not linear: out.append(v[lo])
        else: out.append(v[lo] + (v[hi] - v[lo]) * ((i - lo) / (hi - lo)))
    return ["%.9g" % f32(x) for x in out]
with open(f"{d}/q-gaps.csv", "w") as f:
    f.write("t0,t1,t2,t3,t4,t5,t6,t7\n")
    for r, v in enumerate(rows):
        f.write(",".join(tokens[(r + k) % 6] if x is None else str(x) for k, x in enumerate(v)) + "\n")
for name, lin in (("q-linear.csv", True), ("q-previous.csv", False)):
    with open(f"{d}/{name}", "w") as f:
        f.write("t0,t1,t2,t3,t4,t5,t6,t7\n")
        for v in rows: f.write(",".join(fill(v, lin)) + "\n")
PYEOF
tiny=(--device cpu --set data.batch_size=4 --set train.steps=3 --set train.eval_every=0
      --set train.threads=1 --set model.hidden=4 --set model.layers=1 --set train.log_every=0)
prep --input "$TMP/train.csv" --out "$TMP/c-lin" --missing linear 2>/dev/null || bad "prepare train.csv, linear"
sed 's/NA/1/' "$TMP/train.csv" >"$TMP/train-full.csv"
prep --input "$TMP/train-full.csv" --out "$TMP/c-plain" 2>/dev/null || bad "prepare train-full.csv"
"$LSTMD" train --set data.path="$TMP/c-lin" --set train.run_dir="$TMP/r-lin" "${tiny[@]}" >/dev/null 2>"$TMP/err" \
  || bad "train on the linear rows: $(tail -2 "$TMP/err")"
"$LSTMD" train --set data.path="$TMP/c-plain" --set train.run_dir="$TMP/r-plain" "${tiny[@]}" >/dev/null 2>"$TMP/err" \
  || bad "train on the plain rows: $(tail -2 "$TMP/err")"
CK=$TMP/r-lin/step-3.safetensors PLAIN=$TMP/r-plain/step-3.safetensors
meta() { $PY "$SRC/tests/ckpt_meta.py" "$@" 2>/dev/null; }
[[ $(meta "$CK" classify.missing) == linear && -z $(meta "$PLAIN" classify.missing) ]] \
  && ok "classify.missing = linear in the checkpoint; absent for data prepared without --missing" \
  || bad "classify.missing: '$(meta "$CK" classify.missing)', plain '$(meta "$PLAIN" classify.missing)'"
"$LSTMD" classify --checkpoint "$CK" --input "$TMP/q-gaps.csv" >"$TMP/o-gaps" 2>"$TMP/err" \
  && "$LSTMD" classify --checkpoint "$CK" --input "$TMP/q-linear.csv" >"$TMP/o-hand" 2>/dev/null \
  && [[ $(wc -l <"$TMP/o-gaps") == 4 ]] && cmp -s "$TMP/o-gaps" "$TMP/o-hand" \
  && grep -q "q-gaps.csv: filled 15 missing values (--missing linear, as the model's data was prepared) in 3 of 4 rows: line 2: 6, line 3: 4, line 5: 5" "$TMP/err" \
  && ok "classify of the gaps, by default linear: = of the CSV filled by hand ($(tr '\n' ' ' <"$TMP/o-gaps")); $(cat "$TMP/err")" \
  || bad "classify default: $(cat "$TMP/err"); $(diff "$TMP/o-gaps" "$TMP/o-hand" 2>&1)"
"$LSTMD" classify --checkpoint "$CK" --input "$TMP/q-gaps.csv" --missing previous >"$TMP/o-prev" 2>"$TMP/err" \
  && "$LSTMD" classify --checkpoint "$CK" --input "$TMP/q-previous.csv" >"$TMP/o-hand" 2>/dev/null \
  && cmp -s "$TMP/o-prev" "$TMP/o-hand" && ! cmp -s "$TMP/o-prev" "$TMP/o-gaps" \
  && grep -q "filled 15 missing values (--missing previous) in 3 of 4 rows" "$TMP/err" \
  && ok "classify --missing previous overrides the checkpoint's linear: = of the CSV filled by hand ($(tr '\n' ' ' <"$TMP/o-prev"))" \
  || bad "classify --missing previous: $(cat "$TMP/err"); $(diff "$TMP/o-prev" "$TMP/o-hand" 2>&1); linear $(cat "$TMP/o-gaps")"
"$LSTMD" classify --checkpoint "$CK" --input "$TMP/q-gaps.csv" --missing error >"$TMP/o-err" 2>"$TMP/err"; rc=$?
[[ $rc == 2 && ! -s $TMP/o-err ]] && grep -q "q-gaps.csv:2: column 2: a missing value (an empty field); --missing previous" "$TMP/err" \
  && ok "classify --missing error: exit 2, $(head -1 "$TMP/err")" || bad "classify --missing error: exit $rc, $(cat "$TMP/err")"
"$LSTMD" classify --checkpoint "$PLAIN" --input "$TMP/q-gaps.csv" >"$TMP/o-plain" 2>"$TMP/err"; rc=$?
[[ $rc == 2 && ! -s $TMP/o-plain ]] && grep -q "q-gaps.csv:2: column 2: a missing value (an empty field); --missing previous" "$TMP/err" \
  && ok "classify with a model of unfilled data refuses gaps by default: $(head -1 "$TMP/err")" \
  || bad "classify, plain model: exit $rc, $(cat "$TMP/err")"
printf '1,2,3,4,5,6,7,8\nNA,,,null,NaN,,,n/a\n' >"$TMP/q-allrow.csv"
"$LSTMD" classify --checkpoint "$CK" --input "$TMP/q-allrow.csv" >"$TMP/o-all" 2>"$TMP/err"; rc=$?
[[ $rc == 2 && ! -s $TMP/o-all ]] && grep -q "q-allrow.csv:2: every one of the row's 8 values (columns 1-8) is missing" "$TMP/err" \
  && ok "classify of a row all gaps: exit 2, $(head -1 "$TMP/err")" || bad "classify, a row all gaps: exit $rc, $(cat "$TMP/err")"
"$LSTMD" classify --checkpoint "$CK" --input "$TMP/q-linear.csv" --missing nearest >/dev/null 2>"$TMP/err"; rc=$?
[[ $rc == 2 ]] && grep -q -- "classify: --missing 'nearest' is not one of error previous linear" "$TMP/err" \
  && ok "classify --missing nearest refused: $(head -1 "$TMP/err")" || bad "classify --missing nearest: exit $rc, $(cat "$TMP/err")"
printf 'en\tthe\nen\tand\nde\tder\nde\tund\nen\tof\nde\tdie\n' >"$TMP/words.tsv"
"$LSTMD" prepare classify --input "$TMP/words.tsv" --out "$TMP/c-text" --val-fraction 0.34 2>/dev/null || bad "prepare words.tsv"
"$LSTMD" train --set data.path="$TMP/c-text" --set train.run_dir="$TMP/r-text" "${tiny[@]}" >/dev/null 2>"$TMP/err" \
  || bad "train a text classifier: $(tail -2 "$TMP/err")"
printf 'the\n' >"$TMP/q.txt"
"$LSTMD" classify --checkpoint "$TMP/r-text/step-3.safetensors" --input "$TMP/q.txt" --missing linear >/dev/null 2>"$TMP/err"; rc=$?
[[ $rc == 2 ]] && grep -q -- "--missing is for a series classifier's CSV" "$TMP/err" \
  && ok "classify --missing with a text classifier: exit 2, $(head -1 "$TMP/err")" || bad "classify --missing, text classifier: exit $rc, $(cat "$TMP/err")"

if ((fails)); then echo "$fails check(s) failed"; exit 1; fi
echo "all checks passed"
