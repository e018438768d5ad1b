"""Weight-only routed experts: experts whose weights are narrower than the 16-bit unit they run on
(vLLM's W4A16 MXFP4 MoE for gpt-oss on Hopper) stream their bytes and multiply at
``weight_only_moe_efficiency`` of the engine's bandwidth and GEMM efficiency."""

from __future__ import annotations

import pytest

from capplan.engine import list_engines, load_engine
from capplan.hardware import load_hardware
from capplan.modelspec import load_model_spec
from capplan.roofline import RooflineInputs, _terms, decode_step, prefill_step, weight_only_experts


def _engine(efficiency: float):
    base = load_engine("vllm-0.19")
    return base.model_copy(update={"time": base.time.model_copy(update={"weight_only_moe_efficiency": efficiency}), "hardware": {}})


MXFP4_ON_BF16 = dict(weight_dtype="bf16", expert_dtype="mxfp4", gemm_dtype="bf16")


def test_decode_pays_the_touched_experts_bytes_once_more_at_half_efficiency():
    """gpt-oss-120b (36 MoE layers, 128 experts, top-4) on one H100, one decode token: the step
    touches ``k / E = 4 / 128`` of the routed expert bytes; at efficiency 0.5 they take twice as
    long to stream, so the memory time grows by exactly ``routed_bytes x 4/128 / (HBM x
    bandwidth_efficiency)`` and nothing else changes."""
    spec, h100 = load_model_spec("gpt-oss-120b"), load_hardware("h100-sxm")
    full, half = _engine(1.0), _engine(0.5)
    a = decode_step(spec, h100, RooflineInputs(engine=full, **MXFP4_ON_BF16), batch=1, context=400)
    b = decode_step(spec, h100, RooflineInputs(engine=half, **MXFP4_ON_BF16), batch=1, context=400)
    routed = _terms(spec, "bf16", "bf16", 1, expert_dtype="mxfp4")["routed_bytes"]
    expected = routed * 4 / 128 / (h100.hbm_bandwidth_bytes_per_s * full.time_on("h100-sxm").bandwidth_efficiency)
    assert float(b.memory_time_s - a.memory_time_s) == pytest.approx(expected, rel=1e-9)
    assert float(b.bytes) == float(a.bytes)  # the bytes are the same; only their rate changes


def test_prefill_multiplies_the_routed_flops_at_the_lower_efficiency():
    """A compute-bound 8,192-token gpt-oss-120b prefill: at efficiency 0.5 the routed experts'
    GEMMs take twice as long, so the compute time grows by the routed FLOPs' time at the 16-bit
    GEMM rate (after the MoE grouped-GEMM term) and the step gets slower."""
    spec, h100 = load_model_spec("gpt-oss-120b"), load_hardware("h100-sxm")
    a = prefill_step(spec, h100, RooflineInputs(engine=_engine(1.0), **MXFP4_ON_BF16), prompt=8192)
    b = prefill_step(spec, h100, RooflineInputs(engine=_engine(0.5), **MXFP4_ON_BF16), prompt=8192)
    t = _terms(spec, "bf16", "bf16", 1, expert_dtype="mxfp4")
    terms = _engine(1.0).time_on("h100-sxm")
    routed_time = t["routed_flops_per_token"] * 8192 / terms.moe_gemm_efficiency / (h100.peak_flops("bf16") * terms.gemm_efficiency)
    assert a.bound == b.bound == "compute"
    assert float(b.compute_time_s - a.compute_time_s) == pytest.approx(routed_time, rel=1e-9)


@pytest.mark.parametrize("model, hardware, kwargs", [
    ("gpt-oss-120b", "b200", dict(weight_dtype="bf16", expert_dtype="mxfp4")),  # FP4 unit: not weight-only
    ("gpt-oss-120b", "h100-sxm", dict(weight_dtype="bf16")),  # 16-bit experts
    ("llama-3.1-8b", "h100-sxm", dict(weight_dtype="int4", gemm_dtype="bf16")),  # dense: no routed experts
])
def test_no_effect_outside_weight_only_experts(model, hardware, kwargs):
    """The term prices only routed experts that dequantise inside a 16-bit GEMM: experts on an FP4
    unit, 16-bit experts and a dense W4A16 model step exactly as they did."""
    spec, hw = load_model_spec(model), load_hardware(hardware)
    steps = [decode_step(spec, hw, RooflineInputs(engine=_engine(e), **kwargs), batch=8, context=1024).step_time_s for e in (1.0, 0.3)]
    assert steps[0] == steps[1]
    assert weight_only_experts(spec, hw, RooflineInputs(**kwargs)) is False


def test_bundled_profiles_share_the_fitted_value_and_its_rows():
    """Every bundled profile takes the value fitted on the gpt-oss rows (vLLM on H100, MXFP4
    experts as W4A16), records those rows, and none of them is held out."""
    from capplan.accuracy.corpus import load_corpus

    held = {r.id for r in load_corpus() if r.held_out}
    values = set()
    for name in list_engines():
        engine = load_engine(name)
        values.add(engine.time.weight_only_moe_efficiency)
        ids = engine.fitted_on["time.weight_only_moe_efficiency"]
        assert ids and all("gpt-oss" in i or "gpt_oss" in i for i in ids)
        assert not held & set(ids)
    assert len(values) == 1 and 0.2 < values.pop() < 1.0


def test_the_fit_reproduces_the_bundled_value():
    """``python -m capplan.accuracy.refit --unit weight-only`` on the shipped corpus and profiles
    gives back the bundled value and rows (the profiles were written from this fit)."""
    from capplan.accuracy.refit import fit_unit_efficiency

    value, ids = fit_unit_efficiency("weight-only")
    engine = load_engine("vllm-0.19")
    assert value == engine.time.weight_only_moe_efficiency
    assert ids == engine.fitted_on["time.weight_only_moe_efficiency"]
    with pytest.raises(ValueError, match="unknown unit 'int3'"):
        fit_unit_efficiency("int3")
