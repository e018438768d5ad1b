"""A routed expert's GEMM saturates on its own positions (``TimeTerms.gemm_half_tokens``).

A step of ``T`` positions runs a dense weight GEMM at ``g T / (T + h)`` of peak: ``h`` extra
positions' worth of work. A routed expert sees ``T dp k / E`` of them (``k`` of ``E`` experts per
token, every data-parallel rank's positions), so the routed part pays ``h E / (k dp)`` extra
positions' worth: ``E / (k dp) - 1`` more than the dense form.
"""

from __future__ import annotations

import pytest

from capplan.engine import load_engine
from capplan.hardware import load_hardware
from capplan.modelspec import load_model_spec
from capplan.roofline import RooflineInputs, step_pricer

H100 = load_hardware("h100-sxm")


def _compute_s(model: str, h: float, new: float, **layout: object) -> tuple[float, dict]:
    base = load_engine("vllm-0.19")
    engine = base.model_copy(update={"time": base.time.model_copy(update={"gemm_half_tokens": h})})
    p = step_pricer(load_model_spec(model), H100, RooflineInputs(engine=engine, **layout))
    cost = p.step(new_tokens=new, logits_tokens=0, attention_pairs=0, kv_read_tokens=0, sequences=1)
    return float(cost.compute_time_s), p._t


@pytest.mark.parametrize("new", [512.0, 8192.0])
def test_routed_experts_pay_e_over_k_times_the_saturation(new):
    """Qwen3-30B-A3B (128 experts, 8 per token, E / k = 16): with ``h`` = 200 the compute grows by
    ``(F_gemm + 15 F_routed) x 200`` FLOPs at the GEMM rate, whatever ``T`` (the extra is fixed)."""
    base, t = _compute_s("qwen3-30b-a3b", 0.0, new)
    sat, _ = _compute_s("qwen3-30b-a3b", 200.0, new)
    engine = load_engine("vllm-0.19")
    rate = H100.peak_tflops["bf16"] * 1e12 * engine.time_on(H100.name).gemm_efficiency
    expected = (t["gemm_flops_per_token"] + 15.0 * t["routed_flops_per_token"]) * 200.0 / rate
    assert sat - base == pytest.approx(expected, rel=1e-9)
    assert t["expert_group_spread"] == 15.0


def test_a_dense_model_keeps_h_extra_positions():
    """Llama-3.1-8B has no routed experts: ``F_gemm x h`` extra, as before."""
    base, t = _compute_s("llama-3.1-8b", 0.0, 1024.0)
    sat, _ = _compute_s("llama-3.1-8b", 200.0, 1024.0)
    rate = H100.peak_tflops["bf16"] * 1e12 * load_engine("vllm-0.19").time_on(H100.name).gemm_efficiency
    assert t["expert_group_spread"] == 0.0
    assert sat - base == pytest.approx(t["gemm_flops_per_token"] * 200.0 / rate, rel=1e-9)


def test_data_parallel_ranks_fill_the_experts():
    """DeepSeek-V3 (256 experts, 8 per token) with 32 attention ranks on EP32: each expert sees
    every rank's positions, 256 / (8 x 32) = 1, so the routed GEMMs saturate as the dense ones."""
    _, t = _compute_s("deepseek-v3", 0.0, 64.0, ep=32, dp=32, weight_dtype="fp8")
    assert t["expert_group_spread"] == pytest.approx(0.0)
    _, t1 = _compute_s("deepseek-v3", 0.0, 64.0, tp=8, weight_dtype="fp8")
    assert t1["expert_group_spread"] == pytest.approx(31.0)
