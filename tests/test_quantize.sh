#!/usr/bin/env bash
# test_quantize.sh — `lstmd quantize` and the int8 model through the binary:
#   quality: a text model trained here (seconds) loses ≤ 0.02 bpc in int8, a series model ≤ 2% MSE
#     (quantize --calibrate, and eval of the int8 file giving the same figure);
#   use: sample (greedy, repeatable) and predict (the same bytes at --batch 1 and 64: each row is
#     quantised on its own) take the int8 file; train --resume and quantize refuse it (exit 2);
#   outputs: an --out that is a training checkpoint, a dataset split or a run's metrics.jsonl or
#   train.log is refused (quantize,
#     export, predict); Ctrl-C while quantize or export writes leaves no temp file;
#   bad files (rewritten as valid safetensors where the point is the content): truncated, corrupt
#     header, wrong format tag, a scale count that does not match the rows, a non-finite, zero or
#     negative scale, a non-finite bias, a missing scale, a weight stored as F32: exit 2, nothing
#     on stdout, and a message naming the file (and the tensor, where one is at fault).
# usage: test_quantize.sh LSTMD SOURCE_DIR          (python3, standard library only)
set -u
(($# == 2)) || { echo "usage: $0 LSTMD SOURCE_DIR" >&2; exit 2; }
LSTMD=$(realpath -- "$1") || exit 1
DATA=$(realpath -- "$2")/data
TMP=$(mktemp -d "${TMPDIR:-/tmp}/lstmd-quantize.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
cd "$TMP" || exit 1
failures=0
fail() { echo "FAIL [$1]: $2"; failures=$((failures + 1)); }
ok() { echo "ok   [$1]"; }
run() { "$@" >"$TMP/out" 2>"$TMP/err" || { echo "setup failed: $*"; cat "$TMP/err"; exit 1; }; }
json() { python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).read())[sys.argv[2]])' "$1" "$2"; }

# ---------------------------------------------------------------- models
run "$LSTMD" prepare text --input "$DATA/fortunes.txt" --out text
run "$LSTMD" prepare series --input "$DATA/seattle-temps.csv" --target temp --horizon 4 --out series
COMMON=(--set train.eval_every=0 --set train.log_every=1000 --set train.threads=2)
run "$LSTMD" train --set data.path=text --set train.run_dir=rt --set model.hidden=96 \
  --set model.embed=16 --set data.seq_len=64 --set data.batch_size=32 --set train.steps=250 \
  --set optim.lr=0.01 "${COMMON[@]}"
run "$LSTMD" train --set data.path=series --set train.run_dir=rs --set model.hidden=32 \
  --set data.seq_len=48 --set data.batch_size=16 --set train.steps=200 "${COMMON[@]}"
CT=rt/latest.safetensors CS=rs/latest.safetensors

# ---------------------------------------------------------------- quality
run "$LSTMD" quantize --checkpoint $CT --out qt.safetensors --calibrate text
cp "$TMP/out" qt.json
echo "     text:   $(cat qt.json)"
d=$(json qt.json delta_bpc)
python3 -c "import sys; sys.exit(abs($d) <= 0.02)" && fail "text int8 bpc within 0.02" "delta $d" ||
  ok "text int8 bpc within 0.02 of fp32 (delta $d)"
run "$LSTMD" eval --checkpoint qt.safetensors --data text
[[ $(json "$TMP/out" bpc) == $(json qt.json int8_bpc) ]] && ok "eval of the int8 file = calibrate's int8 bpc" ||
  fail "eval of the int8 file" "$(cat "$TMP/out") vs $(cat qt.json)"
run "$LSTMD" quantize --checkpoint $CS --out qs.safetensors --calibrate series
cp "$TMP/out" qs.json
echo "     series: $(cat qs.json)"
d=$(json qs.json mse_change)
python3 -c "import sys; sys.exit(abs($d) <= 0.02)" && fail "series int8 MSE within 2%" "change $d" ||
  ok "series int8 MSE within 2% of fp32 (change $d)"
# the JSON line stays JSON whatever --out is called (a '"' or '\' in it was printed raw)
odd='q"t\x.safetensors'
run "$LSTMD" quantize --checkpoint $CT --out "$odd"
[[ $(json "$TMP/out" out 2>&1) == "$odd" ]] && ok "JSON line with --out '$odd'" ||
  fail "JSON line with --out '$odd'" "$(cat "$TMP/out")"
[[ $(stat -c %s qt.safetensors) -lt $(($(stat -c %s $CT) / 3)) ]] && ok "int8 file < 1/3 of the checkpoint" ||
  fail "int8 file size" "$(stat -c %s qt.safetensors) vs $(stat -c %s $CT)"

# ---------------------------------------------------------------- use
run "$LSTMD" sample --checkpoint qt.safetensors --prime "The " --length 200 --temperature 0
cp "$TMP/out" s1
run "$LSTMD" sample --checkpoint qt.safetensors --prime "The " --length 200 --temperature 0
[[ $(stat -c %s s1) == 204 ]] && cmp -s s1 "$TMP/out" && ok "int8 sample: 204 bytes, greedy repeatable" ||
  fail "int8 sample" "$(stat -c %s s1) bytes, $(cmp s1 "$TMP/out")"
run "$LSTMD" predict --checkpoint qs.safetensors --input "$DATA/seattle-temps.csv" --out p1.csv --batch 1
run "$LSTMD" predict --checkpoint qs.safetensors --input "$DATA/seattle-temps.csv" --out p64.csv --batch 64
[[ $(wc -l <p1.csv) == 8760 ]] && cmp -s p1.csv p64.csv && ok "int8 predict: --batch 1 and 64 byte for byte" ||
  fail "int8 predict" "$(wc -l <p1.csv) lines; $(cmp p1.csv p64.csv)"

# ---------------------------------------------------------------- refusals and bad files
# expect2 NAME TEXT... -- COMMAND: exit 2, empty stdout, stderr names every TEXT.
expect2() {
  local name=$1 t
  shift
  local -a texts=()
  while [[ $1 != -- ]]; do texts+=("$1"); shift; done
  shift
  "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  if ((rc != 2)) || [[ -s $TMP/out ]]; then
    fail "$name" "exit $rc (want 2), stdout $(stat -c %s "$TMP/out") bytes: $(head -c 300 "$TMP/err")"
    return
  fi
  for t in "${texts[@]}"; do
    grep -qF -- "$t" "$TMP/err" || { fail "$name" "message lacks '$t': $(head -c 300 "$TMP/err")"; return; }
  done
  ok "$name: $(grep -m1 -F -- "${texts[0]}" "$TMP/err" | cut -c1-160)"
}
expect2 "train --resume from an int8 file" qt.safetensors "int8" -- \
  "$LSTMD" train --set data.path=text --set train.run_dir=rr --set model.hidden=96 --set model.embed=16 \
  --set data.seq_len=64 --set train.steps=300 "${COMMON[@]}" --resume qt.safetensors
[[ ! -e rr/latest.safetensors ]] || fail "train --resume from an int8 file" "wrote a checkpoint"
expect2 "quantize an int8 file" qt.safetensors "int8" -- \
  "$LSTMD" quantize --checkpoint qt.safetensors --out again.safetensors
# --calibrate DIR is checked before --out is written: a DIR that cannot score the model leaves
# no file and no JSON, and an --out that is one of DIR's splits is refused, the dataset intact.
expect2 "quantize --calibrate with a series DIR for a text model" "series/val.bin" -- \
  "$LSTMD" quantize --checkpoint $CT --out never.safetensors --calibrate series
[[ ! -e never.safetensors ]] || fail "quantize --calibrate with a wrong DIR" "wrote never.safetensors"
# ... and one whose validation split is too short for a window (it was found only while scoring,
# after the file was written)
run "$LSTMD" prepare text --input "$DATA/fortunes.txt" --out noval --val-fraction 0
expect2 "quantize --calibrate with an empty val.bin" "noval/val.bin" "too short for one window" -- \
  "$LSTMD" quantize --checkpoint $CT --out never2.safetensors --calibrate noval
[[ ! -e never2.safetensors ]] || fail "quantize --calibrate with an empty val.bin" "wrote never2.safetensors"
cp text/val.bin val-before.bin
expect2 "quantize --out DIR/val.bin --calibrate DIR" "--calibrate" -- \
  "$LSTMD" quantize --checkpoint $CT --out text/val.bin --calibrate text
cmp -s val-before.bin text/val.bin || fail "quantize --out DIR/val.bin" "text/val.bin was replaced"
# an --out that is a run's training checkpoint or a dataset split is refused, also without
# --calibrate and by export and predict: the rename put the int8 model, the ONNX graph or the
# CSV in the place of the run's latest.safetensors (what --resume reads) or of the split
cp $CS ckpt-before.safetensors
expect2 "quantize --out a training checkpoint" "$CS" "training checkpoint" -- \
  "$LSTMD" quantize --checkpoint $CT --out $CS
expect2 "quantize --out a dataset split (no --calibrate)" "text/val.bin" "dataset split" -- \
  "$LSTMD" quantize --checkpoint $CT --out text/val.bin
expect2 "export onnx --out a training checkpoint" "$CS" "training checkpoint" -- \
  "$LSTMD" export onnx --checkpoint $CT --out $CS
expect2 "predict --out a dataset split" "series/train.bin" "dataset split" -- \
  "$LSTMD" predict --checkpoint $CS --input "$DATA/seattle-temps.csv" --out series/train.bin
cp rs/metrics.jsonl metrics-before.jsonl
expect2 "quantize --out a run's metrics.jsonl" "rs/metrics.jsonl" "training run's record" -- \
  "$LSTMD" quantize --checkpoint $CT --out rs/metrics.jsonl
expect2 "predict --out a run's train.log" "rs/train.log" "training run's record" -- \
  "$LSTMD" predict --checkpoint $CS --input "$DATA/seattle-temps.csv" --out rs/train.log
cmp -s ckpt-before.safetensors $CS && cmp -s val-before.bin text/val.bin &&
  cmp -s metrics-before.jsonl rs/metrics.jsonl ||
  fail "--out a checkpoint, a split or a run's record" "$CS, text/val.bin or rs/metrics.jsonl was replaced"
run "$LSTMD" quantize --checkpoint $CT --out qt-again.safetensors
run "$LSTMD" quantize --checkpoint $CT --out qt-again.safetensors
ok "quantize --out an earlier int8 file replaces it"

# Ctrl-C while quantize or export writes its file: the temp file ("OUT.tmp.PID", a partial file)
# goes with the process, and no OUT appears (the process is stopped once its temp file is seen,
# and signalled only when that file is still there, i.e. before the rename; a model of ~10 MB
# so that the write lasts long enough to be seen; tries again when it was not)
run "$LSTMD" train --set data.path=text --set train.run_dir=rbig --set model.hidden=512 \
  --set data.seq_len=16 --set data.batch_size=2 --set train.steps=1 "${COMMON[@]}"
python3 - "$LSTMD" rbig/latest.safetensors <<'EOF' || failures=$((failures + 1))
import os, signal, subprocess, sys
lstmd, ckpt = sys.argv[1:3]
bad = 0
for cmd, out in ((["quantize"], "cut.int8"), (["export", "onnx"], "cut.onnx"),
                 (["export", "onnx", "--int8"], "cut8.onnx")):
    name = "Ctrl-C during " + " ".join(cmd)
    def ours(): return [f for f in os.listdir(".") if f.startswith(out)]
    def writing(): return any(".tmp." in f for f in ours())
    for attempt in range(100):
        p = subprocess.Popen([lstmd] + cmd + ["--checkpoint", ckpt, "--out", out],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        while p.poll() is None and not writing(): pass
        if p.poll() is None: os.kill(p.pid, signal.SIGSTOP)
        if p.poll() is None and writing():
            os.kill(p.pid, signal.SIGINT); os.kill(p.pid, signal.SIGCONT); p.wait()
            left = ours()
            if p.returncode == -signal.SIGINT and not left:
                print(f"ok   [{name}: killed by SIGINT while writing (try {attempt + 1}), nothing left]")
            else:
                print(f"FAIL [{name}]: exit {p.returncode}, left {left}"); bad += 1
            break
        if p.poll() is None: os.kill(p.pid, signal.SIGCONT)
        p.wait()
        for f in ours(): os.remove(f)
    else:
        print(f"FAIL [{name}]: the temp file was never seen in 100 tries"); bad += 1
    for f in ours(): os.remove(f)
sys.exit(bad > 0)
EOF

# st_rewrite SRC DST OP [ARGS]: a valid safetensors file with one change. OPs: drop-last NAME,
# set NAME INDEX VALUE (an F32 element), delete NAME, to-f32 NAME (an I8 tensor as F32), tag T.
st_rewrite() {
  python3 - "$@" <<'EOF' || exit 1
import json, struct, sys
src, dst, op, args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
raw = open(src, "rb").read()
(n,) = struct.unpack("<Q", raw[:8])
head = json.loads(raw[8:8 + n])
meta = head.pop("__metadata__", {})
body = raw[8 + n:]
order = sorted(head, key=lambda k: head[k]["data_offsets"][0])
data = {k: bytearray(body[head[k]["data_offsets"][0]:head[k]["data_offsets"][1]]) for k in order}
if op == "drop-last":
    head[args[0]]["shape"][0] -= 1; data[args[0]] = data[args[0]][:-4]
elif op == "set":
    i = int(args[1]); data[args[0]][4 * i:4 * i + 4] = struct.pack("<f", float(args[2]))
elif op == "delete":
    order.remove(args[0])
elif op == "to-f32":
    head[args[0]]["dtype"] = "F32"
    data[args[0]] = bytearray(b"".join(struct.pack("<f", float(v)) for v in struct.unpack("<%db" % len(data[args[0]]), bytes(data[args[0]]))))
elif op == "tag":
    meta["format"] = args[0]
out, off = {"__metadata__": meta}, 0
for k in order:
    out[k] = {"dtype": head[k]["dtype"], "shape": head[k]["shape"], "data_offsets": [off, off + len(data[k])]}
    off += len(data[k])
text = json.dumps(out, separators=(",", ":")).encode()
text += b" " * (-len(text) % 8)
open(dst, "wb").write(struct.pack("<Q", len(text)) + text + b"".join(bytes(data[k]) for k in order))
EOF
}
size=$(stat -c %s qt.safetensors)
for cut in 0 5 100 1000 $((size / 2)) $((size - 1)); do
  head -c $cut qt.safetensors >cut-$cut.safetensors
  expect2 "eval: int8 file truncated to $cut of $size bytes" cut-$cut.safetensors -- \
    "$LSTMD" eval --checkpoint cut-$cut.safetensors --data text
done
python3 -c 'import sys; b=bytearray(open("qt.safetensors","rb").read()); b[8]=ord("["); open("bad-json.safetensors","wb").write(b)'
expect2 "eval: corrupt JSON header" bad-json.safetensors -- "$LSTMD" eval --checkpoint bad-json.safetensors --data text
st_rewrite qt.safetensors tag.safetensors tag lstmd-int8-2
expect2 "eval: wrong format tag" tag.safetensors "lstmd-int8-2" "expected lstmd-int8-1" -- "$LSTMD" eval --checkpoint tag.safetensors --data text
st_rewrite qt.safetensors count.safetensors drop-last lstm.weight_hh_l0.scale
expect2 "eval: scale count != rows" count.safetensors "lstm.weight_hh_l0.scale" -- \
  "$LSTMD" eval --checkpoint count.safetensors --data text
for v in nan inf -inf 0 -0.5; do
  st_rewrite qt.safetensors scale-$v.safetensors set lstm.weight_ih_l1.scale 7 $v
  expect2 "eval: scale $v" scale-$v.safetensors "lstm.weight_ih_l1.scale" "row 7" -- \
    "$LSTMD" eval --checkpoint scale-$v.safetensors --data text
done
st_rewrite qs.safetensors sscale.safetensors set head.weight.scale 1 nan
expect2 "predict: series scale nan" sscale.safetensors "head.weight.scale" -- \
  "$LSTMD" predict --checkpoint sscale.safetensors --input "$DATA/seattle-temps.csv" --out never.csv
[[ ! -e never.csv ]] || fail "predict: series scale nan" "wrote never.csv"
st_rewrite qt.safetensors bias.safetensors set head.bias 3 inf
expect2 "sample: non-finite bias" bias.safetensors "head.bias" -- \
  "$LSTMD" sample --checkpoint bias.safetensors --length 5
st_rewrite qt.safetensors noscale.safetensors delete head.weight.scale
expect2 "eval: scale tensor missing" noscale.safetensors "head.weight.scale" -- \
  "$LSTMD" eval --checkpoint noscale.safetensors --data text
st_rewrite qt.safetensors f32.safetensors to-f32 lstm.weight_ih_l0
expect2 "eval: weight stored as F32" f32.safetensors "lstm.weight_ih_l0" -- \
  "$LSTMD" eval --checkpoint f32.safetensors --data text

echo "test_quantize: $failures failure(s)"
((failures == 0))
