"""lstmd_wire.py — just enough protobuf to speak proto/lstmd.proto from Python's stdlib.

Encodes Requests (and deliberately broken ones) and decodes a Response far enough to say which
oneof it carries and, for an Error, its code and message. Used by tests/throw_frames.py and
tests/fuzz/make_corpus.py; no dependency on the protobuf package, so a broken encoder here can
only make a test fail, never pass for the wrong reason (the daemon decodes with protoc-c code).
"""
import struct

# Request oneof field numbers (proto/lstmd.proto).
SUBMIT, GET, LIST, CANCEL, WATCH, SHUTDOWN = 10, 11, 12, 13, 14, 15
# Response oneof field numbers.
R_ERROR, R_JOB, R_JOBS, R_EVENT, R_SHUTDOWN = 1, 2, 3, 4, 5
ERROR_CODES = {1: "BAD_REQUEST", 2: "NOT_FOUND", 3: "UNAUTHENTICATED", 4: "INVALID_JOB",
               5: "FRAME_TOO_LARGE", 6: "SHUTTING_DOWN", 7: "INTERNAL"}


def varint(n):
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def key(field, wire):
    return varint(field << 3 | wire)


def ld(field, payload):
    """A length-delimited field (string, bytes or embedded message)."""
    if isinstance(payload, str):
        payload = payload.encode()
    return key(field, 2) + varint(len(payload)) + payload


def vi(field, n):
    return key(field, 0) + varint(n)


def frame(payload):
    return struct.pack(">I", len(payload)) + payload


def setting(k, v):
    return ld(1, k) + ld(2, v)


def submit(settings, name="", token=""):
    spec = (ld(1, name) if name else b"") + b"".join(ld(2, setting(k, v)) for k, v in settings)
    return (ld(1, token) if token else b"") + ld(SUBMIT, ld(1, spec))


def by_id(kind, job_id, token=""):
    return (ld(1, token) if token else b"") + ld(kind, vi(1, job_id) if job_id else b"")


def empty(kind, token=""):
    return (ld(1, token) if token else b"") + ld(kind, b"")


def read_varint(buf, i):
    shift = n = 0
    while True:
        if i >= len(buf) or shift > 63:
            raise ValueError("truncated or overlong varint")
        b = buf[i]
        i += 1
        n |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return n, i


def fields(buf):
    """Yields (field, wire, value) of one message; value is an int or bytes."""
    i = 0
    while i < len(buf):
        k, i = read_varint(buf, i)
        field, wire = k >> 3, k & 7
        if wire == 0:
            v, i = read_varint(buf, i)
        elif wire == 1:
            v, i = buf[i:i + 8], i + 8
        elif wire == 5:
            v, i = buf[i:i + 4], i + 4
        elif wire == 2:
            n, i = read_varint(buf, i)
            v, i = buf[i:i + n], i + n
        else:
            raise ValueError("wire type %d" % wire)
        if i > len(buf):
            raise ValueError("field %d runs past the message" % field)
        yield field, wire, v


def response_kind(payload):
    """(oneof field number, Error code or None, Error message or None) of a Response."""
    kind, code, msg = None, None, None
    for field, wire, v in fields(payload):
        if wire != 2 or field not in (R_ERROR, R_JOB, R_JOBS, R_EVENT, R_SHUTDOWN):
            raise ValueError("unexpected field %d (wire %d) in a Response" % (field, wire))
        kind = field
        if field == R_ERROR:
            code, msg = 0, ""
            for f2, w2, v2 in fields(v):
                if f2 == 1 and w2 == 0:
                    code = v2
                elif f2 == 2 and w2 == 2:
                    msg = v2.decode("utf-8", "replace")
    if kind is None:
        raise ValueError("empty Response")
    return kind, code, msg


def job_id(payload):
    """The id of the Job a Response carries (GetJob, SubmitJob), else None."""
    for field, wire, v in fields(payload):
        if field == R_JOB and wire == 2:
            for f2, w2, v2 in fields(v):
                if f2 == 1 and w2 == 0:
                    return v2
    return None
