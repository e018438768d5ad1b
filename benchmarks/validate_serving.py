"""The serving queueing model against the serving simulator: TTFT and TPOT percentiles over utilisation.

Run by hand: ``python benchmarks/validate_serving.py --plot docs/img/serving-validation.png``.
For each bundled serving workload (its request lengths, Poisson arrivals, one H100 running
Llama-3.1-8B with the default engine profile) and each utilisation (the request rate over the
replica's capacity, :func:`capplan.benchmark.serving_capacity`), it prints the model's
(:func:`capplan.benchmark.queueing_latency`) and the simulator's
(:func:`capplan.sim.serving.simulate_replica`) p50 and p99 TTFT and TPOT, and the model's error.

``--slot-limit`` instead runs the case ``docs/serving.md`` quotes under "A batch at its limit":
``max_num_seqs`` 32, 500/200-token requests, Poisson arrivals at rates where the batch touches
the limit, the model without the plan's headroom (``headroom=False``, a measured run's rate).
"""

from __future__ import annotations

import argparse

import numpy as np

from capplan import benchmark as B
from capplan.engine import default_engine
from capplan.hardware import load_hardware
from capplan.modelspec import load_model_spec
from capplan.plan.serving import serving_mix
from capplan.sim.serving import replay_mix, serving_engine, simulate_replica
from capplan.workload import load_workload

UTILISATIONS = (0.1, 0.3, 0.5, 0.7, 0.85, 0.95)
SLOT_RATES = (14.0, 16.0, 18.0, 19.0, 20.0)
"""Requests per second of the ``--slot-limit`` case (the simulator saturates at 20)."""


def compare_slot_limit(requests: int) -> None:
    """Print the model's and the simulator's TTFT with the batch at ``max_num_seqs`` 32."""
    server = B.server_for(load_model_spec("llama-3.1-8b"), load_hardware("h100-sxm"), engine=default_engine(), max_num_seqs=32)
    eng = serving_engine(server)
    print(f"max_num_seqs 32, 500/200 tokens: TTFT mean and p99 [ms], model vs simulator ({requests:,} requests per point)")
    print("  rate  batch | mean model    sim    err | p99 model     sim    err")
    for rate in SLOT_RATES:
        q = B.queueing_latency(server, rate, B.RequestMix.fixed(500, 200), 1.0, (99.0,), capacity=False, headroom=False)
        arrivals = np.cumsum(np.random.default_rng(int(rate)).exponential(1.0 / rate, requests))
        run = simulate_replica(eng, arrivals, np.full(requests, 500), np.full(requests, 200), np.zeros(requests, np.int64))
        ttft = run.ttft_s[requests // 10:]
        sim_mean, sim_p99 = float(ttft.mean()) * 1e3, float(np.percentile(ttft, 99)) * 1e3
        if q.saturated:
            print(f"  {rate:4.1f}      - | saturated {sim_mean:9.1f}        | saturated {sim_p99:9.1f}")
            continue
        mean, p99 = q.ttft_s.mean * 1e3, q.ttft_s.at(99.0) * 1e3
        print(f"  {rate:4.1f} {q.decode_batch:6.1f} | {mean:9.1f} {sim_mean:7.1f} {mean / sim_mean - 1:+6.1%} | "
              f"{p99:9.1f} {sim_p99:7.1f} {p99 / sim_p99 - 1:+6.1%}")


def compare(workload: str, requests: int, seed: int = 0) -> list[dict[str, float]]:
    w = load_workload(workload)
    server = B.server_for(load_model_spec(w.model or "llama-3.1-8b"), load_hardware("h100-sxm"), engine=default_engine())
    mix = serving_mix(w, 20_000)
    cap = B.serving_capacity(server, mix)
    rng = np.random.default_rng(seed)
    rows = []
    for u in UTILISATIONS:
        rate = u * cap[0]
        q = B.queueing_latency(server, rate, mix, 1.0, (50.0, 99.0), cap)
        run, arrivals, out = replay_mix(server, mix, rate, requests, rng, mix.shared_prefix_tokens)
        keep = slice(requests // 10, None)  # the first tenth warms the replica up
        ttft = run.ttft_s[keep]
        tpot = ((run.finish_s - arrivals - run.ttft_s) / np.maximum(out - 1, 1))[keep][out[keep] > 1]
        row = {"utilisation": u, "rate": rate}
        for p in (50, 99):
            row[f"model_ttft_p{p}"] = q.ttft_s.at(p)
            row[f"sim_ttft_p{p}"] = float(np.percentile(ttft, p))
            row[f"model_tpot_p{p}"] = q.tpot_s.at(p)
            row[f"sim_tpot_p{p}"] = float(np.percentile(tpot, p))
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--plot", default=None, help="Write the figure here (.png/.svg; needs matplotlib).")
    parser.add_argument("--slot-limit", action="store_true", help="Only the max_num_seqs 32 case of docs/serving.md.")
    args = parser.parse_args(argv)
    if args.slot_limit:
        compare_slot_limit(args.requests)
        return
    results = {}
    for name in ("chat-serving", "rag-serving"):
        rows = compare(name, args.requests)
        results[name] = rows
        print(f"{name}: TTFT / TPOT p50 and p99 [ms], model vs simulator ({args.requests:,} requests per point)")
        print("  util   rate | TTFT p50 model  sim    err | TTFT p99 model  sim    err | TPOT p50 model sim  err | TPOT p99 model sim  err")
        for r in rows:
            cells = []
            for m in ("ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99"):
                a, b = r[f"model_{m}"] * 1e3, r[f"sim_{m}"] * 1e3
                cells.append(f"{a:8.1f} {b:7.1f} {a / b - 1:+6.1%}")
            print(f"  {r['utilisation']:.2f} {r['rate']:6.2f} | " + " | ".join(cells))
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 2, figsize=(10, 4))
        for ax, (name, rows) in zip(axes, results.items()):
            u = [r["utilisation"] for r in rows]
            for p, colour in ((50, "tab:blue"), (99, "tab:red")):
                ax.plot(u, [r[f"model_ttft_p{p}"] * 1e3 for r in rows], color=colour, label=f"TTFT p{p}, queueing model")
                ax.plot(u, [r[f"sim_ttft_p{p}"] * 1e3 for r in rows], "o", color=colour, label=f"TTFT p{p}, simulator")
            ax.set_title(f"{name}: Llama-3.1-8B on one H100")
            ax.set_xlabel("utilisation (request rate / replica capacity)")
            ax.set_ylabel("TTFT [ms]")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(args.plot, dpi=110)
        print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()
