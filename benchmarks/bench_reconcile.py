"""``capplan ledger reconcile`` throughput and memory: JSONL and Parquet, 100K and 1M records, one and two workers.

Run by hand (not in CI)::

    python benchmarks/bench_reconcile.py                       # the issue's targets
    python benchmarks/bench_reconcile.py --sizes 100000 --formats jsonl --no-directory

Targets: >= 200,000 records/s for JSONL and >= 500,000 for Parquet on one core; peak RSS at 1M
records within 10% of that at 100K; ``--workers 2`` on a directory of files >= 1.7x one worker.

Files come from ``make_trajectories.py`` (written once into ``--dir``, reused after); the Parquet
files are the same records converted with pyarrow in row groups of ``--row-group`` rows. Each
measurement runs in a fresh Python process that reports its CPU time, wall time, and peak
resident set size (``VmHWM``) next to the peak after its imports. Records/s is
per CPU-second of that process (one core); the directory runs report wall time, since they use
more than one process. "previous path" is the record-by-record checker (``batches=False``), which
every record took before the batch path; the results of the two are compared for equality.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

_CHILD = r"""
import json, resource, sys, time
import numpy, msgspec, capplan.ledger
from capplan.reconcile import reconcile
from capplan.reconcile.files import reconcile_files
import capplan.reconcile.batch, capplan.reconcile.columns
try:
    import pyarrow.parquet
except ImportError:
    pass
args = json.loads(sys.argv[1])

def peak_kib():
    # VmHWM starts afresh at exec (ru_maxrss would include the parent's pages shared at fork)
    try:
        with open("/proc/self/status") as fh:
            return next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

base = peak_kib()
cpu, wall = time.process_time(), time.perf_counter()
if args["kind"] == "file":
    r = reconcile(args["path"], batches=args["batches"])
else:
    r = reconcile_files([args["path"]], executor="process", workers=args["workers"])
cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
peak = peak_kib()
doc = r.as_dict()
doc.pop("notes"), doc.pop("source"), doc.pop("files", None), doc.pop("files_failed", None)
print(json.dumps({"records": r.records, "ok": r.ok, "cpu_s": cpu, "wall_s": wall, "rss_after_imports_kib": base,
                  "peak_rss_kib": peak, "digest": hash(json.dumps(doc, sort_keys=True))}))
"""


def run(args: dict) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps(args)], capture_output=True, text=True, check=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    return json.loads(out.stdout)


def best_of(args: dict, repeat: int) -> dict:
    return min((run(args) for _ in range(repeat)), key=lambda r: r["cpu_s"] if args["kind"] == "file" else r["wall_s"])


def jsonl_file(folder: Path, n: int) -> Path:
    path = folder / f"trajectories-{n}.jsonl"
    if not path.exists():
        subprocess.run([sys.executable, str(HERE / "make_trajectories.py"), "--records", str(n), "-o", str(path)], check=True)
    return path


def parquet_file(folder: Path, n: int, row_group: int) -> Path:
    """The JSONL records of ``n`` converted to Parquet (in a child process, so this one stays small)."""
    path = folder / f"trajectories-{n}-rg{row_group}.parquet"
    if not path.exists():
        source = jsonl_file(folder, n)
        subprocess.run(
            [sys.executable, __file__, "--convert", str(source), str(path), str(row_group)], check=True
        )
    return path


def convert(source: Path, path: Path, row_group: int) -> None:
    """Write the records of ``source`` to Parquet, streamed ``row_group`` rows at a time."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    writer = None
    rows: list[dict] = []
    with open(source, "rb") as fh:
        for line in fh:
            rows.append(json.loads(line))
            if len(rows) == row_group:
                table = pa.Table.from_pylist(rows)
                writer = writer or pq.ParquetWriter(path, table.schema)
                writer.write_table(table)
                rows = []
    if rows:
        table = pa.Table.from_pylist(rows)
        writer = writer or pq.ParquetWriter(path, table.schema)
        writer.write_table(table)
    assert writer is not None
    writer.close()


def split_directory(folder: Path, source: Path, files: int) -> Path:
    """``source`` split into ``files`` JSONL files of consecutive lines."""
    target = folder / f"{source.stem}-in-{files}"
    if target.exists():
        return target
    target.mkdir()
    lines = source.read_bytes().splitlines(keepends=True)
    per = -(-len(lines) // files)
    for k in range(files):
        (target / f"part-{k:03d}.jsonl").write_bytes(b"".join(lines[k * per:(k + 1) * per]))
    return target


def main() -> None:
    if sys.argv[1:2] == ["--convert"]:
        convert(Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4]))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--formats", nargs="+", default=["jsonl", "parquet"], choices=["jsonl", "parquet"])
    parser.add_argument("--dir", type=Path, default=Path("/tmp/capplan-bench"))
    parser.add_argument("--row-group", type=int, default=65_536, help="Parquet rows per row group")
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement; the fastest is shown")
    parser.add_argument("--files", type=int, default=8, help="files of the directory benchmark")
    parser.add_argument("--no-directory", action="store_true", help="skip the one-against-two-workers run")
    parser.add_argument("--no-previous", action="store_true", help="skip the record-by-record comparison")
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; records from make_trajectories.py (short multi-turn records)")
    peaks: dict[str, dict[int, float]] = {}
    rates: dict[str, dict[int, float]] = {}
    figures: list[str] = []
    held = True
    for fmt in args.formats:
        for n in args.sizes:
            path = jsonl_file(args.dir, n) if fmt == "jsonl" else parquet_file(args.dir, n, args.row_group)
            r = best_of({"kind": "file", "path": str(path), "batches": True}, args.repeat)
            assert r["records"] == n and r["ok"], r
            peaks.setdefault(fmt, {})[n] = r["peak_rss_kib"] / 1024
            rates.setdefault(fmt, {})[n] = n / r["cpu_s"]
            line = (
                f"{fmt:>7} {n:>10,} records ({path.stat().st_size / 2**20:,.0f} MiB): {n / r['cpu_s']:>9,.0f} records/s "
                f"(CPU, one core), {n / r['wall_s']:>9,.0f} wall; peak RSS {r['peak_rss_kib'] / 1024:,.1f} MiB "
                f"(after imports {r['rss_after_imports_kib'] / 1024:,.1f} MiB)"
            )
            if not args.no_previous and n == min(args.sizes):
                old = best_of({"kind": "file", "path": str(path), "batches": False}, 1)
                assert old["digest"] == r["digest"], "the batch path and the record-by-record path differ"
                line += f"; previous path {n / old['cpu_s']:,.0f} records/s ({old['cpu_s'] / r['cpu_s']:.1f}x slower), same result"
            print(line)
    for fmt, by_size in peaks.items():
        if len(by_size) > 1:
            small, large = min(by_size), max(by_size)
            growth = by_size[large] / by_size[small] - 1
            print(f"{fmt:>7} peak RSS at {large:,} vs {small:,} records: {growth:+.1%} (target within 10%)")
            held = held and abs(growth) <= 0.10
        else:
            growth = None
        floor = 200_000 if fmt == "jsonl" else 500_000
        held = held and min(rates[fmt].values()) >= floor
        figures.append(
            f"{'JSONL' if fmt == 'jsonl' else 'Parquet'} " + ", ".join(f"{rate:,.0f} ({n:,})" for n, rate in sorted(rates[fmt].items()))
            + " records per CPU-second" + (f", peak RSS {growth:+.1%} from {min(by_size):,} to {max(by_size):,}" if growth is not None else "")
        )
    if not args.no_directory:
        folder = split_directory(args.dir, jsonl_file(args.dir, max(args.sizes)), args.files)
        one = best_of({"kind": "dir", "path": str(folder), "workers": 1}, args.repeat)
        two = best_of({"kind": "dir", "path": str(folder), "workers": 2}, args.repeat)
        assert one["digest"] == two["digest"], "one and two workers differ"
        n = one["records"]
        print(
            f"directory of {args.files} JSONL files, {n:,} records: 1 worker {one['wall_s']:.2f} s "
            f"({n / one['wall_s']:,.0f} records/s), 2 workers {two['wall_s']:.2f} s ({n / two['wall_s']:,.0f} records/s): "
            f"{one['wall_s'] / two['wall_s']:.2f}x (target >= 1.7x), same result"
        )
        figures.append(f"{args.files} files on --workers 2: {one['wall_s'] / two['wall_s']:.2f}x one worker")
        held = held and one["wall_s"] / two["wall_s"] >= 1.7
    from report import record

    record("reconcile", "`capplan ledger reconcile` (`bench_reconcile.py`)", "; ".join(figures),
           "JSONL >= 200,000/s, Parquet >= 500,000/s, RSS within 10%, 2 workers >= 1.7x", held,
           headline=f"JSONL {min(rates.get('jsonl', {0: 0}).values()) / 1e3:,.0f}K, Parquet {min(rates.get('parquet', {0: 0}).values()) / 1e3:,.0f}K records/s")


if __name__ == "__main__":
    main()
