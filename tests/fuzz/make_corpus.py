#!/usr/bin/env python3
"""make_corpus.py — writes the seed corpus of the frame/request fuzz target (tests/fuzz/corpus/).

Each file is a byte stream as a client would send it: one or more frames (4-byte big-endian
length + lstmd.Request), or something broken. Run it again after changing proto/lstmd.proto:
  python3 tests/fuzz/make_corpus.py tests/fuzz/corpus
"""
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import lstmd_wire as w  # noqa: E402

GOOD_SETTINGS = [("data.path", "data"), ("data.seq_len", "32"), ("data.batch_size", "4"),
                 ("data.order", "stream"), ("model.embed", "16"), ("model.hidden", "32"),
                 ("model.layers", "1"), ("model.dropout", "0.1"), ("optim.algo", "sgd"),
                 ("optim.lr", "0.5"), ("optim.weight_decay", "0.01"), ("optim.beta1", "0.9"),
                 ("optim.beta2", "0.999"), ("optim.eps", "1e-8"), ("optim.momentum", "0.9"),
                 ("optim.warmup", "10"), ("optim.schedule", "constant"), ("optim.clip_norm", "1"),
                 ("optim.grad_accum", "2"), ("train.steps", "50"), ("train.seed", "7"),
                 ("train.device", "cpu"), ("train.precision", "fp32"), ("train.run_dir", "runs/x"),
                 ("train.checkpoint_every", "0"), ("train.eval_every", "0"),
                 ("train.log_every", "10"), ("train.threads", "1"), ("train.bucket_mb", "0.5")]


def corpus():
    f = w.frame
    yield "submit_min", f(w.submit([("data.path", "data")]))
    yield "submit_all_keys", f(w.submit(GOOD_SETTINGS, name="every key", token="t0k3n"))
    yield "get", f(w.by_id(w.GET, 1))
    yield "list", f(w.empty(w.LIST))
    yield "cancel", f(w.by_id(w.CANCEL, 2**64 - 1))
    yield "watch", f(w.by_id(w.WATCH, 3))
    yield "shutdown", f(w.empty(w.SHUTDOWN, token="x"))
    yield "pipelined", b"".join(f(p) for p in (w.empty(w.LIST), w.by_id(w.GET, 1),
                                               w.submit([("train.steps", "5")]), w.empty(w.LIST)))
    # valid protobuf, rejected by the validator or the config table
    yield "submit_no_spec", f(w.ld(w.SUBMIT, b""))
    yield "submit_bad_key", f(w.submit([("Data.Path", "x")]))
    yield "submit_unknown_key", f(w.submit([("data.nope", "1")]))
    yield "submit_out_of_range", f(w.submit([("model.layers", "17"), ("optim.beta2", "1")]))
    yield "submit_bad_numbers", f(w.submit([("train.seed", "-1"), ("train.steps", "1e3"),
                                            ("optim.lr", "nan"), ("data.order", "random")]))
    yield "submit_long_value", f(w.submit([("train.run_dir", "r" * 1100)]))
    yield "submit_many_settings", f(w.submit([("train.steps", str(i)) for i in range(300)]))
    yield "submit_long_name", f(w.submit([("data.path", "d")], name="n" * 300))
    yield "submit_not_utf8", f(w.submit([("train.run_dir", "runs/\udcff".encode("utf-8", "surrogateescape"))]))
    yield "get_zero", f(w.by_id(w.GET, 0))
    yield "long_token", f(w.empty(w.LIST, token="t" * 300))
    yield "empty_payload", f(b"")
    # malformed or unknown protobuf
    yield "unknown_kind_16", f(w.ld(16, b""))
    yield "unknown_kind_99", f(w.ld(99, w.vi(1, 5)))
    yield "kind_as_varint", f(w.vi(w.LIST, 1))
    yield "two_kinds", f(w.empty(w.LIST) + w.by_id(w.GET, 4) + w.submit([("data.path", "a")]))
    yield "submit_twice", f(w.submit([("data.path", "a")]) + w.submit([("train.steps", "9")]))
    yield "truncated_varint", f(w.key(w.GET, 2) + b"\x05" + w.key(1, 0) + b"\xff\xff")
    yield "overlong_varint", f(w.key(11, 2) + b"\x0b" + w.key(1, 0) + b"\xff" * 10)
    yield "ld_overrun", f(w.key(10, 2) + w.varint(1000) + b"abc")
    yield "ld_huge_len", f(w.key(1, 2) + w.varint(2**63))
    yield "group_wire", f(w.key(12, 3) + w.key(12, 4))
    yield "wire_6_7", f(w.key(12, 6) + b"\x00" + w.key(12, 7))
    yield "field_zero", f(w.vi(0, 1))
    yield "field_zero_overlong", f(b"\x80\x00\x80\x00" + w.ld(w.SUBMIT, w.ld(1, w.ld(2, b"\x80\x00\x01" + w.setting("data.path", "d")))))
    yield "unknown_fields_all_wires", f(w.vi(100, 1) + w.key(101, 1) + b"\x00" * 8 +
                                        w.key(102, 5) + b"\x00" * 4 + w.ld(103, b"zz") +
                                        w.empty(w.LIST))
    yield "setting_as_varint", f(w.ld(w.SUBMIT, w.ld(1, w.vi(2, 7))))
    yield "string_embedded_nul", f(w.submit([("data.path\x00x", "a\x00b")]))
    # framing
    yield "oversize_ffffffff", b"\xff\xff\xff\xff" + w.empty(w.LIST)
    yield "oversize_just_above", struct.pack(">I", (4 << 20) + 1) + b"\x00" * 64
    yield "max_exactly_header", struct.pack(">I", 4 << 20)
    yield "lying_prefix", struct.pack(">I", 1000) + w.empty(w.LIST)
    yield "truncated_header", b"\x00\x00"
    yield "truncated_frame", f(w.submit(GOOD_SETTINGS))[:37]
    yield "good_then_truncated", f(w.empty(w.LIST)) + f(w.by_id(w.GET, 1))[:5]
    yield "junk_ascii", b"GET / HTTP/1.1\r\nHost: lstmd\r\n\r\n"
    yield "junk_bytes", bytes((i * 167 + 13) & 0xFF for i in range(256))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "corpus"
    os.makedirs(out, exist_ok=True)
    for name, data in corpus():
        with open(os.path.join(out, name), "wb") as fh:
            fh.write(data)


if __name__ == "__main__":
    main()
