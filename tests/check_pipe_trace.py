#!/usr/bin/env python3
"""check_pipe_trace.py TRACE.json STAGES CHUNKS METRICS.jsonl — checks the --trace of a pipeline
run with one replica (rank = stage):
  * every rank has F, B and W events, each with {"unit", "chunk"} args, every (unit, chunk) of a
    step F, B and W once per rank, and the stages above stage 0 have "recv wait" events;
  * on the last stage, no B of a unit starts before that unit's F of chunk K-1 has ended (the
    reverse wave needs the whole window's forward);
  * every rank has one "step" event per step, and the bubble recomputed from the trace
    (1 - sum of the ranks' F/B/W time inside their step events / sum of the ranks' step events'
    time) is within 0.05 of the `bubble` metrics.jsonl logged for the same step, for every step
    but the first (which includes start-up); needs train.log_every = 1. The time between steps (logging, the
    optimizer) is in neither.
Prints the bubble; exit 1 with a message on the first failed check."""
import json
import sys
from collections import defaultdict


def main():
    path, stages, chunks, metrics = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    text = open(path).read().rstrip()
    if not text.endswith("]"):
        text += "]"  # a cut trace is valid for viewers; close it here
    spans = [e for e in json.loads(text) if e.get("ph") == "X"]
    by_rank = defaultdict(list)
    for e in spans:
        by_rank[e["pid"]].append(e)
    if sorted(by_rank) != list(range(stages)):
        sys.exit("ranks in the trace: %s, want 0..%d" % (sorted(by_rank), stages - 1))
    for r in range(stages):
        ev = by_rank[r]
        opt = sorted(e["ts"] for e in ev if e["name"] == "optimizer")
        if len(opt) < 3:
            sys.exit("rank %d: %d optimizer events, want several steps" % (r, len(opt)))
        items = [e for e in ev if e["name"] in ("F", "B", "W")]
        for e in items:
            if "unit" not in e.get("args", {}) or "chunk" not in e.get("args", {}):
                sys.exit("rank %d: %s event without unit/chunk args" % (r, e["name"]))
        # per step (between optimizer events): every item of every (unit, chunk) once
        for a, b in zip(opt, opt[1:]):
            seen = defaultdict(int)
            for e in items:
                if a < e["ts"] < b:
                    seen[(e["name"], e["args"]["unit"], e["args"]["chunk"])] += 1
            units = {u for (_, u, _) in seen}
            want = {(n, u, k) for n in "FBW" for u in units for k in range(chunks)}
            if set(seen) != want or any(c != 1 for c in seen.values()):
                sys.exit("rank %d: a step's items are not each (unit, chunk) once: %s"
                         % (r, sorted(set(want) ^ set(seen))[:4]))
        if r > 0 and not any(e["name"] == "recv wait" for e in ev):
            sys.exit("rank %d: no recv wait events" % r)
    last = by_rank[stages - 1]
    opt = sorted(e["ts"] for e in last if e["name"] == "optimizer")
    for a, b in zip(opt, opt[1:]):  # within each step
        step = [e for e in last if a < e["ts"] < b]
        for e in step:
            if e["name"] != "B":
                continue
            u = e["args"]["unit"]
            done = [f for f in step if f["name"] == "F" and f["args"]["unit"] == u and
                    f["args"]["chunk"] == chunks - 1 and f["ts"] + f["dur"] <= e["ts"] + 1e-3]
            if not done:
                sys.exit("last stage: B of unit %d chunk %d at %.0f before its F of chunk %d ended"
                         % (u, e["args"]["chunk"], e["ts"], chunks - 1))
    # the bubble per step, from the trace
    busy, wall = defaultdict(float), defaultdict(float)
    for r in range(stages):
        ev = by_rank[r]
        steps_r = sorted((e["args"]["step"], e["ts"], e["ts"] + e["dur"]) for e in ev
                         if e["name"] == "step")
        if [s for s, _, _ in steps_r] != list(range(1, len(steps_r) + 1)) or len(steps_r) < 2:
            sys.exit("rank %d: step events for steps %s, want 1..n (n >= 2)"
                     % (r, [s for s, _, _ in steps_r]))
        for s, a, b in steps_r[1:]:
            wall[s] += b - a
            busy[s] += sum(e["dur"] for e in ev if e["name"] in ("F", "B", "W") and a <= e["ts"] < b)
    steps = sorted(wall)
    traced = 1.0 - sum(busy[i] for i in steps) / sum(wall[i] for i in steps)
    logged = [json.loads(l)["bubble"] for l in open(metrics) if '"bubble"' in l]
    if len(logged) < len(steps) + 1:
        sys.exit("metrics.jsonl has %d bubble records for %d traced steps" % (len(logged), len(steps)))
    mean_logged = sum(logged[1:len(steps) + 1]) / len(steps)
    # step by step (train.log_every = 1: record i is step i + 1), so that one slow step under
    # load weighs the same on both sides
    worst = max(abs((1.0 - busy[i] / wall[i]) - logged[i - 1]) for i in steps)
    if worst > 0.05:
        sys.exit("bubble from the trace vs logged: a step differs by %.3f (over steps 2..%d: "
                 "%.3f vs %.3f)" % (worst, len(steps) + 1, traced, mean_logged))
    print("F/B/W items each (unit, chunk) once per step on %d ranks, receive waits, the reverse "
          "wave after the forward; bubble %.3f from the trace vs %.3f logged"
          % (stages, traced, mean_logged))


if __name__ == "__main__":
    main()
