#!/usr/bin/env bash
# test_classify_data.sh — `lstmd prepare classify` (issue 19 §2, the dataset):
#  1. a label<TAB>text file (CRLF line included, labels out of order) → train.bin/val.bin of kind 3:
#     an independent Python decoder checks the header (kind, dtype, width = longest text, classes,
#     header CRC-32C), the labels in ascending byte order, the byte vocabulary, and that the
#     records of both splits hold exactly the input's (label, text) pairs, zero-padded;
#  2. the same file twice gives the same bytes (the shuffle has a fixed seed), and so does the
#     file with a UTF-8 byte order mark in front;
#  3. bad lines exit 2 naming FILE:LINE and leave no output folder; a record whose label id is
#     out of range (payload CRC recomputed) is refused by the reader's verify;
#  4. model.bidirectional and model.pool on a text LM or a forecasting series exit 2 naming them
#     (training classifiers: test_classify_train.sh).
set -u
LSTMD=$(realpath "${1:?usage: test_classify_data.sh LSTMD}")
export CUDA_VISIBLE_DEVICES= OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export PYTHONPATH=$(cd "$(dirname "$0")" && pwd) # dataset_crc.py
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cd "$TMP"
FAIL=0
fail() { echo "FAIL: $*"; FAIL=1; }

printf 'fr\tbonjour\nen\thello\r\nde\thallo Welt\nen\tworld\nde\tKatze\nfr\tchat\nen\tcat\nde\tHund\nfr\tchien\nen\tdog\nes\tperro\nes\tgato\n' > in.tsv
"$LSTMD" prepare classify --input in.tsv --out d --val-fraction 0.25 2> log || fail "prepare exit $?"
grep -q "12 sequences, 4 classes" log || fail "summary line: $(cat log)"
"$LSTMD" prepare classify --input in.tsv --out d2 --val-fraction 0.25 2>/dev/null
cmp -s d/train.bin d2/train.bin && cmp -s d/val.bin d2/val.bin || fail "two runs differ"
printf '\xef\xbb\xbf' | cat - in.tsv > bom.tsv # a UTF-8 byte order mark: skipped, same dataset
"$LSTMD" prepare classify --input bom.tsv --out d3 --val-fraction 0.25 2>/dev/null
cmp -s d/train.bin d3/train.bin && cmp -s d/val.bin d3/val.bin || fail "a byte order mark changed the dataset"

python3 - in.tsv d <<'PY' || FAIL=1
import struct, sys
from dataset_crc import crc32c
want = []
for line in open(sys.argv[1], 'rb').read().split(b'\n'):
    if not line: continue
    line = line.rstrip(b'\r')
    lab, txt = line.split(b'\t', 1)
    want.append((lab, txt))
labels = sorted({l for l, _ in want})
vocab = sorted({c for _, t in want for c in t})
got = []
for split in ('train', 'val'):
    raw = open(f'{sys.argv[2]}/{split}.bin', 'rb').read()
    assert raw[:8] == b'LSTMDDAT', 'magic'
    ver, kind, dtype, hb = struct.unpack_from('<4I', raw, 8)
    count, = struct.unpack_from('<Q', raw, 24)
    width, vs, classes, pcrc, hcrc, season = struct.unpack_from('<6I', raw, 32)
    assert (ver, kind, dtype, season) == (1, 3, 3, 0), (ver, kind, dtype, season)
    assert width == max(len(t) for _, t in want), width
    assert classes == len(labels) and vs == len(vocab), (classes, vs)
    h = bytearray(raw[:hb]); h[48:52] = b'\0\0\0\0'
    assert crc32c(bytes(h)) == hcrc, 'header crc'
    assert list(raw[64:64 + vs]) == vocab, 'vocab'
    p = 64 + vs; names = []
    for _ in range(classes):
        n = raw[p]; names.append(raw[p + 1:p + 1 + n]); p += 1 + n
    assert names == labels, names
    assert any(b for b in raw[p:hb]) is False, 'header padding'
    payload = raw[hb:]
    assert len(payload) == count * (8 + width) and crc32c(payload) == pcrc, 'payload'
    for r in range(count):
        rec = payload[r * (8 + width):(r + 1) * (8 + width)]
        lab, n = struct.unpack_from('<2I', rec)
        ids = rec[8:]
        assert 1 <= n <= width and not any(ids[n:]), 'padding'
        got.append((names[lab], bytes(vocab[i] for i in ids[:n])))
    print(split, count, 'records')
assert sorted(got) == sorted(want), (sorted(got), sorted(want))
print('decoded', len(got), 'pairs; labels', [l.decode() for l in labels])
PY

bad() { # bad NAME CONTENT EXPECTED-MESSAGE
  printf "$2" > "$1.tsv"
  "$LSTMD" prepare classify --input "$1.tsv" --out "out_$1" 2> err; rc=$?
  [[ $rc == 2 ]] || fail "$1: exit $rc, want 2"
  grep -qF "$3" err || fail "$1: message '$(cat err)', want '$3'"
  [[ ! -e out_$1 ]] || fail "$1: left out_$1"
}
bad notab 'en\thello\nde hallo\n' "notab.tsv:2: no TAB"
bad emptylabel 'en\thello\n\thallo\n' "emptylabel.tsv:2: empty label"
bad emptytext 'en\thello\nde\t\n' "emptytext.tsv:2: empty text"
bad emptyline 'en\thello\n\nde\thallo\n' "emptyline.tsv:2: empty line"
bad longlabel "en\thello\n$(printf 'x%.0s' {1..64})\thallo\n" "longlabel.tsv:2: label longer than 63 bytes"
bad onelabel 'en\thello\nen\tworld\n' "one label only ('en')"
python3 -c "print('en\thi'); print('de\t' + 'a' * 4097)" > longtext.tsv
"$LSTMD" prepare classify --input longtext.tsv --out out_lt 2> err; rc=$?
[[ $rc == 2 ]] && grep -qF "longtext.tsv:2: text of 4097 bytes, at most 4096" err || fail "longtext: $rc $(cat err)"
python3 -c "
for k in range(65): print(f'l{k:02d}\tx')" > many.tsv
"$LSTMD" prepare classify --input many.tsv --out out_many 2> err; rc=$?
[[ $rc == 2 ]] && grep -qF "many.tsv:65: more than 64 distinct labels" err || fail "many: $rc $(cat err)"

# A label id out of range with a consistent CRC: the reader's verify refuses it.
cp -r d bad && python3 - bad/train.bin <<'PY'
import struct, sys
from dataset_crc import crc32c
raw = bytearray(open(sys.argv[1], 'rb').read())
hb, = struct.unpack_from('<I', raw, 20)
struct.pack_into('<I', raw, hb, 9)                # label id 9 of 4 classes
struct.pack_into('<I', raw, 44, crc32c(bytes(raw[hb:])))
raw[48:52] = b'\0\0\0\0'
struct.pack_into('<I', raw, 48, crc32c(bytes(raw[:hb])))
open(sys.argv[1], 'wb').write(raw)
PY
printf '[data]\npath = bad\n[train]\nrun_dir = run\nsteps = 1\n' > bad.ini
"$LSTMD" train --config bad.ini --device cpu > /dev/null 2> err; rc=$?
[[ $rc != 0 ]] && grep -q "bad/train.bin: cannot read payload" err || fail "bad label id: $rc $(tail -2 err)"

# model.bidirectional / model.pool: refused for a text LM and for forecasting (exit 2 naming them).
python3 -c "print('the quick brown fox jumps over the lazy dog. ' * 200, end='')" > lm.txt
"$LSTMD" prepare text --input lm.txt --out td 2>/dev/null
python3 -c "
import math
print('y,x')
for i in range(400): print(f'{math.sin(i/5):.4f},{math.cos(i/7):.4f}')" > s.csv
"$LSTMD" prepare series --input s.csv --target y --out sd 2>/dev/null
for data in td sd; do
  printf '[data]\npath = %s\nseq_len = 16\nbatch_size = 4\n[train]\nrun_dir = run_%s\nsteps = 1\n' $data $data > $data.ini
  for kv in model.bidirectional=true model.pool=max; do
    "$LSTMD" train --config $data.ini --device cpu --set $kv > /dev/null 2> err; rc=$?
    [[ $rc == 2 ]] && grep -q "lstmd: ${kv%%=*}: .* $data is a" err || fail "$data $kv: $rc $(tail -1 err)"
  done
done
"$LSTMD" train --config td.ini --device cpu --set model.pool=avg > /dev/null 2> err; rc=$?
[[ $rc == 2 ]] && grep -q "model.pool: 'avg' is not one of last mean max" err || fail "pool=avg: $rc $(tail -1 err)"

[[ $FAIL == 0 ]] && echo "test_classify_data: all passed"
exit $FAIL
