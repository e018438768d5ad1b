"""KV calculator throughput: (model x hardware x TP x KV dtype x context) combinations per second.

Run by hand: ``python benchmarks/bench_kv.py``. The target is 1,000,000 combinations in under a
second on the 2-core development machine.
"""

from __future__ import annotations

import time

import numpy as np

from capplan.hardware import list_hardware
from capplan.kv import kv_grid
from capplan.modelspec import list_models, load_model_spec


def main() -> None:
    specs = [load_model_spec(n) for n in list_models()]
    hardware = list_hardware()
    tps = [1, 2, 4, 8]
    dtypes = ["bf16", "fp8"]
    n_ctx = -(-1_000_000 // (len(specs) * len(hardware) * len(tps) * len(dtypes)))
    contexts = np.linspace(512, 131072, n_ctx).astype(int)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        grid = kv_grid(specs, hardware, tps, dtypes, contexts)
        best = min(best, time.perf_counter() - t0)
    print(
        f"{grid.size:,} combinations ({len(specs)} models x {len(hardware)} GPUs x {len(tps)} TP x "
        f"{len(dtypes)} KV dtypes x {len(contexts)} contexts): best {best:.3f} s = {grid.size / best:,.0f} combinations/s"
    )
    print(f"feasible combinations: {int(grid.fits.sum()):,}")
    from report import record

    record("kv", "KV calculator grid, model x GPU x TP x KV dtype x context (`bench_kv.py`)",
           f"{grid.size:,} combinations in {best:.3f} s best of 5 ({grid.size / best:,.0f}/s)",
           "1,000,000 in < 1 s", grid.size >= 1_000_000 and best < 1.0,
           headline=f"{grid.size / 1e6:.0f}M KV configs in {best:.2f} s")


if __name__ == "__main__":
    main()
