#!/usr/bin/env python3
"""onnx_int8_forms.py MODEL-int8.onnx THREADS... — why `lstmd export onnx --int8` writes
com.microsoft DynamicQuantizeLSTM/DynamicQuantizeMatMul: the same int8 weights and scales in
the other form ONNX offers, QDQ (DequantizeLinear per output row feeding the standard LSTM and
MatMul), built here from the exported file, and both timed with onnxruntime (bench_onnx.sh).
Text models. One JSON line per form and thread count: batch-1 greedy sampling characters/s
(one token per session.run, h/c carried) and batched tokens/s (BATCH windows of SEQ tokens),
file size, and the largest difference of its logits from the DynamicQuantizeLSTM form's.
Environment: SEQ (the model's lstmd.seq_len), BATCH (64), STREAM_TOKENS (1000)."""
import json
import os
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from onnx_infer_peer import best_rate  # noqa: E402


def qdq_form(m):
    """The --int8 model with each int8 weight dequantised per output row in the graph."""
    g = m.graph
    inits = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    keep, nodes = {}, []

    def dequant(name, q, scale, axis):  # q int8 with scale along axis
        keep[name + ".q"], keep[name + ".s"] = q, scale
        keep[name + ".z"] = np.zeros(scale.shape, np.int8)
        nodes.append(helper.make_node("DequantizeLinear", [name + ".q", name + ".s", name + ".z"],
                                      [name + ".f"], axis=axis))
        return name + ".f"

    for n in g.node:
        if n.op_type == "DynamicQuantizeLSTM":
            w = dequant(n.input[1], inits[n.input[1]].transpose(0, 2, 1).copy(),
                        inits[n.input[8]][0], 1)
            r = dequant(n.input[2], inits[n.input[2]].transpose(0, 2, 1).copy(),
                        inits[n.input[10]][0], 1)
            lstm = helper.make_node("LSTM", [n.input[0], w, r] + list(n.input[3:7]),
                                    list(n.output), name=n.name)
            lstm.attribute.extend(n.attribute)
            nodes.append(lstm)
        elif n.op_type == "DynamicQuantizeMatMul":
            wt = dequant(n.input[1], inits[n.input[1]].T.copy(), inits[n.input[2]], 0)
            nodes.append(helper.make_node("Transpose", [wt], ["head.wt"], perm=[1, 0]))
            nodes.append(helper.make_node("MatMul", [n.input[0], "head.wt"], ["head.mm"]))
            nodes.append(helper.make_node("Add", ["head.mm", n.input[4]], list(n.output)))
        else:
            nodes.append(n)
    used = {i for n in nodes for i in n.input}
    keep.update({k: v for k, v in inits.items() if k in used and k not in keep})
    graph = helper.make_graph(nodes, g.name, g.input, g.output,
                              [numpy_helper.from_array(v, k) for k, v in keep.items()])
    return helper.make_model(graph, opset_imports=[m.opset_import[0]], ir_version=m.ir_version)


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__.strip().splitlines()[0])
    path, threads = argv[1], [int(t) for t in argv[2:]]
    model = onnx.load(path)
    props = {p.key: p.value for p in model.metadata_props}
    dims = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in model.graph.input}
    L, H = dims["h0"][0], dims["h0"][2]
    V = len(json.loads(props["lstmd.vocab"]))
    T = int(os.environ.get("SEQ", props["lstmd.seq_len"]))
    B = int(os.environ.get("BATCH", "64"))
    steps = int(os.environ.get("STREAM_TOKENS", "1000"))
    x = np.random.default_rng(0).integers(0, V, (T, B), dtype=np.int64)
    zeros = np.zeros((L, B, H), np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        qdq = os.path.join(tmp, "qdq.onnx")
        onnx.save(qdq_form(model), qdq)
        ref = None
        for form, p in (("DynamicQuantizeLSTM", path), ("QDQ", qdq)):
            for n in threads:
                opts = ort.SessionOptions()
                opts.intra_op_num_threads, opts.inter_op_num_threads = n, 1
                sess = ort.InferenceSession(p, opts, providers=["CPUExecutionProvider"])
                y = sess.run(None, {"tokens": x, "h0": zeros, "c0": zeros})[0]
                ref = y if ref is None else ref

                def stream():
                    h = c = np.zeros((L, 1, H), np.float32)
                    tok = np.zeros((1, 1), np.int64)
                    for _ in range(steps):
                        logits, h, c = sess.run(None, {"tokens": tok, "h0": h, "c0": c})
                        tok[0, 0] = int(np.argmax(logits[0, 0]))

                print(json.dumps({
                    "form": form, "threads": n, "bytes": os.path.getsize(p),
                    "stream_per_s": best_rate(stream, steps),
                    "batched_per_s": best_rate(
                        lambda: sess.run(None, {"tokens": x, "h0": zeros, "c0": zeros}), T * B),
                    "max_diff_from_dynamic": float(np.abs(y - ref).max())}), flush=True)


if __name__ == "__main__":
    main(sys.argv)
