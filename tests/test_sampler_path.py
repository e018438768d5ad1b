"""The sampler warm-up's memory peak by its top-k/top-p path (PyTorch's sort or FlashInfer's
kernels): the engine-profile terms, the KV calculator, ``capplan kv --sampler``, and the start-up
logs that say which path they ran."""

from __future__ import annotations

import csv
import re

import pytest
from typer.testing import CliRunner

from capplan.cli.app import app
from capplan.engine import load_engine
from capplan.errors import InputError
from capplan.hardware import load_hardware
from capplan.kv import GIB, KVInputs, activation_bytes_per_gpu, compute_kv
from capplan.modelspec import load_model_spec


@pytest.fixture(scope="module")
def v010():
    return load_engine("vllm-0.10")


def test_each_path_takes_its_own_bytes_per_entry(v010):
    """Qwen2-7B (vocabulary 152,064) at 256 sequences on one GPU, 64 batched tokens so the
    sampler sets the peak: PyTorch 32.68 B x 256 x 152,064 = 1.18 GiB; FlashInfer 5.96 B x ... =
    0.22 GiB; no path given is the profile's default (pytorch for vllm-0.10)."""
    spec = load_model_spec("qwen2-7b")
    m = v010.memory
    torch = activation_bytes_per_gpu(spec, 64, 256, 1, m, "pytorch")
    fi = activation_bytes_per_gpu(spec, 64, 256, 1, m, "flashinfer")
    assert torch == pytest.approx(m.sampler_bytes_per_seq_vocab * 256 * 152064)
    assert fi == pytest.approx(m.flashinfer_sampler_bytes_per_seq_vocab * 256 * 152064)
    assert round(torch / GIB, 2) == 1.18 and round(fi / GIB, 2) == 0.22
    assert activation_bytes_per_gpu(spec, 64, 256, 1, m) == torch


def test_a_flashinfer_log_is_reproduced(v010):
    """dennislee22's Qwen2-7B on 2 x A100-80GB at utilisation 0.5 logged 'Using FlashInfer for
    top-p & top-k sampling' and 1,192,160 KV tokens; the FlashInfer path is within 0.2% of it, the
    PyTorch path 0.93 GiB x 2 GPUs further off (more than 3% low)."""
    spec, hw = load_model_spec("qwen2-7b"), load_hardware("a100-80gb")
    base = dict(tp=2, gpu_mem_util=0.5, max_batched_tokens=2048, context=16384, engine=v010)
    fi = compute_kv(spec, hw, KVInputs(sampler="flashinfer", **base)).kv_capacity_tokens
    torch = compute_kv(spec, hw, KVInputs(sampler="pytorch", **base)).kv_capacity_tokens
    assert fi == pytest.approx(1192160, rel=2e-3)
    assert torch < 1192160 * 0.97


def test_an_unmeasured_flashinfer_path_is_refused():
    """vllm-0.19 has no FlashInfer sampler term: asking for that path names the profile and the
    way out, it does not price the PyTorch path instead."""
    assert load_engine("vllm-0.19").memory.flashinfer_sampler_bytes_per_seq_vocab is None
    with pytest.raises(InputError, match=r"engine profile vllm-0\.19 has no memory\.flashinfer_sampler_bytes_per_seq_vocab"):
        compute_kv(load_model_spec("qwen2-7b"), load_hardware("a100-80gb"), KVInputs(sampler="flashinfer", engine=load_engine("vllm-0.19")))


def test_the_kv_command_takes_the_path():
    """``capplan kv --sampler``: FlashInfer reserves less than PyTorch, so more KV; a bad value is
    a one-line error naming the flag and what is allowed."""
    args = ["kv", "-m", "qwen2-7b", "-H", "a100-80gb", "--engine", "vllm-0.10", "--gpu-memory-utilization", "0.5", "-f", "csv"]
    r_fi = CliRunner().invoke(app, args + ["--sampler", "flashinfer"])
    r_pt = CliRunner().invoke(app, args + ["--sampler", "pytorch"])
    assert r_fi.exit_code == 0 and r_pt.exit_code == 0, r_fi.output + r_pt.output
    cap = lambda out: float(next(csv.DictReader(out.splitlines()))["kv_capacity_tokens"])  # noqa: E731
    assert cap(r_fi.output) > cap(r_pt.output)
    bad = CliRunner().invoke(app, args + ["--sampler", "triton"])
    assert bad.exit_code != 0 and "--sampler triton" in bad.output and "pytorch, flashinfer" in bad.output
    assert "Traceback" not in bad.output


def test_the_corpus_sampler_column_follows_the_logs():
    """``validation/kv_capacity.csv``'s ``sampler`` column is ``flashinfer`` exactly where the
    notes say the log ran FlashInfer's sampler, ``pytorch`` where it fell back to PyTorch's."""
    from capplan.accuracy.corpus import validation_dir

    for r in csv.DictReader((validation_dir() / "kv_capacity.csv").open()):
        notes = r["notes"]
        if re.search(r"FlashInfer (top-k/top-p )?sampler in use", notes):
            assert r["sampler"] == "flashinfer", r["id"]
        elif "Falling back to the PyTorch-native implementation" in notes:
            assert r["sampler"] == "pytorch", r["id"]
        else:
            assert r["sampler"] == "", r["id"]


def test_vllm_010_logs_within_two_percent():
    """The vllm-0.10 profile (sampler terms per path, fitted with ``refit --memory vllm-0.10``)
    reproduces every predicted vLLM 0.9-0.11.0 start-up log row within 2%."""
    from capplan.accuracy import run_accuracy
    from capplan.accuracy.corpus import load_corpus
    from capplan.accuracy.report import default_engines

    rows = [r for r in load_corpus() if r.kind == "kv"]
    report = run_accuracy(rows, engines=default_engines())
    mine = [r for r in report.rows if r.engine_profile == "vllm-0.10" and r.predicted is not None]
    assert len(mine) >= 12
    assert max(abs(r.signed_error) for r in mine) < 0.02


def test_the_kv_table_says_which_sampler_path_sized_the_peak():
    """The table's header names the sampler path the activation peak was sized with (the given
    one, else the engine profile's default), and leaves it out when ``--activation-gib`` gives
    the peak."""
    base = ["kv", "-m", "qwen2-7b", "-H", "a100-80gb", "--engine", "vllm-0.10"]
    wide = {"COLUMNS": "200"}
    assert "sampler warm-up pytorch." in CliRunner().invoke(app, base, env=wide).output
    assert "sampler warm-up flashinfer." in CliRunner().invoke(app, base + ["--sampler", "flashinfer"], env=wide).output
    assert "sampler warm-up" not in CliRunner().invoke(app, base + ["--activation-gib", "1.0"], env=wide).output


def test_the_memory_refit_fits_one_term_per_sampler_path():
    """``python -m capplan.accuracy.refit --memory vllm-0.10`` (nothing written here): both sampler
    terms are fitted, on the fit rows only, and the fit reproduces the bundled profile's values
    (it is how they were made); a profile without fitted memory terms is refused by name."""
    from capplan.accuracy.refit import fit_profile_memory

    out = fit_profile_memory("vllm-0.10", write=False)
    m = load_engine("vllm-0.10").memory
    assert out["terms"]["sampler_bytes_per_seq_vocab"] == pytest.approx(m.sampler_bytes_per_seq_vocab, rel=1e-3)
    assert out["terms"]["flashinfer_sampler_bytes_per_seq_vocab"] == pytest.approx(m.flashinfer_sampler_bytes_per_seq_vocab, rel=1e-3)
    assert out["after"] < 0.005 and len(out["rows"]) >= 12
    with pytest.raises(ValueError, match="no bundled profile 'vllm-latest' with fitted memory terms"):
        fit_profile_memory("vllm-latest", write=False)
