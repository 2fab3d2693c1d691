#!/usr/bin/env bash
# test_classify_series.sh — series classification (issue 19 §2, `prepare classify --series`), on
# deploy/examples/wave_shapes.py's synthetic waves (sine/square/sawtooth/triangle + noise):
#  1. prepare: an independent Python decoder checks the header (version 2, kind 3, dtype 4,
#     width N, no vocabulary, labels ascending, the training split's global mean/std, CRCs) and
#     that the records of both splits hold exactly the input's (label, values) rows; the same
#     file twice gives the same bytes, and so does the label as the last column (--label-column
#     last); --header auto/yes/no; a byte order mark + quoted header + CRLF gives the same bytes;
#  2. bad lines exit 2 naming FILE:LINE and leave no output; 200 random mutations of a good file
#     each end in exit 0 or in exit 2 naming FILE:LINE with nothing written; a NaN record (CRC
#     recomputed) and a dtype-4 header claiming version 1 are refused by the reader;
#  3. training: a bidirectional max-pooled classifier learns 3 shapes (eval accuracy ≥ 0.9);
#     every evaluation logs val_accuracy beside val_loss (train.log, metrics.jsonl and the
#     TensorBoard scalar val/accuracy, read here from the event file), equal to `lstmd eval`'s
#     accuracy at the last step; the checkpoint has no embedding, lstm.weight_ih_l0 [4H,1] and the
#     normalisation;
#  4. `lstmd classify` prints label<TAB>p for every CSV row (right on ≥ 0.85 of fresh rows); a row
#     of the wrong length exits 2 naming FILE:LINE; `lstmd eval` of a split prepared from another
#     file notes that its statistics differ from the model's (its own split: no note);
#  5. mpirun -np 2 × batch 4 = 1 rank × batch 8 (bidirectional, last; updates within 1e-5);
#  6. a series classifier job through `lstmd serve` + lstmctl (2 ranks) SUCCEEDED with the weights
#     of the same run under mpirun, bit for bit.
set -u
LSTMD=$(realpath "${1:?usage: test_classify_series.sh LSTMD SOURCE_DIR}")
SRC=$(realpath "${2:?}")
PY=/usr/bin/python3
export PYTHONPATH=$SRC/tests # dataset_crc.py
GEN=$SRC/deploy/examples/wave_shapes.py
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_plm=isolated
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export CUDA_VISIBLE_DEVICES=
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cd "$TMP"
FAIL=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; FAIL=1; }

# 1. prepare
SHAPES=--shapes=sawtooth,sine,square
$PY "$GEN" 800 --length 48 --noise 0.2 --seed 5 $SHAPES > w.csv
"$LSTMD" prepare classify --series --input w.csv --out d --val-fraction 0.2 2> log || bad "prepare: $(cat log)"
grep -q "800 rows of 48 values (header line skipped), 3 classes, train 640, val 160" log \
  && ok "prepare: $(cat log)" || bad "summary line: $(cat log)"
"$LSTMD" prepare classify --series --input w.csv --out d2 --val-fraction 0.2 --header yes 2>/dev/null
cmp -s d/train.bin d2/train.bin && cmp -s d/val.bin d2/val.bin && ok "the same file twice: the same bytes" \
  || bad "two runs differ"
awk -F, -v OFS=, '{ l = $1; for (i = 1; i < NF; i++) $i = $(i + 1); $NF = l; print }' w.csv > last.csv
"$LSTMD" prepare classify --series --input last.csv --out d3 --val-fraction 0.2 --label-column last 2>/dev/null
cmp -s d/train.bin d3/train.bin && cmp -s d/val.bin d3/val.bin && ok "--label-column last: the same bytes" \
  || bad "--label-column last differs"
tail -n +2 w.csv > nohead.csv
"$LSTMD" prepare classify --series --input nohead.csv --out d4 --val-fraction 0.2 --header no 2>/dev/null
cmp -s d/train.bin d4/train.bin && ok "--header no on a file without one: the same bytes" || bad "--header no"
# Excel's "CSV UTF-8": a byte order mark, every header cell quoted, CRLF line ends
{ printf '\xef\xbb\xbf'; head -1 w.csv | sed 's/[^,]*/"&"/g'; tail -n +2 w.csv; } | sed 's/$/\r/' > excel.csv
"$LSTMD" prepare classify --series --input excel.csv --out d5 --val-fraction 0.2 2> err
cmp -s d/train.bin d5/train.bin && cmp -s d/val.bin d5/val.bin \
  && ok "byte order mark + quoted header + CRLF: the same bytes" || bad "BOM + quoted + CRLF: $(cat err)"

if msg=$($PY - w.csv d <<'PY'
import struct, sys
import numpy as np
from dataset_crc import crc32c, header_crc_ok
lines = open(sys.argv[1]).read().split('\n')[1:]
want = sorted((l.split(',')[0], tuple(np.float32(v) for v in l.split(',')[1:])) for l in lines if l)
labels = sorted({w[0] for w in want})
got, stats = {}, []
for split in ('train', 'val'):
    raw = open(f'{sys.argv[2]}/{split}.bin', 'rb').read()
    assert raw[:8] == b'LSTMDDAT'
    ver, kind, dtype, hb = struct.unpack_from('<4I', raw, 8)
    count, = struct.unpack_from('<Q', raw, 24)
    width, vs, classes, pcrc, hcrc, season = struct.unpack_from('<6I', raw, 32)
    assert (ver, kind, dtype, width, vs, classes, season) == (2, 3, 4, 48, 0, 3, 0), (ver, kind, dtype, width, vs, classes)
    assert header_crc_ok(raw, hb), 'header crc'
    p = 64; names = []
    for _ in range(classes):
        n = raw[p]; names.append(raw[p + 1:p + 1 + n].decode()); p += 1 + n
    assert names == labels, names
    stats.append(struct.unpack_from('<2f', raw, p))
    assert not any(raw[p + 8:hb]), 'header padding'
    payload = raw[hb:]
    rb = 8 + 4 * width
    assert len(payload) == count * rb and crc32c(payload) == pcrc, 'payload'
    got[split] = []
    for r in range(count):
        lab, n = struct.unpack_from('<2I', payload, r * rb)
        assert n == width
        got[split].append((names[lab], tuple(np.frombuffer(payload, '<f4', width, r * rb + 8))))
assert stats[0] == stats[1], stats
assert sorted(got['train'] + got['val']) == want, 'records differ from the input rows'
assert {l for l, _ in got['val']} == set(labels), 'validation lacks a class'
train = np.array([v for _, v in got['train']], dtype=np.float64)
mean, std = stats[0]
assert abs(mean - train.mean()) < 1e-5 and abs(std - train.std()) < 1e-5 * train.std(), (stats, train.mean(), train.std())
print(f"decoded {len(got['train'])}+{len(got['val'])} records = the input rows; labels {labels}; "
      f"global mean {mean:.5f} std {std:.5f} = numpy's over the training split")
PY
); then ok "$msg"; else bad "decoder: $msg"; fi

# 2. bad input
badcase() { # NAME CONTENT EXPECTED [extra prepare args]
  local name=$1 content=$2 want=$3; shift 3
  printf "$content" > "$name.csv"
  "$LSTMD" prepare classify --series --input "$name.csv" --out "out_$name" "$@" > out 2> err; rc=$?
  if [[ $rc == 2 && ! -s out && ! -e out_$name ]] && grep -qF "$want" err; then ok "$name: $(cat err)"
  else bad "$name: exit $rc, '$(cat err)', want '$want'"; fi
}
badcase short 'a,1,2,3\nb,4,5\n' "short.csv:2: 2 values, the first row has 3"
badcase long 'a,1,2\nb,4,5\na,1,2,3\n' "long.csv:3: 3 values, the first row has 2"
badcase word 'a,1,2\nb,4,x\n' "word.csv:2: column 3: 'x' is not a finite number"
badcase nan 'a,1,2\nb,nan,1\n' "nan.csv:2: column 2: a missing value ('nan'); --missing previous"
badcase inf 'a,1,2\nb,1,-inf' "inf.csv:2: column 3: '-inf' is not a finite number"
badcase huge 'a,1,2\nb,1,1e39\n' "huge.csv:2: column 3: '1e39' is not a finite number"
badcase hex 'a,1,2\nb,0x10,1\n' "hex.csv:2: column 2: '0x10' is not a finite number (hexadecimal is not read: write the value in decimal)"
badcase emptyvalue 'a,1,2\nb,,2\n' "emptyvalue.csv:2: column 2: a missing value (an empty field); --missing previous"
badcase emptylabel 'a,1,2\n,3,4\n' "emptylabel.csv:2: column 1: empty label"
badcase mixed 'label,1,x\na,1,2\nb,3,4\n' "mixed.csv:1: the first line mixes numbers and names"
badcase headerno 'label,t0,t1\na,1,2\nb,3,4\n' "headerno.csv:1: column 2: 't0' is not a finite number" --header no
badcase nolabelcol 'a,1,2\nb,3,4\n' "nolabelcol.csv:1: 3 fields, the label is column 4" --label-column 4
badcase novalues 'a\nb\n' "novalues.csv:1: a label and no values"
badcase onelabel 'a,1,2\na,3,4\n' "one label only ('a')"
badcase onlyheader 'label,t0\n' "onlyheader.csv: no data rows"
badcase quote 'a,1,2\nb,"3,4\n' "quote.csv:2: malformed CSV"
badcase semicolon 'a;1;2\nb;3;4\n' "semicolon.csv: its first line is split by ';', not by ','"
badcase headerval 'a,1\nb,2\n' "'maybe' is not one of auto yes no" --header maybe
printf 'a,1\nb,2\n' > ok.csv
"$LSTMD" prepare classify --input ok.csv --out o --header yes 2> err; rc=$?
[[ $rc == 2 && ! -e o ]] && grep -q "belong to --series" err && ok "--header without --series: $(cat err)" \
  || bad "--header without --series: $rc $(cat err)"

# random mutations of a good file: exit 0, or exit 2 naming FILE:LINE with nothing written
$PY "$GEN" 12 --length 6 --seed 2 > seed.csv
$PY - seed.csv <<'PY'
import random, sys
src = open(sys.argv[1], 'rb').read()
rng = random.Random(11)
alphabet = b'0123456789,.-+eE\n\r"x \t'
for k in range(200):
    b = bytearray(src)
    for _ in range(rng.randint(1, 4)):
        op, i = rng.random(), rng.randrange(len(b))
        if op < 0.4: b[i] = rng.choice(alphabet)
        elif op < 0.7: del b[i:i + rng.randint(1, 8)]
        else: b[i:i] = bytes(rng.choice(alphabet) for _ in range(rng.randint(1, 3)))
    open('mut%03d.csv' % k, 'wb').write(bytes(b))
PY
n0=0 n2=0
for f in mut*.csv; do
  timeout 20 "$LSTMD" prepare classify --series --input $f --out "out_$f" --val-fraction 0.2 >/dev/null 2>err; rc=$?
  if [[ $rc == 0 && -f out_$f/train.bin ]]; then n0=$((n0 + 1))
  elif [[ $rc == 2 && ! -e out_$f ]] && grep -qE "lstmd: $f(:[0-9]+:|: )" err; then n2=$((n2 + 1))
  else bad "mutation $f: exit $rc, $(cat err)"; fi
done
((n0 + n2 == 200)) && ok "200 mutations: $n0 prepared, $n2 refused naming the file (and line)" ||
  bad "mutations: $((n0 + n2)) of 200 ran to a verdict"

$PY - d <<'PY'
import struct, sys, shutil
from dataset_crc import fix_crcs
for name, how in (('nanrec', 'nan'), ('v1', 'version')):
    shutil.copytree(sys.argv[1], name)
    raw = bytearray(open(f'{name}/train.bin', 'rb').read())
    hb, = struct.unpack_from('<I', raw, 20)
    if how == 'nan': struct.pack_into('<f', raw, hb + 8 + 4 * 3, float('nan'))
    else: struct.pack_into('<I', raw, 8, 1)
    fix_crcs(raw, hb)
    open(f'{name}/train.bin', 'wb').write(raw)
PY
for c in "nanrec:nanrec/train.bin: cannot read payload" "v1:v1/train.bin: inconsistent dataset header"; do
  printf '[data]\npath = %s\n[train]\nrun_dir = run_%s\nsteps = 1\n' ${c%%:*} ${c%%:*} > c.ini
  "$LSTMD" train --config c.ini --device cpu > /dev/null 2> err; rc=$?
  [[ $rc == 2 ]] && grep -q "${c#*:}" err && ok "${c%%:*} refused: $(grep -m1 "${c#*:}" err)" \
    || bad "${c%%:*}: $rc $(tail -2 err)"
done

# 3. training, evaluation, val_accuracy
common=(--set data.path=d --set model.hidden=24 --device cpu --set train.log_every=50)
"$LSTMD" train "${common[@]}" --set model.bidirectional=true --set model.pool=max \
  --set data.batch_size=32 --set optim.lr=0.01 --set train.steps=240 --set train.eval_every=80 \
  --set train.run_dir=run >/dev/null 2>err || bad "train: $(tail -3 err)"
"$LSTMD" eval --checkpoint run/latest.safetensors --data d > eval.json 2>err || bad "eval: $(cat err)"
if msg=$($PY - eval.json run d/train.bin <<'PY'
import glob, json, struct, sys
e = json.load(open(sys.argv[1]))
run = sys.argv[2]
evals = [json.loads(l) for l in open(run + '/metrics.jsonl') if '"val_loss"' in l]
log = [l for l in open(run + '/train.log') if 'val_accuracy' in l]
assert [r['step'] for r in evals] == [80, 160, 240] and all('val_accuracy' in r for r in evals), evals
assert len(log) == 3 and all('eval step' in l for l in log), log
for r, l in zip(evals, log):
    assert ('val_accuracy %.4f' % r['val_accuracy']) in l, (r, l)
last = evals[-1]
assert abs(e['loss'] - last['val_loss']) < 1e-5 and abs(e['accuracy'] - last['val_accuracy']) < 1e-6, (e, last)
conf = e['confusion']
assert e['labels'] == ['sawtooth', 'sine', 'square'], e['labels']
assert sum(map(sum, conf)) == e['sequences'] == 160, e
assert abs(sum(conf[k][k] for k in range(3)) - e['accuracy'] * 160) < 1e-3, e
assert e['accuracy'] >= 0.9, e['accuracy']
# TensorBoard: TFRecords of Event protos; the scalars are Summary.Value{tag=1, simple_value=2}
def varint(b, p):
    v = s = 0
    while True:
        x = b[p]; p += 1; v |= (x & 0x7f) << s; s += 7
        if x < 0x80: return v, p
def fields(b):
    p = 0
    while p < len(b):
        key, p = varint(b, p)
        f, wt = key >> 3, key & 7
        if wt == 0: v, p = varint(b, p)
        elif wt == 1: v = b[p:p + 8]; p += 8
        elif wt == 5: v = b[p:p + 4]; p += 4
        else: n, p = varint(b, p); v = b[p:p + n]; p += n
        yield f, v
tb = {}
raw = open(glob.glob(run + '/events.out.tfevents.*')[0], 'rb').read()
p = 0
while p < len(raw):
    n, = struct.unpack_from('<Q', raw, p); ev = raw[p + 12:p + 12 + n]; p += 16 + n
    step = dict(fields(ev)).get(2, 0)
    for f, summ in fields(ev):
        if f != 5: continue
        for g, val in fields(summ):
            d = dict(fields(val))
            if g == 1 and d.get(1) == b'val/accuracy': tb[step] = struct.unpack('<f', d[2])[0]
assert sorted(tb) == [80, 160, 240], tb
assert all(abs(tb[r['step']] - r['val_accuracy']) < 1e-6 for r in evals), (tb, evals)
ck = open(run + '/latest.safetensors', 'rb').read()
head = json.loads(ck[8:8 + struct.unpack('<Q', ck[:8])[0]])
meta = head['__metadata__']
ds = open(sys.argv[3], 'rb').read()
stats = struct.unpack_from('<2f', ds, 64 + sum(1 + len(l) for l in e['labels']))
assert 'embed.weight' not in head and head['lstm.weight_ih_l0']['shape'] == [96, 1], head.keys()
assert head['lstm.weight_ih_l0_reverse']['shape'] == [96, 1] and head['head.weight']['shape'] == [3, 48]
assert (meta['model.kind'], meta['model.width'], meta['model.vocab'], meta['model.embed']) == ('classify', '1', '0', '0'), meta
assert (json.loads(meta['classify.mean'])[0], json.loads(meta['classify.std'])[0]) == tuple(float(x) for x in stats), meta
print('accuracy %.4f; val_accuracy per evaluation %s in train.log, metrics.jsonl and TensorBoard; '
      'checkpoint: lstm.weight_ih_l0 [96,1], no embedding, normalisation %s' %
      (e['accuracy'], [r['val_accuracy'] for r in evals], stats))
PY
); then ok "$msg"; else bad "train/eval/metrics: $msg"; fi

# 4. classify
$PY "$GEN" 200 --length 48 --noise 0.2 --seed 99 $SHAPES --no-label > q.csv 2> q.labels
if "$LSTMD" classify --checkpoint run/latest.safetensors --input q.csv > q.out 2>err &&
   msg=$($PY - q.out q.labels <<'PY'
import sys
out = [l.rstrip('\n').split('\t') for l in open(sys.argv[1])]
want = open(sys.argv[2]).read().split()
assert len(out) == len(want) == 200 and all(len(o) == 2 and 1 / 3 <= float(o[1]) <= 1 for o in out), out[:3]
right = sum(o[0] == w for o, w in zip(out, want)) / len(want)
assert right >= 0.85, right
print('%d rows, %.3f right, e.g. %s' % (len(out), right, '\t'.join(out[0])))
PY
); then ok "classify: $msg"; else bad "classify: ${msg:-} $(cat err)"; fi
# eval of a split prepared from other data (its own mean and std): scored with the model's, and
# said so; the model's own split: no note
$PY "$GEN" 200 --length 48 --noise 0.2 --seed 98 $SHAPES > new.csv
"$LSTMD" prepare classify --series --input new.csv --out dnew --val-fraction 0.5 2>/dev/null || bad "prepare new.csv"
"$LSTMD" eval --checkpoint run/latest.safetensors --data dnew > /dev/null 2>err || bad "eval of dnew: $(cat err)"
"$LSTMD" eval --checkpoint run/latest.safetensors --data d > /dev/null 2>err0
grep -q "note: dnew.* was prepared with other statistics than the classifier was trained with (mean .* in the checkpoint, .* in the dataset); scoring with the checkpoint's" err &&
  ! grep -q "other statistics" err0 && ok "eval of another file's split: $(grep -o 'other statistics.*' err | cut -c1-90)..." ||
  bad "eval of another file's split says nothing of its statistics: $(cat err) / $(cat err0)"
printf '1,2,3\n' > q3.csv
"$LSTMD" classify --checkpoint run/latest.safetensors --input q3.csv > /dev/null 2> err; rc=$?
[[ $rc == 2 ]] && grep -q "q3.csv:1: 3 values, the model was trained on rows of 48" err \
  && ok "wrong length: $(cat err)" || bad "wrong length: rc $rc $(cat err)"
# a labelled row (a label column the model does not have): the row's length is named, not a
# --header option classify does not take ("the first line mixes numbers and names")
{ printf 'up,'; head -1 q.csv; } > qlab.csv
"$LSTMD" classify --checkpoint run/latest.safetensors --input qlab.csv > /dev/null 2> err; rc=$?
[[ $rc == 2 ]] && grep -q "qlab.csv:1: 49 values, the model was trained on rows of 48 (no label column)" err \
  && ok "a labelled first row: $(cat err)" || bad "a labelled first row: rc $rc $(cat err)"
# eval of a split of other row lengths: refused as classify refuses them (it scored them)
$PY "$GEN" 200 --length 20 --noise 0.2 --seed 97 $SHAPES > w20.csv
"$LSTMD" prepare classify --series --input w20.csv --out d20 --val-fraction 0.5 2>/dev/null || bad "prepare w20.csv"
"$LSTMD" eval --checkpoint run/latest.safetensors --data d20 > /dev/null 2> err; rc=$?
[[ $rc == 2 ]] && grep -q "d20/val.bin: rows of 20 values, the classifier was trained on rows of 48" err \
  && ok "eval of rows of another length: $(cat err)" || bad "eval of 20-value rows: rc $rc $(cat err)"
# stdout that cannot be written: said, exit 1 (it exited 0 in silence)
"$LSTMD" classify --checkpoint run/latest.safetensors --input q.csv > /dev/full 2> err; rc=$?
[[ $rc == 1 ]] && grep -q "classify: writing to stdout failed: No space left on device" err \
  && ok "classify > /dev/full: exit 1, $(cat err)" || bad "classify > /dev/full: rc $rc $(cat err)"

# 5. two ranks = one rank
eq=("${common[@]}" --set model.layers=2 --set model.bidirectional=true --set model.pool=last
    --set optim.algo=sgd --set optim.lr=0.5 --set optim.clip_norm=0 --set train.eval_every=0)
"$LSTMD" train "${eq[@]}" --set data.batch_size=8 --set optim.lr=0 --set train.steps=1 \
  --set train.run_dir=init >/dev/null 2>&1 || bad "initialisation run"
"$LSTMD" train "${eq[@]}" --set data.batch_size=8 --set train.steps=6 --set train.run_dir=one \
  >/dev/null 2>&1 || bad "one rank"
timeout 120 mpirun -np 2 "$LSTMD" train "${eq[@]}" --set data.batch_size=4 --set train.steps=6 \
  --set train.run_dir=two >/dev/null 2>err || bad "mpirun -np 2: $(tail -3 err)"
if msg=$($PY "$SRC/tests/compare_checkpoints.py" one/step-6.safetensors two/step-6.safetensors \
         --rtol 1e-5 --initial init/step-1.safetensors); then
  ok "bidirectional last: mpirun -np 2 × batch 4 = 1 rank × batch 8: $msg"
else bad "2 ranks vs 1: $msg"; fi

# 6. through the daemon: the job's weights equal the same run's under mpirun
job=(--set data.path="$TMP/d" --set model.hidden=16 --set model.bidirectional=true
     --set model.pool=mean --set data.batch_size=4 --set train.steps=8 --set train.eval_every=0
     --set train.threads=1 --set optim.algo=sgd --set optim.lr=0.1 --set optim.clip_norm=0)
source "$SRC/tests/daemon_vs_mpirun.sh"
daemon_vs_mpirun "a series classifier job" 8 "${job[@]}"

[[ $FAIL == 0 ]] && echo "test_classify_series: all passed"
exit $FAIL
