#!/usr/bin/env python3
"""make_trend_series.py — a deterministic weekly series shaped like the Mauna Loa CO2 record that
issue 19 was filed with (2,284 points: a rising, slightly accelerating trend, a 52-week cycle and
small noise), for bench/forecast_baselines.sh and tests/test_forecast.sh.

usage: make_trend_series.py OUT.csv [ROWS]
Columns: week,co2. The noise comes from random.Random(19), so the file is the same on every run."""
import math
import random
import sys

out = sys.argv[1]
rows = int(sys.argv[2]) if len(sys.argv) > 2 else 2284
rng = random.Random(19)
with open(out, "w") as f:
    f.write("week,co2\n")
    for t in range(rows):
        trend = 316.0 + 0.0235 * t + 2.4e-6 * t * t
        season = 3.0 * math.sin(2 * math.pi * t / 52) + 0.8 * math.cos(4 * math.pi * t / 52)
        f.write(f"{t},{trend + season + rng.gauss(0.0, 0.3):.4f}\n")
