"""Roofline sweep throughput: decode steps priced per second over batch x context x TP x hardware.

Run by hand (not in CI): ``python benchmarks/bench_roofline.py [--model llama-3.1-70b] [--repeat 5]``.
The target in the roofline issue is a sweep of 1,000,000 (batch x context x TP x hardware)
points in under a second. The sweep is one :func:`capplan.roofline.decode_grid` call (numpy
broadcasting over a 4-D grid); each timing includes building the per-TP and per-hardware terms.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from capplan.hardware import list_hardware
from capplan.modelspec import load_model_spec
from capplan.roofline import RooflineInputs, decode_grid


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="llama-3.1-70b")
    parser.add_argument("--weight-dtype", default="fp8")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    spec = load_model_spec(args.model)
    hardware = list_hardware()  # every bundled profile
    tp = [1, 2, 4, 8]
    batch = np.arange(1, 129)
    contexts = np.linspace(0, 32768, 163).round()
    inp = RooflineInputs(weight_dtype=args.weight_dtype)
    points = len(hardware) * len(tp) * len(batch) * len(contexts)
    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        g = decode_grid(spec, hardware, inp, tp, batch, contexts)
        times.append(time.perf_counter() - t0)
    assert g.step_time_s.size == points
    compute = int(np.count_nonzero(g.bound == "compute"))
    print(
        f"{args.model} ({args.weight_dtype} weights): {len(hardware)} hardware x {len(tp)} TP x {len(batch)} batch x "
        f"{len(contexts)} context = {points:,} decode steps; first {times[0]:.3f} s, best {min(times):.3f} s "
        f"= {points / min(times):,.0f} steps/s; {compute:,} compute-bound"
    )
    from report import record

    record("roofline", "roofline decode grid, hardware x TP x batch x context (`bench_roofline.py`)",
           f"{points:,} decode steps in {min(times):.3f} s best of {args.repeat} ({points / min(times):,.0f}/s)",
           "1,000,000 in < 1 s", points >= 1_000_000 and min(times) < 1.0,
           headline=f"{points / 1e6:.1f}M decode steps in {min(times):.2f} s")


if __name__ == "__main__":
    main()
