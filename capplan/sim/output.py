"""A simulation's trajectory log: completed conversations as records of ``capplan ledger reconcile``'s format, as JSONL."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

if TYPE_CHECKING:
    from capplan.sim.result import SimResult
    from capplan.workload import Workload


def trajectory_records(result: "SimResult", workload: "Workload") -> Iterator[dict[str, Any]]:
    """Completed trajectories as records of ``capplan ledger reconcile``'s own format, by end time.

    Log-probs are placeholders (``0.0`` for every sampled position): the simulator models that a
    behaviour log-prob is stored, not its value. ``outcome`` (accepted, rejected_stale,
    rejected_filtered, rejected_surplus, unfinished = not yet ingested) and ``simulated`` are
    extra fields the reconciler ignores.
    """
    from capplan.records import trajectory_record
    from capplan.sim.conversations import OUTCOME_NAMES

    table = result.table
    if table is None:
        raise ValueError("this SimResult carries no conversation table (it was not made by simulate)")
    n = result.conversations["n"]
    order = sorted((t, i) for i, t in enumerate(table.end_s[:n]) if not math.isnan(t))
    loss_on = workload.training.loss_on
    drop_truncated = workload.training.drop_truncated
    for end_s, i in order:
        invoked = table.invoked[i]
        turns = next((j for j, ran in enumerate(invoked) if not ran), len(invoked))
        extra: dict[str, Any] = {"outcome": OUTCOME_NAMES[table.outcome[i]], "end_s": end_s, "simulated": True}
        if table.trainer_version[i] >= 0:
            extra["trainer_version"] = table.trainer_version[i]
        yield trajectory_record(
            i,
            table.prompt_tokens[i],
            [(table.action_tokens[i][j], table.tool_tokens[i][j]) for j in range(turns)],
            table.cache_hits[i],
            loss_on=loss_on,
            truncated=table.truncated[i],
            drop_truncated=drop_truncated,
            policy_version=table.policy_version[i],
            tool_wait_s=round(sum(table.tool_wait_s[i][:turns]), 6),
            logprob=0.0,
            extra=extra,
        )


def write_trajectories(result: "SimResult", workload: "Workload", path: str | Path, force: bool = False) -> Path:
    """Write :func:`trajectory_records` as JSONL, atomically (never over a file without ``force``).

    Raises
    ------
    OutputExistsError
        ``path`` exists and ``force`` is false.
    """
    from capplan.output import atomic_file

    dumps = json.JSONEncoder(separators=(",", ":")).encode
    with atomic_file(path, force) as fh:
        for record in trajectory_records(result, workload):
            fh.write(dumps(record) + "\n")
    return Path(path)
