"""A decode kernel that reads a GQA group's K/V once per query head (``TimeTerms.gqa_kv_reread``).

TensorRT-LLM before its XQA kernel (releases up to 0.6) decoded grouped-query attention with the
masked multi-head attention kernel, one query head per thread block: each K/V head was read from
HBM once for every query head it serves. NVIDIA's XQA blog (docs/source/blogs/XQA-kernel.md @
585c756) measured Llama-70B FP8 on one H200 at 128/2048 at 1,227 tok/s/GPU before the kernel and
2,941 after. The ``trtllm-0.6`` profile prices that with ``gqa_kv_reread: 1``.
"""

from __future__ import annotations

import pytest

from capplan.accuracy.corpus import CorpusRow
from capplan.accuracy.predict import prepare_serving
from capplan.accuracy.refit import PROFILES, TRTLLM_PRE_XQA_SOURCE
from capplan.accuracy.report import default_engines, run_accuracy, time_profile_name
from capplan.engine import load_engine
from capplan.hardware import load_hardware
from capplan.modelspec import load_model_spec
from capplan.roofline import RooflineInputs, step_pricer

H100 = load_hardware("h100-sxm")
LLAMA70 = load_model_spec("llama-3.1-70b")  # 64 query heads, 8 K/V heads
LLAMA2_7B = load_model_spec("llama-2-7b")  # multi-head: 32 and 32


def _reread(share: float):
    trt = load_engine("trtllm")
    return trt.model_copy(update={"time": trt.time.model_copy(update={"gqa_kv_reread": share})})


def _decode(spec, engine, tp: int, batch: int = 64, context: int = 2_000):
    return step_pricer(spec, H100, RooflineInputs(tp=tp, weight_dtype="fp8", kv_dtype="fp8", engine=engine)).decode(batch, context)


@pytest.mark.parametrize(("tp", "group"), [(1, 8), (2, 8), (8, 8), (16, 4)])
def test_cached_kv_bytes_grow_by_the_group_size(tp, group):
    """Llama-3.1-70B: 64 query heads share 8 K/V heads, 8 per group on every GPU up to TP 8; at
    TP 16 a K/V head is replicated on two GPUs, each holding 4 query heads of its group, so each
    GPU reads it 4 times. Reading once per query head multiplies the cached-KV bytes by that."""
    once, per_head = _decode(LLAMA70, _reread(0.0), tp), _decode(LLAMA70, _reread(1.0), tp)
    assert per_head.kv_read_bytes == pytest.approx(group * once.kv_read_bytes, rel=1e-12)
    assert per_head.weight_bytes == once.weight_bytes and per_head.kv_write_bytes == once.kv_write_bytes
    half = _decode(LLAMA70, _reread(0.5), tp)
    assert half.kv_read_bytes == pytest.approx((1 + (group - 1) * 0.5) * once.kv_read_bytes, rel=1e-12)


def test_multi_head_attention_is_unaffected():
    """Llama-2-7B has one query head per K/V head: nothing is read twice."""
    assert _decode(LLAMA2_7B, _reread(1.0), 1).step_time_s == _decode(LLAMA2_7B, _reread(0.0), 1).step_time_s


def test_scalar_and_array_paths_agree():
    """The pricer's scalar path and its numpy path give the same step with the term on."""
    pricer = step_pricer(LLAMA70, H100, RooflineInputs(tp=2, engine=_reread(1.0)))
    scalar = pricer.decode(128, 1_500)
    array = pricer.decode([128.0], [1_500.0])
    assert float(array.step_time_s[0]) == pytest.approx(scalar.step_time_s, rel=1e-12)
    assert float(array.kv_read_bytes[0]) == pytest.approx(scalar.kv_read_bytes, rel=1e-12)


def test_the_default_and_the_current_profiles_share_loads():
    """Every bundled profile but trtllm-0.6 reads a K/V head once per group."""
    assert load_engine("trtllm-0.6").time.gqa_kv_reread == 1.0
    assert load_engine("trtllm-0.6").sources["time.gqa_kv_reread"] == TRTLLM_PRE_XQA_SOURCE
    for p in PROFILES:
        if p.name != "trtllm-0.6":
            assert load_engine(p.name).time.gqa_kv_reread == 0.0, p.name


def _row(version: str | None, engine: str = "TensorRT-LLM (static batching)") -> CorpusRow:
    fields = {"engine": engine, "engine_version": version, "model": "llama-2-70b", "hardware": "h100-sxm",
              "num_gpus": "2", "tp": "2", "weight_dtype": "fp8", "kv_dtype": "fp8", "scenario": "static_batch",
              "batch": "64", "input_tokens": "2048", "output_tokens": "2048", "per_gpu": "true"}
    return CorpusRow(id="t", kind="serving", source="s", citation="c", metric="output_tokens_per_s",
                     unit="tokens/s", measured=547.0, held_out=True, fields=fields)


@pytest.mark.parametrize(("version", "profile"), [
    ("0.5", "trtllm-0.6"), ("0.6.1", "trtllm-0.6"), ("0.5.0 (TensorRT 9.1.0.4)", "trtllm-0.6"),
    ("0.7a (pre-release)", "trtllm"), ("0.14.0", "trtllm"), ("1.0", "trtllm"), (None, "trtllm"),
])
def test_rows_take_the_profile_of_their_release(version, profile):
    """A TensorRT-LLM row of a release up to 0.6 is priced by trtllm-0.6; a later or unstated
    release by the family profile; another family is never moved."""
    assert time_profile_name(_row(version), "trtllm") == profile
    assert time_profile_name(_row(version), "vllm") == "vllm"


def test_the_published_row_it_was_built_for():
    """TensorRT-LLM 0.6.1, Llama-2-70B FP8 on 2 x H100, batch 64, 2048/2048 (performance.md @
    138f96d): 547 out tok/s/GPU measured. Sharing the group's loads prices +76% (the family
    profile); reading once per query head -30%: the pre-XQA profile is the one inside 2x."""
    report = run_accuracy([_row("0.6.1")], default_engines())
    (r,) = report.rows
    assert r.engine_profile == "trtllm-0.6"
    assert -0.45 < r.signed_error < -0.15
    family = run_accuracy([_row("0.6.1")], {"trtllm": load_engine("trtllm"), "trtllm-0.6": load_engine("trtllm")})
    assert family.rows[0].signed_error > 0.5


def test_a_fit_keeps_the_release_term():
    """A prepared row keeps its release's term when a fit prices it at another profile's terms."""
    prepared = prepare_serving(_row("0.6.1"), load_engine("trtllm-0.6"))
    assert prepared.pinned_time == {"gqa_kv_reread": 1.0}
    assert prepared.evaluate(load_engine("trtllm")) == pytest.approx(prepared.evaluate(), rel=1e-12)


def test_the_roofline_command_says_when_kv_is_read_per_query_head():
    """``capplan roofline --engine trtllm-0.6`` on Llama-3.1-70B at TP 2 says each K/V head is read
    8 times a step (64 query heads on 8 K/V heads); the family profile says nothing of it."""
    from typer.testing import CliRunner

    from capplan.cli.app import app

    args = ["roofline", "--model", "llama-3.1-70b", "--hardware", "h100-sxm", "--tp", "2", "--batch", "8"]
    old = CliRunner().invoke(app, [*args, "--engine", "trtllm-0.6"], env={"COLUMNS": "200"})
    assert old.exit_code == 0, old.output
    assert "reads each K/V head 8 times a step (8 query heads share one on a GPU; gqa_kv_reread 1" in old.output
    new = CliRunner().invoke(app, [*args, "--engine", "trtllm"], env={"COLUMNS": "200"})
    assert new.exit_code == 0 and "K/V head" not in new.output
