#!/usr/bin/env python3
"""pipe_checks.py — two checks the pipeline tests (test_pipeline.sh, test_pipe_balance.sh) share.

  pipe_checks.py clip-norms RUN.metrics.jsonl REF.metrics.jsonl
      6 logged grad_norm values, the reference's all above the clip (0.01: clipping fired every
      step), each within 1e-5 (relative) of the reference's: exit 0, else 1. metrics.jsonl keeps
      6 significant digits, so one unit of the last is up to 1e-5 of the value (3.2e-6 seen
      with test_pipeline's clip-dxs at lr 10); a norm of one stage's gradients alone, not the
      global one, is off by tens of percent.
  pipe_checks.py same-layout A.safetensors B.safetensors
      the two checkpoints hold the same tensor names, dtypes and shapes: exit 0, else 1.
Prints one line saying what it found."""
import json
import struct
import sys


def clip_norms(run, ref):
    def norms(p):
        return [json.loads(l)["grad_norm"] for l in open(p) if '"grad_norm"' in l]
    a, b = norms(run), norms(ref)
    if not len(a) == len(b) == 6:
        print("%d and %d logged grad_norm values, want 6" % (len(a), len(b)))
        return 1
    if min(b) <= 0.01:
        print("clipping did not fire every step: %s" % b)
        return 1
    worst = max(abs(x - y) / y for x, y in zip(a, b))
    print("grad_norm per step within %.2e of one rank's (%.4g ... %.4g, clip 0.01)"
          % (worst, b[0], b[-1]))
    return 0 if worst <= 1e-5 else 1


def same_layout(pa, pb):
    def header(p):
        b = open(p, "rb").read()
        n = struct.unpack("<Q", b[:8])[0]
        h = json.loads(b[8:8 + n])
        h.pop("__metadata__", None)
        return {k: (v["dtype"], v["shape"]) for k, v in h.items()}
    a, b = header(pa), header(pb)
    if a != b:
        print("differ: %s" % sorted(set(map(str, a.items())) ^ set(map(str, b.items()))))
        return 1
    print("%d tensors, names, shapes and dtypes equal" % len(a))
    return 0


if __name__ == "__main__":
    checks = {"clip-norms": clip_norms, "same-layout": same_layout}
    if len(sys.argv) != 4 or sys.argv[1] not in checks:
        sys.exit(__doc__)
    sys.exit(checks[sys.argv[1]](sys.argv[2], sys.argv[3]))
