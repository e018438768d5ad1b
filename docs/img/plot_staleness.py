"""Draw ``plan-staleness-olmo3-7b.png`` from the staleness table of ``docs/plan.md``.

The table holds the figures of ``capplan plan`` and ``capplan simulate`` at each staleness bound
(the command lines are under it); this script only draws them::

    python docs/img/plot_staleness.py
"""

from __future__ import annotations

import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).resolve().parent
ROW = re.compile(r"^\| (\d+) \| ([\d,]+) \| ([\d,]+) \| ([\d,]+) \| ([\d,]+) \| (\d+)% / (\d+)% \|")


def table() -> list[tuple[int, float, float, float, float]]:
    """``(K, plan tokens/s, simulate tokens/s, plan stale %, simulate stale %)`` per table row."""
    rows = []
    for line in (HERE.parent / "plan.md").read_text().splitlines():
        m = ROW.match(line)
        if m:
            k, _, _, plan_tps, sim_tps, plan_stale, sim_stale = m.groups()
            rows.append((int(k), float(plan_tps.replace(",", "")), float(sim_tps.replace(",", "")),
                         float(plan_stale), float(sim_stale)))
    if not rows:
        raise SystemExit("docs/plan.md: no staleness table rows found")
    return rows


def main() -> None:
    rows = table()
    k = [r[0] for r in rows]
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    ax.plot(k, [r[1] for r in rows], "o-", label="plan: trained tokens/s")
    ax.plot(k, [r[2] for r in rows], "s--", label="simulate: trained tokens/s")
    ax.set_xlabel("max staleness K [policy versions]")
    ax.set_ylabel("trained tokens/s")
    ax.set_ylim(bottom=0)
    right = ax.twinx()
    right.plot(k, [r[3] for r in rows], "^:", color="tab:red", label="plan: stale [%]")
    right.plot(k, [r[4] for r in rows], "v:", color="tab:purple", label="simulate: stale [%]")
    right.set_ylabel("stale trajectories [%]")
    right.set_ylim(0, 105)
    lines = ax.get_legend_handles_labels()[0] + right.get_legend_handles_labels()[0]
    ax.legend(lines, [h.get_label() for h in lines], loc="lower right", fontsize=8)
    ax.set_title("reasoning-rl-olmo3-7b, 16 trainer : 56 inference H100, async")
    fig.tight_layout()
    fig.savefig(HERE / "plan-staleness-olmo3-7b.png", dpi=120)


if __name__ == "__main__":
    main()
