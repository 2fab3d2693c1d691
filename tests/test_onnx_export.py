#!/usr/bin/env python3
"""test_onnx_export.py — `lstmd export onnx` checked with PyPI's onnx and onnxruntime.

  1. proto/onnx_subset.proto: every message, field (number, type, repeated, oneof) and enum
     value is the one of the same name in the onnx package's own descriptors.
  2. Text (1 and 3 layers) and series (1 layer W=1 K=2; 3 layers W=3 K=3) models trained for a
     few steps, exported: onnx.checker (full check) passes; the graph's inputs/outputs have the
     documented names and dynamic seq/batch axes; onnxruntime's logits (predictions) for
     tests/dump_logits' inputs equal lstmd's within 1e-4 at batch 1 and 7; the same inputs run
     as two chunks with hn/cn carried equal one long chunk; every weight is read back with
     onnx.numpy_helper from where README.md ("Export to ONNX") says it is, bit for bit.
  3. End to end: the mean cross-entropy of onnxruntime's logits over the validation split equals
     `lstmd eval`'s; onnxruntime on raw CSV rows equals `lstmd predict`'s CSV (the
     normalisation in the graph); --opset 13 runs and gives the default opset's outputs; the
     default opset is the newest onnxruntime loads (it refuses the next).
  4. --int8 (text 1 layer, series 3 layers): every int8 weight and scale is the one `lstmd
     quantize` writes (bit for bit, from its file); onnxruntime's DynamicQuantizeLSTM model stays
     within 0.02 bpc of `lstmd eval` of the int8 file (text) and within 0.05 of the target's std
     of `lstmd predict` with it (series), and close to the fp32 outputs (INT8_REL).
  4b. model.target=level/delta with data.window_norm=last and delta with none: onnxruntime on
     windows of seq_len rows equals `lstmd predict` (the transform undone inside the graph).
  5. Refusals: a bad opset, an int8 model file as --checkpoint, a damaged checkpoint (exit 2
     naming it, no output file), an unwritable output (exit 1).
usage: test_onnx_export.py --lstmd PATH --dump-logits PATH --source-dir DIR [--keep]
"""
import argparse
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_checkpoints import load as load_tensors  # noqa: E402  (numpy only)

TOL = 1e-4
INT8_REL = 0.05  # int8 outputs against fp32: max |difference| / max |fp32 output|
FAILURES = []


def fail(msg):
    print("FAIL: " + msg, flush=True)
    FAILURES.append(msg)


def run(cmd, check=True):
    print("+ " + " ".join(cmd), flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if check and p.returncode != 0:
        raise RuntimeError("exit %d: %s\n%s%s" % (p.returncode, " ".join(cmd), p.stdout, p.stderr))
    return p


def read_st(path):
    """Every tensor of a safetensors file (F32 or I8) by name."""
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    dtypes = {"F32": "<f4", "I8": "i1"}
    return {k: np.frombuffer(raw[8 + n + t["data_offsets"][0]:8 + n + t["data_offsets"][1]],
                             dtypes[t["dtype"]]).reshape(t["shape"]) for k, t in header.items()}


def metadata(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n))["__metadata__"]


# ---- 1. the proto subset against onnx's descriptors ----

SCALARS = {"int64": 3, "int32": 5, "string": 9, "bytes": 12}


def check_proto_subset(path):
    stack, checked = [], 0  # entries: ("message"|"enum"|"oneof", name)
    for lineno, raw in enumerate(open(path), 1):
        line = raw.split("//")[0].strip()
        where = "%s:%d" % (path, lineno)
        m = re.match(r"(message|enum|oneof) (\w+) \{$", line)
        if m:
            stack.append((m.group(1), m.group(2)))
            continue
        if line == "}":
            stack.pop()
            continue
        if not stack or not line:
            continue
        msgs = [n for k, n in stack if k == "message"]
        desc = onnx
        for n in msgs:
            desc = getattr(desc, n)
        desc = desc.DESCRIPTOR
        if stack[-1][0] == "enum":
            m = re.match(r"(\w+) = (\d+);$", line)
            values = desc.enum_types_by_name[stack[-1][1]].values_by_name
            if not m or m.group(1) not in values or values[m.group(1)].number != int(m.group(2)):
                fail("%s: enum value '%s' is not onnx's" % (where, line))
            checked += 1
            continue
        m = re.match(r"(?:(optional|repeated) )?(\w+) (\w+) = (\d+);$", line)
        if not m:
            fail("%s: cannot read '%s'" % (where, line))
            continue
        label, typ, name, number = m.group(1), m.group(2), m.group(3), int(m.group(4))
        f = desc.fields_by_name.get(name)
        if f is None:
            fail("%s: onnx.%s has no field '%s'" % (where, desc.name, name))
            continue
        oneof = stack[-1][1] if stack[-1][0] == "oneof" else None
        got_type = f.message_type.name if f.message_type else f.enum_type.name if f.enum_type \
            else None
        type_ok = got_type == typ if got_type else SCALARS.get(typ) == f.type
        if (f.number != number or not type_ok or f.is_repeated != (label == "repeated")
                or (f.containing_oneof.name if f.containing_oneof else None) != oneof):
            fail("%s: '%s' differs from onnx.%s.%s (number %d, type %s, repeated %s)"
                 % (where, line, desc.name, name, f.number, got_type or f.type, f.is_repeated))
        checked += 1
    print("proto subset: %d fields and enum values match onnx %s's descriptors"
          % (checked, onnx.__version__), flush=True)


# ---- 2. models ----

def write_ini(path, data_dir, run_dir, model, data):
    with open(path, "w") as f:
        f.write("[data]\npath = %s\nseq_len = 16\nbatch_size = 4\n" % data_dir)
        f.write("".join("%s = %s\n" % kv for kv in data.items()))
        f.write("[model]\n" + "".join("%s = %s\n" % kv for kv in model.items()) + "dropout = 0\n")
        f.write("[optim]\nlr = 0.01\n")
        f.write("[train]\nsteps = 3\nseed = 7\nrun_dir = %s\ncheckpoint_every = 0\n"
                "eval_every = 0\nlog_every = 1\nthreads = 1\n" % run_dir)


def train(args, tmp, name, data_dir, model, data=None):
    """data: [data] keys beyond path, seq_len, batch_size; by default window_norm = none (the
    graph against tests/dump_logits, which feeds the model's inputs as they are)."""
    ini = os.path.join(tmp, name + ".ini")
    run_dir = os.path.join(tmp, "run-" + name)
    write_ini(ini, data_dir, run_dir, model, data or {"window_norm": "none"})
    run([args.lstmd, "train", "--config", ini])
    return os.path.join(run_dir, "latest.safetensors")


def export(args, ckpt, out, *extra):
    run([args.lstmd, "export", "onnx", "--checkpoint", ckpt, "--out", out] + list(extra))
    return out


def compare(label, got, ref, tol=TOL, what="onnx - lstmd"):
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    if got.shape != ref.shape:
        fail("%s: shape %s, expected %s" % (label, got.shape, ref.shape))
        return
    diff = float(np.max(np.abs(got - ref))) if got.size else 0.0
    print("  %-44s max|%s| %.3e (max|ref| %.3g)" % (label, what, diff, float(np.max(np.abs(ref)))),
          flush=True)
    if not np.all(np.isfinite(got)):
        fail("%s: non-finite outputs" % label)
    elif not diff <= tol:
        fail("%s: max abs difference %.3e > %g" % (label, diff, tol))
    if not np.any(ref):
        fail("%s: the reference is all zeros (degenerate test)" % label)


class Exported:
    """An exported model, its session and what the checkpoint says about it."""

    def __init__(self, args, ckpt, path):
        self.ckpt, self.path, self.args = ckpt, path, args
        self.meta = metadata(ckpt)
        self.text = self.meta["model.kind"] == "text"
        self.L, self.H = int(self.meta["model.layers"]), int(self.meta["model.hidden"])
        if not self.text:
            self.mean = np.array(json.loads(self.meta["series.mean"]), np.float64)
            self.std = np.array(json.loads(self.meta["series.std"]), np.float64)
        self.model = onnx.load(path)
        onnx.checker.check_model(self.model, full_check=True)
        self.sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        self.x_name = "tokens" if self.text else "inputs"
        self.y_name = "logits" if self.text else "predictions"

    def run(self, x, h0=None, c0=None):
        B = x.shape[1]
        zeros = np.zeros((self.L, B, self.H), np.float32)
        feed = {self.x_name: x, "h0": zeros if h0 is None else h0,
                "c0": zeros if c0 is None else c0}
        return self.sess.run([self.y_name, "hn", "cn"], feed)

    def raw(self, x_normalised):  # dump_logits' normalised series rows -> raw CSV units
        return (x_normalised * self.std + self.mean).astype(np.float32)

    def normalised(self, pred):  # predictions in target units -> the model's normalised units
        return (np.asarray(pred, np.float64) - self.mean[0]) / self.std[0]


def check_interface(e, label):
    g = e.model.graph
    dims = lambda v: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]  # noqa
    out_dim = int(e.meta["model.vocab"] if e.text else e.meta["model.horizon"])
    want_in = [(e.x_name, ["seq", "batch"] + ([] if e.text else [int(e.meta["model.width"])])),
               ("h0", [e.L, "batch", e.H]), ("c0", [e.L, "batch", e.H])]
    want_out = [(e.y_name, ["seq", "batch", out_dim]), ("hn", [e.L, "batch", e.H]),
                ("cn", [e.L, "batch", e.H])]
    got_in = [(v.name, dims(v)) for v in g.input]
    got_out = [(v.name, dims(v)) for v in g.output]
    if got_in != want_in or got_out != want_out:
        fail("%s: graph inputs %s outputs %s, expected %s %s" % (label, got_in, got_out, want_in,
                                                                 want_out))
    lstm = [n for n in g.node if n.op_type in ("LSTM", "DynamicQuantizeLSTM")]
    if len(lstm) != e.L:
        fail("%s: %d LSTM nodes for %d layers" % (label, len(lstm), e.L))
    print("  interface: inputs %s, outputs %s, %d LSTM node(s), opset %d, IR %d"
          % (got_in, got_out, len(lstm), e.model.opset_import[0].version, e.model.ir_version),
          flush=True)


def check_outputs(e, tmp, label):
    """dump_logits' inputs and outputs at batch 1 and 7; two chunks with carried state."""
    for T, B, seed in ((5, 1, 11), (9, 7, 12)):
        inp, out = os.path.join(tmp, "in.bin"), os.path.join(tmp, "out.bin")
        run([e.args.dump_logits, e.ckpt, str(T), str(B), str(seed), inp, out])
        if e.text:
            x = np.fromfile(inp, "<i4").reshape(T, B).astype(np.int64)
            ref = np.fromfile(out, "<f4").reshape(T, B, -1)
        else:
            x = e.raw(np.fromfile(inp, "<f4").reshape(T, B, -1).astype(np.float64))
            ref = np.fromfile(out, "<f4").reshape(T, B, -1)
        y, hn, cn = e.run(x)
        if not e.text:
            y = e.normalised(y)
        compare("%s T=%d B=%d" % (label, T, B), y, ref)
        # The same sequence as two chunks, the state carried by the caller.
        cut = T // 2
        y1, h1, c1 = e.run(x[:cut])
        y2, h2, c2 = e.run(x[cut:], h1, c1)
        y12 = np.concatenate([y1, y2])
        if not e.text:
            y12 = e.normalised(y12)
        compare("%s T=%d B=%d as %d+%d carried" % (label, T, B, cut, T - cut), y12, ref)
        compare("%s hn, cn after the 2 chunks" % label, np.concatenate([h2, c2]),
                np.concatenate([hn, cn]), 1e-6, "chunked - whole")


def torch_gates(onnx_blocks):
    """README: ONNX stacks gate blocks i, o, f, c; PyTorch's order is i, f, g (= c), o."""
    i, o, f, c = np.split(onnx_blocks, 4, axis=0)
    return np.concatenate([i, f, c, o], axis=0)


def check_round_trip(e, label):
    """Every weight where README.md's table says it is, bit for bit (onnx.numpy_helper)."""
    inits = {t.name: numpy_helper.to_array(t) for t in e.model.graph.initializer}
    ckpt = {k: v for k, v in load_tensors(e.ckpt).items() if not k.startswith(("optim.", "state."))}
    found, used = {}, set()

    def take(name):
        used.add(name)
        return inits[name]

    if e.text:
        found["embed.weight"] = take("embed.weight")
    for k in range(e.L):
        found["lstm.weight_ih_l%d" % k] = torch_gates(take("lstm.W_l%d" % k)[0])
        found["lstm.weight_hh_l%d" % k] = torch_gates(take("lstm.R_l%d" % k)[0])
        wb, rb = np.split(take("lstm.B_l%d" % k)[0], 2)
        found["lstm.bias_ih_l%d" % k] = torch_gates(wb)
        found["lstm.bias_hh_l%d" % k] = torch_gates(rb)
    found["head.weight"] = take("head.weight")
    found["head.bias"] = take("head.bias")
    if sorted(found) != sorted(ckpt):
        fail("%s: tensors found %s, checkpoint has %s" % (label, sorted(found), sorted(ckpt)))
    for name, want in ckpt.items():
        got = found.get(name)
        if got is None or got.dtype != np.float32 or got.shape != want.shape or \
                not np.array_equal(got, want):
            fail("%s: %s is not where README says (or differs)" % (label, name))
    props = {p.key: p.value for p in e.model.metadata_props}
    if e.text:
        if json.loads(props.get("lstmd.vocab", "null")) != json.loads(e.meta["vocab"]):
            fail("%s: metadata lstmd.vocab differs from the checkpoint's vocab" % label)
    else:
        f32 = lambda v: np.array(v, np.float32)  # noqa: E731
        for name, want in (("series.mean", f32(e.mean)), ("series.std", f32(e.std)),
                           ("series.target_mean", f32(e.mean[:1])),
                           ("series.target_std", f32(e.std[:1]))):
            if not np.array_equal(take(name), want):
                fail("%s: initializer %s differs from the checkpoint's metadata" % (label, name))
        if json.loads(props.get("lstmd.series.columns", "null")) != \
                json.loads(e.meta["series.columns"]):
            fail("%s: metadata lstmd.series.columns differs" % label)
    helpers = {"layer_split": [1] * e.L, "squeeze_axes": [1]}
    for name, want in helpers.items():
        if list(take(name)) != want:
            fail("%s: %s is %s, expected %s" % (label, name, list(inits[name]), want))
    if set(inits) != used:
        fail("%s: initializers README does not list: %s" % (label, sorted(set(inits) - used)))
    print("  round trip: %d checkpoint tensors and %d initializers where README says"
          % (len(ckpt), len(used)), flush=True)


# ---- 3. end to end ----

def check_eval(args, e, data_dir, label, model=None, tol=2e-6):
    """Mean cross-entropy of onnxruntime's logits over the validation split == `lstmd eval` of
    model (default the checkpoint) within tol nats."""
    raw = open(os.path.join(data_dir, "val.bin"), "rb").read()
    header_bytes, count = struct.unpack_from("<I", raw, 20)[0], struct.unpack_from("<Q", raw, 24)[0]
    tokens = np.frombuffer(raw, np.uint8, count, header_bytes).astype(np.int64)
    T = int(e.meta["data.seq_len"])
    n = (count - 1) // T
    x = tokens[:n * T].reshape(n, T).T  # [T, windows], each window from a zero state
    y = tokens[1:n * T + 1].reshape(n, T).T
    logits = e.run(np.ascontiguousarray(x))[0].astype(np.float64)
    top = logits.max(axis=2, keepdims=True)
    logp = logits - top - np.log(np.exp(logits - top).sum(axis=2, keepdims=True))
    loss = float(-np.take_along_axis(logp, y[:, :, None], axis=2).mean())
    p = run([args.lstmd, "eval", "--checkpoint", model or e.ckpt, "--data", data_dir])
    want = json.loads(p.stdout)
    print("  eval: onnxruntime %.6f nats over %d tokens, lstmd eval %.6f over %d (tolerance %g)"
          % (loss, n * T, want["loss"], want["tokens"], tol), flush=True)
    if want["tokens"] != n * T or not abs(loss - want["loss"]) <= tol:
        fail("%s: onnxruntime's validation loss %.7f != lstmd eval's %.6f" % (label, loss,
                                                                             want["loss"]))


def check_predict(args, e, tmp, csv, label, model=None, tol=TOL):
    """onnxruntime on raw CSV rows (windows of seq_len from a zero state, the last ending at the
    last row: the first 5 rows one window, then two of T) == `lstmd predict` of model (default
    the checkpoint) within tol target standard deviations."""
    T = int(e.meta["data.seq_len"])
    cols = json.loads(e.meta["series.columns"])
    lines = open(csv).read().splitlines()
    head = lines[0].split(",")
    n = 2 * T + 5
    short = os.path.join(tmp, "predict-in.csv")
    with open(short, "w") as f:
        f.write("\n".join(lines[:n + 1]) + "\n")
    rows = np.array([[float(r.split(",")[head.index(c)]) for c in cols] for r in lines[1:n + 1]],
                    np.float32)
    out = os.path.join(tmp, "predict-out.csv")
    run([args.lstmd, "predict", "--checkpoint", model or e.ckpt, "--input", short, "--out", out,
         "--batch", "4"])
    want = np.loadtxt(out, delimiter=",", skiprows=1)[:, 1:]
    head = e.run(np.ascontiguousarray(rows[:5, None, :]))[0][:, 0, :]
    windows = rows[5:].reshape(2, T, -1).transpose(1, 0, 2)  # [T, 2 windows, W]
    got = e.run(np.ascontiguousarray(windows))[0].transpose(1, 0, 2).reshape(2 * T, -1)
    compare("%s vs lstmd predict (target units / std)" % label,
            np.concatenate([head, got]) / e.std[0], want / e.std[0], tol)


def check_newest_opset(default, ir_version):
    """The default opset is the newest this onnxruntime loads: it refuses default + 1."""
    def loads(opset):
        g = onnx.helper.make_graph(
            [onnx.helper.make_node("Identity", ["x"], ["y"])], "g",
            [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
            [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])])
        m = onnx.helper.make_model(g, opset_imports=[onnx.helper.make_opsetid("", opset)],
                                   ir_version=ir_version)
        try:
            ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
            return True
        except Exception:  # onnxruntime's own error type for an unsupported opset
            return False
    ok = loads(default), loads(default + 1)
    print("  onnxruntime %s loads opset %d: %s, opset %d: %s" % (ort.__version__, default, ok[0],
                                                                 default + 1, ok[1]), flush=True)
    if ok != (True, False):
        fail("the default opset %d is not the newest onnxruntime %s loads" % (default,
                                                                              ort.__version__))


def check_refusals(args, ckpt, tmp):
    out = os.path.join(tmp, "refused.onnx")
    cases = [
        (["--opset", "27"], 2, "opset"),
        (["--opset", "12"], 2, "opset"),
    ]
    for extra, code, words in cases:
        p = run([args.lstmd, "export", "onnx", "--checkpoint", ckpt, "--out", out] + extra, False)
        print("  %s -> exit %d: %s" % (" ".join(extra), p.returncode, p.stderr.strip()))
        if p.returncode != code or words not in p.stderr or os.path.exists(out):
            fail("export %s: exit %d, stderr %r" % (extra, p.returncode, p.stderr))
    qfile = os.path.join(tmp, "refused.int8")
    run([args.lstmd, "quantize", "--checkpoint", ckpt, "--out", qfile])
    p = run([args.lstmd, "export", "onnx", "--checkpoint", qfile, "--out", out, "--int8"], False)
    print("  int8 model file -> exit %d: %s" % (p.returncode, p.stderr.strip()))
    if p.returncode != 2 or "int8 model file" not in p.stderr or os.path.exists(out):
        fail("int8 model file as --checkpoint: exit %d, stderr %r" % (p.returncode, p.stderr))
    bad = os.path.join(tmp, "damaged.safetensors")
    data = open(ckpt, "rb").read()
    open(bad, "wb").write(data[:len(data) // 2])
    p = run([args.lstmd, "export", "onnx", "--checkpoint", bad, "--out", out], False)
    print("  damaged checkpoint -> exit %d: %s" % (p.returncode, p.stderr.strip()))
    if p.returncode != 2 or bad not in p.stderr or os.path.exists(out):
        fail("damaged checkpoint: exit %d, stderr %r" % (p.returncode, p.stderr))
    unwritable = os.path.join(tmp, "no-such-dir", "m.onnx")
    p = run([args.lstmd, "export", "onnx", "--checkpoint", ckpt, "--out", unwritable], False)
    print("  unwritable output -> exit %d: %s" % (p.returncode, p.stderr.strip()))
    if p.returncode != 1 or "no-such-dir" not in p.stderr:
        fail("unwritable output: exit %d, stderr %r" % (p.returncode, p.stderr))


def check_int8(args, tmp, name, ckpt, end_to_end):
    """--int8: the weights of `lstmd quantize`'s file, outputs near lstmd's int8 and fp32."""
    qfile = os.path.join(tmp, name + ".int8")
    run([args.lstmd, "quantize", "--checkpoint", ckpt, "--out", qfile])
    e = Exported(args, ckpt, export(args, ckpt, os.path.join(tmp, name + "-int8.onnx"), "--int8"))
    label = name + " int8"
    check_interface(e, label)
    inits = {t.name: numpy_helper.to_array(t) for t in e.model.graph.initializer}
    want = read_st(qfile)
    found = {"head.weight": inits["head.weight"].T, "head.weight.scale": inits["head.weight_scale"],
             "head.bias": inits["head.bias"]}
    if e.text:
        found["embed.weight"] = inits["embed.weight"]
    for k in range(e.L):
        for onnx_name, torch_name in (("W", "weight_ih"), ("R", "weight_hh")):
            found["lstm.%s_l%d" % (torch_name, k)] = torch_gates(inits["lstm.%s_l%d" % (onnx_name, k)][0].T)
            found["lstm.%s_l%d.scale" % (torch_name, k)] = torch_gates(
                inits["lstm.%s_scale_l%d" % (onnx_name, k)][0])
        wb, rb = np.split(inits["lstm.B_l%d" % k][0], 2)
        found["lstm.bias_ih_l%d" % k], found["lstm.bias_hh_l%d" % k] = torch_gates(wb), torch_gates(rb)
    if sorted(found) != sorted(want):
        fail("%s: tensors found %s, the int8 file has %s" % (label, sorted(found), sorted(want)))
    for k, v in want.items():
        if k not in found or found[k].dtype != v.dtype or not np.array_equal(found[k], v):
            fail("%s: %s differs from lstmd quantize's" % (label, k))
    zeros = [n for n in ("lstm.zero_point", "head.zero_point") if np.any(inits[n])]
    if zeros:
        fail("%s: non-zero zero points %s" % (label, zeros))
    print("  int8 round trip: %d tensors of %s equal, ops %s" % (
        len(want), os.path.basename(qfile),
        sorted({"%s:%s" % (n.domain, n.op_type) for n in e.model.graph.node if n.domain})),
        flush=True)
    inp, out = os.path.join(tmp, "in.bin"), os.path.join(tmp, "out.bin")
    run([args.dump_logits, ckpt, "9", "7", "13", inp, out])
    ref = np.fromfile(out, "<f4").reshape(9, 7, -1)
    if e.text:
        y = e.run(np.fromfile(inp, "<i4").reshape(9, 7).astype(np.int64))[0]
    else:
        y = e.normalised(e.run(e.raw(np.fromfile(inp, "<f4").reshape(9, 7, -1).astype(np.float64)))[0])
    compare("%s T=9 B=7 vs lstmd fp32" % label, y, ref, INT8_REL * float(np.max(np.abs(ref))),
            "onnx int8 - lstmd fp32")
    end_to_end(e, qfile)


def check_model(args, tmp, name, ckpt, extra=None):
    print("%s: %s" % (name, ckpt), flush=True)
    e = Exported(args, ckpt, export(args, ckpt, os.path.join(tmp, name + ".onnx")))
    check_interface(e, name)
    check_outputs(e, tmp, name)
    check_round_trip(e, name)
    if extra:
        extra(e)
    return e


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lstmd", required=True)
    ap.add_argument("--dump-logits", required=True)
    ap.add_argument("--source-dir", required=True)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    print("onnx %s, onnxruntime %s, numpy %s" % (onnx.__version__, ort.__version__,
                                                  np.__version__), flush=True)
    tmp = tempfile.mkdtemp(prefix="lstmd-onnx-")
    try:
        check_proto_subset(os.path.join(args.source_dir, "proto", "onnx_subset.proto"))
        data = os.path.join(args.source_dir, "data")
        small = os.path.join(tmp, "small.txt")
        with open(os.path.join(data, "fortunes.txt"), "rb") as f, open(small, "wb") as g:
            g.write(f.read(200000))
        text_dir = os.path.join(tmp, "text")
        run([args.lstmd, "prepare", "text", "--input", small, "--out", text_dir])
        ckpt = train(args, tmp, "text1", text_dir, {"embed": 16, "hidden": 32, "layers": 1})
        e = check_model(args, tmp, "text1", ckpt, lambda e: check_eval(args, e, text_dir, "text1"))
        # --opset 13, the oldest lstmd writes: the same outputs as the default opset.
        e13 = Exported(args, ckpt, export(args, ckpt, os.path.join(tmp, "text1-13.onnx"),
                                          "--opset", "13"))
        x = np.arange(24, dtype=np.int64).reshape(4, 6) % int(e.meta["model.vocab"])
        compare("text1 opset 13 vs opset %d" % e.model.opset_import[0].version, e13.run(x)[0],
                e.run(x)[0], 0.0, "opset 13 - default")
        check_newest_opset(e.model.opset_import[0].version, e.model.ir_version)
        check_int8(args, tmp, "text1", ckpt, lambda e, q: check_eval(
            args, e, text_dir, "text1 int8", q, 0.02 * np.log(2)))
        check_refusals(args, ckpt, tmp)
        ckpt = train(args, tmp, "text3", text_dir, {"embed": 24, "hidden": 20, "layers": 3})
        check_model(args, tmp, "text3", ckpt)

        series_dir = os.path.join(tmp, "series")
        run([args.lstmd, "prepare", "series", "--input", os.path.join(data, "seattle-temps.csv"),
             "--target", "temp", "--horizon", "2", "--out", series_dir])
        ckpt = train(args, tmp, "series1", series_dir, {"hidden": 32, "layers": 1})
        check_model(args, tmp, "series1", ckpt)
        csv = os.path.join(tmp, "multi.csv")
        rng = np.random.default_rng(0)
        with open(csv, "w") as f:
            f.write("t,a,b,c\n")
            for i in range(600):
                f.write("%d,%.6f,%.6f,%.6f\n" % (i, np.sin(i / 10.0) + 0.1 * rng.standard_normal(),
                                                 np.cos(i / 7.0), 5.0 + rng.standard_normal()))
        multi_dir = os.path.join(tmp, "multi")
        run([args.lstmd, "prepare", "series", "--input", csv, "--target", "a", "--features",
             "b,c", "--horizon", "3", "--out", multi_dir])
        ckpt = train(args, tmp, "series3", multi_dir, {"hidden": 24, "layers": 3})
        check_model(args, tmp, "series3", ckpt,
                    lambda e: check_predict(args, e, tmp, csv, "series3"))
        check_int8(args, tmp, "series3", ckpt,
                   lambda e, q: check_predict(args, e, tmp, csv, "series3 int8", q, 0.05))
        # model.target and data.window_norm=last undone inside the graph: onnxruntime on windows
        # of seq_len rows from a zero state (the shift is each window's first row) == predict.
        for target, norm in (("level", "last"), ("delta", "last"), ("delta", "none")):
            name = "series3-%s-%s" % (target, norm)
            ckpt = train(args, tmp, name, multi_dir,
                         {"hidden": 24, "layers": 3, "target": target}, {"window_norm": norm})
            print("%s: %s" % (name, ckpt), flush=True)
            e = Exported(args, ckpt, export(args, ckpt, os.path.join(tmp, name + ".onnx")))
            check_interface(e, name)
            check_predict(args, e, tmp, csv, name)
    except Exception as ex:  # a broken step is a failure too, with its reason
        fail("%s: %s" % (type(ex).__name__, ex))
    if args.keep:
        print("kept " + tmp)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    if FAILURES:
        print("%d failure(s)" % len(FAILURES))
        return 1
    print("onnx export: all checks passed (tolerance %g)" % TOL)
    return 0


if __name__ == "__main__":
    sys.exit(main())
