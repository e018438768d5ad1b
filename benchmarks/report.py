"""The performance table: every benchmark records its headline here, and this script writes the table into the README and docs/performance.md.

Each ``bench_*.py`` ends with :func:`record`, which stores its figures in ``results.json`` beside
this file (one entry per benchmark, with the machine's core count, the Python version and the
date of the run). Then::

    python benchmarks/report.py          # rewrite the tables from results.json
    python benchmarks/report.py --check  # exit 1 if a table differs from results.json

rewrites the text between ``<!-- performance:start -->`` and ``<!-- performance:end -->`` in
``README.md`` and ``docs/performance.md`` (``tests/test_docs_and_packaging.py`` runs the check, so
a table never drifts from the recorded runs). Figures are never typed into the tables by hand.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results.json"
DOCUMENTS = {HERE.parent / "README.md": True, HERE.parent / "docs" / "performance.md": False}
"""The documents holding a table, and whether theirs is the short one."""
START, END = "<!-- performance:start -->", "<!-- performance:end -->"

ORDER = (
    "startup", "ledger", "kv", "roofline", "scalar", "sweep_api", "sweep_export", "reconcile", "simulate", "simulate_compiled",
    "serving_sim", "ray",
)
"""Row order of the table (benchmarks not listed come after, by name)."""


def record(key: str, benchmark: str, figure: str, target: str = "", met: bool | None = None, headline: str = "") -> None:
    """Store one benchmark's headline in ``results.json`` (replacing its previous entry).

    Parameters
    ----------
    key : str
        The entry's name (one per benchmark headline, e.g. ``"sweep_export"``).
    benchmark : str
        What was measured and by which script, as the table's first column.
    figure : str
        The measured figures, as the table's second column.
    target : str
        The target the figures are held to (empty: none).
    met : bool, optional
        Whether every target held on this run (``None``: no target).
    headline : str
        The figure in a few words, for the README's short table (default: ``figure``).
    """
    results = json.loads(RESULTS.read_text(encoding="utf-8")) if RESULTS.exists() else {}
    results[key] = {
        "benchmark": benchmark,
        "figure": figure,
        "target": target,
        "met": met,
        "headline": headline or figure,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "date": datetime.date.today().isoformat(),
    }
    RESULTS.write_text(json.dumps(dict(sorted(results.items())), indent=2) + "\n", encoding="utf-8")


def render(results: dict[str, dict[str, Any]], short: bool = False) -> str:
    """The markdown table of ``results`` (see :func:`record`), with the machines it was run on;
    ``short``: the headlines only (the README's table)."""
    keys = sorted(results, key=lambda k: (ORDER.index(k) if k in ORDER else len(ORDER), k))
    if short:
        lines = ["| benchmark | figure | target met |", "|---|---|---|"]
    else:
        lines = ["| benchmark | figure | target | met |", "|---|---|---|---|"]
    for key in keys:
        r = results[key]
        met = {True: "yes", False: "**no**", None: ""}[r["met"]]
        cells = [f"`{key}`", r["headline"], met] if short else [r["benchmark"], r["figure"], r["target"], met]
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    machines = sorted({(r["cores"], r["python"]) for r in results.values()})
    dates = sorted({r["date"] for r in results.values()})
    where = "; ".join(f"{cores} cores, Python {python}" for cores, python in machines)
    when = dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}"
    lines.append("")
    if short:
        lines.append(f"{where}, {when}; targets and details in [docs/performance.md](docs/performance.md).")
    else:
        lines.append(f"Measured on {where}, {when}, by the scripts in `benchmarks/` (`python benchmarks/report.py` "
                     "writes this table from their recorded results).")
    return "\n".join(lines)


def splice(text: str, table: str) -> str:
    """``text`` with the part between the markers replaced by ``table``."""
    head, start, rest = text.partition(START)
    _, end, tail = rest.partition(END)
    if not start or not end:
        raise ValueError(f"the markers {START} and {END} are missing")
    return f"{head}{START}\n{table}\n{END}{tail}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 if a table is stale")
    args = parser.parse_args()
    results = json.loads(RESULTS.read_text(encoding="utf-8"))
    stale = []
    for path, short in DOCUMENTS.items():
        text = path.read_text(encoding="utf-8")
        new = splice(text, render(results, short))
        if new != text:
            stale.append(path)
            if not args.check:
                path.write_text(new, encoding="utf-8")
    for path in stale:
        print(f"{path}: {'stale' if args.check else 'rewritten'}", file=sys.stderr)
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
