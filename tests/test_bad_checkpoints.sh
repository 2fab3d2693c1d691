#!/usr/bin/env bash
# test_bad_checkpoints.sh — lstmd on bad checkpoints and the commands that read them: corrupt or
# foreign checkpoints, layer_norm checkpoints where there is no layer-normalised path, a
# checkpoint against the wrong data or command, a prime outside the vocabulary, predict on bad
# CSVs, an --out naming its --input or --checkpoint, --out - (stdout for predict's CSV, refused
# for datasets and models) and --config given twice.
# (Data files, prepared datasets and configs: test_bad_input.sh.)
# Every case must: exit with exactly 2 (no crash, no 1; a few cases say otherwise: an unwritable
# output exits 1, a warning 0), print nothing on stdout, print a message
# on stderr that names the offending file (and CSV line / config key where given), and, for
# prepare, leave nothing half-written in the output directory. "The message" is lstmd's own lines
# ("lstmd: ...") without the effective-config dump that `train` prints first: the dump echoes
# data.path and the other settings, so a match there would pass with no error message at all.
#
# usage: test_bad_checkpoints.sh LSTMD SOURCE_DIR        (ctest passes both)
# The arguments, check() and the good inputs are bad_input_lib.sh's.
# Byte surgery on checkpoint headers uses python3 (standard library only).
source "$(dirname "${BASH_SOURCE[0]}")/bad_input_lib.sh"

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
# an epoch of -1 (hand-edited): strtoull read it as 2^64 - 1 and the run went on from there
st_edit "$CKPT" "$TMP/epoch.safetensors" '"train.epoch":"' '"train.epoch":"-1'
check "train --resume: train.epoch -1" --file "$TMP/epoch.safetensors" --has "train.epoch" \
  --no-ckpt "$TMP/run-epoch" -- \
  "$LSTMD" train --set data.path="$TMP/good-text" --set train.run_dir="$TMP/run-epoch" "${TINY[@]}" \
  --set train.steps=4 --resume "$TMP/epoch.safetensors"
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

# A checkpoint past a file size limit (ulimit -f 100, 100 KiB): SIGXFSZ ended the run mid-write
# (exit 153, the temp file left); now the write fails, is named, exit 1, no temp file left
mkdir "$TMP/run-fsize"
check "train: a checkpoint past a file size limit" --has "File too large" --exit 1 -- \
  bash -c 'ulimit -f 100 && exec "$@"' lstmd "$LSTMD" train --set data.path="$TMP/good-text" \
  --set train.run_dir="$TMP/run-fsize" "${TINY[@]}" --set model.hidden=128
! compgen -G "$TMP/run-fsize/*.tmp.*" >/dev/null ||
  fail "train: past a file size limit" "temp files left: $(ls "$TMP/run-fsize")"

# stdout that cannot be written (a full disk, /dev/full): said, exit 1; eval exited 0 in silence
# and sample 2 in silence
check "eval: stdout /dev/full" --has "eval: writing to stdout failed" --exit 1 -- \
  bash -c 'exec "$@" >/dev/full' lstmd "$LSTMD" eval --checkpoint "$CKPT" --data "$TMP/good-text"
check "sample: stdout /dev/full" --has "sample: writing to stdout failed" --exit 1 -- \
  bash -c 'exec "$@" >/dev/full' lstmd "$LSTMD" sample --checkpoint "$CKPT" --length 10

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
printf 'a,b\n1,2\n3,4\n5,6\n' >"$TMP/no-target.csv"
check "predict: input without the target column" --file "$TMP/no-target.csv" --has "temp" \
  --clean-dir "$TMP/p2" -- \
  "$LSTMD" predict --checkpoint "$SCKPT" --input "$TMP/no-target.csv" --out "$TMP/p2/out.csv"
# Finite inputs whose forecast overflows (3e38 in a column trained near 1, std 7e-5): it was
# written as "inf" with exit 0, into a CSV lstmd's own reader refuses
python3 -c '
import math; print("date,v")
for i in range(500): print("d%d,%.6f" % (i, 1 + 0.0001 * math.sin(i / 3)))' >"$TMP/flat.csv"
setup "$LSTMD" prepare series --input "$TMP/flat.csv" --target v --out "$TMP/flat"
setup "$LSTMD" train --set data.path="$TMP/flat" --set train.run_dir="$TMP/run-flat" "${TINY[@]}" \
  --set data.window_norm=none --set model.target=delta
{ head -1 "$TMP/flat.csv"; tail -30 "$TMP/flat.csv" | sed '29s/,.*/,3e38/'; } >"$TMP/flat-huge.csv"
mkdir "$TMP/p-inf"
check "predict: a forecast that overflows" --has "the forecast for row 28 is not finite" \
  --clean-dir "$TMP/p-inf" -- \
  "$LSTMD" predict --checkpoint "$TMP/run-flat/step-2.safetensors" --input "$TMP/flat-huge.csv" \
  --out "$TMP/p-inf/out.csv"
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

finish
