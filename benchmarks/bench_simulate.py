"""Simulator throughput: simulated trajectories per wall-clock second and engine steps per second.

Run by hand: ``python benchmarks/bench_simulate.py``. The target is 100,000 multi-turn
trajectories with tool waits (the bundled ``agentic-tool-rl``: 4-12 turns, lognormal tool waits,
automatic prefix reuse, KV retained during waits) in under 30 seconds on the 2-core development
machine. The run simulates enough trainer updates (``prompts_per_step x samples_per_prompt`` =
256 trajectories each) to complete at least ``--trajectories`` trajectories.
"""

from __future__ import annotations

import argparse
import math
import time

from capplan.hardware import load_hardware
from capplan.sim import SimConfig, simulate
from capplan.workload import load_workload


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", default="agentic-tool-rl")
    parser.add_argument("--hardware", default="h100-sxm")
    parser.add_argument("--trajectories", type=int, default=100_000)
    parser.add_argument("--replicas", type=int, default=8)
    parser.add_argument("--mode", choices=("sync", "async"), default="async")
    parser.add_argument("--max-staleness", type=int, default=1)
    args = parser.parse_args(argv)
    w = load_workload(args.workload)
    steps = math.ceil(args.trajectories / w.volume.conversations_per_step)
    cfg = SimConfig(
        inference_replicas=args.replicas, mode=args.mode, max_staleness=args.max_staleness, steps=steps
    )
    t0 = time.perf_counter()
    r = simulate(w, load_hardware(args.hardware), cfg)
    wall = time.perf_counter() - t0
    s = r.summary
    turns = sum(c for c, ok in zip(r.table.cache_hit_count, r.conversations["completed"]) if ok)
    print(
        f"{args.workload} on {args.replicas} x {args.hardware}, {args.mode}"
        f"{f' K={args.max_staleness}' if args.mode == 'async' else ''}, {steps} updates: "
        f"{s['completed_trajectories']:,} trajectories ({turns:,} invocations) and "
        f"{s['engine_steps']:,} engine steps in {wall:.1f} s wall"
    )
    print(
        f"  {s['completed_trajectories'] / wall:,.0f} simulated trajectories/s, "
        f"{s['engine_steps'] / wall:,.0f} engine steps/s, {s['simulated_s']:,.0f} simulated s "
        f"({s['simulated_s'] / wall:,.0f}x real time)"
    )


if __name__ == "__main__":
    main()
