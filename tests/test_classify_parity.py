#!/usr/bin/env python3
"""test_classify_parity.py — the sequence classifier's logits against PyTorch (issue 19 §2).

For forward-only and bidirectional 2-layer models with pool = last, mean and max, this runs
tests/dump_classify (seeded parameters written as safetensors under lstmd's names; a padded
batch with random ids past each length; lstmd_clf_forward's logits), then builds nn.Embedding,
nn.LSTM(num_layers=2, bidirectional=...) and nn.Linear, loads the file with
load_state_dict(strict=True) (so the `_reverse` names and the 2H input of layer 1 must be
PyTorch's), and runs the batch through pack_padded_sequence in float64: PyTorch never sees the
padding. Pooling: last = h_n (forward's final state, reverse's final state), mean and max over
pad_packed_sequence's valid steps. Pass: max|lstmd − torch| / max|torch| < 1e-5 for every case.
The same runs for the series classifier (dump_classify ... series): no nn.Embedding, an
nn.LSTM(input_size=1) reading one value per step, padded values random.

usage: test_classify_parity.py --dump-classify PATH
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


def load_safetensors(path):
    raw = open(path, "rb").read()
    (hlen,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + hlen].decode("utf-8"))
    header.pop("__metadata__", None)
    data = raw[8 + hlen:]
    out = {}
    for name, d in header.items():
        assert d["dtype"] == "F32", name
        b, e = d["data_offsets"]
        out[name] = np.frombuffer(data[b:e], dtype="<f4").reshape(d["shape"]).copy()
    return out


class Classifier(nn.Module):
    def __init__(self, V, E, H, L, C, bidirectional, series=False):
        super().__init__()
        self.embed = None if series else nn.Embedding(V, E)
        self.lstm = nn.LSTM(1 if series else E, H, num_layers=L, bidirectional=bidirectional)
        self.head = nn.Linear(H * (2 if bidirectional else 1), C)
        self.bidirectional = bidirectional

    def forward(self, ids, lengths, pool):
        x = self.embed(ids) if self.embed is not None else ids[:, :, None]  # [T,B,E] or [T,B,1]
        packed = pack_padded_sequence(x, lengths, enforce_sorted=False)
        out, (h_n, _) = self.lstm(packed)
        out, _ = pad_packed_sequence(out, total_length=ids.shape[0])  # [T,B,D·H], 0 past length
        if pool == "last":
            pooled = torch.cat([h_n[-2], h_n[-1]], 1) if self.bidirectional else h_n[-1]
        elif pool == "mean":
            pooled = out.sum(0) / lengths.to(out.dtype)[:, None]
        else:
            T = ids.shape[0]
            valid = torch.arange(T)[:, None] < lengths[None, :]
            pooled = out.masked_fill(~valid[:, :, None], float("-inf")).max(0).values
        return self.head(pooled)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump-classify", required=True)
    args = ap.parse_args()
    torch.manual_seed(0)
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for series, bidirectional, pool in ((s, b, p) for s in (0, 1) for b in (0, 1)
                                            for p in ("last", "mean", "max")):
            line = subprocess.run([args.dump_classify, tmp, str(bidirectional), pool, "42"]
                                  + (["series"] if series else []),
                                  check=True, capture_output=True, text=True).stdout
            dims = dict(kv.split("=") for kv in line.split())
            V, E, H, L, C, T, B = (int(dims[k]) for k in "V E H L C T B".split())
            params = load_safetensors(os.path.join(tmp, "model.safetensors"))
            model = Classifier(V, E, H, L, C, bool(bidirectional), bool(series)).double()
            model.load_state_dict({k: torch.from_numpy(v).double() for k, v in params.items()},
                                  strict=True)
            if series:
                inputs = torch.from_numpy(
                    np.fromfile(os.path.join(tmp, "x.bin"), dtype="<f4").reshape(T, B)).double()
            else:
                inputs = torch.from_numpy(
                    np.fromfile(os.path.join(tmp, "ids.bin"), dtype="<i4").reshape(T, B)).long()
            lengths = np.fromfile(os.path.join(tmp, "lengths.bin"), dtype="<i4")
            got = np.fromfile(os.path.join(tmp, "logits.bin"), dtype="<f4").reshape(B, C)
            with torch.no_grad():
                want = model(inputs, torch.from_numpy(lengths).long(), pool).numpy()
            err = np.max(np.abs(got - want)) / np.max(np.abs(want))
            ok = err < 1e-5
            failures += not ok
            print("%-6s %-14s pool=%-4s  max|lstmd-torch|/max|torch| = %.3g  %s"
                  % ("series" if series else "text", "bidirectional" if bidirectional
                     else "forward", pool, err,
                     "ok" if ok else "FAIL"))
    print("test_classify_parity: %s" % ("all passed" if not failures else "%d FAILED" % failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
