#!/usr/bin/env bash
# make_loader_corpora.sh — writes the seed corpora of the file loaders' fuzz targets under
# tests/fuzz, each seed under the driver's 64 KiB:
#   corpus-qckpt    the int8 model loader (tests/fuzz_qckpt.c): the text and series checkpoints
#                   below made int8 by `lstmd quantize`, a wrong format tag, a truncation
#   corpus-ckpt     the fp32 checkpoint loader (tests/fuzz_ckpt.c): tiny checkpoints of `lstmd
#                   train` (text, 1 layer; series, 2 layers, stream order: carried state;
#                   layer-normalised; SGD, which the target's AdamW resume refuses), a wrong
#                   format tag, a truncation
#   corpus-dataset  the dataset reader (tests/fuzz_dataset.c): splits of `lstmd prepare` (text,
#                   series, series with a fill record (--missing), classify by bytes and by
#                   values, by values with a fill record), a bad magic, a truncation
#   corpus-prepare  `lstmd prepare` itself (tests/fuzz_prepare.c): user files behind a first byte
#                   0-3 picking text, series, classify, classify --series; one accepted and one
#                   refused of each but text; for series also Excel's dialect (a byte order mark,
#                   a quoted header, CRLF: accepted) and a ';'-delimited file (refused); first
#                   bytes 4 and 5 are series with --missing previous and linear: a file with
#                   every kind of gap token (accepted by each) and one whose x is all gaps
#                   (refused); first bytes 6 and 7 are classify --series with --missing previous
#                   and linear: rows with gaps at their start, inside and at their end (accepted
#                   by each) and a row that is all gaps (refused)
# Run again after changing a file format:
#   tests/fuzz/make_loader_corpora.sh build/lstmd tests/fuzz
set -eu
LSTMD=$(realpath "$1")
OUT=$(realpath "$2")
SRC=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cd "$TMP"
mkdir -p "$OUT/corpus-qckpt" "$OUT/corpus-ckpt" "$OUT/corpus-dataset" "$OUT/corpus-prepare"
head -c 3000 "$SRC/data/fortunes.txt" | tr -c 'a-e\n' 'a' >text.txt
head -n 400 "$SRC/data/seattle-temps.csv" >series.csv
printf 'en\thello there\nfr\tbonjour la\nen\tgood day\nfr\tau revoir\nen\tsee you\nfr\tmerci bien\n' >cls.tsv
for i in 1 2 3 4 5 6; do printf 'up,1,2,%d,4\ndown,4,%d,2,1\n' $i $i; done >cls.csv
"$LSTMD" prepare text --input text.txt --out t 2>/dev/null
"$LSTMD" prepare series --input series.csv --target temp --horizon 2 --out s 2>/dev/null
"$LSTMD" prepare classify --input cls.tsv --out c --val-fraction 0.34 2>/dev/null
"$LSTMD" prepare classify --series --input cls.csv --out cs --val-fraction 0.34 2>/dev/null
TINY=(--set data.seq_len=8 --set data.batch_size=2 --set train.steps=1 --set train.eval_every=0
  --set train.threads=1 --set model.hidden=4)
"$LSTMD" train --set data.path=t --set train.run_dir=rt --set model.embed=3 --set model.layers=1 \
  "${TINY[@]}" >/dev/null 2>&1
"$LSTMD" train --set data.path=s --set train.run_dir=rs --set model.layers=2 --set data.order=stream \
  "${TINY[@]}" >/dev/null 2>&1
"$LSTMD" train --set data.path=t --set train.run_dir=rl --set model.embed=3 --set model.layers=2 \
  --set model.layer_norm=true "${TINY[@]}" >/dev/null 2>&1
"$LSTMD" train --set data.path=t --set train.run_dir=rg --set model.embed=3 --set model.layers=1 \
  --set optim.algo=sgd "${TINY[@]}" >/dev/null 2>&1
C=$OUT/corpus-ckpt
cp rt/latest.safetensors "$C/text.safetensors"
cp rs/latest.safetensors "$C/series.safetensors"
cp rl/latest.safetensors "$C/layer-norm.safetensors"
cp rg/latest.safetensors "$C/sgd.safetensors"
sed 's/"lstmd-checkpoint-1"/"lstmd-checkpoint-9"/' rt/latest.safetensors >"$C/wrong-tag.safetensors"
head -c 1000 rs/latest.safetensors >"$C/truncated.safetensors"
Q=$OUT/corpus-qckpt
"$LSTMD" quantize --checkpoint rt/latest.safetensors --out "$Q/text-int8.safetensors" >/dev/null
"$LSTMD" quantize --checkpoint rs/latest.safetensors --out "$Q/series-int8.safetensors" >/dev/null
sed 's/"lstmd-int8-1"/"lstmd-int8-9"/' "$Q/text-int8.safetensors" >"$Q/wrong-tag.safetensors"
head -c 1000 "$Q/series-int8.safetensors" >"$Q/truncated.safetensors"
D=$OUT/corpus-dataset
cp t/train.bin "$D/text-train.bin"
cp s/val.bin "$D/series-val.bin"
cp c/train.bin "$D/classify-bytes.bin"
cp cs/train.bin "$D/classify-values.bin"
{ printf 'XXXX'; tail -c +5 t/val.bin; } >"$D/bad-magic.bin"
head -c 100 s/train.bin >"$D/truncated.bin"
P=$OUT/corpus-prepare
{ printf '\0'; head -c 600 text.txt; } >"$P/text"
awk 'BEGIN { print "date,temp,x"; for (i = 0; i < 80; i++) printf "d%d,%.1f,%d\n", i, 40 + (i % 7), i % 3 }' \
  >series-x.csv
{ printf '\1'; cat series-x.csv; } >"$P/series"
{ printf '\1'; sed 's/temp/tmp/' series-x.csv; } >"$P/series-no-target"
{ printf '\1\xef\xbb\xbf'; sed '1s/.*/"date","temp","x"/' series-x.csv | sed 's/$/\r/'; } \
  >"$P/series-bom-quoted-crlf"
{ printf '\1'; tr ',' ';' <series-x.csv; } >"$P/series-semicolon"
# gaps: a leading and a trailing run, empty, NA, N/A, NaN, nan, null (any case, blanks around)
awk -F, 'BEGIN { split("|NA|n/a|NaN|nan|NULL| na ", gap, "|") }
  NR == 1 { print; next }
  { if (NR == 2 || NR == 3 || NR == 81) $2 = ""; else if (NR % 9 == 0) $2 = gap[1 + NR % 7];
    if (NR % 11 == 0) $3 = gap[1 + NR % 7]; print }' OFS=, series-x.csv >series-gaps.csv
{ printf '\4'; cat series-gaps.csv; } >"$P/series-gaps-previous"
{ printf '\5'; cat series-gaps.csv; } >"$P/series-gaps-linear"
{ printf '\5'; awk -F, 'NR > 1 { $3 = "NA" } { print }' OFS=, series-x.csv; } >"$P/series-x-all-missing"
# and a split with the fill record after its statistics, for the dataset reader
"$LSTMD" prepare series --input series-gaps.csv --target temp --features x --horizon 2 \
  --missing linear --out sg 2>/dev/null
cp sg/val.bin "$D/series-filled-val.bin"
{ printf '\2'; cat cls.tsv; } >"$P/classify"
{ printf '\2'; grep '^en' cls.tsv; } >"$P/classify-one-label"
{ printf '\3'; cat cls.csv; } >"$P/classify-series"
{ printf '\3'; sed '3s/,4$/,x/' cls.csv; } >"$P/classify-series-bad-value"
# classify --series gaps: every token, never a whole row (column c, value 3, stays)
awk -F, 'BEGIN { split("|NA|n/a|NaN|nan|NULL| na ", gap, "|") }
  { if (NR % 3 == 1) $2 = gap[1 + NR % 7]; if (NR % 4 == 2) $4 = gap[1 + (NR + 3) % 7];
    if (NR % 5 == 0) $5 = gap[1 + (NR + 1) % 7]; print }' OFS=, cls.csv >cls-gaps.csv
{ printf '\6'; cat cls-gaps.csv; } >"$P/classify-series-gaps-previous"
{ printf '\7'; cat cls-gaps.csv; } >"$P/classify-series-gaps-linear"
{ printf '\7'; sed '5s/^up,.*/up,NA,,null,N\/A/' cls.csv; } >"$P/classify-series-row-all-missing"
# and a numeric classify split with the fill record after its mean and std
"$LSTMD" prepare classify --series --input cls-gaps.csv --out csg --val-fraction 0.34 \
  --missing linear 2>/dev/null
cp csg/train.bin "$D/classify-values-filled.bin"
ls -l "$Q" "$C" "$D" "$P"
