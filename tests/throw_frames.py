#!/usr/bin/env python3
"""throw_frames.py — a storm of bad clients against a live `lstmd serve` (tests/test_serve_bad_clients.sh).

  throw_frames.py --socket S --lstmctl LSTMCTL --idle-timeout SEC --max-frame BYTES [--frames N]

While a well-behaved client keeps asking for the job list (fresh connection each time, and
`lstmctl list` now and then), it throws at the daemon:
  crowd      hundreds of connections at once that say nothing, send half a header, or announce
             a frame and send only part of it: each must be closed by the idle timeout;
  pipelines  connections that send 20-200 frames at once, mixing valid requests (list, get,
             cancel, watch of a missing job, submits the config table rejects) with malformed
             protobuf, unknown request kinds and empty payloads: exactly one reply per frame,
             in order, each an error with the expected code where one is expected; some end in
             an oversized or lying length prefix (FRAME_TOO_LARGE, then closed);
  junk       unframed random bytes, and half frames ended by a reset;
  hoarders   clients that pipeline 4,000 requests for a ~6 KiB job record and never read the
             replies: the daemon must drop them rather than hold their replies in memory.
Then, with the hoarders still connected, it checks rank 0's VmRSS (the daemon's pid from
SO_PEERCRED) against the value before the storm (bound +64 MiB), and the good client's latency
(p99 < 0.5 s, max < 2 s). Prints one line of statistics; exits 1 with the reasons when a check fails.
"""
import argparse
import os
import random
import socket
import struct
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import lstmd_wire as w

BAD, NOT_FOUND, INVALID, TOO_LARGE = 1, 2, 4, 5
failures = []
T0 = time.monotonic()
lock = threading.Lock()
stats = {"frames": 0, "connections": 0, "replies": 0, "errors": 0, "closed": 0, "storm_frames": 0}


def fail(msg):
    with lock:
        if len(failures) < 20:
            failures.append(msg)


def count(key, n=1):
    with lock:
        stats[key] += n


def connect(path, timeout=10.0):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(path)
    count("connections")
    return s


def read_exact(s, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def read_reply(s):
    """(kind, code, message) of the next Response, or None at EOF / reset."""
    try:
        head = read_exact(s, 4)
        if head is None:
            return None
        body = read_exact(s, struct.unpack(">I", head)[0])
    except ConnectionResetError:
        return None
    if body is None:
        return None
    count("replies")
    return w.response_kind(body)


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def daemon_pid(path):
    s = connect(path)
    pid = struct.unpack("3i", s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[0]
    s.close()
    return pid


# ---- the well-behaved client ----

class Good(threading.Thread):
    def __init__(self, path, lstmctl):
        super().__init__(daemon=True)
        self.path, self.lstmctl = path, lstmctl
        self.latencies, self.ctl_runs, self.stop = [], 0, threading.Event()
        self.worst_at = 0.0

    def run(self):
        i = 0
        while not self.stop.is_set():
            t0 = time.monotonic()
            try:
                s = connect(self.path)
                s.sendall(w.frame(w.empty(w.LIST)))
                r = read_reply(s)
                s.close()
            except OSError as e:
                r = None
                fail("good client: %s" % e)
            if r is None or r[0] != w.R_JOBS:
                fail("good client: list answered with %r" % (r,))
            self.latencies.append(time.monotonic() - t0)
            if self.latencies[-1] >= max(self.latencies):
                self.worst_at = t0 - T0
            i += 1
            if i % 25 == 0:
                p = subprocess.run([self.lstmctl, "--socket", self.path, "list"],
                                   capture_output=True, timeout=30)
                self.ctl_runs += 1
                if p.returncode != 0:
                    fail("lstmctl list exited %d: %s" % (p.returncode, p.stderr[-300:]))
            time.sleep(0.01)


# ---- the offenders ----

def junk_payload(rng):
    """Random bytes that cannot hold a submit, cancel, watch or shutdown key (a watch would turn
    the connection into a stream, a shutdown would end the test)."""
    while True:
        data = bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 200)))
        if not any(k in data for k in (0x52, 0x6a, 0x72, 0x7a)):
            return data


def pipeline_frame(rng, big_job):
    """(frame bytes, expected) where expected is ('ok', response kind), ('err', code), or 'any'."""
    c = rng.randrange(12)
    if c == 0:
        return w.frame(w.empty(w.LIST)), ("ok", w.R_JOBS)
    if c == 1:
        return w.frame(w.by_id(w.GET, big_job)), ("ok", w.R_JOB)
    if c == 2:
        return w.frame(w.by_id(rng.choice([w.GET, w.CANCEL, w.WATCH]), 10**9 + rng.randrange(9))), ("err", NOT_FOUND)
    if c == 3:
        return w.frame(w.submit([("data.path", "data"), ("model.layers", str(rng.randrange(17, 99)))])), ("err", INVALID)
    if c == 4:
        return w.frame(w.submit([("data.path", rng.choice(["/etc", "../..", "/"]))])), ("err", INVALID)
    if c == 5:
        return w.frame(w.submit([("no_dot_key", "1")])), ("err", INVALID)
    if c == 6:  # unknown request kinds: oneof field numbers the schema does not have
        return w.frame(w.ld(rng.choice([16, 17, 99, 1000, 536870911]), b"")), ("err", BAD)
    if c == 7:  # malformed: a field running past the end, a truncated varint, group wire types
        bad = rng.choice([w.key(10, 2) + w.varint(500) + b"x", w.key(11, 2) + b"\x02\x08\xff",
                          w.key(12, 3), b"\xff" * 11, w.key(12, 2) + w.varint(2**40)])
        return w.frame(bad), ("err", BAD)
    if c == 8:
        return w.frame(b""), ("err", BAD)  # no kind at all
    if c == 9:
        return w.frame(w.by_id(w.GET, 0)), ("err", BAD)
    return w.frame(junk_payload(rng)), "any"


def check_reply(r, expected, where):
    if r is None:
        fail("%s: no reply (closed) where one was due" % where)
        return False
    kind, code, msg = r
    if kind == w.R_ERROR:
        count("errors")
        if not msg:
            fail("%s: error reply without a message" % where)
    if expected == "any":
        return True
    want, value = expected
    if want == "ok" and kind != value:
        fail("%s: expected response kind %d, got %r" % (where, value, r))
    if want == "err" and (kind != w.R_ERROR or code != value):
        fail("%s: expected error code %d, got %r" % (where, value, r))
    return True


def expect_eof(s, where, timeout):
    s.settimeout(timeout)
    try:
        while True:
            r = read_reply(s)
            if r is None:
                count("closed")
                return True
            if r[0] != w.R_ERROR:
                fail("%s: unexpected non-error reply before the close: %r" % (where, r))
    except socket.timeout:
        fail("%s: not closed within %.0f s" % (where, timeout))
        return False
    finally:
        s.close()


def pipeline(path, seed, big_job, max_frame):
    rng = random.Random(seed)
    frames, expected = [], []
    for _ in range(rng.randrange(20, 200)):
        f, e = pipeline_frame(rng, big_job)
        frames.append(f)
        expected.append(e)
    ending = rng.randrange(4)  # 0: oversized, 1: 0xffffffff, else a clean end
    tail = b""
    if ending == 0:
        tail = struct.pack(">I", max_frame + 1 + rng.randrange(1000)) + b"\x00" * rng.randrange(64)
    elif ending == 1:
        tail = b"\xff\xff\xff\xff" + junk_payload(rng)
    s = connect(path)
    s.sendall(b"".join(frames) + tail)
    count("frames", len(frames) + (1 if tail else 0))
    count("storm_frames", len(frames) + (1 if tail else 0))
    if not tail:
        s.shutdown(socket.SHUT_WR)  # the daemon answers what it got, then closes
    where = "pipeline %d" % seed
    for i, e in enumerate(expected):
        if not check_reply(read_reply(s), e, "%s frame %d" % (where, i)):
            s.close()
            return
    if tail:
        r = read_reply(s)
        if r is None or r[0] != w.R_ERROR or r[1] != TOO_LARGE:
            fail("%s: oversized prefix answered with %r" % (where, r))
    expect_eof(s, where, 10)


def junk(path, seed, idle):
    rng = random.Random(seed)
    s = connect(path)
    if rng.randrange(2):  # unframed noise, then half-close: error replies at most, then EOF
        data = bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 4000)))
        s.sendall(data)
        count("frames")
        count("storm_frames")
        s.shutdown(socket.SHUT_WR)
        expect_eof(s, "junk %d" % seed, idle + 10)
    else:  # half a frame, then a reset
        s.sendall(w.frame(w.submit([("data.path", "data")] * 5))[:rng.randrange(1, 40)])
        count("frames")
        count("storm_frames")
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()


def open_crowd(path, n, rng, max_frame):
    crowd = []
    for i in range(n):
        s = connect(path)
        kind = i % 3
        if kind == 1:
            s.sendall(b"\x00\x00")  # half a header
        elif kind == 2:  # announces a frame under the maximum, sends a little of it
            s.sendall(struct.pack(">I", rng.randrange(1000, max_frame)) + b"\x0a\x03abc")
        if kind:
            count("frames")
        crowd.append(s)
    return crowd


def hoarder(path, job, n_requests):
    """Pipelines requests and never reads the replies; returns the socket (still open)."""
    s = connect(path)
    s.setblocking(False)
    data = w.frame(w.by_id(w.GET, job)) * n_requests
    sent, deadline = 0, time.monotonic() + 20
    while sent < len(data) and time.monotonic() < deadline:
        try:
            sent += s.send(data[sent:])
        except BlockingIOError:
            time.sleep(0.01)
        except OSError:
            break  # dropped by the daemon
    count("frames", sent // len(w.frame(w.by_id(w.GET, job))))
    return s


def closed_by_peer(s):
    """True when the daemon closed s (EOF or reset once the unread replies are drained)."""
    s.settimeout(5)
    try:
        while True:
            if not s.recv(1 << 20):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


def submit_big_job(path):
    """A job with a long record (its GetJob reply is ~6 KiB), for the hoarders to ask for."""
    settings = [("data.path", "data"), ("train.steps", "1")] + [("train.log_every", "0" * 18 + "10")] * 250
    s = connect(path)
    s.sendall(w.frame(w.submit(settings, name="x" * 200)))
    head = read_exact(s, 4)
    body = read_exact(s, struct.unpack(">I", head)[0]) if head else None
    s.close()
    if body is None or w.response_kind(body)[0] != w.R_JOB:
        raise SystemExit("throw_frames: could not submit the big job: %r" % (body and w.response_kind(body),))
    return w.job_id(body)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--lstmctl", required=True)
    ap.add_argument("--idle-timeout", type=float, required=True)
    ap.add_argument("--max-frame", type=int, required=True)
    ap.add_argument("--frames", type=int, default=10000)
    ap.add_argument("--crowd", type=int, default=300)
    ap.add_argument("--hoarders", type=int, default=6)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    pid = daemon_pid(a.socket)
    rss_before = rss_kib(pid)
    t_start = time.monotonic()

    big_job = submit_big_job(a.socket)
    good = Good(a.socket, a.lstmctl)
    good.start()

    crowd = open_crowd(a.socket, a.crowd, rng, a.max_frame)
    crowd_opened = time.monotonic()
    hoarders = [hoarder(a.socket, big_job, 4000) for _ in range(a.hoarders)]
    hoarders_done = time.monotonic()

    seed = 0
    with ThreadPoolExecutor(max_workers=8) as pool:
        deadline = time.monotonic() + 60
        while stats["storm_frames"] < a.frames and time.monotonic() < deadline and not failures:
            batch = [pool.submit(pipeline, a.socket, a.seed * 100000 + seed + i, big_job, a.max_frame)
                     for i in range(16)]
            batch += [pool.submit(junk, a.socket, a.seed * 100000 + seed + i, a.idle_timeout)
                      for i in range(8)]
            seed += 24
            for f in batch:
                try:
                    f.result()
                except (OSError, ValueError) as e:
                    fail("offender: %s: %s" % (type(e).__name__, e))
    storm_s = time.monotonic() - t_start

    # The crowd and the hoarders must be gone by now or soon: idle timeout plus a grace.
    time.sleep(max(0.0, crowd_opened + a.idle_timeout + 2 - time.monotonic()))
    open_crowd_left = 0
    for s in crowd:
        s.settimeout(3)
        try:
            if s.recv(1) != b"":
                fail("crowd: a silent connection got a reply")
            else:
                count("closed")
        except ConnectionResetError:
            count("closed")
        except socket.timeout:
            open_crowd_left += 1
        s.close()
    if open_crowd_left:
        fail("crowd: %d of %d idle connections still open after the idle timeout" % (open_crowd_left, len(crowd)))

    time.sleep(max(0.0, hoarders_done + 2 * a.idle_timeout + 2 - time.monotonic()))
    rss_after = rss_kib(pid)  # hoarders still connected: their replies must be gone already
    kept = sum(1 for s in hoarders if not closed_by_peer(s))
    for s in hoarders:
        s.close()
    if kept:
        fail("hoarders: %d of %d never-reading clients not dropped" % (kept, len(hoarders)))

    good.stop.set()
    good.join()
    lat = sorted(good.latencies)
    p50, p99, worst = lat[len(lat) // 2], lat[int(len(lat) * 0.99)], lat[-1]
    growth_mib = (rss_after - rss_before) / 1024
    print("throw_frames: %d frames (%d in pipelines and junk) on %d connections in %.1f s (%d "
          "replies, %d errors, %d closed by the daemon); good client: %d lists + %d lstmctl runs, "
          "latency p50 %.1f ms p99 %.1f ms max %.1f ms (at +%.2f s); rank 0 VmRSS %.1f -> %.1f MiB "
          "(%+.1f)"
          % (stats["frames"], stats["storm_frames"], stats["connections"], storm_s, stats["replies"],
             stats["errors"], stats["closed"], len(lat), good.ctl_runs, p50 * 1e3, p99 * 1e3,
             worst * 1e3, good.worst_at, rss_before / 1024, rss_after / 1024, growth_mib))
    if stats["storm_frames"] < a.frames:
        fail("only %d frames thrown by the pipelines" % stats["storm_frames"])
    if worst > 2.0 or p99 > 0.5:
        fail("good client latency: p99 %.3f s, max %.3f s (bounds 0.5 s, 2 s)" % (p99, worst))
    if growth_mib > 64 and os.environ.get("LSTMD_SANITIZED") != "1":  # ASan's quarantine
        fail("rank 0 VmRSS grew by %.1f MiB (bound 64)" % growth_mib)
    if failures:
        print("\n".join("FAIL  " + f for f in failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
