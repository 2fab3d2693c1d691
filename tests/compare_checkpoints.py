#!/usr/bin/env python3
"""compare_checkpoints.py A B [--rtol R] [--initial P0 [--ulps N]] — compares the model tensors of two lstmd
checkpoints (safetensors, parsed here with struct/json/numpy).

Without --initial: fails when any tensor differs by more than R in norm-relative terms,
||a - b|| / ||b|| > R. With --rtol 0 that is "every model tensor equal".

With --initial P0 (the checkpoint both runs started from): compares what training did, the
updates a - p0 and b - p0, relative to the size of the update: ||(a - p0) - (b - p0)|| /
||b - p0|| > R fails, and so does a tensor that B did not move at all (nothing to compare).
Weights against their own norm hide a wrong update: after a few steps the update is a small
fraction of the weights, so even a 10% error in it can stay under 1e-5 of ||b||.

--ulps N (with --initial): a difference of up to N units in the last place of B's stored float32
value is storage rounding, not a different update; only the excess counts. Without it, a tensor
that barely moves makes the comparison one of rounding: with clipping at 0.01 (tests/
test_pipeline.sh) weight_hh_l0 moved by 5.8e-5 in norm over 4 steps, and one element that two
correct engines rounded one ulp apart (7.5e-9, from different but equally exact summation
orders) was 1.3e-4 of that update, 13x a 1e-5 tolerance. A wrong update (a factor off, another
mask) differs by far more than an ulp in most elements, and still fails.

Pruning masks (I8 tensors 'prune.mask.<tensor>') must be equal in A and B, element for element,
whatever R: the same weights must be pruned.

A NaN or Inf in any tensor of any of the files (optimizer moments and carried state included)
fails, naming the file and the tensor: a NaN would otherwise make the relative error NaN, which
no "greater than" test catches.
Prints the worst tensor. Exit 0: within tolerance; 1: not."""
import json
import struct
import sys

import numpy as np


def load(path):
    """Every tensor of the file (model, optimizer moments, carried state) by name."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        dtype = {"F32": "<f4", "I8": "i1"}[t["dtype"]]
        out[name] = np.frombuffer(data[base + b:base + e], dtype=dtype).reshape(t["shape"])
    return out


def model_tensors(tensors):
    return {k: v for k, v in tensors.items() if not k.startswith(("optim.", "state.", "prune."))}


def mask_differences(a, b):
    """Messages for the pruning masks that A and B do not share exactly."""
    ma = {k: v for k, v in a.items() if k.startswith("prune.")}
    mb = {k: v for k, v in b.items() if k.startswith("prune.")}
    if ma.keys() != mb.keys():
        return ["pruning masks differ in name: %s" % sorted(ma.keys() ^ mb.keys())]
    return ["%s: %d of %d elements differ" % (k, int(np.sum(ma[k] != mb[k])), ma[k].size)
            for k in sorted(ma) if ma[k].shape != mb[k].shape or np.any(ma[k] != mb[k])]


def non_finite(path, tensors):
    """Messages for the tensors of `path` that hold a NaN or an Inf."""
    msgs = []
    for name, x in tensors.items():
        bad = ~np.isfinite(x)
        if bad.any():
            first = int(np.flatnonzero(bad.reshape(-1))[0])
            msgs.append(f"{path}: tensor {name} holds {int(bad.sum())} non-finite value(s) "
                        f"(first at flat index {first}: {x.reshape(-1)[first]})")
    return msgs


def main(argv):
    args, rtol, initial, ulps = [], 1e-5, None, 0.0
    i = 1
    while i < len(argv):
        if argv[i] == "--rtol":
            rtol, i = float(argv[i + 1]), i + 2
        elif argv[i] == "--ulps":
            ulps, i = float(argv[i + 1]), i + 2
        elif argv[i] == "--initial":
            initial, i = argv[i + 1], i + 2
        else:
            args.append(argv[i])
            i += 1
    if len(args) != 2:
        print(__doc__.splitlines()[0], file=sys.stderr)
        return 2
    files = [(args[0], load(args[0])), (args[1], load(args[1]))]
    if initial:
        files.append((initial, load(initial)))
    msgs = [m for path, t in files for m in non_finite(path, t)]
    if msgs:
        print("non-finite values: " + "; ".join(msgs))
        return 1
    msgs = mask_differences(files[0][1], files[1][1])
    if msgs:
        print("pruning masks: " + "; ".join(msgs))
        return 1
    files = [(path, model_tensors(t)) for path, t in files]
    a, b = files[0][1], files[1][1]
    p0 = files[2][1] if initial else None
    for path, t in files[1:]:
        if t.keys() != a.keys():
            print(f"tensor names differ between {args[0]} and {path}:", sorted(a.keys() ^ t.keys()))
            return 1
        for name in a:
            if t[name].shape != a[name].shape:
                print(f"tensor {name}: shape {a[name].shape} in {args[0]}, {t[name].shape} in {path}")
                return 1
    worst, worst_name, still = 0.0, "", []
    for name in a:
        x, y = a[name].astype(np.float64), b[name].astype(np.float64)
        allowance = 0.0
        if p0 is not None:
            if ulps:
                allowance = ulps * np.spacing(np.abs(b[name]).astype(np.float32)).astype(np.float64)
            x, y = x - p0[name], y - p0[name]
            if not np.any(y):
                still.append(name)
                continue
        diff = np.maximum(np.abs(x - y) - allowance, 0.0)
        rel = np.linalg.norm(diff) / max(np.linalg.norm(y), 1e-30)
        if not rel <= worst:
            worst, worst_name = rel, name
    if still:
        print(f"{args[1]} did not move from {initial}: tensor(s) {', '.join(still)} "
              "(no update to compare)")
        return 1
    what = "update" if p0 is not None else "weight"
    beyond = f" beyond {ulps:g} ulp of the stored weights" if p0 is not None and ulps else ""
    print(f"max norm-relative {what} difference{beyond} {worst:.3g} ({worst_name or 'all equal'}), "
          f"tolerance {rtol:g}")
    return 0 if worst <= rtol else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
