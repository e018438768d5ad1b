"""Generate a synthetic trajectory log in capplan's record format, for ``bench_reconcile.py``.

Run by hand (not in CI)::

    python benchmarks/make_trajectories.py --records 1000000 -o /tmp/traj-1m.jsonl.gz

Records are short multi-turn rollouts (ASSUMED shape, for throughput measurement only, not a
model of any real workload): a 16-64 token prompt, 1-3 turns of 4-24 sampled tokens, a 4-32 token
tool observation after every turn but the last, one log-prob per sampled position, automatic
prefix reuse logged as ``cached_tokens`` and ``prefill_tokens``, 256 records per trainer step with
a policy lag of 0-2 versions, and stop reason ``stop`` (5% ``length``). Every record passes every
check unless ``--defects`` asks for broken ones. The same ``--seed`` gives the same file.

With ``--workload W`` the records are instead the conversations ``capplan ledger W`` samples
(``capplan.reconcile.plan_records``), so ``capplan ledger reconcile FILE --workload W`` matches the
plan within Monte Carlo noise (and exactly with the same seed and count)::

    python benchmarks/make_trajectories.py --workload agentic-tool-rl --records 20000 -o /tmp/agentic.jsonl.gz
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import sys
import time
from pathlib import Path
from typing import IO, Any


def record(rng: random.Random, i: int, token_ids: bool) -> dict[str, Any]:
    """One clean record (see the module docstring for its shape)."""
    P = rng.randint(16, 64)
    turns = rng.randint(1, 3)
    origin = ["p" * P]
    loss = ["0" * P]
    spans, cached, prefill, logprobs = [], [], [], []
    pos = P
    computed = 0
    for j in range(turns):
        a = rng.randint(4, 24)
        spans.append([pos, pos + a])
        cached.append(computed)
        prefill.append(pos - computed)
        computed = pos + a - 1
        logprobs += [round(-rng.expovariate(2.0), 3) for _ in range(a)]
        origin.append("a" * a)
        loss.append("1" * a)
        pos += a
        if j < turns - 1:
            t = rng.randint(4, 32)
            origin.append("t" * t)
            loss.append("0" * t)
            pos += t
    step = i // 256
    rec: dict[str, Any] = {"id": i}
    if token_ids:
        rec["token_ids"] = [rng.randrange(151_000) for _ in range(pos)]
    else:
        o = "".join(origin)
        rec["counts"] = {"prompt": P, "action": o.count("a"), "tool": o.count("t")}
    rec.update(
        {
            "origin": "".join(origin),
            "loss_mask": "".join(loss),
            "turns": spans,
            "cached_tokens": cached,
            "prefill_tokens": prefill,
            "logprobs": logprobs,
            "policy_version": max(step - rng.randint(0, 2), 0),
            "trainer_version": step,
            "stop_reason": "length" if rng.random() < 0.05 else "stop",
            "tool_wait_s": round(rng.uniform(0.0, 3.0) * (turns - 1), 3),
        }
    )
    return rec


def _break(rng: random.Random, rec: dict[str, Any]) -> dict[str, Any] | str:
    """Break one check of ``rec`` (or the whole line), chosen at random."""
    kind = rng.randrange(4)
    if kind == 0:
        return "{not json"
    if kind == 1:
        rec["loss_mask"] = "1" + rec["loss_mask"][1:]  # loss on a prompt position
    elif kind == 2:
        rec["logprobs"] = rec["logprobs"][:-1]  # one log-prob short
    else:
        rec["stop_reason"] = "eos"  # not a known stop reason
    return rec


def write(out: IO[str], n: int, seed: int, token_ids: bool, defects: float, workload: str | None = None) -> None:
    rng = random.Random(seed)
    dumps = json.JSONEncoder(separators=(",", ":")).encode
    if workload is not None:
        from capplan.reconcile import plan_records
        from capplan.workload import load_workload

        for planned in plan_records(load_workload(workload), n=n, seed=seed):
            out.write(dumps(planned) + "\n")
        return
    for i in range(n):
        rec: dict[str, Any] | str = record(rng, i, token_ids)
        if defects and rng.random() < defects:
            rec = _break(rng, rec)  # type: ignore[arg-type]
        out.write((rec if isinstance(rec, str) else dumps(rec)) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("-o", "--output", type=Path, required=True, help="*.jsonl or *.jsonl.gz")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--token-ids", action="store_true", help="write token_ids instead of per-class counts")
    parser.add_argument("--defects", type=float, default=0.0, help="fraction of records to break [0-1]")
    parser.add_argument("--workload", help="write the conversations this workload's plan samples instead")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    if args.output.suffix == ".gz":
        with gzip.open(args.output, "wt", compresslevel=1, encoding="utf-8") as fh:
            write(fh, args.records, args.seed, args.token_ids, args.defects, args.workload)
    else:
        with open(args.output, "w", encoding="utf-8") as fh:
            write(fh, args.records, args.seed, args.token_ids, args.defects, args.workload)
    size = args.output.stat().st_size
    print(
        f"wrote {args.records:,} records to {args.output} ({size / 2**20:,.1f} MiB) in "
        f"{time.perf_counter() - t0:.1f} s",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
