"""A 32-point simulation sweep through ``capplan.scale``: sequential, a local process pool, a local Ray instance.

Run by hand (not in CI; the Ray part needs ``pip install 'capplan[ray]'``)::

    python benchmarks/bench_ray.py                 # target: Ray on 2 CPUs >= 1.6x sequential, same results
    python benchmarks/bench_ray.py --steps 4 --ray-address auto   # on an existing cluster

The grid: agentic-tool-rl on h100-sxm, inference replicas 1/2/3/4 x staleness bound 0/1/2/3 x
sync/async = 32 simulations, run by :func:`capplan.sim.grid.simulate_grid` (what ``capplan
simulate --sweep`` runs: one task per point through :func:`capplan.scale.run_tasks`). Every
executor's rows are compared with the sequential ones. The local Ray instance is started with
``--workers`` CPUs; its start-up and shutdown are timed apart from the sweep (a cluster is started
once and reused), and one run that starts its own instance is timed whole, as a user's first
``--executor ray`` run is.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from capplan.hardware import load_hardware
from capplan.sim import SimConfig, simulate_grid
from capplan.workload import load_workload

AXES: dict[str, list[Any]] = {"inference_replicas": [1, 2, 3, 4], "max_staleness": [0, 1, 2, 3], "mode": ["sync", "async"]}
"""The 32-point grid."""


def run_grid(steps: int, executor: str, **options: Any) -> Any:
    """The grid's :class:`capplan.sim.grid.SimGrid` on ``executor``."""
    return simulate_grid(load_workload("agentic-tool-rl"), load_hardware("h100-sxm"), SimConfig(steps=steps), AXES,
                         executor=executor, **options)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=2, help="trainer updates per simulation")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--ray-address", default=None)
    args = parser.parse_args()
    points = 1
    for values in AXES.values():
        points *= len(values)
    print(f"python {sys.version.split()[0]}, os.cpu_count() = {os.cpu_count()}; {points} simulations of agentic-tool-rl, "
          f"{args.steps} updates each")

    def timed(executor: str, **options: Any) -> tuple[float, Any]:
        """The faster of two runs (the machine may be shared: each rate is a best case)."""
        best, run = float("inf"), None
        for _ in range(2):
            start = time.perf_counter()
            run = run_grid(args.steps, executor, **options)
            best = min(best, time.perf_counter() - start)
        return best, run

    serial_s, serial = timed("serial")
    assert serial.ok, serial.failures
    print(f"sequential:            {serial_s:7.2f} s (best of 2)")
    pool_s, pool = timed("process", workers=args.workers)
    print(f"process pool ({args.workers} workers): {pool_s:7.2f} s = {serial_s / pool_s:.2f}x; same results: {pool.rows == serial.rows}")
    try:
        import ray
    except ImportError:
        print("ray: not measured (pip install 'capplan[ray]')")
        return
    if not args.ray_address:  # a user's first run: the local instance started and stopped inside
        start = time.perf_counter()
        cold = run_grid(args.steps, "ray", workers=args.workers)
        cold_s = time.perf_counter() - start
        print(f"ray, own local instance: {cold_s:7.2f} s = {serial_s / cold_s:.2f}x sequential, start-up and shutdown included; "
              f"same results: {cold.rows == serial.rows}")
    start = time.perf_counter()
    if args.ray_address:
        ray.init(address=args.ray_address, include_dashboard=False, log_to_driver=False)
    else:
        ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False)
    startup_s = time.perf_counter() - start
    try:
        ray_warm = time.perf_counter()
        simulate_grid(load_workload("agentic-tool-rl"), load_hardware("h100-sxm"), SimConfig(steps=1),
                      {"inference_replicas": list(range(1, args.workers + 1))}, executor="ray")  # workers import capplan
        warm_s = time.perf_counter() - ray_warm
        ray_s, on_ray = timed("ray")
    finally:
        ray.shutdown()
    where = args.ray_address or f"local, {args.workers} CPUs"
    print(
        f"ray ({where}):   {ray_s:7.2f} s = {serial_s / ray_s:.2f}x sequential (target >= 1.6x); same results: "
        f"{on_ray.rows == serial.rows}; start-up {startup_s:.1f} s and worker warm-up {warm_s:.1f} s apart"
    )
    from report import record

    same = on_ray.rows == serial.rows and pool.rows == serial.rows
    record("ray", f"{points}-point simulation sweep (`simulate_grid`, `bench_ray.py`)",
           f"sequential {serial_s:.2f} s; process pool ({args.workers} workers) {serial_s / pool_s:.2f}x; Ray ({where}, "
           f"started once) {serial_s / ray_s:.2f}x; Ray start-up {startup_s:.1f} s apart; identical results: {same}",
           "Ray on 2 CPUs >= 1.6x sequential, identical results", same and serial_s / ray_s >= 1.6,
           headline=f"Ray {serial_s / ray_s:.2f}x, pool {serial_s / pool_s:.2f}x sequential")


if __name__ == "__main__":
    main()
