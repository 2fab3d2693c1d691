#!/usr/bin/env bash
# make_qckpt_corpus.sh — writes the seed corpus of the int8 model loader's fuzz target
# (tests/fuzz_qckpt.c) into tests/fuzz/corpus-qckpt: tiny int8 models made by `lstmd quantize`
# (text, 1 layer; series, 2 layers) and two it must reject (a wrong format tag, a truncation).
# Run again after changing the int8 file format:
#   tests/fuzz/make_qckpt_corpus.sh build/lstmd tests/fuzz/corpus-qckpt
set -eu
LSTMD=$(realpath "$1")
OUT=$(realpath "$2")
SRC=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cd "$TMP"
head -c 3000 "$SRC/data/fortunes.txt" | tr -c 'a-e\n' 'a' >text.txt
head -n 400 "$SRC/data/seattle-temps.csv" >series.csv
TINY=(--set data.seq_len=8 --set data.batch_size=2 --set train.steps=1 --set train.eval_every=0
  --set train.threads=1 --set model.hidden=4)
"$LSTMD" prepare text --input text.txt --out t 2>/dev/null
"$LSTMD" prepare series --input series.csv --target temp --horizon 2 --out s 2>/dev/null
"$LSTMD" train --set data.path=t --set train.run_dir=rt --set model.embed=3 --set model.layers=1 \
  "${TINY[@]}" >/dev/null 2>&1
"$LSTMD" train --set data.path=s --set train.run_dir=rs --set model.layers=2 "${TINY[@]}" \
  >/dev/null 2>&1
"$LSTMD" quantize --checkpoint rt/latest.safetensors --out "$OUT/text-int8.safetensors" >/dev/null
"$LSTMD" quantize --checkpoint rs/latest.safetensors --out "$OUT/series-int8.safetensors" >/dev/null
sed 's/"lstmd-int8-1"/"lstmd-int8-9"/' "$OUT/text-int8.safetensors" >"$OUT/wrong-tag.safetensors"
head -c 1000 "$OUT/series-int8.safetensors" >"$OUT/truncated.safetensors"
ls -l "$OUT"
