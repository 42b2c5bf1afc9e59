#!/usr/bin/env python3
"""Writes sessions.csv, the availability trace of experiments/asynchronous.json.

A synthetic trace in fedsim's format (client,start_s,end_s): each of 100 clients alternates
online sessions (exponential, mean 300 s) and offline gaps (exponential, mean 120 s) over a
day of 1200 simulated seconds that repeats (period_s in the experiment), starting online or
offline at random. Python's own generator, seeded, so the file is the same on every run:

    python3 experiments/traces/make-sessions.py > experiments/traces/sessions.csv
"""

import random

CLIENTS, DAY, ONLINE, OFFLINE = 100, 1200.0, 300.0, 120.0

rng = random.Random(2024)
print("client,start_s,end_s")
for client in range(CLIENTS):
    t, online = 0.0, rng.random() < ONLINE / (ONLINE + OFFLINE)
    while t < DAY:
        length = rng.expovariate(1 / (ONLINE if online else OFFLINE))
        end = min(DAY, t + length)
        if online and end - t >= 1.0:
            print(f"{client},{t:.1f},{end:.1f}")
        t, online = end, not online
