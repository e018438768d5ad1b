"""A 32-point simulation sweep through ``capplan.scale``: sequential, a local process pool, a local Ray instance.

Run by hand (not in CI; the Ray part needs ``pip install 'capplan[ray]'``)::

    python benchmarks/bench_ray.py                 # target: Ray on 2 CPUs >= 1.6x sequential, same results
    python benchmarks/bench_ray.py --steps 4 --ray-address auto   # on an existing cluster

The grid: agentic-tool-rl on h100-sxm, inference replicas 1/2/3/4 x staleness bound 0/1/2/3 x
sync/async = 32 simulations (:func:`capplan.sim.simulate`), one task each
(:func:`capplan.scale.run_tasks`). Every executor's results are compared with the sequential
ones. The local Ray instance is started with ``--workers`` CPUs; its start-up and shutdown are
timed apart from the sweep (a cluster is started once and reused).
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time
from typing import Any

from capplan.scale import run_tasks


def simulate_point(point: dict[str, Any]) -> dict[str, Any]:
    """One simulation of the grid; its summary (a task of :func:`capplan.scale.run_tasks`)."""
    from capplan.hardware import load_hardware
    from capplan.sim import SimConfig, simulate
    from capplan.workload import load_workload

    config = SimConfig(
        inference_replicas=point["replicas"], mode=point["mode"], max_staleness=point["staleness"], steps=point["steps"]
    )
    result = simulate(load_workload("agentic-tool-rl"), load_hardware("h100-sxm"), config)
    return dict(result.summary)


def grid(steps: int) -> list[tuple[str, dict[str, Any]]]:
    points = []
    for replicas, staleness, mode in itertools.product((1, 2, 3, 4), (0, 1, 2, 3), ("sync", "async")):
        points.append((f"replicas={replicas} staleness={staleness} {mode}", {
            "replicas": replicas, "staleness": staleness, "mode": mode, "steps": steps,
        }))
    return points


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=2, help="trainer updates per simulation")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--ray-address", default=None)
    args = parser.parse_args()
    points = grid(args.steps)
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; {len(points)} simulations of agentic-tool-rl")
    def timed(executor: str, **options: Any) -> tuple[float, Any]:
        """The faster of two runs (the machine may be shared: each rate is a best case)."""
        best, run = float("inf"), None
        for _ in range(2):
            start = time.perf_counter()
            run = run_tasks(simulate_point, points, executor=executor, **options)
            best = min(best, time.perf_counter() - start)
        return best, run

    serial_s, serial = timed("serial")
    assert serial.ok, serial.failures
    print(f"sequential:            {serial_s:7.2f} s (best of 2)")
    pool_s, pool = timed("process", workers=args.workers)
    print(f"process pool ({args.workers} workers): {pool_s:7.2f} s = {serial_s / pool_s:.2f}x; same results: {pool.results == serial.results}")
    try:
        import ray
    except ImportError:
        print("ray: not measured (pip install 'capplan[ray]')")
        return
    start = time.perf_counter()
    if args.ray_address:
        ray.init(address=args.ray_address, include_dashboard=False, log_to_driver=False)
    else:
        ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False)
    startup_s = time.perf_counter() - start
    try:
        run_tasks(simulate_point, points[:2], executor="ray")  # workers import capplan once
        ray_s, on_ray = timed("ray")
    finally:
        ray.shutdown()
    where = args.ray_address or f"local, {args.workers} CPUs"
    print(
        f"ray ({where}):   {ray_s:7.2f} s = {serial_s / ray_s:.2f}x sequential (target >= 1.6x); same results: "
        f"{on_ray.results == serial.results}; start-up {startup_s:.1f} s apart"
    )


if __name__ == "__main__":
    main()
