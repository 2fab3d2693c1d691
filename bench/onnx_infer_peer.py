#!/usr/bin/env python3
"""onnx_infer_peer.py MODEL.onnx THREADS... — onnxruntime's throughput on a model written by
`lstmd export onnx`, for bench/bench_onnx.sh. For each intra-op thread count, one JSON line:

  text:   "stream": batch-1 greedy sampling, one token per session.run with h/c carried
          (what `lstmd sample --temperature 0` does), characters/s; "batched": windows of SEQ
          tokens, BATCH at a time, each from a zero state (what `lstmd eval` does), tokens/s.
  series: "stream": one window of SEQ raw rows at batch 1 (`lstmd predict --batch 1`), rows/s;
          "batched": BATCH windows at a time (`lstmd predict --batch 64`), rows/s.

Session creation is excluded; each figure is the best of 3 timed runs of at least ~1 s.
Environment: SEQ (seq_len of the windows; default the model's lstmd.seq_len), BATCH (64),
STREAM_TOKENS (text stream length, 2000)."""
import json
import os
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort


def best_rate(fn, items_per_call, min_s=1.0):
    fn()  # warm-up
    calls = 1
    while True:  # calls for ~min_s
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        dt = time.perf_counter() - t0
        if dt >= min_s / 4 or calls >= 1 << 20:
            break
        calls *= 4
    calls = max(1, int(calls * min_s / max(dt, 1e-9)))
    best = 0.0
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = max(best, calls * items_per_call / (time.perf_counter() - t0))
    return best


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__.strip().splitlines()[0])
    path, threads = argv[1], [int(t) for t in argv[2:]]
    model = onnx.load(path, load_external_data=False)
    props = {p.key: p.value for p in model.metadata_props}
    text = props["lstmd.kind"] == "text"
    dims = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in model.graph.input}
    L, H = dims["h0"][0], dims["h0"][2]
    T = int(os.environ.get("SEQ", props["lstmd.seq_len"]))
    B = int(os.environ.get("BATCH", "64"))
    rng = np.random.default_rng(0)
    for n in threads:
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = n
        opts.inter_op_num_threads = 1
        sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        out = {"threads": n, "onnxruntime": ort.__version__, "kind": props["lstmd.kind"]}
        if text:
            V = len(json.loads(props["lstmd.vocab"]))
            steps = int(os.environ.get("STREAM_TOKENS", "2000"))

            def stream():
                h = c = np.zeros((L, 1, H), np.float32)
                tok = np.zeros((1, 1), np.int64)
                for _ in range(steps):
                    logits, h, c = sess.run(None, {"tokens": tok, "h0": h, "c0": c})
                    tok[0, 0] = int(np.argmax(logits[0, 0]))

            x = rng.integers(0, V, (T, B), dtype=np.int64)
            zeros = np.zeros((L, B, H), np.float32)
            out["stream_per_s"] = best_rate(stream, steps)
            out["batched_per_s"] = best_rate(
                lambda: sess.run(None, {"tokens": x, "h0": zeros, "c0": zeros}), T * B)
        else:
            W = dims["inputs"][2]
            for key, b in (("stream_per_s", 1), ("batched_per_s", B)):
                x = rng.standard_normal((T, b, W)).astype(np.float32)
                zeros = np.zeros((L, b, H), np.float32)
                out[key] = best_rate(
                    lambda: sess.run(None, {"inputs": x, "h0": zeros, "c0": zeros}), T * b)
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main(sys.argv)
