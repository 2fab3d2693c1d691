#!/usr/bin/env python3
"""torch_lstm_peer.py — PyTorch peer of lstmd's CPU char-LM benchmark (bench/bench_cpu.sh).

Same model and step as `lstmd train` with bench/char_lm_h512.ini:
  nn.Embedding(V, 64) -> nn.LSTM(64, 512, num_layers=2), seq-major [T, B] -> nn.Linear(512, V)
  -> cross-entropy (mean over T*B targets), fp32, AdamW(lr 2e-3, weight_decay 0),
  clip_grad_norm_(1.0); T=128, B=32, V=109, random token ids.
Runs on Debian's torch 1.13 (/usr/bin/python3) and on PyPI's torch 2.x (bench/torch2_env.sh).
Debian's torch does its GEMMs in the system OpenBLAS (libblas.so.3 -> openblas-pthread), which uses
all cores for every GEMM whatever torch.set_num_threads says, on the kernels OPENBLAS_CORETYPE
names (set before the process starts); --threads only sets torch's own (OpenMP) intra-op threads.
On a 2-core VM, --threads 2 with libgomp's default spin-waiting makes the OpenMP and OpenBLAS
threads fight for the cores (measured: ~10x slower); bench_cpu.sh runs it with
OMP_WAIT_POLICY=passive (must be in the environment before the process starts).
PyPI's torch 2.x links MKL and oneDNN statically and runs them on its own OpenMP threads, which
torch.set_num_threads sets (no OpenBLAS in the process, OPENBLAS_CORETYPE is irrelevant there).
Prints one parseable line:  torch_peer threads=N ... tokens_per_s=Y ...
"""
import argparse
import ctypes
import os
import re
import sys
import time

import torch
import torch.nn as nn


class CharLM(nn.Module):
    def __init__(self, vocab, embed, hidden, layers):
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.lstm = nn.LSTM(embed, hidden, num_layers=layers)  # batch_first=False: [T, B, E]
        self.head = nn.Linear(hidden, vocab)

    def forward(self, ids):
        out, _ = self.lstm(self.embed(ids))  # zero initial state, like lstmd's shuffle order
        return self.head(out)


def blas_info():
    """(blas, openblas core, openblas threads) of the BLAS torch computes with: the OpenBLAS loaded
    in this process if any (Debian's torch: the same library instance, so its kernels and
    threads), else torch's BLAS_INFO (PyPI's torch 2.x: 'mkl', '-', -1). Never loads an OpenBLAS
    just to ask it (that would be a second instance, not the one torch uses)."""
    try:
        with open("/proc/self/maps") as f:
            loaded = [ln.split()[-1] for ln in f if "libopenblas" in ln]
    except OSError:
        loaded = []
    if loaded:
        try:
            lib = ctypes.CDLL(loaded[0])
            lib.openblas_get_corename.restype = ctypes.c_char_p
            return "openblas", lib.openblas_get_corename().decode(), lib.openblas_get_num_threads()
        except (OSError, AttributeError):
            return "openblas", "unknown", -1
    m = re.search(r"BLAS_INFO=([^,\s]+)", torch.__config__.show())
    return (m.group(1) if m else "unknown"), "-", -1


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    ap.add_argument("--steps", type=int, default=20, help="timed training steps")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    ap.add_argument("--max-seconds", type=float, default=0.0,
                    help="stop timing early after this long (at least 1 step; 0: no limit)")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--vocab", type=int, default=109)
    ap.add_argument("--embed", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=2)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    T, B, V = args.seq_len, args.batch, args.vocab
    model = CharLM(V, args.embed, args.hidden, args.layers)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.0)
    loss_fn = nn.CrossEntropyLoss()
    # A pool of random batches (fresh data each step, no per-step RNG cost in the timed loop).
    pool = [torch.randint(0, V, (T + 1, B)) for _ in range(8)]

    def step(i):
        seq = pool[i % len(pool)]
        x, y = seq[:-1], seq[1:]
        opt.zero_grad(set_to_none=True)
        logits = model(x)
        loss = loss_fn(logits.reshape(T * B, V), y.reshape(T * B))
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.detach()

    for i in range(args.warmup):
        step(i)
    t0 = time.perf_counter()
    done = 0
    for i in range(args.steps):
        loss = step(i)
        done += 1
        if args.max_seconds > 0 and time.perf_counter() - t0 > args.max_seconds:
            break
    loss = loss.item()  # sync (CPU: already done)
    dt = time.perf_counter() - t0
    rate = done * T * B / dt
    blas, core, blas_threads = blas_info()
    mkldnn = int(torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled)
    print(f"torch_peer threads={torch.get_num_threads()} steps={done} seconds={dt:.3f} "
          f"tokens_per_s={rate:.0f} loss={loss:.3f} torch={torch.__version__} "
          f"blas={blas} openblas_core={core} openblas_threads={blas_threads} mkldnn={mkldnn} "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
