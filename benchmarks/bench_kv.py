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


if __name__ == "__main__":
    main()
