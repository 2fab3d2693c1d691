#!/usr/bin/env python3
"""test_torch_parity.py — lstmd's forward pass against PyTorch, as an independent reference.

For a text model (bundled corpus), a layer-normalised one (model.layer_norm, against the 20-line
LayerNormLSTM below, which loads lstmd's lstm.ln_* tensors under their names) and series models (bundled Seattle temperatures, horizon 2, and
a synthetic multi-column CSV), this:
  1. prepares the data and trains a tiny model for a few steps with `lstmd train`;
  2. parses the safetensors checkpoint itself (struct + json + numpy, no safetensors package);
  3. builds torch nn.Embedding / nn.LSTM(num_layers=L) / nn.Linear and loads the checkpoint's
     tensors with load_state_dict(strict=True) under their exact names (prefix stripped);
  4. runs tests/dump_logits (lstmd_model_step, no dropout, zero state) on pseudo-random inputs and
     the same inputs through torch in float64 and float32, and compares.
Pass: norm-relative error of lstmd vs torch float64 below 1e-5 and the max error relative to the
output's scale (max|a-b| / max|b|) below 1e-5, for every output. Exit 1 on any mismatch.

usage: test_torch_parity.py --lstmd PATH --dump-logits PATH --source-dir DIR [--keep]
       test_torch_parity.py --dump-logits PATH --checkpoint CKPT   (steps 2-4 on a given file,
       e.g. one gathered from pipeline stages; tests/test_pipeline.sh)
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch

TOL = 1e-5
FAILURES = []


def fail(msg):
    print("FAIL: " + msg, flush=True)
    FAILURES.append(msg)


def run(cmd, **kw):
    print("+ " + " ".join(cmd), flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    if p.returncode != 0:
        sys.stdout.write(p.stdout)
        sys.stdout.write(p.stderr)
        raise RuntimeError("command failed with exit code %d: %s" % (p.returncode, " ".join(cmd)))
    return p


# ---- safetensors, parsed by hand ----

DTYPES = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "I32": np.int32,
          "F16": np.float16, "U8": np.uint8, "I8": np.int8}


def load_safetensors(path):
    """Returns (tensors: dict name -> np.ndarray, metadata: dict). Validates the layout."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError("%s: shorter than the 8-byte header length" % path)
    (hlen,) = struct.unpack("<Q", raw[:8])
    if 8 + hlen > len(raw):
        raise ValueError("%s: header length %d exceeds the file" % (path, hlen))
    header = json.loads(raw[8:8 + hlen].decode("utf-8"))
    data = raw[8 + hlen:]
    meta = header.pop("__metadata__", {}) or {}
    tensors = {}
    spans = []
    for name, d in header.items():
        dt = np.dtype(DTYPES[d["dtype"]]).newbyteorder("<")
        shape = tuple(int(x) for x in d["shape"])
        begin, end = (int(x) for x in d["data_offsets"])
        n = int(np.prod(shape)) if shape else 1
        if end - begin != n * dt.itemsize or end > len(data) or begin < 0:
            raise ValueError("%s: tensor %s has inconsistent offsets" % (path, name))
        spans.append((begin, end))
        tensors[name] = np.frombuffer(data, dtype=dt, count=n, offset=begin).reshape(shape).copy()
    spans.sort()
    pos = 0
    for b, e in spans:
        if b != pos:
            raise ValueError("%s: gap or overlap in tensor data at %d" % (path, b))
        pos = e
    if pos != len(data):
        raise ValueError("%s: %d trailing bytes after the tensors" % (path, len(data) - pos))
    return tensors, meta


def sub_state(tensors, prefix, dtype):
    return {k[len(prefix):]: torch.from_numpy(v.astype(dtype))
            for k, v in tensors.items() if k.startswith(prefix)}


# ---- the reference model ----

class LayerNormLSTM(torch.nn.Module):
    """model.layer_norm (TFA's LayerNormLSTMCell) under lstmd's tensor names, which PyTorch has no
    module for: z = LN_ih(x W_ih^T) + LN_hh(h W_hh^T) + b_ih + b_hh; gates i, f, g, o;
    c = LN_c(f c + i g), the normalised c carried; h = o tanh(c). LN: biased variance, eps 1e-3."""
    NAMES = ("weight_ih", "weight_hh", "bias_ih", "bias_hh", "ln_ih_weight", "ln_ih_bias",
             "ln_hh_weight", "ln_hh_bias", "ln_c_weight", "ln_c_bias")

    def __init__(self, inp, hidden, layers):
        super().__init__()
        self.H, self.L = hidden, layers
        for k in range(layers):
            G = 4 * hidden
            shapes = ((G, inp if k == 0 else hidden), (G, hidden), (G,), (G,), (G,), (G,), (G,),
                      (G,), (hidden,), (hidden,))
            for n, shape in zip(self.NAMES, shapes):
                self.register_parameter("%s_l%d" % (n, k), torch.nn.Parameter(torch.zeros(shape)))

    def forward(self, x):
        for k in range(self.L):
            p = lambda n: getattr(self, "%s_l%d" % (n, k))
            ln = lambda v, w: torch.nn.functional.layer_norm(
                v, v.shape[-1:], p("ln_%s_weight" % w), p("ln_%s_bias" % w), eps=1e-3)
            h = x.new_zeros(x.shape[1], self.H)
            c, out, xp = h, [], ln(x @ p("weight_ih").T, "ih")
            for t in range(x.shape[0]):
                z = xp[t] + ln(h @ p("weight_hh").T, "hh") + p("bias_ih") + p("bias_hh")
                i, f, g, o = z.chunk(4, -1)
                c = ln(torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g), "c")
                h = torch.sigmoid(o) * torch.tanh(c)
                out.append(h)
            x = torch.stack(out)
        return x, None


class Reference(torch.nn.Module):
    def __init__(self, kind, vocab, embed, width, hidden, layers, horizon, layer_norm=False):
        super().__init__()
        self.kind = kind
        inp = embed if kind == "text" else width
        if kind == "text":
            self.embed = torch.nn.Embedding(vocab, embed)
        self.lstm = (LayerNormLSTM(inp, hidden, layers) if layer_norm
                     else torch.nn.LSTM(inp, hidden, num_layers=layers))
        self.head = torch.nn.Linear(hidden, vocab if kind == "text" else horizon)

    def load_checkpoint(self, tensors, dtype):
        model_keys = {k for k in tensors if k.split(".")[0] in ("embed", "lstm", "head")}
        expected = set()
        mods = (["embed"] if self.kind == "text" else []) + ["lstm", "head"]
        for m in mods:
            sd = sub_state(tensors, m + ".", dtype)
            getattr(self, m).load_state_dict(sd, strict=True)  # exact names and shapes
            expected |= {m + "." + k for k in getattr(self, m).state_dict()}
        if model_keys != expected:
            raise ValueError("checkpoint model tensors %s != torch's %s"
                             % (sorted(model_keys ^ expected), sorted(expected)))

    def forward(self, inp):
        x = self.embed(inp) if self.kind == "text" else inp
        y, _ = self.lstm(x)  # [T,B,*], zero initial state
        return self.head(y)


def compare(label, got, ref64, ref32):
    got = got.astype(np.float64)
    diff = np.abs(got - ref64)
    scale = float(np.max(np.abs(ref64)))
    norm_rel = float(np.linalg.norm(got - ref64) / max(np.linalg.norm(ref64), 1e-30))
    max_rel_scale = float(np.max(diff) / max(scale, 1e-30))
    elem_rel = float(np.max(diff / np.maximum(np.abs(ref64), 1e-3)))
    t32_norm_rel = float(np.linalg.norm(ref32 - ref64) / max(np.linalg.norm(ref64), 1e-30))
    finite = bool(np.all(np.isfinite(got)))
    print("  %-28s lstmd vs torch64: norm-rel %.3e  max|d|/max|ref| %.3e  max elem-rel(eps=1e-3) "
          "%.3e | torch32 vs torch64 norm-rel %.3e | max|ref| %.3g"
          % (label, norm_rel, max_rel_scale, elem_rel, t32_norm_rel, scale), flush=True)
    if not finite:
        fail("%s: lstmd output has non-finite values" % label)
    if not (norm_rel < TOL):
        fail("%s: norm-relative error %.3e >= %g" % (label, norm_rel, TOL))
    if not (max_rel_scale < TOL):
        fail("%s: max error relative to scale %.3e >= %g" % (label, max_rel_scale, TOL))
    if scale == 0.0:
        fail("%s: reference output is all zeros (degenerate test)" % label)


def check_checkpoint(args, tmp, ckpt, shapes):
    tensors, meta = load_safetensors(ckpt)
    if meta.get("format") != "lstmd-checkpoint-1":
        fail("%s: metadata format is %r" % (ckpt, meta.get("format")))
    kind = meta["model.kind"]
    dims = {k: int(meta["model." + k]) for k in ("vocab", "embed", "width", "hidden", "layers",
                                                 "horizon")}
    print("checkpoint %s: kind=%s %s, tensors: %s" % (
        ckpt, kind, dims, ", ".join("%s%s" % (k, list(v.shape)) for k, v in sorted(tensors.items())
                                    if not k.startswith(("optim.", "state.", "prune.")))), flush=True)
    models = {}
    layer_norm = meta.get("model.layer_norm") == "1"
    if layer_norm != any(k.startswith("lstm.ln_") for k in tensors):
        fail("%s: metadata model.layer_norm %r but LN tensors %s" % (
            ckpt, meta.get("model.layer_norm"), "present" if not layer_norm else "absent"))
    for dt, tdt in ((np.float64, torch.float64), (np.float32, torch.float32)):
        m = Reference(kind, layer_norm=layer_norm, **dims).to(tdt)
        m.load_checkpoint(tensors, dt)
        m.eval()
        models[dt] = m
    for (T, B, seed) in shapes:
        inp_path = os.path.join(tmp, "inputs.bin")
        out_path = os.path.join(tmp, "outputs.bin")
        p = run([args.dump_logits, ckpt, str(T), str(B), str(seed), inp_path, out_path])
        print("  dump_logits: " + p.stdout.strip(), flush=True)
        if kind == "text":
            V = dims["vocab"]
            ids = np.fromfile(inp_path, dtype="<i4")
            if ids.size != T * B:
                fail("%s: dump_logits wrote %d ids, expected %d" % (ckpt, ids.size, T * B))
                continue
            ids = ids.reshape(T, B)
            if ids.min() < 0 or ids.max() >= V:
                fail("%s: ids out of range" % ckpt)
                continue
            inp64 = inp32 = torch.from_numpy(ids.astype(np.int64))
            out_dim = V
        else:
            W = dims["width"]
            x = np.fromfile(inp_path, dtype="<f4")
            if x.size != T * B * W:
                fail("%s: dump_logits wrote %d inputs, expected %d" % (ckpt, x.size, T * B * W))
                continue
            x = x.reshape(T, B, W)
            inp64 = torch.from_numpy(x.astype(np.float64))
            inp32 = torch.from_numpy(x.astype(np.float32))
            out_dim = dims["horizon"]
        got = np.fromfile(out_path, dtype="<f4")
        if got.size != T * B * out_dim:
            fail("%s: dump_logits wrote %d outputs, expected %d" % (ckpt, got.size,
                                                                    T * B * out_dim))
            continue
        got = got.reshape(T, B, out_dim)
        with torch.no_grad():
            ref64 = models[np.float64](inp64).numpy()
            ref32 = models[np.float32](inp32).numpy().astype(np.float64)
        compare("%s%s T=%d B=%d" % (kind, " LN" if layer_norm else "", T, B), got, ref64, ref32)


def write_ini(path, data_dir, run_dir, extra):
    cfg = {
        "data": {"path": data_dir, "seq_len": 16, "batch_size": 4},
        "model": {"embed": 16, "hidden": 32, "layers": 2, "dropout": 0},
        "optim": {"lr": 0.01},
        "train": {"steps": 5, "seed": 7, "run_dir": run_dir, "checkpoint_every": 0,
                  "eval_every": 0, "log_every": 1, "threads": 1},
    }
    for sec, kv in extra.items():
        cfg.setdefault(sec, {}).update(kv)
    with open(path, "w") as f:
        for sec, kv in cfg.items():
            f.write("[%s]\n" % sec)
            for k, v in kv.items():
                f.write("%s = %s\n" % (k, v))
            f.write("\n")


def train(args, tmp, name, data_dir, extra=None):
    run_dir = os.path.join(tmp, "run-" + name)
    ini = os.path.join(tmp, name + ".ini")
    write_ini(ini, data_dir, run_dir, extra or {})
    run([args.lstmd, "train", "--config", ini])
    ckpt = os.path.join(run_dir, "step-5.safetensors")
    if not os.path.exists(ckpt):
        raise RuntimeError("training did not write %s (run dir has %s)"
                           % (ckpt, os.listdir(run_dir)))
    return ckpt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lstmd")
    ap.add_argument("--dump-logits", required=True)
    ap.add_argument("--source-dir")
    ap.add_argument("--checkpoint", help="check only this checkpoint (strict load, outputs)")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir")
    args = ap.parse_args()
    if not args.checkpoint and not (args.lstmd and args.source_dir):
        ap.error("--lstmd and --source-dir are required without --checkpoint")
    torch.manual_seed(0)
    print("torch %s, numpy %s" % (torch.__version__, np.__version__), flush=True)
    tmp = tempfile.mkdtemp(prefix="lstmd-parity-")
    try:
        if args.checkpoint:
            check_checkpoint(args, tmp, args.checkpoint, [(16, 4, 1), (23, 3, 2)])
            return finish(args, tmp)
        data = os.path.join(args.source_dir, "data")
        # Text: the bundled corpus.
        text_dir = os.path.join(tmp, "text")
        run([args.lstmd, "prepare", "text", "--input", os.path.join(data, "fortunes.txt"),
             "--out", text_dir])
        ckpt = train(args, tmp, "text", text_dir)
        check_checkpoint(args, tmp, ckpt, [(16, 4, 1), (37, 3, 2), (1, 1, 3)])
        # Text with 3 layers and different E/H, to catch layout mistakes that square shapes hide.
        ckpt = train(args, tmp, "text3", text_dir,
                     {"model": {"embed": 24, "hidden": 20, "layers": 3}})
        check_checkpoint(args, tmp, ckpt, [(16, 4, 4), (23, 5, 5)])
        # Pruned: the masks ride along as I8 'prune.mask.*' tensors; the model's names load
        # strictly as before, and half of every weight matrix is zero.
        ckpt = train(args, tmp, "pruned", text_dir,
                     {"prune": {"target_sparsity": 0.5, "begin_step": 1, "end_step": 3,
                                "frequency": 1}})
        tensors, _ = load_safetensors(ckpt)
        for k in ("lstm.weight_ih_l0", "lstm.weight_hh_l1", "head.weight"):
            if "prune.mask." + k not in tensors or np.mean(tensors[k] == 0) != 0.5:
                fail("%s: %.3f of it is zero, want 0.5" % (k, np.mean(tensors[k] == 0)))
        check_checkpoint(args, tmp, ckpt, [(16, 4, 10)])

        # model.layer_norm: the 20-line reference cell above, loaded strictly from the file.
        ckpt = train(args, tmp, "text-ln", text_dir,
                     {"model": {"embed": 24, "hidden": 20, "layers": 2, "layer_norm": "true"}})
        check_checkpoint(args, tmp, ckpt, [(16, 4, 11), (23, 3, 12)])

        # Series: the bundled Seattle temperatures, horizon 2.
        series_dir = os.path.join(tmp, "series")
        run([args.lstmd, "prepare", "series", "--input", os.path.join(data, "seattle-temps.csv"),
             "--target", "temp", "--horizon", "2", "--out", series_dir])
        ckpt = train(args, tmp, "series", series_dir)
        check_checkpoint(args, tmp, ckpt, [(16, 4, 6), (41, 3, 7)])
        ckpt = train(args, tmp, "series-ln", series_dir, {"model": {"layer_norm": "true"}})
        check_checkpoint(args, tmp, ckpt, [(16, 4, 13)])

        # Series with extra feature columns (W=3) and horizon 3.
        csv = os.path.join(tmp, "multi.csv")
        rng = np.random.default_rng(0)
        with open(csv, "w") as f:
            f.write("t,a,b,c\n")
            for i in range(600):
                a = np.sin(i / 10.0) + 0.1 * rng.standard_normal()
                f.write("%d,%.6f,%.6f,%.6f\n" % (i, a, np.cos(i / 7.0), 5.0 + rng.standard_normal()))
        multi_dir = os.path.join(tmp, "multi")
        run([args.lstmd, "prepare", "series", "--input", csv, "--target", "a",
             "--features", "b,c", "--horizon", "3", "--out", multi_dir])
        ckpt = train(args, tmp, "multi", multi_dir, {"model": {"hidden": 24, "layers": 3}})
        check_checkpoint(args, tmp, ckpt, [(16, 4, 8), (29, 2, 9)])
    except Exception as e:  # a broken pipeline is a failure too, with the reason
        fail("%s: %s" % (type(e).__name__, e))
    return finish(args, tmp)


def finish(args, tmp):
    if args.keep:
        print("kept " + tmp)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    if FAILURES:
        print("%d failure(s)" % len(FAILURES))
        return 1
    print("torch parity: all outputs match (tolerance %g)" % TOL)
    return 0


if __name__ == "__main__":
    sys.exit(main())
