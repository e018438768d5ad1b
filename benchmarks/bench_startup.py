"""Start-up time of ``capplan --help`` (target < 0.3 s): the CLI must not import numpy or pandas.

Run by hand: ``python benchmarks/bench_startup.py``. Prints the best and median of 15 runs and
which heavy modules the help path imported (should be none).
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import time


def main() -> None:
    exe = shutil.which("capplan")
    cmd = [exe, "--help"] if exe else [sys.executable, "-m", "capplan", "--help"]
    times = []
    for _ in range(15):
        t0 = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - t0)
    print(f"{' '.join(cmd[-2:])}: best {min(times):.3f} s, median {statistics.median(times):.3f} s (15 runs)")
    probe = (
        "import sys; sys.argv=['capplan','--help']\n"
        "from capplan.cli.app import app\n"
        "try:\n    app()\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('numpy','pandas','pydantic','yaml','matplotlib') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    print("heavy modules imported by --help:", out.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
