#!/usr/bin/env python3
"""check_trace.py TRACE.json RANKS — checks an lstmd --trace file: valid JSON, one track per rank
with data wait, forward, backward, optimizer, checkpoint and all-reduce bucket events, and
communication overlapping compute: on every rank buckets are handed to the reducer while a
backward pass is still running (when the reducer thread then gets a core is up to the OS)."""
import json
import sys

events = json.load(open(sys.argv[1]))
ranks = int(sys.argv[2])
spans = [e for e in events if e.get("ph") == "X"]
need = {"data wait", "forward", "backward", "optimizer", "checkpoint"}
if ranks > 1:
    need.add("all-reduce bucket")
for r in range(ranks):
    mine = [e for e in spans if e["pid"] == r]
    names = {e["name"] for e in mine}
    assert need <= names, f"rank {r} lacks {need - names}"
    if ranks > 1:
        queued = [e["args"]["queued_us"] for e in mine if e["name"] == "all-reduce bucket"]
        backward = [(e["ts"], e["ts"] + e["dur"]) for e in mine if e["name"] == "backward"]
        overlapped = sum(1 for lo, hi in backward if any(lo < q < hi for q in queued))
        assert overlapped > 0, f"rank {r}: no all-reduce was started during a backward pass"
print(f"trace ok: {len(spans)} spans on {ranks} rank(s)")
