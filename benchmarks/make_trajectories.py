"""Generate a synthetic trajectory log in capplan's record format, for ``bench_reconcile.py``.

Run by hand (not in CI)::

    python benchmarks/make_trajectories.py --records 1000000 -o /tmp/traj-1m.jsonl.gz

Records are short multi-turn rollouts (ASSUMED shape, for throughput measurement only, not a
model of any real workload): a 16-64 token prompt, 1-3 turns of 4-24 sampled tokens, a 4-32 token
tool observation after every turn but the last, one log-prob per sampled position, automatic
prefix reuse logged as ``cached_tokens`` and ``prefill_tokens``, 256 records per trainer step with
a policy lag of 0-2 versions, and stop reason ``stop`` (5% ``length``). Every record passes every
check unless ``--defects`` asks for broken ones. The same ``--seed`` gives the same file. Records
are built by :func:`capplan.records.trajectory_record`, the format's one builder; this script adds
the per-position log-probs it draws, the trainer version and, with ``--token-ids``, token IDs.

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

from capplan.records import trajectory_record

#: Key order of a record, as the files written so far have it (the builder puts trainer_version last).
_KEYS = ("id", "counts", "origin", "loss_mask", "turns", "cached_tokens", "prefill_tokens", "logprobs",
         "policy_version", "trainer_version", "stop_reason", "tool_wait_s")
_KEYS_WITH_IDS = tuple("token_ids" if key == "counts" else key for key in _KEYS)


def record(rng: random.Random, i: int, token_ids: bool) -> dict[str, Any]:
    """One clean record (see the module docstring for its shape), built by ``trajectory_record``.

    The random draws keep their order (prompt, turns, then per turn the sampled tokens, their
    log-probs and the tool observation; token IDs; policy lag, stop, tool wait), so a seed gives
    the same file as before.
    """
    prompt_tokens = rng.randint(16, 64)
    turn_count = rng.randint(1, 3)
    turns: list[tuple[int, int]] = []
    cached: list[int] = []
    logprobs: list[float] = []
    position = prompt_tokens
    computed = 0  # positions the previous invocations computed: reused by automatic prefix caching
    for j in range(turn_count):
        action_tokens = rng.randint(4, 24)
        cached.append(computed)
        computed = position + action_tokens - 1
        logprobs += [round(-rng.expovariate(2.0), 3) for _ in range(action_tokens)]
        tool_tokens = rng.randint(4, 32) if j < turn_count - 1 else 0
        turns.append((action_tokens, tool_tokens))
        position += action_tokens + tool_tokens
    ids = [rng.randrange(151_000) for _ in range(position)] if token_ids else None
    step = i // 256
    policy_version = max(step - rng.randint(0, 2), 0)
    truncated = rng.random() < 0.05
    tool_wait_s = round(rng.uniform(0.0, 3.0) * (turn_count - 1), 3)
    rec = trajectory_record(
        i,
        prompt_tokens,
        turns,
        cached,
        loss_on=("action",),
        truncated=truncated,
        drop_truncated=False,
        policy_version=policy_version,
        tool_wait_s=tool_wait_s,
    )
    rec["logprobs"] = logprobs  # drawn per sampled position (the builder writes one placeholder value)
    rec["trainer_version"] = step
    if ids is not None:
        rec["token_ids"] = ids  # in place of counts
    return {key: rec[key] for key in (_KEYS_WITH_IDS if ids is not None else _KEYS)}


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
