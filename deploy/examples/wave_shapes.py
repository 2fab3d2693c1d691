#!/usr/bin/env python3
"""wave_shapes.py — a SYNTHETIC series-classification data set for `lstmd prepare classify
--series` (README: "Series classification"): each row is a label (sine, square, sawtooth or
triangle) and LENGTH noisy samples of that wave, with a random period (8..25 samples), phase,
amplitude (0.5..2), offset (±0.5) and Gaussian noise (σ = NOISE), drawn with a fixed SEED, so
the same arguments always give the same file. Nothing here is measured data.

usage: wave_shapes.py ROWS [--length 64] [--noise 0.4] [--seed 1] [--shapes A,B,...] [--no-label]
                        > FILE.csv
  --shapes: a subset of sawtooth,sine,square,triangle (default all four)
  --no-label: rows of values only (what `lstmd classify` reads); the labels go to stderr
"""
import argparse
import math
import random
import sys

SHAPES = ("sawtooth", "sine", "square", "triangle")


def wave(shape, u):
    """One period-1 wave of amplitude 1 at phase u."""
    frac = u - math.floor(u)
    if shape == "sine":
        return math.sin(2 * math.pi * u)
    if shape == "square":
        return 1.0 if frac < 0.5 else -1.0
    if shape == "sawtooth":
        return 2.0 * frac - 1.0
    return 4.0 * abs(frac - 0.5) - 1.0  # triangle


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("rows", type=int)
    ap.add_argument("--length", type=int, default=64)
    ap.add_argument("--noise", type=float, default=0.4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--no-label", action="store_true")
    a = ap.parse_args()
    shapes = a.shapes.split(",")
    if not shapes or any(s not in SHAPES for s in shapes):
        ap.error("--shapes: a comma-separated subset of " + ",".join(SHAPES))
    rng = random.Random(a.seed)
    out = sys.stdout
    if not a.no_label:
        out.write("label," + ",".join("t%d" % i for i in range(a.length)) + "\n")
    for _ in range(a.rows):
        shape = rng.choice(shapes)
        period = rng.uniform(8, 25)
        phase, amp, offset = rng.random(), rng.uniform(0.5, 2.0), rng.uniform(-0.5, 0.5)
        values = ["%.4f" % (offset + amp * wave(shape, t / period + phase) + rng.gauss(0, a.noise))
                  for t in range(a.length)]
        if a.no_label:
            sys.stderr.write(shape + "\n")
            out.write(",".join(values) + "\n")
        else:
            out.write(shape + "," + ",".join(values) + "\n")


if __name__ == "__main__":
    main()
