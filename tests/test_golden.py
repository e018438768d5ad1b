"""Golden files: the JSON and CSV contracts of every command on every bundled workload.

Each case runs one command line in-process and compares its standard output (or the file it
writes) byte for byte with ``tests/golden/<case>.<ext>``. A change that moves a number shows up
here as a diff; when the change is intended, regenerate the files and review the diff::

    CAPPLAN_UPDATE_GOLDEN=1 pytest tests/test_golden.py

and say in the commit message which figures moved and why.

A file that differs only in the last digits of floating-point numbers (relative difference below
1e-9, what another numpy or scipy release gives for the same sums) still matches; any other
difference, including every integer and every word, fails.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from capplan.cli.app import app

REPO = Path(__file__).resolve().parent.parent
GOLDEN = REPO / "tests" / "golden"
FIXTURES = Path("tests") / "fixtures" / "reconcile"
"""Relative to the repository root, where the cases run, so no output holds a checkout's path."""
UPDATE = os.environ.get("CAPPLAN_UPDATE_GOLDEN") == "1"
BIG = 1_000_000
"""Outputs above this many characters are kept as their SHA-256 (still a byte-for-byte check)."""

MODEL_OF = {
    "agentic-tool-rl": "qwen3-8b",
    "chat-serving": "llama-3.1-8b",
    "distillation": "qwen3-8b",
    "rag-serving": "llama-3.1-8b",
    "reasoning-rl-olmo3-32b": "olmo-3-32b",
    "reasoning-rl-olmo3-7b": "olmo-3-7b",
    "seed-replay": "llama-3.1-8b",
    "seed-replay-auto": "llama-3.1-8b",
    "seed-replay-claim16": "llama-3.1-8b",
    "sft": "qwen3-8b",
}
"""Every bundled workload and the model its commands run with (its own, or one for the replay examples)."""

RL = ["agentic-tool-rl", "distillation", "reasoning-rl-olmo3-32b", "reasoning-rl-olmo3-7b", "seed-replay-auto"]
"""Workloads with both a rollout engine and a trainer (what ``simulate`` accepts)."""

PRESETS = [
    "deepseek-v3", "gemma-2-9b", "llama-3.1-405b", "llama-3.1-70b", "llama-3.1-8b", "mistral-7b",
    "olmo-3-32b", "olmo-3-7b", "qwen2.5-72b", "qwen2.5-7b", "qwen3-30b-a3b", "qwen3-32b", "qwen3-8b",
]

TPS = {"deepseek-v3": "8", "llama-3.1-405b": "8", "llama-3.1-70b": "2,4,8", "qwen2.5-72b": "4,8", "qwen2.5-7b": "1,2,4"}
"""Tensor-parallel degrees each preset runs at in the KV cases (those that fit and divide its heads)."""

N = ["--conversations", "3000"]
"""Plan cases sample 3,000 conversations (not the workloads' 100,000) to keep the suite fast."""


def _cases() -> list[tuple[str, list[str], str | None]]:
    """(case name, argv, output file name or None for standard output)."""
    out: list[tuple[str, list[str], str | None]] = []
    for w, m in MODEL_OF.items():
        for fmt in ("json", "csv"):
            out.append((f"ledger-{w}.{fmt}", ["ledger", "show", w, "--format", fmt], None))
            out.append((f"plan-{w}.{fmt}", ["plan", w, "-H", "h100-sxm", "-m", m, *N, "--format", fmt], None))
            if w != "sft":  # kv refuses a workload without an inference engine (tests/bad_inputs: kv-workload-sft)
                out.append((f"kv-workload-{w}.{fmt}", ["kv", "-m", m, "-H", "h100-sxm", "--workload", w, "--format", fmt], None))
    plan_variants = {
        "plan-olmo3-32b-published-split": ["reasoning-rl-olmo3-32b", "--tp", "8", "--trainer-gpus", "64", "--inference-gpus", "160"],
        "plan-olmo3-32b-async-k8": ["reasoning-rl-olmo3-32b", "--tp", "8", "--trainer-gpus", "64", "--inference-gpus", "160", "--mode", "async", "--max-staleness", "8"],
        "plan-olmo3-7b-async-k1": ["reasoning-rl-olmo3-7b", "--trainer-gpus", "16", "--inference-gpus", "56", "--mode", "async", "--max-staleness", "1"],
        "plan-olmo3-7b-total-72": ["reasoning-rl-olmo3-7b", "--total-gpus", "72"],
        "plan-agentic-trainer-8": ["agentic-tool-rl", "--trainer-gpus", "8"],
        "plan-agentic-inference-16": ["agentic-tool-rl", "--inference-gpus", "16", "--kv-dtype", "fp8"],
        "plan-distillation-h200-fp8": ["distillation", "--weight-dtype", "fp8", "--trainer-hardware", "h200"],
        "plan-two-workloads": ["agentic-tool-rl", "reasoning-rl-olmo3-7b"],
    }
    for name, args in plan_variants.items():
        hw = [] if "-H" in args else ["-H", "h100-sxm"]
        for fmt in ("json", "csv"):
            out.append((f"{name}.{fmt}", ["plan", *args, *hw, *N, "--format", fmt], None))
    for m in PRESETS:
        big = ["-H", "h200", "--weight-dtype", "fp8"] if m in ("deepseek-v3", "llama-3.1-405b") else ["-H", "h100-sxm"]
        tps = TPS.get(m, "1,2,4,8")
        out.append((f"kv-{m}.json", ["kv", "-m", m, *big, "--tp", tps, "--context", "4096,32768", "--format", "json"], None))
        out.append((f"roofline-{m}.json", ["roofline", "-m", m, "--hardware", big[1], *big[2:], "--tp", tps.split(",")[-1], "--format", "json"], None))
    for kind, extra in {
        "decode": [],
        "prefill": ["--prompt", "512,4096", "--context", "0,1024"],
        "score": ["--prompt", "512,4096", "--context", "0"],
        "mixed": ["--batch", "1,64", "--prompt", "2048,16384"],
    }.items():
        for fmt in ("json", "csv"):
            out.append((f"roofline-llama-3.1-8b-{kind}.{fmt}", ["roofline", "-m", "llama-3.1-8b", "--hardware", "h100-sxm", "--kind", kind, *extra, "--format", fmt], None))
    out.append(("roofline-qwen3-30b-a3b-a100-fp8.csv", ["roofline", "-m", "qwen3-30b-a3b", "--hardware", "a100-80gb", "--tp", "2", "--weight-dtype", "fp8", "--kv-dtype", "fp8", "--format", "csv"], None))
    out.append(("kv-llama-3.1-8b-a10g.csv", ["kv", "-m", "llama-3.1-8b", "-H", "a10g", "--context", "2048,8192", "--format", "csv"], None))
    out.append(("kv-gemma-2-9b-pp2.json", ["kv", "-m", "gemma-2-9b", "-H", "l40s", "--pp", "2", "--kv-dtype", "fp8", "--format", "json"], None))
    for w in RL:
        base = ["simulate", w, "-H", "h100-sxm", "-m", MODEL_OF[w], "--inference-replicas", "4", "--steps", "2"]
        if w == "reasoning-rl-olmo3-32b":
            base = ["simulate", w, "-H", "h100-sxm", "--tp", "8", "--inference-replicas", "2", "--steps", "1"]
        out.append((f"simulate-{w}.json", [*base, "--format", "json"], None))
        out.append((f"simulate-{w}-trajectories.jsonl", [*base, "--trajectories", "{out}"], "trajectories"))
    out.append(("simulate-agentic-async-k1.json", ["simulate", "agentic-tool-rl", "-H", "h100-sxm", "--inference-replicas", "4", "--steps", "3", "--mode", "async", "--max-staleness", "1", "--format", "json"], None))
    out.append(("simulate-agentic-sweep.json", ["simulate", "agentic-tool-rl", "-H", "h100-sxm", "--inference-replicas", "4", "--steps", "2", "--sweep-staleness", "0,1", "--format", "json"], None))
    out.append(("simulate-chat-serving.json", ["simulate", "chat-serving", "-H", "h100-sxm", "--inference-replicas", "1", "--requests", "3000", "--format", "json"], None))
    out.append(("simulate-rag-serving-records.csv", ["simulate", "rag-serving", "-H", "h100-sxm", "--inference-replicas", "2", "--requests", "500", "--records", "{out}"], "records.csv"))
    out.append(("simulate-distillation-static.json", ["simulate", "distillation", "-H", "h100-sxm", "--inference-replicas", "2", "--steps", "1", "--static-batching", "--format", "json"], None))
    for f in sorted((REPO / FIXTURES).glob("*.jsonl")):
        mapping = f.stem if f.stem in ("verl", "openrlhf", "areal") else "capplan"
        out.append((f"reconcile-{f.stem}.json", ["ledger", "reconcile", str(FIXTURES / f.name), "--mapping", mapping, "--format", "json"], None))
    out.append(("reconcile-clean-workload.csv", ["ledger", "reconcile", str(FIXTURES / "clean.jsonl"), "-w", "seed-replay-auto", "--format", "csv"], None))
    for fmt in ("json", "csv"):
        out.append((f"sweep-agentic.{fmt}", ["sweep", "agentic-tool-rl", "-H", "h100-sxm,h200", "--tp", "1,2", "--kv-dtype", "bf16,fp8", "--inference-gpus", "8,16", "--trainer-gpus", "4,8", "--conversations", "3000", "-o", "{out}"], "sweep." + fmt))
    return out


CASES = _cases()

NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
REL_TOL = 1e-9


def same_up_to_float_rounding(produced: str, golden: str) -> bool:
    """True when the texts are equal, or differ only in float digits beyond ``REL_TOL``."""
    if produced == golden:
        return True
    a, b = NUMBER.split(produced), NUMBER.split(golden)
    if a != b:
        return False
    for x, y in zip(NUMBER.findall(produced), NUMBER.findall(golden), strict=True):
        if x == y:
            continue
        if not ("." in x + y or "e" in (x + y).lower()):
            return False
        if not math.isclose(float(x), float(y), rel_tol=REL_TOL, abs_tol=1e-12):
            return False
    return True


def test_float_rounding_tolerance_is_narrow() -> None:
    """The tolerance forgives the 15th significant digit and nothing coarser, and never an integer."""
    assert same_up_to_float_rounding('{"x": 1.575193937895}', '{"x": 1.575193937807}')
    assert not same_up_to_float_rounding('{"x": 1.5751939}', '{"x": 1.5751940}')
    assert not same_up_to_float_rounding('{"n": 1000}', '{"n": 1001}')
    assert not same_up_to_float_rounding('{"x": 1.0, "y": 2}', '{"x": 1.0, "z": 2}')


@pytest.mark.parametrize("name,argv,outfile", CASES, ids=[c[0] for c in CASES])
def test_golden(name: str, argv: list[str], outfile: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    path = tmp_path / (outfile or "out")
    argv = [a.replace("{out}", str(path)) for a in argv]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code in (0, 1), (result.exit_code, result.output)
    produced = path.read_text() if outfile else result.stdout
    golden = GOLDEN / name
    if len(produced) > BIG:
        produced = f"sha256 {hashlib.sha256(produced.encode()).hexdigest()} bytes {len(produced.encode())}\n"
        golden = GOLDEN / f"{name}.sha256"
    if UPDATE:
        GOLDEN.mkdir(exist_ok=True)
        golden.write_text(produced)
    assert golden.exists(), f"no golden file {golden}; run with CAPPLAN_UPDATE_GOLDEN=1"
    assert same_up_to_float_rounding(produced, golden.read_text()), f"{name} differs from {golden}"
