"""Sweep throughput and export: plan combinations per second, and ``capplan sweep -o`` writing a million rows.

Run by hand (not in CI)::

    python benchmarks/bench_sweep.py                   # both parts
    python benchmarks/bench_sweep.py --skip-api --previous   # also time the former CSV writer

1. The API: 3 GPUs x 4 tp x 2 KV dtypes x 64 inference sizes x 65 trainer sizes = 99,840
   combinations of the bundled OLMo-3-7B-like workload (target of the sweep issue: 100,000 in
   under 5 s), the workload's 100,000-conversation sample included.
2. The command line: 3 GPUs x 4 tp x 2 KV x 2 weight dtypes x 128 inference x 163 trainer sizes =
   1,001,472 rows written to CSV and to Parquet (targets: <= 5 s and <= 500 MiB on 2 cores), each
   in a fresh process that reports its CPU time and peak resident set size; wall time is taken
   around the process (interpreter start included). ``--previous`` also writes the CSV with the
   former writer (``capplan.output.to_csv`` over every row) and checks the files are identical.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ARGS = [
    "sweep", "reasoning-rl-olmo3-7b", "-H", "h100-sxm,h200,b200", "--tp", "1,2,4,8", "--kv-dtype", "bf16,fp8",
    "--dtype", "bf16,fp8", "--inference-gpus", "8:1024:8", "--trainer-gpus", "8:1304:8",
    "--max-grid-cells", "1100000",  # above the 250,000 a sweep refuses by default
]

_CHILD = r"""
import json, resource, sys, time
cpu = time.process_time()
args = json.loads(sys.argv[1])
if args.pop(0) == "previous":
    from capplan.cli.common import emit
    import capplan.cli.sweep_cmd as cmd
    from capplan.output import to_csv
    def write_grid(grid, output, force):  # the former writer: every cell through csv_safe, one string
        emit(to_csv(list(grid.columns), grid.itertuples(index=False)), output, force)
    cmd.write_grid = write_grid
from capplan.cli import main
sys.argv = ["capplan", *args]
try:
    main()
except SystemExit as exc:
    assert not exc.code, exc.code
print(json.dumps({"cpu_s": time.process_time() - cpu, "peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def export(output: Path, previous: bool = False) -> dict:
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps(["previous" if previous else "new", *ARGS, "-o", str(output), "--force"])],
        capture_output=True, text=True, check=True,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["wall_s"] = time.perf_counter() - start
    return result


def api(repeat: int) -> None:
    from capplan.hardware import load_hardware
    from capplan.modelspec import load_model_spec
    from capplan.plan import sweep
    from capplan.workload import load_workload

    w = load_workload("reasoning-rl-olmo3-7b")
    spec = load_model_spec("olmo-3-7b")
    hws = [load_hardware(h) for h in ("h100-sxm", "h200", "b200")]
    inference = list(range(8, 513, 8))
    trainer = list(range(8, 521, 8))
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        grid = sweep(w, spec, hws, [1, 2, 4, 8], ["bf16", "fp8"], inference_gpus=inference, trainer_gpus=trainer)
        best = min(best, time.perf_counter() - t0)
    n = len(grid)
    print(f"API: {n:,} combinations: best {best:.2f} s = {n / best:,.0f} combinations/s (includes the 100,000-conversation sample)")
    from report import record

    record("sweep_api", "plan sweep through the API (`bench_sweep.py`)",
           f"{n:,} combinations in {best:.2f} s best of {repeat} ({n / best:,.0f}/s), the 100,000-conversation sample included",
           "100,000 in < 5 s", best < 5 and n >= 99_000,
           headline=f"{n / best:,.0f} plan rows/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip-api", action="store_true")
    parser.add_argument("--previous", action="store_true", help="also time the former CSV writer and compare")
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    if not args.skip_api:
        api(args.repeat)
    figures: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as folder:
        for name in ("grid.csv", "grid.parquet"):
            path = Path(folder) / name
            runs = [export(path) for _ in range(args.repeat)]
            best = min(runs, key=lambda r: r["wall_s"])
            figures[name] = {"wall_s": best["wall_s"], "rss_mib": max(r["peak_rss_kib"] for r in runs) / 1024}
            print(
                f"CLI: 1,001,472 rows to {name}: wall {best['wall_s']:.2f} s (best of {args.repeat}; target <= 5 s), "
                f"CPU {best['cpu_s']:.2f} s, peak RSS {max(r['peak_rss_kib'] for r in runs) / 1024:,.0f} MiB "
                f"(target <= 500 MiB), {path.stat().st_size / 2**20:,.0f} MiB written"
            )
        if args.previous:
            new = (Path(folder) / "grid.csv").read_bytes()
            old_path = Path(folder) / "previous.csv"
            old = export(old_path, previous=True)
            same = old_path.read_bytes() == new
            print(
                f"CLI, former CSV writer: wall {old['wall_s']:.2f} s, CPU {old['cpu_s']:.2f} s, peak RSS "
                f"{old['peak_rss_kib'] / 1024:,.0f} MiB; files identical: {same}"
            )
            assert same
    from report import record

    csv, parquet = figures["grid.csv"], figures["grid.parquet"]
    import importlib.util

    encoder = "orjson" if importlib.util.find_spec("orjson") else "msgspec (orjson not installed)"
    print(f"numbers encoded by {encoder}")
    record("sweep_export", "`capplan sweep ... -o grid.csv`, 1,001,472 rows (`bench_sweep.py`)",
           f"CSV {csv['wall_s']:.2f} s wall, peak RSS {csv['rss_mib']:,.0f} MiB; Parquet {parquet['wall_s']:.2f} s, "
           f"{parquet['rss_mib']:,.0f} MiB (best of {args.repeat}; numbers by {encoder})", "<= 5 s, <= 500 MiB",
           csv["wall_s"] <= 5 and csv["rss_mib"] <= 500,
           headline=f"1M rows to CSV in {csv['wall_s']:.1f} s, {csv['rss_mib']:,.0f} MiB")


if __name__ == "__main__":
    main()
