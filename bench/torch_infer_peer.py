#!/usr/bin/env python3
"""torch_infer_peer.py — the PyTorch peer of bench/bench_infer.sh: batch-1 greedy sampling with the
same weights as an lstmd checkpoint (read from the safetensors file with json + numpy), in fp32 and
after torch.ao.quantization.quantize_dynamic({nn.LSTM, nn.Linear}, dtype=torch.qint8), one
character per call as a sampling loop runs. Prints one JSON line per (precision, threads):
  {"peer": "torch 2.x", "precision": "int8", "threads": 1, "chars_per_s": ..., "chars": N}
usage: torch_infer_peer.py CKPT CHARS [THREADS ...]
"""
import json
import struct
import sys
import time

import numpy as np
import torch
from torch import nn


def load(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    head = json.loads(raw[8:8 + n])
    meta = head.pop("__metadata__")
    body = raw[8 + n:]
    tensors = {k: torch.from_numpy(np.frombuffer(body[v["data_offsets"][0]:v["data_offsets"][1]],
                                                 dtype=np.float32).reshape(v["shape"]).copy())
               for k, v in head.items() if v["dtype"] == "F32" and not k.startswith(("optim.", "state."))}
    return meta, tensors


class CharLM(nn.Module):
    def __init__(self, V, E, H, L):
        super().__init__()
        self.embed = nn.Embedding(V, E)
        self.lstm = nn.LSTM(E, H, L)
        self.head = nn.Linear(H, V)

    def forward(self, x, state):
        y, state = self.lstm(self.embed(x), state)
        return self.head(y), state


def sample_rate(model, chars):
    x = torch.zeros(1, 1, dtype=torch.long)
    state = None
    with torch.inference_mode():
        for _ in range(20):  # warm-up (oneDNN/fbgemm set-up, caches)
            logits, state = model(x, state)
        t0 = time.perf_counter()
        for _ in range(chars):
            logits, state = model(x, state)
            x = logits.argmax(-1)
        return chars / (time.perf_counter() - t0)


def main():
    path, chars = sys.argv[1], int(sys.argv[2])
    threads = [int(t) for t in sys.argv[3:]] or [1]
    meta, t = load(path)
    V, E = int(meta["model.vocab"]), int(meta["model.embed"])
    H, L = int(meta["model.hidden"]), int(meta["model.layers"])
    model = CharLM(V, E, H, L).eval()
    model.load_state_dict(t, strict=True)
    qmodel = torch.ao.quantization.quantize_dynamic(model, {nn.LSTM, nn.Linear}, dtype=torch.qint8)
    for n in threads:
        torch.set_num_threads(n)
        for name, m in (("fp32", model), ("int8", qmodel)):
            rate = sample_rate(m, chars if name == "int8" else max(chars // 4, 50))
            print(json.dumps({"peer": "torch " + torch.__version__, "precision": name, "threads": n,
                              "chars_per_s": round(rate, 1), "hidden": H}), flush=True)


if __name__ == "__main__":
    main()
