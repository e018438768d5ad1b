"""Monte Carlo ledger throughput: conversations per second on bundled distribution workloads.

Run by hand (not in CI): ``python benchmarks/bench_ledger.py [--conversations 100000]``.
The target in the foundation issue is a 100,000-conversation ledger "well under a second".
"""

from __future__ import annotations

import argparse
import time

from capplan.ledger import compute_ledger
from capplan.workload import load_workload


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--conversations", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    figures = []
    for name in ("reasoning-rl-olmo3-7b", "agentic-tool-rl", "chat-serving"):
        w = load_workload(name)
        compute_ledger(w, conversations=1000)  # warm up imports
        best = float("inf")
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            compute_ledger(w, conversations=args.conversations)
            best = min(best, time.perf_counter() - t0)
        turns = w.conversation.max_turns
        print(
            f"{name:24s} {args.conversations:>9,} conversations (up to {turns} turns): "
            f"best {best:.3f} s = {args.conversations / best:,.0f} conversations/s"
        )
        figures.append(f"{name} {best:.2f} s ({args.conversations / best:,.0f} conversations/s, up to {turns} turns)")
    from report import record

    held = all(float(f.split(" ")[1]) < 1.0 for f in figures)
    record("ledger", f"Monte Carlo ledger, {args.conversations:,} conversations (`bench_ledger.py`)", "; ".join(figures),
           "< 1 s each", held, headline=f"{args.conversations:,} conversations < {max(float(f.split(' ')[1]) for f in figures):.1f} s")


if __name__ == "__main__":
    main()
