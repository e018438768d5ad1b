"""Start-up cost of the command line, as wall time and as a ratio to a bare interpreter.

Targets: ``capplan --help`` under 0.2 s, and the import overhead of ``capplan kv`` (a whole
``capplan kv ... --format json`` run, whose arithmetic takes about a millisecond) under 0.3 s.
Ratios against ``python -c pass`` make the figures comparable across machines.

Each command runs once untimed first, with ``PYTHONDONTWRITEBYTECODE`` removed from its
environment, so the timed runs read compiled bytecode as an installed package does (pip compiles
on install); without it every run would recompile capplan's sources.

Run by hand: ``python benchmarks/bench_startup.py [--runs 15]``. Prints best and median of each,
the ratios, and which heavy modules each path imported (``--help`` should import none).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

HEAVY = ("numpy", "pandas", "scipy", "pydantic", "yaml", "rich", "matplotlib")


ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _time(cmd: list[str], runs: int) -> tuple[float, float]:
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, env=ENV)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, env=ENV)
        times.append(time.perf_counter() - t0)
    return min(times), statistics.median(times)


def _heavy(argv: list[str]) -> list[str]:
    probe = (
        f"import sys; sys.argv={argv!r}\n"
        "from capplan.cli.app import app_for\n"
        "try:\n    app_for(sys.argv[1:])()\nexcept SystemExit:\n    pass\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False)
    return out.stderr.strip().splitlines()[-1:] or ["?"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    exe = shutil.which("capplan") or os.path.join(os.path.dirname(sys.executable), "capplan")
    kv = ["kv", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--format", "json"]
    bare_best, bare_med = _time([sys.executable, "-c", "pass"], args.runs)
    print(f"cores: {os.cpu_count()}; python -c pass: best {bare_best:.3f} s, median {bare_med:.3f} s")
    figures, held = [], True
    for label, argv, target in (("capplan --help", ["--help"], 0.2), ("capplan kv ... --format json", kv, 0.3)):
        best, med = _time([exe, *argv], args.runs)
        figures.append(f"{label}: {best:.2f} s best, {med:.2f} s median ({best / bare_best:.1f}x `python -c pass`)")
        held = held and best < target
        print(
            f"{label}: best {best:.3f} s, median {med:.3f} s; {best / bare_best:.1f}x a bare interpreter "
            f"(target < {target} s: {'met' if best < target else 'NOT met'} on this machine); "
            f"heavy modules imported: {_heavy(['capplan', *argv])[0]}"
        )
    from report import record

    record("startup", "start-up (`bench_startup.py`)", "; ".join(figures), "--help < 0.2 s, kv < 0.3 s", held,
           headline=f"--help {figures[0].split(': ')[1].split(' best')[0]}")


if __name__ == "__main__":
    main()
