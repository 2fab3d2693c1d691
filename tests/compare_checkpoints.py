#!/usr/bin/env python3
"""compare_checkpoints.py A B [--rtol R] — compares the model tensors of two lstmd checkpoints
(safetensors, parsed here with struct/json/numpy) and fails when any tensor differs by more than
R in norm-relative terms: ||a - b|| / ||b|| > R. Prints the worst tensor."""
import json
import struct
import sys

import numpy as np


def load(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, t in header.items():
        if name == "__metadata__" or name.startswith("optim.") or name.startswith("state."):
            continue
        b, e = t["data_offsets"]
        out[name] = np.frombuffer(data[base + b:base + e], dtype="<f4").reshape(t["shape"])
    return out


def main():
    a, b = load(sys.argv[1]), load(sys.argv[2])
    rtol = float(sys.argv[sys.argv.index("--rtol") + 1]) if "--rtol" in sys.argv else 1e-5
    if a.keys() != b.keys():
        print("tensor names differ:", sorted(a.keys() ^ b.keys()))
        return 1
    worst, worst_name = 0.0, ""
    for name in a:
        x, y = a[name].astype(np.float64), b[name].astype(np.float64)
        rel = np.linalg.norm(x - y) / max(np.linalg.norm(y), 1e-30)
        if rel > worst:
            worst, worst_name = rel, name
    print(f"max norm-relative difference {worst:.3g} ({worst_name or 'all equal'}), tolerance {rtol:g}")
    return 0 if worst <= rtol else 1


if __name__ == "__main__":
    sys.exit(main())
