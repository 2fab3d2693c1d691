#!/usr/bin/env python3
"""torch_lstm_gpu_peer.py — PyTorch peer of lstmd's GPU benchmark (bench/bench_gpu.sh).

The model and step of `lstmd train` with train.device=cuda:
  nn.Embedding(V, E) -> nn.LSTM(E, H, num_layers=L) (cuDNN), seq-major [T, B] -> nn.Linear(H, V)
  -> cross-entropy (mean over T*B targets), AdamW(lr 2e-3, fused), clip_grad_norm_(1.0),
with autocast (AMP) in bf16 or fp16 (fp16 with GradScaler), fp32 master weights, random token
ids already on the GPU (no input pipeline: an upper bound for the peer). Written for PyTorch 2.11.
Prints one parseable line:  torch_gpu_peer ... tokens_per_s=Y ...
"""
import argparse
import sys
import time

import torch
import torch.nn as nn


class CharLM(nn.Module):
    def __init__(self, vocab, embed, hidden, layers):
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.lstm = nn.LSTM(embed, hidden, num_layers=layers)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, ids):
        out, _ = self.lstm(self.embed(ids))
        return self.head(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--precision", choices=["bf16", "fp16", "fp32", "tf32"], default="bf16")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=109)
    ap.add_argument("--embed", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=2)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("torch_gpu_peer: no CUDA device", file=sys.stderr)
        sys.exit(77)
    dev = torch.device("cuda")
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = args.precision != "fp32"
    torch.backends.cudnn.allow_tf32 = args.precision != "fp32"
    torch.manual_seed(1)
    T, B, V = args.seq_len, args.batch, args.vocab
    model = CharLM(V, args.embed, args.hidden, args.layers).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.0, fused=True)
    loss_fn = nn.CrossEntropyLoss()
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.precision)
    scaler = torch.amp.GradScaler("cuda", enabled=args.precision == "fp16")
    pool = [torch.randint(0, V, (T + 1, B), device=dev) for _ in range(8)]

    def step(i):
        seq = pool[i % len(pool)]
        x, y = seq[:-1], seq[1:]
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None):
            logits = model(x)
            loss = loss_fn(logits.reshape(T * B, V).float(), y.reshape(T * B))
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        return loss

    for i in range(args.warmup):
        step(i)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(args.steps):
        loss = step(i)
    loss = float(loss)
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    rate = args.steps * T * B / dt
    print(f"torch_gpu_peer precision={args.precision} T={T} B={B} H={args.hidden} L={args.layers} "
          f"steps={args.steps} seconds={dt:.3f} tokens_per_s={rate:.0f} loss={loss:.3f} "
          f"torch={torch.__version__} cudnn={torch.backends.cudnn.version()} "
          f"device=\"{torch.cuda.get_device_name()}\"")


if __name__ == "__main__":
    main()
