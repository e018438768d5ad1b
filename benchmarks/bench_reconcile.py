"""``capplan ledger reconcile`` throughput and memory: records/s and peak RSS at 100K and 1M records.

Run by hand (not in CI)::

    python benchmarks/bench_reconcile.py                 # 100,000 and 1,000,000 records
    python benchmarks/bench_reconcile.py --sizes 100000 --gzip

Files come from ``make_trajectories.py`` (written once into ``--dir``, reused after). Each size is
reconciled in a fresh Python process, which reports its own peak resident set size
(``ru_maxrss``) and the resident set size after its imports, before reading a record. Memory is
flat when the peak does not grow with the number of records: the reader keeps one record, a batch
of at most 16,384 counted rows and fixed-size histograms, never the records themselves.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

_CHILD = r"""
import json, resource, sys, time
from capplan.reconcile import reconcile
import capplan.ledger, numpy  # imports counted in the baseline, not in the run
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
cpu, wall = time.process_time(), time.perf_counter()
r = reconcile(sys.argv[1])
cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"records": r.records, "ok": r.ok, "cpu_s": cpu, "wall_s": wall,
                  "rss_after_imports_kib": base, "peak_rss_kib": peak}))
"""


def run(path: Path) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", _CHILD, str(path)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--dir", type=Path, default=Path("/tmp/capplan-bench"))
    parser.add_argument("--gzip", action="store_true", help="benchmark gzip-compressed files")
    parser.add_argument("--repeat", type=int, default=1, help="runs per size; the fastest is shown")
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    print(f"python {sys.version.split()[0]}; records from make_trajectories.py (short multi-turn records)")
    for n in args.sizes:
        path = args.dir / f"trajectories-{n}.jsonl{'.gz' if args.gzip else ''}"
        if not path.exists():
            subprocess.run(
                [sys.executable, str(HERE / "make_trajectories.py"), "--records", str(n), "-o", str(path)], check=True
            )
        best = min((run(path) for _ in range(args.repeat)), key=lambda r: r["cpu_s"])
        assert best["records"] == n and best["ok"], best
        size = path.stat().st_size / 2**20
        print(
            f"{n:>10,} records ({size:,.0f} MiB{', gzip' if args.gzip else ''}): "
            f"{n / best['cpu_s']:>8,.0f} records/s (CPU time), {n / best['wall_s']:>8,.0f} records/s (wall); "
            f"peak RSS {best['peak_rss_kib'] / 1024:,.1f} MiB "
            f"(after imports {best['rss_after_imports_kib'] / 1024:,.1f} MiB)"
        )


if __name__ == "__main__":
    main()
