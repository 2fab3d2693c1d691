#!/usr/bin/env python3
"""test_compare_checkpoints.py [COMPARE_SCRIPT] — compare_checkpoints.py itself, on tiny
safetensors files written here: equal tensors pass; a NaN or an Inf in either checkpoint (or in
the --initial one, or in an optimizer moment) fails and names the file and the tensor, at any
tolerance; with --initial, an update off by 0.1% fails at 1e-5 although the weights agree to
1e-5; the same weights pass; a run that did not move fails; tensor
names that differ fail. Exit 1 on any wrong verdict."""
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

SCRIPT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__),
                                                             "compare_checkpoints.py")


def write(path, tensors):
    header, blobs, off = {"__metadata__": {"format": "lstmd-checkpoint-1"}}, [], 0
    for name, x in tensors.items():
        b = np.asarray(x, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(np.shape(x)), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    return path


failures = 0


def case(what, want_rc, args, must_say=()):
    global failures
    r = subprocess.run([sys.executable, SCRIPT] + args, capture_output=True, text=True)
    out = (r.stdout + r.stderr).strip()
    missing = [s for s in must_say if s not in out]
    good = r.returncode == want_rc and not missing
    print(f"{'ok  ' if good else 'FAIL'}  {what}: exit {r.returncode} (want {want_rc}): {out}"
          + (f" -- does not name {missing}" if missing else ""))
    failures += not good


with tempfile.TemporaryDirectory() as d:
    f = lambda name, **t: write(os.path.join(d, name), t)
    ok = f("ok.st", w=[1.0, 2.0, 3.0])
    same = f("same.st", w=[1.0, 2.0, 3.0])
    nan = f("nan.st", w=[1.0, float("nan"), 3.0])
    inf = f("inf.st", w=[1.0, float("inf"), 3.0])
    ninf = f("ninf.st", w=[-float("inf"), 2.0, 3.0])
    case("equal tensors, rtol 0", 0, [ok, same, "--rtol", "0"])
    case("[1,2,3] vs [1,nan,3], rtol 0", 1, [ok, nan, "--rtol", "0"], (nan, "tensor w"))
    case("[1,nan,3] vs [1,2,3] (NaN in the first file)", 1, [nan, ok, "--rtol", "0"], (nan, "tensor w"))
    case("[1,2,3] vs [1,nan,3] at a huge tolerance", 1, [ok, nan, "--rtol", "1e30"], (nan,))
    case("[1,2,3] vs [1,inf,3]", 1, [ok, inf, "--rtol", "1e-5"], (inf, "tensor w"))
    case("[-inf,2,3] vs [1,2,3]", 1, [ninf, ok, "--rtol", "1e-5"], (ninf, "tensor w"))
    case("NaN vs NaN (the same file twice)", 1, [nan, nan, "--rtol", "0"], (nan,))
    moment = f("moment.st", w=[1.0, 2.0, 3.0], **{"optim.m": [0.0, float("nan"), 0.0]})
    case("NaN in an optimizer moment", 1, [ok, moment, "--rtol", "0"], (moment, "optim.m"))
    case("different tensor names", 1, [ok, f("other.st", v=[1.0, 2.0, 3.0]), "--rtol", "0"])

    # Updates: p0 → a = p0 + u; b = p0 + 1.001·u (a uniform 0.1% error in the update, as a wrong
    # gradient scale makes). The weights agree to ~4e-7 of their norm; the updates only to 1e-3.
    rng = np.random.default_rng(1)
    p0 = rng.standard_normal(1000)
    u = 1e-3 * rng.standard_normal(1000)
    init = f("init.st", w=p0, b=p0[:10])
    a = f("a.st", w=p0 + u, b=p0[:10] + u[:10])
    b = f("b.st", w=p0 + 1.001 * u, b=p0[:10] + 1.001 * u[:10])
    r = subprocess.run([sys.executable, SCRIPT, a, b, "--rtol", "1e-5"], capture_output=True, text=True)
    print(f"info  the same 0.1% update error, weights against their own norm: {r.stdout.strip()}")
    case("a 0.1% update error, updates against theirs (--initial)", 1,
         [a, b, "--rtol", "1e-5", "--initial", init], ("update",))
    a2 = f("a2.st", w=(p0 + u).astype(np.float32), b=(p0[:10] + u[:10]).astype(np.float32))
    case("the same weights, --initial", 0, [a, a2, "--rtol", "1e-5", "--initial", init])
    case("a run that did not move from --initial", 1, [a, init, "--rtol", "1e-5", "--initial", init],
         ("did not move",))
    case("NaN in the --initial checkpoint", 1,
         [a, b, "--rtol", "1", "--initial", f("init-nan.st", w=np.full(1000, np.nan), b=p0[:10])],
         ("init-nan.st", "tensor w"))

print(f"test_compare_checkpoints: {'passed' if not failures else f'{failures} FAILED'}")
sys.exit(1 if failures else 0)
