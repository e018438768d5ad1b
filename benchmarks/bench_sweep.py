"""Sweep throughput: plan combinations per second (target: 100,000 in under 5 s).

Run by hand: ``python benchmarks/bench_sweep.py``. Grid: 3 GPUs x 4 tp x 2 KV dtypes x 64
inference sizes x 65 trainer sizes = 99,840 combinations of the bundled OLMo-3-7B-like workload.
"""

from __future__ import annotations

import time

from capplan.hardware import load_hardware
from capplan.modelspec import load_model_spec
from capplan.plan import sweep
from capplan.workload import load_workload


def main() -> None:
    w = load_workload("reasoning-rl-olmo3-7b")
    spec = load_model_spec("olmo-3-7b")
    hws = [load_hardware(h) for h in ("h100-sxm", "h200", "b200")]
    inference = list(range(8, 513, 8))
    trainer = list(range(8, 521, 8))
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        grid = sweep(w, spec, hws, [1, 2, 4, 8], ["bf16", "fp8"], inference_gpus=inference, trainer_gpus=trainer)
        best = min(best, time.perf_counter() - t0)
    n = len(grid)
    print(f"{n:,} combinations: best {best:.2f} s = {n / best:,.0f} combinations/s (includes the 100,000-conversation sample)")


if __name__ == "__main__":
    main()
