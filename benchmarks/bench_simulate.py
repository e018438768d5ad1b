"""Simulator throughput and memory: simulated trajectories and engine steps per wall-clock second, peak RSS at two sizes.

Run by hand: ``python benchmarks/bench_simulate.py``. The workload is the bundled
``agentic-tool-rl`` (4-12 turns, lognormal tool waits, automatic prefix reuse, KV retained
during waits) on 8 x h100-sxm, async with K = 1; each size simulates enough trainer updates
(``prompts_per_step x samples_per_prompt`` = 256 trajectories each) to complete at least that
many trajectories. Targets: 100,000 trajectories in at most 10 s on one core, and peak memory at
100,000 within 1.5x of that at 10,000.

Each run is a fresh process (so its peak RSS, ``resource.getrusage(...).ru_maxrss``, is its
own); a size's wall time is the best of ``--repeat`` runs and its peak RSS the largest. The
machine is shared, so wall times are noisy: the CPU time (user + system) of the same runs is
printed beside them. ``--baseline DIR`` runs the same benchmark on another checkout's
``capplan`` (``PYTHONPATH=DIR``, e.g. ``git worktree add /tmp/sim-old <commit>``) and prints
old / new ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys


def child(args: argparse.Namespace) -> None:
    """One run in this process: print one JSON line of figures."""
    import math
    import resource
    import time

    from capplan.hardware import load_hardware
    from capplan.sim import SimConfig, simulate
    from capplan.workload import load_workload

    import capplan.sim.scheduler

    w = load_workload(args.workload)
    steps = math.ceil(args.trajectories / w.volume.conversations_per_step)
    cfg = SimConfig(inference_replicas=args.replicas, mode=args.mode, max_staleness=args.max_staleness, steps=steps)
    hw = load_hardware(args.hardware)
    cpu_0 = time.process_time()
    t0 = time.perf_counter()
    r = simulate(w, hw, cfg)
    wall_s = time.perf_counter() - t0
    cpu_s = time.process_time() - cpu_0
    s = r.summary
    print(json.dumps({
        "updates": steps,
        "trajectories": s["completed_trajectories"],
        "engine_steps": s["engine_steps"],
        "simulated_s": s["simulated_s"],
        "wall_s": wall_s,
        "cpu_s": cpu_s,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,  # KiB on Linux
        "compiled": not capplan.sim.scheduler.__file__.endswith(".py"),
    }))


def measure(args: argparse.Namespace, size: int, pythonpath: str | None) -> dict[str, float]:
    """Best wall time (and the largest peak RSS) of ``--repeat`` fresh processes simulating ``size`` trajectories."""
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    command = [
        sys.executable, __file__, "--child", "--trajectories", str(size), "--workload", args.workload,
        "--hardware", args.hardware, "--replicas", str(args.replicas), "--mode", args.mode,
        "--max-staleness", str(args.max_staleness),
    ]
    runs = []
    for _ in range(args.repeat):
        out = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
        runs.append(json.loads(out.strip().splitlines()[-1]))
    best = min(runs, key=lambda run: run["wall_s"])
    return {**best, "cpu_s": min(run["cpu_s"] for run in runs), "peak_rss_mib": max(run["peak_rss_mib"] for run in runs)}


def report(label: str, figures: dict[int, dict[str, float]]) -> None:
    print(f"{label}:")
    print(f"  {'trajectories':>12} {'updates':>8} {'wall [s]':>9} {'cpu [s]':>8} {'trajectories/s':>15} "
          f"{'engine steps/s':>15} {'peak RSS [MiB]':>15}")
    for f in figures.values():
        print(f"  {f['trajectories']:>12,} {f['updates']:>8,} {f['wall_s']:>9.2f} {f['cpu_s']:>8.2f} "
              f"{f['trajectories'] / f['wall_s']:>15,.0f} {f['engine_steps'] / f['wall_s']:>15,.0f} "
              f"{f['peak_rss_mib']:>15.1f}")
    small, large = figures[min(figures)], figures[max(figures)]
    print(f"  peak RSS {large['trajectories']:,} / {small['trajectories']:,} trajectories: "
          f"{large['peak_rss_mib'] / small['peak_rss_mib']:.2f} (target <= 1.5)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", default="agentic-tool-rl")
    parser.add_argument("--hardware", default="h100-sxm")
    parser.add_argument("--trajectories", type=int, default=None, help="one size only (default: 10,000 and 100,000)")
    parser.add_argument("--replicas", type=int, default=8)
    parser.add_argument("--mode", choices=("sync", "async"), default="async")
    parser.add_argument("--max-staleness", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3, help="fresh processes per size (best wall time is kept)")
    parser.add_argument("--baseline", default=None, help="a checkout of an earlier capplan to compare with")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args)
        return
    sizes = [args.trajectories] if args.trajectories else [10_000, 100_000]
    new = {size: measure(args, size, None) for size in sizes}
    build = "compiled with mypyc" if new[sizes[0]]["compiled"] else "plain Python"
    mode = f"{args.mode}{f' K={args.max_staleness}' if args.mode == 'async' else ''}"
    print(f"{args.workload} on {args.replicas} x {args.hardware}, {mode}; os.cpu_count() = {os.cpu_count()}; "
          f"best wall time of {args.repeat} fresh processes per size")
    report(f"this checkout (capplan.sim {build})", new)
    from report import record

    large, small = new[max(sizes)], new[min(sizes)]
    ratio = large["peak_rss_mib"] / small["peak_rss_mib"]
    figure = (f"{large['trajectories']:,} trajectories ({mode}, {args.replicas} replicas, {build}) in {large['wall_s']:.1f} s wall, "
              f"{large['cpu_s']:.1f} s CPU ({large['engine_steps'] / large['wall_s']:,.0f} engine steps/s)")
    if len(sizes) > 1:
        figure += f"; peak RSS {ratio:.2f}x that at {small['trajectories']:,}"
    compiled = bool(new[sizes[0]]["compiled"])
    record("simulate_compiled" if compiled else "simulate",
           f"`capplan simulate {args.workload}`{', compiled build' if compiled else ''} (`bench_simulate.py`)", figure,
           "100K trajectories <= 10 s on one core, RSS <= 1.5x that at 10K",
           large["cpu_s"] <= 10 and large["trajectories"] >= 100_000 and (len(sizes) == 1 or ratio <= 1.5),
           headline=f"{large['trajectories'] / 1e3:,.0f}K trajectories in {large['cpu_s']:.1f} s CPU")
    if args.baseline is not None:
        old = {size: measure(args, size, args.baseline) for size in sizes}
        report(f"baseline {args.baseline}", old)
        for size in sizes:
            o, n = old[size], new[size]
            print(f"  old / new at {n['trajectories']:,} trajectories: wall {o['wall_s'] / n['wall_s']:.2f}x, "
                  f"cpu {o['cpu_s'] / n['cpu_s']:.2f}x, peak RSS {o['peak_rss_mib'] / n['peak_rss_mib']:.2f}x")
            if (o["trajectories"], o["engine_steps"]) != (n["trajectories"], n["engine_steps"]):
                print(f"  note: the two runs differ ({o['trajectories']:,} / {o['engine_steps']:,} against "
                      f"{n['trajectories']:,} / {n['engine_steps']:,} trajectories / engine steps)")


if __name__ == "__main__":
    main()
