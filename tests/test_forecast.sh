#!/usr/bin/env bash
# test_forecast.sh — series forecasting settings end to end (issue 19 §1), on a deterministic
# trending + seasonal series (bench/make_trend_series.py, 800 weekly rows):
#  1. prepare series --season P: the season in the dataset header; a bad --season exits 2, so does
#     one the training split cannot hold (one the validation split cannot: a warning); a file
#     from before the field existed (offset 52 zero, header CRC recomputed) loads with season 0;
#  2. a run with model.target=delta, data.window_norm=mean: metrics.jsonl and the TensorBoard file
#     carry val_skill / val/skill; `lstmd eval` prints the baselines and skill, the baselines equal
#     an independent float64 computation from the CSV (persistence; seasonal naive
#     y[i+k−P·ceil(k/P)], y[i] before the first row), skill = 1 − loss / mse_persistence; a flat
#     validation split (persistence exact): skill null in metrics.jsonl and eval, kept by a resume;
#  3. `predict --baselines`: its persistence and seasonal columns equal the CSV's values, and its
#     forecasts (the transform undone) score eval's loss on the same windows; eval (and quantize
#     --calibrate) of a copy with the target × 10, prepared afresh, scores what predict forecasts
#     for it (the checkpoint's mean/std), with a note naming the column and both values;
#     predict's windows end at the last row: the newest row's forecast from N rows is the one
#     from the last seq_len rows (2·seq_len − 1 with window_norm mean), not the one from 8;
#     seq_len 48 (two seasons) in shuffle order on a daily cycle, validation from hour 17: skill
#     > 0.5 (the training windows all began at midnight: -1.34);
#     predict's header quotes a target name that holds a comma (it was written bare);
#  4. the keys: bad values exit 2 naming them; a resume that changes either refused (exit 2,
#     naming it), the same settings resume; window_norm=mean on train.device=cuda refused naming
#     it; ONNX export refuses window_norm (exit 2, naming it) and takes delta; int8 keeps both;
#  5. mpirun -np 2 × batch 4 = 1 rank × batch 8 with delta + mean in stream order (updates within
#     1e-5, compare_checkpoints.py --initial, clip off);
#  6. lstmd serve + lstmctl: a job with --set model.target=delta --set data.window_norm=mean
#     SUCCEEDED, its checkpoint says so; a bad value refused at submission naming the key.
set -u
LSTMD=$(realpath "${1:?usage: test_forecast.sh LSTMD LSTMCTL SOURCE_DIR}")
CTL=$(realpath "${2:?}")
SRC=$(realpath "${3:?}")
export CUDA_VISIBLE_DEVICES=
source "$SRC/tests/serve_helpers.sh"
PY=/usr/bin/python3
meta() { $PY "$SRC/tests/ckpt_meta.py" "$@"; }

# 1. the season in the dataset
$PY "$SRC/bench/make_trend_series.py" "$TMP/trend.csv" 800
"$LSTMD" prepare series --input "$TMP/trend.csv" --target co2 --horizon 4 --val-fraction 0.25 \
  --season 52 --out "$TMP/ds" 2>/dev/null || bad "prepare --season 52"
season_at() { $PY -c "import struct,sys; print(struct.unpack_from('<I', open(sys.argv[1],'rb').read(64), 52)[0])" "$1"; }
[[ $(season_at "$TMP/ds/train.bin") == 52 && $(season_at "$TMP/ds/val.bin") == 52 ]] \
  && ok "--season 52 is in both headers (offset 52)" || bad "season in the header: $(season_at "$TMP/ds/val.bin")"
for s in -1 52x 1000001 ""; do
  "$LSTMD" prepare series --input "$TMP/trend.csv" --target co2 --horizon 4 --season "$s" \
    --out "$TMP/bad" 2>"$TMP/err"; rc=$?
  [[ $rc == 2 ]] && grep -q -- "--season" "$TMP/err" && [[ ! -e $TMP/bad ]] \
    && ok "--season '$s' refused: exit 2, $(head -1 "$TMP/err")" || bad "--season '$s': exit $rc, $(cat "$TMP/err")"
done
# A season the data cannot hold: 800 rows, val 0.25 → train 600, val 200. P ≥ 600: no window of
# the training split holds a row and the row P before it (refused); 200 ≤ P < 600: evaluations'
# seasonal naive would be persistence (a warning, exit 0).
"$LSTMD" prepare series --input "$TMP/trend.csv" --target co2 --horizon 4 --val-fraction 0.25 \
  --season 600 --out "$TMP/bad" 2>"$TMP/err"; rc=$?
[[ $rc == 2 ]] && grep -q -- "--season 600 is not shorter than the training split (600 of 800 rows)" "$TMP/err" \
  && [[ ! -e $TMP/bad ]] && ok "--season 600 on a 600-row training split refused: $(head -1 "$TMP/err")" \
  || bad "--season 600 on 600 training rows: exit $rc, $(cat "$TMP/err")"
"$LSTMD" prepare series --input "$TMP/trend.csv" --target co2 --horizon 4 --val-fraction 0.25 \
  --season 200 --out "$TMP/warn" 2>"$TMP/err"; rc=$?
[[ $rc == 0 ]] && grep -q -- "warning: --season 200 is not shorter than the validation split (200 rows)" "$TMP/err" \
  && ok "--season 200 on a 200-row validation split warns: $(grep warning "$TMP/err")" \
  || bad "--season 200 on 200 validation rows: exit $rc, $(cat "$TMP/err")"
# A dataset as lstmd wrote it before the season existed: offset 52 a reserved zero.
cp -r "$TMP/ds" "$TMP/old"
$PY - "$TMP/old/train.bin" "$TMP/old/val.bin" <<'PYEOF'
import struct, sys
def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF
for path in sys.argv[1:]:
    buf = bytearray(open(path, "rb").read())
    hb = struct.unpack_from("<I", buf, 20)[0]
    struct.pack_into("<I", buf, 52, 0)
    struct.pack_into("<I", buf, 48, 0)
    struct.pack_into("<I", buf, 48, crc32c(bytes(buf[:hb])))
    open(path, "wb").write(buf)
PYEOF

# 2. a run with the forecasting settings
common=(--set data.path="$TMP/ds" --set data.seq_len=26 --set data.order=stream --set model.hidden=16
        --set model.layers=1 --set train.threads=1 --set train.log_every=0)
fc=(--set model.target=delta --set data.window_norm=mean)
"$LSTMD" train "${common[@]}" "${fc[@]}" --set data.batch_size=4 --set train.steps=120 \
  --set train.eval_every=60 --set train.run_dir="$TMP/dm" >/dev/null 2>"$TMP/dm.log" \
  || bad "delta/mean run: $(tail -3 "$TMP/dm.log")"
CK=$TMP/dm/step-120.safetensors
n=$(grep -c '"val_skill"' "$TMP/dm/metrics.jsonl")
[[ $n == 2 ]] && grep '"val_skill"' "$TMP/dm/metrics.jsonl" | tail -1 | grep -q '"val_mse_persistence".*"val_mse_seasonal"' \
  && ok "metrics.jsonl: $n evaluations with baselines and skill: $(tail -1 "$TMP/dm/metrics.jsonl")" \
  || bad "metrics.jsonl: $(cat "$TMP/dm/metrics.jsonl")"
grep -q "val/skill" "$TMP"/dm/events.out.tfevents.* && ok "the TensorBoard file has val/skill" \
  || bad "no val/skill in the TensorBoard file"
[[ $(meta "$CK" series.target) == delta && $(meta "$CK" series.window_norm) == mean && \
   $(meta "$CK" series.season) == 52 ]] && ok "the checkpoint records target delta, window_norm mean, season 52" \
  || bad "checkpoint metadata: $(meta "$CK" series.target) $(meta "$CK" series.window_norm)"
"$LSTMD" eval --checkpoint "$CK" --data "$TMP/ds" > "$TMP/eval.json" 2>"$TMP/err" || bad "eval: $(cat "$TMP/err")"
# The baselines from the CSV in float64: the training split's mean/std, evaluation's positions
# (consecutive windows of seq_len 26 from the split's first row, K = 4 targets each).
if msg=$($PY - "$TMP/trend.csv" "$TMP/eval.json" <<'PYEOF'
import csv, json, math, sys
v = [float(r["co2"]) for r in csv.DictReader(open(sys.argv[1]))]
e = json.load(open(sys.argv[2]))
n_val = int(0.25 * len(v)); train, val = v[:-n_val], v[-n_val:]
mean = sum(train) / len(train); std = math.sqrt(sum((x - mean) ** 2 for x in train) / len(train))
z = [(x - mean) / std for x in val]
T, K, P = 26, 4, 52
steps = (len(z) - K) // T * T
sp = ss = 0.0
for i in range(steps):
    for k in range(1, K + 1):
        lag = i + k - P * math.ceil(k / P)
        seasonal = z[lag] if lag >= 0 else z[i]
        sp += (z[i] - z[i + k]) ** 2
        ss += (seasonal - z[i + k]) ** 2
sp /= steps * K; ss /= steps * K
bad = []
for name, want in (("mse_persistence", sp), ("mse_seasonal", ss)):
    if abs(e[name] - want) > 1e-4 * want + 1e-6: bad.append(f"{name} {e[name]} != {want:.6f}")
mp = e["mse_persistence"]  # eval prints 6 decimals: the skill from them is off by at most
bound = 0.5e-6 / mp * (1 + (e["loss"] + 0.5e-6) / (mp - 0.5e-6)) + 0.5e-6  # this
if abs(e["skill"] - (1 - e["loss"] / mp)) > bound: bad.append("skill != 1 - loss/mse_persistence")
if e.get("season") != 52 or e.get("target") != "delta" or e.get("window_norm") != "mean": bad.append("season/target/window_norm")
print("; ".join(bad) if bad else f"persistence {sp:.6f}, seasonal {ss:.6f} (float64 from the CSV); eval: {json.dumps(e)}")
sys.exit(1 if bad else 0)
PYEOF
); then ok "eval's baselines = the closed form: $msg"; else bad "eval baselines: $msg"; fi
"$LSTMD" eval --checkpoint "$CK" --data "$TMP/old" > "$TMP/eval-old.json" 2>"$TMP/err" \
  && ! grep -q season "$TMP/eval-old.json" && grep -q mse_persistence "$TMP/eval-old.json" \
  && ok "a dataset from before --season loads (season 0, no seasonal baseline): $(cat "$TMP/eval-old.json")" \
  || bad "old dataset: $(cat "$TMP/err" "$TMP/eval-old.json")"

# 2b. a flat validation split (a sensor stuck at one value): persistence is exact, so skill is
# -inf, which JSON cannot hold; metrics.jsonl and eval write null there, every line parses, and a
# --resume keeps the evaluation records (one with -inf was dropped as a torn line).
$PY -c 'import math,sys; print("t,y"); [print(f"{i},{math.sin(i / 5) if i < 180 else 5.0:.6f}") for i in range(240)]' > "$TMP/flat.csv"
"$LSTMD" prepare series --input "$TMP/flat.csv" --target y --horizon 4 --val-fraction 0.25 --out "$TMP/flat" \
  2>/dev/null || bad "prepare of the flat series"
flat=(--set data.path="$TMP/flat" --set data.seq_len=26 --set model.hidden=8 --set model.layers=1
      --set train.threads=1 --set train.eval_every=10 --set train.run_dir="$TMP/fl")
"$LSTMD" train "${flat[@]}" --set train.steps=20 >/dev/null 2>&1 \
  && "$LSTMD" train "${flat[@]}" --set train.steps=30 --resume >/dev/null 2>"$TMP/fl.err" \
  && "$LSTMD" eval --checkpoint "$TMP/fl/latest.safetensors" --data "$TMP/flat" >"$TMP/fl.json" 2>/dev/null \
  || bad "flat series run: $(tail -2 "$TMP/fl.err")"
if msg=$($PY - "$TMP/fl/metrics.jsonl" "$TMP/fl.json" <<'PYEOF'
import json, sys
def parse(path, line):
    try: return json.loads(line)
    except ValueError: print(f"{path}: not JSON: {line.strip()}"); sys.exit(1)
recs = [parse("metrics.jsonl", line) for line in open(sys.argv[1])]
e = parse("eval's output", open(sys.argv[2]).read())
evals = [r["step"] for r in recs if "val_loss" in r]
skills = {r.get("val_skill", "absent") for r in recs if "val_loss" in r}
if evals != [10, 20, 30] or skills != {None} or e["skill"] is not None or e["mse_persistence"] != 0:
    print(f"evaluations at {evals}, val_skill {skills}, eval {e}"); sys.exit(1)
print(f"evaluations at {evals} with val_skill null; eval {json.dumps(e)}")
PYEOF
); then ! grep -q torn "$TMP/fl.err" && ok "flat validation split: $msg" || bad "flat: $(grep torn "$TMP/fl.err")"
else bad "flat validation split: $msg"; fi

# 3. predict --baselines on the validation rows: the first 182 of them (7 windows of 26), so that
# predict's windows, which end at the last row given, are eval's, which start at the split's first
# row; the targets of the last forecasts are the 4 rows after them.
{ head -1 "$TMP/trend.csv"; tail -200 "$TMP/trend.csv" | head -182; } > "$TMP/val.csv"
"$LSTMD" predict --checkpoint "$CK" --input "$TMP/val.csv" --out "$TMP/pred.csv" --baselines 2>"$TMP/err" \
  || bad "predict --baselines: $(cat "$TMP/err")"
# predict_mse CSV PRED EVAL_JSON CKPT: predict's forecasts (PRED, of CSV's last 200 rows' first
# 182) score EVAL_JSON's loss, in the checkpoint's normalised units; the baseline columns, when
# PRED has them, equal the CSV's values.
predict_mse() {
$PY - "$@" <<'PYEOF'
import csv, json, math, struct, sys
allv = [float(r["co2"]) for r in csv.DictReader(open(sys.argv[1]))]
v = allv[-200:]
rows = list(csv.reader(open(sys.argv[2])))
e = json.load(open(sys.argv[3]))
with open(sys.argv[4], "rb") as f:
    meta = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))["__metadata__"]
std = json.loads(meta["series.std"])[0]
K, P, T = 4, 52, 26
head = rows[0]
want_head = ["row"] + [f"co2+{k}" for k in range(1, K + 1)] + [f"persistence+{k}" for k in range(1, K + 1)] \
    + [f"seasonal52+{k}" for k in range(1, K + 1)]
worst = 0.0
if len(head) > K + 1:
    if head != want_head: print(f"header {head}"); sys.exit(1)
    for r in rows[1:]:
        i = int(r[0]); f = [float(x) for x in r[1:]]
        for k in range(1, K + 1):
            lag = i + k - P * math.ceil(k / P)
            worst = max(worst, abs(f[K + k - 1] - v[i]), abs(f[2 * K + k - 1] - (v[lag] if lag >= 0 else v[i])))
    if worst > 1e-3: print(f"baseline columns off by {worst}"); sys.exit(1)
steps = (len(v) - K) // T * T
if len(rows) - 1 != steps: print(f"{len(rows) - 1} forecast rows, want {steps}"); sys.exit(1)
mse = sum(((float(rows[1 + i][k]) - v[i + k]) / std) ** 2 for i in range(steps) for k in range(1, K + 1)) / (steps * K)
if abs(mse - e["loss"]) > 1e-4 * e["loss"] + 1e-6: print(f"predict's MSE {mse:.6f} != eval's {e['loss']}"); sys.exit(1)
print(f"{len(rows) - 1} rows, " + (f"baseline columns within {worst:.1e} of the CSV, " if len(head) > K + 1 else "")
      + f"forecasts' MSE {mse:.6f} (the checkpoint's std {std:.6g}) = eval's {e['loss']}")
PYEOF
}
if msg=$(predict_mse "$TMP/trend.csv" "$TMP/pred.csv" "$TMP/eval.json" "$CK"); then
  ok "predict --baselines: $msg"; else bad "predict --baselines: $msg"; fi

# 3b. eval of a copy in other units (the target × 10, prepared afresh: its own mean and std)
# scores what predict forecasts for it: the checkpoint's statistics, not the split's, and a note
# naming the column and both values; never the original's loss, silently (it used to be that,
# byte for byte).
$PY - "$TMP/trend.csv" "$TMP/trend10.csv" <<'PYEOF'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
c = rows[0].index("co2")
with open(sys.argv[2], "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(rows[0])
    for r in rows[1:]:
        w.writerow([repr(float(x) * 10) if j == c else x for j, x in enumerate(r)])
PYEOF
"$LSTMD" prepare series --input "$TMP/trend10.csv" --target co2 --horizon 4 --val-fraction 0.25 \
  --season 52 --out "$TMP/ds10" 2>/dev/null || bad "prepare the × 10 copy"
"$LSTMD" eval --checkpoint "$CK" --data "$TMP/ds10" > "$TMP/eval10.json" 2>"$TMP/err10"; rc=$?
loss=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["loss"])' "$TMP/eval.json")
loss10=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["loss"])' "$TMP/eval10.json" 2>/dev/null)
ckmean=$(meta "$CK" series.mean | $PY -c 'import json,sys; print("%.9g" % json.load(sys.stdin)[0])')
note=$(grep -m1 "other statistics" "$TMP/err10")
[[ $rc == 0 && -n $loss10 && $loss10 != "$loss" ]] && grep -q "column 0 'co2': mean $ckmean" <<<"$note" \
  && ok "eval of the × 10 copy: loss $loss10 (the original $loss), stderr: $note" \
  || bad "eval of the × 10 copy: exit $rc, loss $loss10 (the original $loss), stderr: $(cat "$TMP/err10")"
{ head -1 "$TMP/trend10.csv"; tail -200 "$TMP/trend10.csv" | head -182; } > "$TMP/val10.csv"
"$LSTMD" predict --checkpoint "$CK" --input "$TMP/val10.csv" --out "$TMP/pred10.csv" 2>"$TMP/err" \
  || bad "predict of the × 10 copy: $(cat "$TMP/err")"
if msg=$(predict_mse "$TMP/trend10.csv" "$TMP/pred10.csv" "$TMP/eval10.json" "$CK"); then
  ok "eval of the × 10 copy = predict's forecasts of it: $msg"; else bad "eval of the × 10 copy vs predict: $msg"; fi
"$LSTMD" quantize --checkpoint "$CK" --out "$TMP/q10.int8" --calibrate "$TMP/ds10" > "$TMP/q10.json" 2>"$TMP/err"
fp32=$($PY -c 'import json,sys; print("%.6f" % json.load(open(sys.argv[1]))["fp32_mse"])' "$TMP/q10.json" 2>/dev/null)
[[ -n $fp32 && $fp32 == "$($PY -c 'import sys; print("%.6f" % float(sys.argv[1]))' "$loss10")" ]] && grep -q "other statistics" "$TMP/err" \
  && ok "quantize --calibrate on the × 10 copy: fp32_mse $fp32 = eval's, with the note" \
  || bad "quantize --calibrate on the × 10 copy: fp32_mse '$fp32', eval $loss10: $(cat "$TMP/err")"

# 3c. predict's windows end at the last row: the newest row's forecast sees seq_len (26) rows
# whatever the file's length, the same as from the last 26 rows alone, and not the forecast from
# the last 8 (the windows used to start at row 0, so it saw N mod 26 rows: 200 rows = 8 rows).
# A level/last model (its windows read nothing before their first row); and the delta/mean one,
# whose window statistics read up to 25 rows before it, from 51 rows on.
"$LSTMD" train "${common[@]}" --set data.batch_size=4 --set train.steps=30 --set train.eval_every=0 \
  --set train.run_dir="$TMP/lv" >/dev/null 2>&1 || bad "level/last run"
last_forecast() { # CKPT N [BATCH]: the last row's forecast (without the row number) from the last N rows
  { head -1 "$TMP/trend.csv"; tail -"$2" "$TMP/trend.csv"; } > "$TMP/last$2.csv"
  "$LSTMD" predict --checkpoint "$1" --input "$TMP/last$2.csv" --out "$TMP/last$2.out" --batch "${3:-64}" \
    2>"$TMP/err" || { echo "predict of $2 rows: $(cat "$TMP/err")"; return; }
  [[ $(wc -l <"$TMP/last$2.out") == $(($2 + 1)) && $(tail -1 "$TMP/last$2.out" | cut -d, -f1) == $(($2 - 1)) ]] \
    || { echo "predict of $2 rows: $(wc -l <"$TMP/last$2.out") lines, last $(tail -1 "$TMP/last$2.out")"; return; }
  tail -1 "$TMP/last$2.out" | cut -d, -f2-
}
for spec in "$TMP/lv/step-30.safetensors:26:27 40 52 60 200 800" "$CK:51:52 77 200 800"; do
  IFS=: read -r ck nref ns <<<"$spec"
  ref=$(last_forecast "$ck" "$nref")
  short=$(last_forecast "$ck" 8)
  diffs=""
  for n in $ns; do
    got=$(last_forecast "$ck" "$n")
    [[ $got == "$ref" ]] || diffs+=" N=$n: $got;"
  done
  [[ -z $diffs && $ref =~ ^[-+0-9.e,]+$ && $ref != "$short" ]] \
    && ok "$(basename "$(dirname "$ck")"): the last row's forecast from N = $ns rows = from the last $nref ($ref), != from the last 8 ($short)" \
    || bad "$(basename "$(dirname "$ck")"): the last row's forecast from the last $nref rows '$ref', 8 rows '$short';$diffs"
done
last_forecast "$TMP/lv/step-30.safetensors" 200 1 >/dev/null && cp "$TMP/last200.out" "$TMP/b1.out"
last_forecast "$TMP/lv/step-30.safetensors" 200 64 >/dev/null
# The same forecasts up to float rounding: OpenBLAS rounds a row's sums by where the row falls in
# the batched GEMM, so the bytes may differ (an H 32 model: 8,930 of 80,640 values, 2e-7 apart).
if msg=$($PY - "$TMP/b1.out" "$TMP/last200.out" <<'PYEOF'
import csv, sys
a, b = (list(csv.reader(open(p))) for p in sys.argv[1:3])
if a[0] != b[0] or len(a) != len(b) or [r[0] for r in a] != [r[0] for r in b]:
    print(f"other header, rows or row numbers: {len(a)} against {len(b)} lines"); sys.exit(1)
worst = max((abs(float(u) - float(v)) / max(abs(float(u)), 1e-30), r[0], u, v)
            for r, s in zip(a[1:], b[1:]) for u, v in zip(r[1:], s[1:]))
print(f"largest relative difference {worst[0]:.2g} (row {worst[1]}: {worst[2]} against {worst[3]})")
sys.exit(0 if worst[0] <= 1e-5 else 1)
PYEOF
); then ok "predict of 200 rows (a window of 18, then 7 of 26): --batch 1 and 64 agree: $msg"
else bad "predict --batch 1 vs 64: $msg"; fi

# 3d. seq_len a multiple of the season, shuffle order (the defaults): a daily cycle of hourly rows
# and seq_len 48. The windows all began at i·48, at midnight, and the model forecast windows
# starting at other hours worse than persistence: this validation split starts at hour 17 and
# scored skill -0.88. Its windows now start at any row, so it forecasts every hour.
$PY -c 'import math, random
random.seed(3)
print("t,y")
for i in range(1218): print(f"{i},{math.sin(2 * math.pi * i / 24) + random.gauss(0, 0.1):.6f}")' > "$TMP/phase.csv"
"$LSTMD" prepare series --input "$TMP/phase.csv" --target y --horizon 4 --season 24 --val-fraction 0.1 \
  --out "$TMP/phase" 2>/dev/null || bad "prepare of the daily series"
"$LSTMD" train --set data.path="$TMP/phase" --set data.seq_len=48 --set data.batch_size=16 \
  --set model.hidden=16 --set model.layers=1 --set train.steps=300 --set train.eval_every=0 \
  --set train.threads=1 --set optim.lr=0.005 --set train.run_dir="$TMP/ph" >/dev/null 2>&1 \
  && "$LSTMD" eval --checkpoint "$TMP/ph/latest.safetensors" --data "$TMP/phase" >"$TMP/ph.json" 2>/dev/null \
  || bad "the daily series run"
skill=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["skill"])' "$TMP/ph.json" 2>/dev/null)
$PY -c 'import sys; sys.exit(0 if float(sys.argv[1]) > 0.5 else 1)' "${skill:-nan}" 2>/dev/null \
  && ok "seq_len 48 on a daily cycle, validation from hour 17: skill $skill (> 0.5)" \
  || bad "seq_len 48 on a daily cycle, validation from hour 17: skill '$skill' (want > 0.5): $(cat "$TMP/ph.json")"

# 3e. a target whose header cell is quoted because it holds a comma ("load, kW", as spreadsheet
# exports name columns): predict's header quotes it again (its quotes doubled), so the header has
# as many fields as the rows. It was written bare: 9 header fields over rows of 7.
$PY -c 'print("ts,\"load, kW\",\"say \"\"hi\"\"\"")
for i in range(100): print(f"{i},{i % 7},{i % 5}")' > "$TMP/quoted.csv"
"$LSTMD" prepare series --input "$TMP/quoted.csv" --target "load, kW" --features 'say "hi"' --horizon 2 \
  --season 7 --out "$TMP/quoted" 2>/dev/null \
  && "$LSTMD" train --set data.path="$TMP/quoted" --set data.seq_len=8 --set model.hidden=4 --set model.layers=1 \
    --set train.steps=2 --set train.eval_every=0 --set train.run_dir="$TMP/qr" >/dev/null 2>&1 \
  && "$LSTMD" predict --checkpoint "$TMP/qr/latest.safetensors" --input "$TMP/quoted.csv" --out "$TMP/quoted.out" \
    --baselines 2>"$TMP/err" || bad "the quoted-name run: $(cat "$TMP/err")"
if msg=$($PY - "$TMP/quoted.out" <<'PYEOF'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
widths = {len(r) for r in rows}
print(f"header {rows[0][:3]}, {len(rows)} lines of {sorted(widths)} fields")
sys.exit(0 if widths == {7} and rows[0][1:3] == ["load, kW+1", "load, kW+2"] and len(rows) == 101 else 1)
PYEOF
); then ok "predict's header quotes a target named 'load, kW': $msg"; else bad "predict of a quoted target name: $msg"; fi

# 4. the keys
for kv in model.target=trend data.window_norm=max; do
  "$LSTMD" train "${common[@]}" --set "$kv" --set train.steps=1 --set train.run_dir="$TMP/x" >/dev/null 2>"$TMP/err"; rc=$?
  [[ $rc == 2 ]] && grep -q "${kv%%=*}" "$TMP/err" && ok "--set $kv refused: exit 2, $(grep -m1 "${kv%%=*}" "$TMP/err")" \
    || bad "--set $kv: exit $rc, $(tail -2 "$TMP/err")"
done
for kv in model.target=level data.window_norm=last; do
  "$LSTMD" train "${common[@]}" "${fc[@]}" --set data.batch_size=4 --set train.steps=130 --set "$kv" \
    --set train.run_dir="$TMP/r-${kv%%=*}" --resume "$CK" >/dev/null 2>"$TMP/err"; rc=$?
  msg=$(grep '^lstmd:' "$TMP/err" | grep -v -e 'effective config' -e 'device auto' -e 'lstmd: note:' | head -1)
  [[ $rc == 2 ]] && grep -qF "${kv%%=*}" <<<"$msg" && ! ls "$TMP/r-${kv%%=*}"/*.safetensors >/dev/null 2>&1 \
    && ok "resume with $kv refused: exit 2, $msg" || bad "resume with $kv: exit $rc, $msg"
done
"$LSTMD" train "${common[@]}" "${fc[@]}" --set data.batch_size=4 --set train.steps=130 \
  --set train.run_dir="$TMP/r-same" --resume "$CK" >/dev/null 2>"$TMP/err" && grep -q "resumed from" "$TMP/err" \
  && ok "the same settings resume" || bad "resume: $(tail -2 "$TMP/err")"
"$LSTMD" train "${common[@]}" "${fc[@]}" --set train.device=cuda --set train.steps=1 \
  --set train.run_dir="$TMP/cuda" >/dev/null 2>"$TMP/err"; rc=$?
[[ $rc == 2 ]] && grep -q "^lstmd: data.window_norm" "$TMP/err" && ok "window_norm=mean on train.device=cuda: exit 2, $(grep -m1 '^lstmd: data.window_norm' "$TMP/err")" \
  || bad "window_norm on cuda: exit $rc, $(tail -2 "$TMP/err")"
"$LSTMD" export onnx --checkpoint "$CK" --out "$TMP/m.onnx" 2>"$TMP/err"; rc=$?
[[ $rc == 2 ]] && grep -q "data.window_norm" "$TMP/err" && [[ ! -e $TMP/m.onnx ]] \
  && ok "export onnx of a window_norm=mean model: exit 2, $(head -1 "$TMP/err")" || bad "export onnx: exit $rc, $(cat "$TMP/err")"
"$LSTMD" train "${common[@]}" --set model.target=delta --set data.batch_size=4 --set train.steps=5 \
  --set train.eval_every=0 --set train.run_dir="$TMP/delta" >/dev/null 2>&1 || bad "delta/none run"
"$LSTMD" export onnx --checkpoint "$TMP/delta/step-5.safetensors" --out "$TMP/d.onnx" 2>"$TMP/err" \
  && ok "export onnx of a delta model (the Slice + Add of the current value)" || bad "export delta: $(cat "$TMP/err")"
"$LSTMD" quantize --checkpoint "$CK" --out "$TMP/q.int8" --calibrate "$TMP/ds" > "$TMP/q.json" 2>"$TMP/err" \
  && "$LSTMD" eval --checkpoint "$TMP/q.int8" --data "$TMP/ds" > "$TMP/qeval.json" 2>>"$TMP/err" \
  && grep -q '"target":"delta","window_norm":"mean"' "$TMP/qeval.json" \
  && ok "int8: quantize $(cat "$TMP/q.json" | grep -o '"mse_change":[^,}]*'), eval of the int8 file $(cat "$TMP/qeval.json")" \
  || bad "int8: $(cat "$TMP/err" "$TMP/q.json" "$TMP/qeval.json" 2>/dev/null)"

# 5. two ranks = one rank
eq=("${common[@]}" "${fc[@]}" --set optim.algo=sgd --set optim.lr=0.5 --set optim.clip_norm=0
    --set train.eval_every=0)
"$LSTMD" train "${eq[@]}" --set data.batch_size=8 --set optim.lr=0 --set train.steps=1 \
  --set train.run_dir="$TMP/init" >/dev/null 2>&1 || bad "initialisation run"
"$LSTMD" train "${eq[@]}" --set data.batch_size=8 --set train.steps=6 --set train.run_dir="$TMP/one" \
  >/dev/null 2>&1 || bad "one rank"
timeout 120 mpirun -np 2 "$LSTMD" train "${eq[@]}" --set data.batch_size=4 --set train.steps=6 \
  --set train.run_dir="$TMP/two" >/dev/null 2>"$TMP/err" || bad "mpirun -np 2: $(tail -3 "$TMP/err")"
if msg=$($PY "$SRC/tests/compare_checkpoints.py" "$TMP/one/step-6.safetensors" "$TMP/two/step-6.safetensors" \
         --rtol 1e-5 --initial "$TMP/init/step-1.safetensors"); then
  ok "delta + mean: mpirun -np 2 × batch 4 = 1 rank × batch 8: $msg"
else bad "2 ranks vs 1: $msg"; fi

# 6. the daemon
cat > "$TMP/job.ini" <<JOB
[data]
path = ds
seq_len = 26
batch_size = 2
order = stream
[model]
hidden = 16
layers = 1
[train]
steps = 20
eval_every = 10
threads = 1
JOB
start_daemon
id=$(ctl submit --config "$TMP/job.ini" --set model.target=delta --set data.window_norm=mean | tail -1)
ctl watch "$id" > "$TMP/watch.txt"; rc=$?
run_dir=$(field "$id" run_dir)
[[ $rc == 0 ]] && tail -1 "$TMP/watch.txt" | grep -q SUCCEEDED && \
  [[ $(meta "$run_dir/latest.safetensors" series.target) == delta && \
     $(meta "$run_dir/latest.safetensors" series.window_norm) == mean ]] \
  && ok "lstmctl submit --set model.target=delta --set data.window_norm=mean: SUCCEEDED, the checkpoint says delta/mean" \
  || bad "daemon job: rc=$rc $(tail -3 "$TMP/watch.txt")"
msg=$(ctl submit --config "$TMP/job.ini" --set data.window_norm=max 2>&1); rc=$?
[[ $rc != 0 ]] && grep -q "data.window_norm" <<<"$msg" && ok "lstmctl submit --set data.window_norm=max refused (exit $rc): $msg" \
  || bad "bad value at submission: exit $rc, $msg"
ctl shutdown >/dev/null 2>&1
stop_daemon

[[ $fails -eq 0 ]] && echo "test_forecast: passed" || echo "test_forecast: $fails FAILED"
exit $((fails > 0))
