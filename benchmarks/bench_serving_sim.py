"""Serving simulator throughput: simulated requests per wall-clock second.

Run by hand: ``python benchmarks/bench_serving_sim.py``. The target is 1,000,000 requests of the
bundled ``chat-serving`` workload (lognormal ~1K-token prompts and ~300-token answers, Poisson
arrivals at 20 req/s per replica on one H100 each) in under 30 seconds on the 2-core development
machine, drawing the requests included. ``--replicas`` deals the stream to more replicas (at
the same load per replica).
"""

from __future__ import annotations

import argparse
import time

from capplan.hardware import load_hardware
from capplan.sim.serving import ServingSimConfig, simulate_serving
from capplan.workload import load_workload


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", default="chat-serving")
    parser.add_argument("--hardware", default="h100-sxm")
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--replicas", type=int, default=1)
    args = parser.parse_args(argv)
    w = load_workload(args.workload)
    rate = w.serving.arrival_rate_per_s * args.replicas if w.serving else None
    cfg = ServingSimConfig(inference_replicas=args.replicas, requests=args.requests, request_rate_per_s=rate)
    t0 = time.perf_counter()
    r = simulate_serving(w, load_hardware(args.hardware), cfg)
    wall = time.perf_counter() - t0
    s, lat = r.summary, r.latency
    print(
        f"{args.workload} on {args.replicas} x {args.hardware}: {s['requests']:,} requests and {s['engine_steps']:,} engine "
        f"steps in {wall:.1f} s wall ({'under' if wall < 30 else 'OVER'} the 30 s target)"
    )
    print(
        f"  {s['requests'] / wall:,.0f} simulated requests/s, {s['engine_steps'] / wall:,.0f} engine steps/s, "
        f"{s['simulated_s']:,.0f} simulated s ({s['simulated_s'] / wall:,.0f}x real time); "
        f"TTFT p50/p99 {lat['ttft_s']['p50'] * 1e3:,.1f}/{lat['ttft_s']['p99'] * 1e3:,.1f} ms"
    )
    from report import record

    record("serving_sim", f"serving simulator, `{args.workload}` on {args.replicas} x {args.hardware} (`bench_serving_sim.py`)",
           f"{s['requests']:,} requests, {s['engine_steps']:,} engine steps in {wall:.1f} s wall ({s['requests'] / wall:,.0f} requests/s)",
           "1,000,000 requests < 30 s", s["requests"] >= 1_000_000 and wall < 30,
           headline=f"{s['requests'] / 1e6:,.1f}M requests in {wall:.0f} s")


if __name__ == "__main__":
    main()
