"""Engine features: expert parallelism, speculative decoding, disaggregation, FP8/FP4/INT4 and CPU KV offload.

The hypothesis properties are the issue's sanity properties: speculative decoding never helps
when nothing is accepted; once the verify step is compute-bound a larger batch never raises the
speed-up; expert parallelism never raises the expert weights a GPU holds; an FP8 KV cache holds
twice the positions of a BF16 one, less its scale bytes.
"""

from __future__ import annotations

import math
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from capplan.errors import InputError
from capplan.hardware import DtypeFallbackWarning, load_hardware
from capplan.kv import KVInputs, compute_kv, kv_bytes_per_token, routed_expert_bytes_per_gpu, weights_bytes_per_gpu
from capplan.modelspec import load_model_spec
from capplan.roofline import RooflineInputs, StepPricer, decode_step
from capplan.speculative import SpecInputs, expected_tokens_per_step, spec_pricers, spec_step
from capplan.units import WEIGHT_DTYPE_BYTES, kv_element_bytes

DENSE = ["llama-3.1-8b", "qwen3-8b", "mistral-7b", "gemma-2-9b"]
MOE = ["qwen3-30b-a3b", "deepseek-v3", "gpt-oss-20b", "mixtral-8x7b", "deepseek-v2-lite"]
HW = ["h100-sxm", "a100-80gb", "l40s", "b200", "mi300x"]
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ------------------------------------------------------------------------------ hypothesis


@SETTINGS
@given(
    model=st.sampled_from(DENSE + ["qwen3-30b-a3b"]), hw=st.sampled_from(HW), method=st.sampled_from(["eagle", "eagle3", "ngram"]),
    k=st.integers(1, 8), batch=st.integers(1, 2048), context=st.integers(0, 32768),
)
def test_speculation_never_helps_at_zero_acceptance(model, hw, method, k, batch, context):
    """At ``a = 0`` a verify step yields one token (the target's own) and costs at least a decode
    step (more positions, the same weights), so the speed-up is at most 1."""
    s = SpecInputs(method=method, num_speculative_tokens=k, acceptance_rate=0.0)
    t, d = spec_pricers(load_model_spec(model), load_hardware(hw), RooflineInputs(), s)
    r = spec_step(t, d, s, batch, context)
    assert r.tokens_per_step == 1.0
    assert r.speedup <= 1.0 + 1e-12


@SETTINGS
@given(
    model=st.sampled_from(DENSE), hw=st.sampled_from(HW), method=st.sampled_from(["eagle", "eagle3", "ngram"]),
    k=st.integers(1, 8), a=st.floats(0.0, 1.0), batch=st.integers(1, 4096), more=st.integers(1, 4096),
    context=st.integers(0, 32768),
)
def test_speedup_shrinks_with_batch_once_verify_is_compute_bound(model, hw, method, k, a, batch, more, context):
    """Once the verify step is compute-bound its ``k + 1`` positions per sequence cost ``k + 1``
    times a decode step's GEMM FLOPs, so adding sequences never lowers the verify step's cost
    against a plain decode step's. The whole speed-up can still rise by a hair: the drafter's ``k``
    steps each pay the engine's fixed host time and read the drafter's weights, which spread over
    more sequences (Qwen3-8B, EAGLE-3 with 8 tokens on B200 at 2,889 cached positions: 82.7 ->
    81.0 us of drafting per sequence from 2,794 to 6,256 sequences, speed-up 1.0847 -> 1.0875),
    never by 1% in a 3,000-case search (at most 0.26%). (While the verify step is memory-bound
    the speed-up stays nearly flat and can rise at long contexts, where the drafter reads far less
    KV than the target: docs/features.md.)"""
    s = SpecInputs(method=method, num_speculative_tokens=k, acceptance_rate=a)
    t, d = spec_pricers(load_model_spec(model), load_hardware(hw), RooflineInputs(), s)
    r1 = spec_step(t, d, s, batch, context)
    if r1.verify_bound != "compute":
        return
    r2 = spec_step(t, d, s, batch + more, context)
    assert r2.decode_step_s / r2.verify_step_s <= r1.decode_step_s / r1.verify_step_s * (1 + 1e-9)
    assert r2.speedup <= r1.speedup * 1.01


@SETTINGS
@given(model=st.sampled_from(MOE), tp=st.sampled_from([1, 2, 4, 8]), dp=st.sampled_from([1, 2, 4, 8, 16]),
       dtype=st.sampled_from(["bf16", "fp8", "int4", "nvfp4"]))
def test_expert_parallelism_never_raises_expert_weights_per_gpu(model, tp, dp, dtype):
    """``ep = tp x dp`` whole experts per GPU: ``W / (tp dp) <= W / tp``, and exactly what
    tensor parallelism over the same ``tp x dp`` GPUs would hold."""
    spec = load_model_spec(model)
    ep = tp * dp
    if spec.num_attention_heads % tp or spec.moe.num_experts % ep or (spec.mla is None and spec.num_kv_heads % tp and tp % spec.num_kv_heads):
        return
    with_ep = routed_expert_bytes_per_gpu(spec, dtype, tp, ep=ep, dp=dp)
    assert with_ep <= routed_expert_bytes_per_gpu(spec, dtype, tp) * (1 + 1e-12)
    if spec.num_attention_heads % ep == 0:
        assert with_ep == pytest.approx(routed_expert_bytes_per_gpu(spec, dtype, ep))
    assert weights_bytes_per_gpu(spec, dtype, tp, ep=ep, dp=dp) <= weights_bytes_per_gpu(spec, dtype, tp) * (1 + 1e-12)


@SETTINGS
@given(model=st.sampled_from(DENSE + MOE), scale=st.sampled_from(["tensor", "token_head"]), tp=st.sampled_from([1, 2, 8]))
def test_fp8_kv_is_half_of_bf16_up_to_its_scales(model, scale, tp):
    """Per cached position fp8 takes half of bf16's bytes times ``1 + 4 / (head_dim)`` with
    per-token-head fp32 scales (exactly half with per-tensor scales)."""
    spec = load_model_spec(model)
    if spec.num_attention_heads % tp or (spec.mla is None and spec.num_kv_heads % tp and tp % spec.num_kv_heads):
        return
    width = spec.head_dim if spec.mla is None else spec.mla.kv_lora_rank + spec.mla.qk_rope_head_dim
    overhead = 1.0 + (4.0 / width if scale == "token_head" else 0.0)
    b16 = kv_bytes_per_token(spec, "bf16", tp)[1]
    b8 = kv_bytes_per_token(spec, "fp8", tp, 1, scale)[1]
    assert b8 == pytest.approx(b16 / 2 * overhead)


@SETTINGS
@given(model=st.sampled_from(DENSE + ["qwen3-30b-a3b"]), hw=st.sampled_from(["h100-sxm", "h200", "a100-80gb", "b200"]),
       scale=st.sampled_from(["tensor", "token_head"]))
def test_fp8_kv_doubles_capacity_up_to_the_scale_overhead(model, hw, scale):
    """The same budget (weights, activations unchanged) holds ``2 / overhead`` times the
    positions, to within one paged block of rounding."""
    spec, h = load_model_spec(model), load_hardware(hw)
    b16 = compute_kv(spec, h, KVInputs(kv_dtype="bf16"))
    b8 = compute_kv(spec, h, KVInputs(kv_dtype="fp8", kv_scale=scale))
    assert b8.kv_budget_gib_per_gpu == b16.kv_budget_gib_per_gpu
    ratio = b16.kv_bytes_per_token_per_gpu / b8.kv_bytes_per_token_per_gpu
    expected = b16.kv_capacity_tokens * ratio
    assert expected - 2 * b8.block_size * ratio <= b8.kv_capacity_tokens <= expected + 2 * b8.block_size * ratio
    assert ratio <= 2.0 + 1e-12


# ------------------------------------------------------------------------------ units and dtypes


def test_fp4_weight_bytes_include_block_scales():
    """NVFP4: 4 bits + one E4M3 byte per 16 = 0.5625 B; MXFP4: one E8M0 byte per 32 = 0.53125 B;
    AWQ int4: one 16-bit scale per 128 = 0.515625 B."""
    assert WEIGHT_DTYPE_BYTES["nvfp4"] == 0.5625
    assert WEIGHT_DTYPE_BYTES["mxfp4"] == 0.53125
    assert WEIGHT_DTYPE_BYTES["int4"] == 0.515625


@pytest.mark.parametrize("dtype,scale,expected", [("fp8", "tensor", 1), ("fp8", "token_head", 1 + 4 / 128),
                                                   ("int4", "token_head", 0.5 + 4 / 128), ("bf16", "token_head", 2)])
def test_kv_element_bytes(dtype, scale, expected):
    assert kv_element_bytes(dtype, 128, scale) == expected


def test_gpt_oss_mxfp4_experts_beside_bf16_attention():
    """gpt-oss-20b with mxfp4 experts: 24 layers x 32 experts x 3 x 2880 x 2880 = 19.11 B routed
    weights at 0.53125 bytes plus the other 1.80 B at 2 bytes = 13.75 GB = 12.80 GiB per GPU,
    against 20.91 B x 2 = 38.94 GiB in bf16."""
    spec = load_model_spec("gpt-oss-20b")
    mixed = weights_bytes_per_gpu(spec, "bf16", expert_dtype="mxfp4") / 2**30
    assert round(mixed, 2) == 12.80
    assert round(weights_bytes_per_gpu(spec, "bf16") / 2**30, 2) == 38.94


# ------------------------------------------------------------------------------ hardware support


def test_fp4_weights_on_hopper_are_refused_with_the_remedy():
    with pytest.raises(InputError, match=r"--weight-dtype nvfp4: h100-sxm has no FP4 tensor unit .* --gemm-dtype bf16"):
        StepPricer(load_model_spec("llama-3.1-8b"), load_hardware("h100-sxm"), RooflineInputs(weight_dtype="nvfp4"))


def test_fp4_weights_as_weight_only_kernels_on_hopper_run_in_bf16():
    """With ``--gemm-dtype bf16`` the decoder weights are read at 0.5625 bytes (a decode step reads
    the resident weights but the input embedding, whose rows it gathers: ``V d x 2`` bytes) and
    multiplied on the bf16 unit."""
    spec, h100 = load_model_spec("llama-3.1-8b"), load_hardware("h100-sxm")
    s = decode_step(spec, h100, RooflineInputs(weight_dtype="nvfp4", gemm_dtype="bf16"), 1, 0)
    assert s.weight_bytes == pytest.approx(weights_bytes_per_gpu(spec, "nvfp4") - spec.vocab_size * spec.hidden_size * 2)
    assert RooflineInputs(weight_dtype="nvfp4", gemm_dtype="bf16").resolved(h100).gemm_dtype == "bf16"


def test_fp4_runs_on_the_fp4_unit_of_blackwell():
    assert RooflineInputs(weight_dtype="mxfp4").resolved(load_hardware("b200")).gemm_dtype == "fp4"
    assert load_hardware("b200").dtype_support()["nvfp4"] == "full rate (fp4)"


def test_fp8_on_ampere_warns_that_it_falls_back():
    with pytest.warns(DtypeFallbackWarning, match="a100-80gb has no fp8 tensor unit"):
        load_hardware("a100-80gb").gemm_unit("fp8")


def test_int4_weight_only_does_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_hardware("h100-sxm").gemm_unit("int4") == "bf16"


# ------------------------------------------------------------------------------ expert parallelism


@pytest.mark.parametrize(
    "model,kw,message",
    [
        ("deepseek-v2-lite", dict(tp=1, dp=3, ep=3), r"--ep 3: deepseek-v2-lite has 64 routed experts per MoE layer, which 3 does not divide"),
        ("deepseek-v2-lite", dict(tp=1, ep=3), r"--ep 3: deepseek-v2-lite has 64 routed experts"),
        ("llama-3.1-8b", dict(ep=2), r"--ep 2: llama-3.1-8b is a dense model"),
        ("qwen3-30b-a3b", dict(tp=2, ep=8, dp=2), r"--ep 8: expert parallelism spans every GPU of the instance, --tp x --dp = 2 x 2 = 4"),
        ("qwen3-30b-a3b", dict(tp=1, dp=4), r"--dp 4: data-parallel attention with a MoE model .* give --ep 4"),
        ("qwen3-30b-a3b", dict(redundant_experts=8), r"--redundant-experts 8: .* give --ep > 1"),
    ],
)
def test_bad_expert_layouts_are_one_line_errors(model, kw, message):
    with pytest.raises(InputError, match=message):
        compute_kv(load_model_spec(model), load_hardware("h200"), KVInputs(**kw))


def test_redundant_experts_make_ep72_possible():
    """256 experts do not split over 72 GPUs; 256 + 32 replicas do (LMSYS's EP72), 4 per GPU."""
    spec = load_model_spec("deepseek-v3")
    with pytest.raises(InputError):
        routed_expert_bytes_per_gpu(spec, "fp8", 1, ep=72, dp=72)
    b = routed_expert_bytes_per_gpu(spec, "fp8", 1, ep=72, dp=72, redundant_experts=32)
    assert b == pytest.approx(653_908_770_816 / 256 * 4)


def test_distinct_experts_count_every_data_parallel_rank():
    """The MoE layers of a step see all ``dp`` ranks' tokens: one rank's decode of 1 sequence at
    dp 16 touches as many experts as 16 sequences at dp 1, ``E (1 - (1 - k/E)^16)``."""
    spec, h = load_model_spec("deepseek-v3"), load_hardware("h200")
    ep16 = StepPricer(spec, h, RooflineInputs(weight_dtype="fp8", ep=16))
    q = 1 - 8 / 256
    touched = ep16._t["routed_bytes"] * (1 - q**16)
    one = ep16.decode(1, 0)
    assert one.weight_bytes == pytest.approx(ep16._t["fixed_weight_bytes"] + touched + ep16._t["head_bytes"])


def test_alltoall_is_zero_without_expert_parallelism_and_hidden_by_two_batch_overlap():
    spec, h = load_model_spec("deepseek-v3"), load_hardware("h200")
    plain = decode_step(spec, h, RooflineInputs(tp=8, weight_dtype="fp8"), 64, 2048)
    assert plain.alltoall_time_s == 0.0
    ep = decode_step(spec, h, RooflineInputs(weight_dtype="fp8", ep=16), 64, 2048)
    tbo = decode_step(spec, h, RooflineInputs(weight_dtype="fp8", ep=16, two_batch_overlap=True), 64, 2048)
    assert ep.alltoall_time_s > 0
    assert tbo.comm_time_s < ep.comm_time_s


def test_low_latency_alltoall_over_the_nic_for_a_decode_step():
    """EP16 on two 8-GPU H200 nodes, one rank decoding 128 sequences: low-latency kernels send
    the 8 copies of each token over the NIC, fp8 (+ scales) out and bf16 back:
    ``128 x 58 x 8 x 7168 x (1 + 4/128 + 2) / (50e9 x 0.96)`` plus ``2 x 58`` latencies."""
    spec, h = load_model_spec("deepseek-v3"), load_hardware("h200")
    eng = RooflineInputs().profile()
    s = decode_step(spec, h, RooflineInputs(weight_dtype="fp8", ep=16), 128, 1024)
    t = eng.time_on("h200")
    expected = 128 * 58 * 8 * 7168 * (1 + 4 / 128 + 2) * t.moe_load_imbalance / (50e9 * t.alltoall_efficiency) + 2 * 58 * t.allreduce_latency_us * 1e-6
    assert s.alltoall_time_s == pytest.approx(expected)


# ------------------------------------------------------------------------------ speculative decoding


@pytest.mark.parametrize("k,a,expected", [(1, 0.5, 1.5), (3, 0.0, 1.0), (3, 1.0, 4.0), (3, 0.7, 2.533)])
def test_expected_tokens_per_verify_step(k, a, expected):
    """``(1 - a^(k+1)) / (1 - a)``: k = 3, a = 0.7 gives 1 + 0.7 + 0.49 + 0.343 = 2.533."""
    assert expected_tokens_per_step(k, a) == pytest.approx(expected)


@pytest.mark.parametrize("kw,message", [
    (dict(method="eagle3", num_speculative_tokens=0, acceptance_rate=0.5), "--spec-tokens 0: must be in [1, 64]"),
    (dict(method="eagle3", num_speculative_tokens=3), "give exactly one of --acceptance-rate"),
    (dict(method="eagle3", num_speculative_tokens=3, acceptance_rate=1.5), "--acceptance-rate 1.5: must be in [0, 1]"),
    (dict(method="draft", num_speculative_tokens=3, acceptance_rate=0.5), "--spec-method draft needs --draft-model"),
    (dict(method="eagle", num_speculative_tokens=2, acceptance_length=4.0), "--acceptance-length 4: a verify step yields at most --spec-tokens + 1 = 3"),
])
def test_bad_speculative_settings(kw, message):
    with pytest.raises(InputError) as info:
        SpecInputs(**kw)
    assert message in str(info.value)


def test_mtp_needs_a_checkpoint_with_an_mtp_module():
    s = SpecInputs(method="mtp", num_speculative_tokens=1, acceptance_rate=0.8)
    with pytest.raises(InputError, match="llama-3.1-8b ships no multi-token-prediction module"):
        spec_pricers(load_model_spec("llama-3.1-8b"), load_hardware("h100-sxm"), RooflineInputs(), s)
    t, d = spec_pricers(load_model_spec("deepseek-v3"), load_hardware("h200"), RooflineInputs(tp=8, weight_dtype="fp8"), s)
    assert d.spec.num_layers == 1 and d.spec.moe is not None


def test_workload_acceptance_falls_per_step():
    from capplan.workload import Speculative

    block = Speculative(method="eagle3", num_speculative_tokens=3, acceptance_by_step=[
        {"step": 0, "acceptance_rate": 0.8}, {"step": 100, "acceptance_rate": 0.6}])
    assert [block.acceptance_at(s) for s in (0, 50, 100, 500)] == [0.8, 0.7, 0.6, 0.6]
    assert SpecInputs.from_workload(block, 50).acceptance_rate == 0.7


def test_workload_speculative_block_is_validated(tmp_path):
    from capplan.workload import load_workload

    path = tmp_path / "w.yaml"
    path.write_text(
        "version: 1\nname: w\nmethod: sft\nconversation: {prompt_tokens: 10, num_turns: 1, action_tokens: 5}\n"
        "speculative: {method: eagle3, num_speculative_tokens: 3, acceptance_rate: 0.7}\n"
    )
    with pytest.raises(InputError, match="speculative.*method sft samples nothing"):
        load_workload(path)


# ------------------------------------------------------------------------------ disaggregation and offload


def test_kv_transfer_time():
    """Llama-3.1-8B, 4,096 positions x 131,072 bytes over 50 GB/s x 0.475, plus one latency."""
    from capplan.disagg import kv_transfer_s

    eng = RooflineInputs().profile()
    t = eng.time_on("h100-sxm")
    x = kv_transfer_s(load_model_spec("llama-3.1-8b"), load_hardware("h100-sxm"), 4096)
    assert x == pytest.approx(4096 * 131072 / (50e9 * t.kv_transfer_efficiency) + t.allreduce_latency_us * 1e-6)


def test_pool_sizes_meet_the_targets():
    from capplan.benchmark import server_for
    from capplan.disagg import decode_capacity, size_pools

    s = server_for(load_model_spec("llama-3.1-8b"), load_hardware("h100-sxm"))
    plan = size_pools(s, s, 10.0, 4096, 256, ttft_target_s=1.0, tpot_target_s=0.02, transfer_s=0.02)
    assert plan.ttft_s == pytest.approx(1.0) and plan.tpot_s <= 0.02  # the prefill pool runs at the load that meets TTFT
    assert plan.decode_instances == pytest.approx(10.0 / decode_capacity(s, 4096, 256, 0.02).requests_per_s)
    with pytest.raises(InputError, match="TTFT target 10 ms"):
        size_pools(s, s, 10.0, 4096, 256, ttft_target_s=0.01, tpot_target_s=None)


def test_offload_beats_recomputation_only_past_a_break_even_prefix():
    from capplan.benchmark import server_for
    from capplan.offload import break_even_tokens, offload_hit

    s = server_for(load_model_spec("llama-3.1-8b"), load_hardware("h100-sxm"))
    n = break_even_tokens(s)
    assert 1 < n < 100_000
    assert offload_hit(s, n).speedup > 1 >= offload_hit(s, n - 1).speedup
    assert offload_hit(s, 32768).speedup > offload_hit(s, 4096).speedup


def test_offload_throughput_adds_the_loads_to_the_compute():
    """The vLLM blog (2026-01-08, Figure 2: 10,000 unique 512-token prefills, Llama-3.1-8B, H100)
    measured 41,838 prompt tokens/s with no CPU hits and 389,171 with all; in between it follows
    the serial sum, ``1 / rate(h) = (1 - h) / rate(0) + h / rate(1)``: 75,469 at 50% (74,003
    measured) and 212,735 at 90% (218,188), where the slower of the two would give 424,000 at
    90%, above the 100% point. So the model's ``1 / rate`` is linear in the hit rate, and the rate
    rises all the way to 100%."""
    from capplan.benchmark import server_for
    from capplan.offload import offload_throughput

    s = server_for(load_model_spec("llama-3.1-8b"), load_hardware("h100-sxm"))
    r = {h: offload_throughput(s, 512, h) for h in (0.0, 0.5, 0.9, 1.0)}
    assert 1 / r[0.5] == pytest.approx(0.5 / r[0.0] + 0.5 / r[1.0], rel=1e-12)
    assert 1 / r[0.9] == pytest.approx(0.1 / r[0.0] + 0.9 / r[1.0], rel=1e-12)
    assert r[0.0] < r[0.5] < r[0.9] < r[1.0]


def test_host_copy_fit_recovers_a_known_latency_and_bandwidth():
    """Rates made from ``t(b) = 4 us + b / 50 GB/s`` at 4 KiB-16 MiB give back both terms."""
    from capplan.offload import fit_host_copy

    sizes = [4096.0 * 2**k for k in range(13)]
    rates = [b / (4e-6 + b / 50e9) for b in sizes]
    f = fit_host_copy(sizes, rates)
    assert f.latency_s == pytest.approx(4e-6, rel=0.01)
    assert f.bandwidth_bytes_per_s == pytest.approx(50e9, rel=0.01)
    assert f.max_rel_error < 0.01
    with pytest.raises(InputError, match="at least two"):
        fit_host_copy([4096.0], [1e9])
    with pytest.raises(InputError, match="must be > 0"):
        fit_host_copy([4096.0, 0.0], [1e9, 2e9])


def test_profiles_carry_the_host_copy_fit_of_the_bundled_benchmark():
    """The vLLM blog's Figure 4 (H100 host-to-device DMA copies of 1000 blocks, 4 KiB-16 MiB,
    ``validation/sources/host_copy_dma.csv``) fits 3.54 us a copy and 52.7 GB/s, 0.823 of PCIe
    Gen5 x16's 64 GB/s; every bundled profile carries those two terms, and the fit reproduces
    every rate within 6% (1 MiB: 44.4 GB/s measured)."""
    from capplan.engine import load_engine
    from capplan.offload import fit_host_copy, host_copy_points
    from capplan.resources import bundled_names

    sizes, rates = host_copy_points()
    assert len(sizes) == 13
    f = fit_host_copy(sizes, rates)
    assert f.max_rel_error < 0.06
    assert f.rate_bytes_per_s(2**20) == pytest.approx(44.4e9, rel=0.02)
    for name in bundled_names("engine_profiles"):
        t = load_engine(name).time
        assert t.host_copy_latency_s == pytest.approx(f.latency_s, rel=0.005), name
        assert t.host_link_efficiency == pytest.approx(f.bandwidth_bytes_per_s / 64e9, rel=0.005), name


def test_a_smaller_block_loads_below_the_link_rate():
    """Each block copy pays the fixed latency: Llama-3.1-8B's 16-position block is 2 MiB on one
    GPU and 1 MiB a GPU at TP 2, so a position's load at TP 2 takes more than half the TP 1 time:
    (65,536 B / 52.7 GB/s + 3.54 us / 16) / (131,072 B / 52.7 GB/s + 3.54 us / 16) = 0.541."""
    from capplan.benchmark import server_for
    from capplan.offload import kv_load_s

    spec, hw = load_model_spec("llama-3.1-8b"), load_hardware("h100-sxm")
    one = kv_load_s(server_for(spec, hw), 1000)
    two = kv_load_s(server_for(spec, hw, tp=2), 1000)
    assert two / one == pytest.approx(0.541, abs=0.002)


def test_offload_needs_the_host_link_in_the_profile():
    from capplan.benchmark import server_for
    from capplan.offload import kv_load_s

    s = server_for(load_model_spec("llama-3.1-8b"), load_hardware("l4"))
    with pytest.raises(InputError, match="l4: the hardware profile has no host_link_bandwidth_gbps"):
        kv_load_s(s, 100)


# ------------------------------------------------------------------------------ command line


def test_kv_with_expert_parallelism(runner):
    from capplan.cli.app import app

    r = runner.invoke(app, ["kv", "-m", "deepseek-v3", "-H", "h200", "--tp", "1", "--ep", "16", "--weight-dtype", "fp8", "-f", "json"])
    assert r.exit_code == 0, r.output
    import json

    doc = json.loads(r.stdout)[0]
    assert doc["ep"] == 16 and doc["dp"] == 16
    assert doc["weights_gib_per_gpu"] == pytest.approx(weights_bytes_per_gpu(load_model_spec("deepseek-v3"), "fp8", 1, ep=16, dp=16) / 2**30)


@pytest.mark.parametrize("argv,message", [
    (["kv", "-m", "deepseek-v2-lite", "-H", "h100-sxm", "--ep", "3", "--dp", "3"], "Error: --ep 3: deepseek-v2-lite has 64 routed experts"),
    (["kv", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--spec-method", "eagle3", "--spec-tokens", "0", "--acceptance-rate", "0.5"],
     "Error: --spec-tokens 0: must be in [1, 64]"),
    (["roofline", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--weight-dtype", "nvfp4"], "Error: --weight-dtype nvfp4: h100-sxm has no FP4 tensor unit"),
    (["roofline", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--acceptance-rate", "0.5"], "Error: --spec-tokens, --acceptance-rate"),
])
def test_feature_flags_fail_with_one_line(runner, argv, message):
    from capplan.cli.app import app

    r = runner.invoke(app, argv)
    assert r.exit_code == 2
    assert r.stderr.startswith(message)
    assert r.stderr.count("\n") == 1


def test_roofline_speculative_columns(runner):
    from capplan.cli.app import app

    r = runner.invoke(app, ["roofline", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--spec-method", "eagle3", "--spec-tokens", "3",
                            "--acceptance-rate", "0.7", "--batch", "1", "--context", "1024", "-f", "json"])
    assert r.exit_code == 0, r.output
    import json

    row = json.loads(r.stdout)[0]
    assert row["spec_tokens_per_step"] == pytest.approx(2.533)
    assert row["spec_speedup"] == pytest.approx(row["step_time_s"] / row["spec_time_per_token_s"])
    assert math.isfinite(row["spec_draft_s"]) and row["spec_draft_s"] > 0
