"""The roofline step model: hand-derived FLOPs and bytes, bounds, the ridge point, the CLI, and
the comparison with published measurements that ``docs/roofline.md`` tabulates."""

from __future__ import annotations

import csv
import io
import json
import math
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from numpy.testing import assert_allclose

from capplan.cli.app import app
from capplan.errors import InputError
from capplan.hardware import load_hardware
from capplan.kv import weights_bytes_per_gpu
from capplan.modelspec import ModelSpec, MoESpec, load_model_spec
from capplan.roofline import (

    ROW_KEYS,
    RooflineInputs,
    causal_pairs,
    critical_decode_batch,
    decode_grid,
    decode_step,
    engine_step,
    mixed_step,
    prefill_step,
    ridge_point,
    score_step,
)

pytestmark = pytest.mark.usefixtures("assumed_engine")

REPO = Path(__file__).resolve().parent.parent
H100 = load_hardware("h100-sxm")
BF16 = RooflineInputs()


def tiny() -> ModelSpec:
    """A 2-layer GQA model small enough to count by hand.

    d = 64, H = 4 query heads, H_kv = 2, h = 16, d_ff = 128, V = 1000, untied head.
    Per layer: attention 64*64 + 2*64*32 + 64*64 = 12,288; MLP 3*64*128 = 24,576;
    GEMM weights per token 2 * 36,864 = 73,728; norms 2*64 per layer + 64 final = 320.
    """
    return ModelSpec(
        name="tiny", source="synthetic test model", architecture="LlamaForCausalLM", num_layers=2,
        hidden_size=64, num_attention_heads=4, num_kv_heads=2, head_dim=16, intermediate_size=128,
        vocab_size=1000, tie_word_embeddings=False, max_position_embeddings=4096,
    )


# ------------------------------------------------------------------------------ hand counts


def test_tiny_decode_flops_and_bytes():
    """Decode, batch 2, 10 cached positions, bf16 weights and KV, TP1.

    FLOPs: GEMMs 2 tokens x 2 x 73,728 = 294,912; attention 4 H h = 256 per pair and layer,
    pairs 2 x 11 = 22, 2 layers: 22 x 512 = 11,264; LM head 2 x 2 x 1000 x 64 = 256,000.
    Total 562,176.

    Bytes: weights (73,728 + 320) x 2 + head 64,000 x 2 = 276,096 (the input embedding is
    gathered, not read whole); KV per position and layer 2 x 2 x 16 x 2 = 128 B: read
    2 x 10 x 2 x 128 = 5,120, written 2 x 2 x 128 = 512; activations per token
    (2 x (64 + 128 + 64 + 64 + 128 + 384) + 64) x 2 B = 3,456, x 2 tokens = 6,912; logits
    (64 + 1000) x 2 B x 2 = 4,256. Total 292,896.
    """
    s = decode_step(tiny(), H100, BF16, batch=2, context=10)
    assert (s.gemm_flops, s.attention_flops, s.lm_head_flops, s.flops) == (294_912, 11_264, 256_000, 562_176)
    assert (s.weight_bytes, s.kv_read_bytes, s.kv_write_bytes, s.activation_bytes) == (276_096, 5_120, 512, 11_168)
    assert s.bytes == 292_896
    assert s.arithmetic_intensity == pytest.approx(562_176 / 292_896)


@pytest.mark.parametrize(
    "make, flops, nbytes",
    [
        # prefill of 4: GEMMs 4 x 147,456 = 589,824; pairs 4 x 5 / 2 = 10 -> 5,120; head (last only) 128,000.
        # bytes: weights 276,096 + KV written 4 x 256 = 1,024 + activations 4 x 3,456 = 13,824 + logits 2,128.
        (lambda s: prefill_step(s, H100, BF16, prompt=4), 722_944, 293_072),
        # scoring 4: the head runs on all 4 positions: 589,824 + 5,120 + 512,000; logits bytes 4 x 2,128.
        (lambda s: score_step(s, H100, BF16, length=4), 1_106_944, 299_456),
    ],
    ids=["prefill", "score"],
)
def test_tiny_prefill_and_score(make, flops, nbytes):
    s = make(tiny())
    assert (s.flops, s.bytes) == (flops, nbytes)


def test_tiny_tp2_halves_flops_and_prices_the_all_reduces():
    """TP2: every FLOP is split; bytes per GPU are

    weights 73,728 (GEMMs / 2) + 640 (norms, replicated) + 64,000 (head / 2) = 138,368;
    KV 1 head per rank: 64 B per position and layer, read 2 x 10 x 2 x 64 = 2,560, written 256;
    activations (2 x (64 + 64 + 32 + 64 + 128 + 192) + 64) x 2 B = 2,304 per token, x 2;
    logits (64 + 500) x 2 B x 2 = 2,256. Total 148,048.

    Communication on NVLink (450 GB/s x 0.7, 10 us): 2L + 1 = 5 all-reduces of 2 x 64 x 2 B,
    each 10 us + 2 x 1/2 x 256 B / 315 GB/s, plus one logits gather 10 us + 1/2 x 4,000 B / 315 GB/s.
    """
    one = decode_step(tiny(), H100, BF16, batch=2, context=10)
    two = decode_step(tiny(), H100, RooflineInputs(tp=2), batch=2, context=10)
    assert two.flops == one.flops / 2
    assert two.bytes == 148_048
    link = 450e9 * 0.7
    assert two.comm_time_s == pytest.approx(5 * (10e-6 + 256 / link) + 10e-6 + 2000 / link, rel=1e-12)
    assert one.comm_time_s == 0


def test_step_time_is_the_roofline_formula():
    """step = max(F / (989.4e12 x 0.7), bytes / (3.35e12 x 0.8)) + comm + 2 ms (h100-sxm assumptions)."""
    s = decode_step(load_model_spec("llama-3.1-8b"), H100, RooflineInputs(tp=2), batch=[1, 4096], context=64)
    compute = s.flops / (989.4e12 * 0.7)
    memory = s.bytes / (3.35e12 * 0.8)
    assert_allclose(s.step_time_s, np.maximum(compute, memory) + s.comm_time_s + 0.002, rtol=1e-12)
    assert s.bound.tolist() == ["memory", "compute"]
    assert_allclose(s.mbu, s.bytes / (3.35e12 * s.step_time_s))
    assert_allclose(s.mfu, s.flops / (989.4e12 * s.step_time_s))


def test_llama31_8b_gqa_decode_counts():
    """Llama-3.1-8B (GQA 32/8, h = 128, d = 4096, d_ff = 14336, V = 128256, 32 layers), batch 1,
    2047 cached positions, bf16:

    GEMM weights per token 32 x (41,943,040 + 3 x 4096 x 14336) = 6,979,321,856 -> 13,958,643,712 FLOPs;
    attention 4 x 32 x 128 x 32 layers = 524,288 per pair x 2048 pairs = 1,073,741,824;
    head 2 x 128,256 x 4096 = 1,050,673,152. Total 16,083,058,688.

    Bytes: all 8,030,261,248 weights x 2 less the input embedding (1,050,673,152 B) = 15,009,849,344;
    KV read 2047 x 131,072 = 268,304,384; written 131,072; activations per token
    (32 x (4096 + 6144 + 4096 + 4096 + 8192 + 43008) + 4096) x 2 = 4,464,640, logits
    (4096 + 128,256) x 2 = 264,704. Total 15,283,014,144.
    """
    s = decode_step(load_model_spec("llama-3.1-8b"), H100, BF16, batch=1, context=2047)
    assert (s.gemm_flops, s.attention_flops, s.lm_head_flops) == (13_958_643_712, 1_073_741_824, 1_050_673_152)
    assert s.flops == 16_083_058_688
    assert (s.weight_bytes, s.kv_read_bytes, s.kv_write_bytes) == (15_009_849_344, 268_304_384, 131_072)
    assert s.activation_bytes == 4_464_640 + 264_704
    assert s.bytes == 15_283_014_144


def test_causal_prefill_costs_the_triangle_not_the_square():
    """A 2048-position prefill has 2048 x 2049 / 2 = 2,098,176 attention pairs, not 2048^2."""
    spec = load_model_spec("llama-3.1-8b")
    s = prefill_step(spec, H100, BF16, prompt=2048)
    assert s.attention_flops == 2_098_176 * 524_288
    # with 1000 positions cached the new 2048 attend to 1000 more each
    c = prefill_step(spec, H100, BF16, prompt=2048, cached=1000)
    assert c.attention_flops == (2_098_176 + 2048 * 1000) * 524_288
    assert c.kv_read_bytes == 1000 * 131_072


def test_qwen3_moe_counts_only_routed_and_shared_experts():
    """Qwen3-30B-A3B: 48 layers, 128 experts of width 768, 8 per token, no shared experts.

    GEMM FLOPs per token = 2 x (active 3,353,032,704 - embeddings 2 x 311,164,928 - norms
    48 x 2 x 2048 - final norm 2048) = 2 x 2,730,504,192 = 5,461,008,384.
    At batch 1 a step reads the k = 8 experts a token routes to: weights read =
    2 B x (active - input embedding) = 2 x 3,041,867,776 = 6,083,735,552 (all 128 would be 61.1 GB).
    """
    spec = load_model_spec("qwen3-30b-a3b")
    s = decode_step(spec, H100, BF16, batch=1, context=0)
    assert s.gemm_flops == 5_461_008_384
    assert s.weight_bytes == 6_083_735_552
    assert s.weight_bytes < weights_bytes_per_gpu(spec) / 10


@pytest.mark.parametrize("batch, experts", [(1, 8.0), (2, 128 * (1 - (120 / 128) ** 2)), (64, 125.94), (4096, 128.0)])
def test_moe_expected_distinct_experts(batch, experts):
    """E (1 - (1 - k/E)^T) distinct experts per layer: 8 at T = 1, 15.5 at T = 2, 125.9 at T = 64,
    every one of the 128 at large batch; the routed bytes scale with that count."""
    spec = load_model_spec("qwen3-30b-a3b")
    s = decode_step(spec, H100, BF16, batch=batch, context=0)
    routed_all = 48 * 128 * 3 * 2048 * 768 * 2
    non_routed = 2 * (spec.total_params() - 311_164_928) - routed_all
    assert (s.weight_bytes - non_routed) / routed_all * 128 == pytest.approx(experts, abs=0.01)


def test_deepseek_v3_mla_latent_attention_and_experts():
    """DeepSeek-V3, TP8, fp8 weights, bf16 KV, batch 1 with 4095 cached positions.

    Absorbed MLA: per pair and layer 2 H (2 r_kv + r_rope) = 2 x 128 x (1024 + 64) = 278,528
    FLOPs; 4096 pairs x 61 layers / 8 ranks = 8,698,986,496. The latent (512 + 64) x 2 B =
    1,152 B per position and layer is read whole on every rank: 4095 x 61 x 1,152 =
    287,763,840 B; written 61 x 1,152 = 70,272 B. Of 256 routed experts per layer the token
    touches 8, so 8/256 of the routed bytes are read.
    """
    spec = load_model_spec("deepseek-v3")
    inp = RooflineInputs(tp=8, weight_dtype="fp8")
    s = decode_step(spec, load_hardware("h200"), inp, batch=1, context=4095)
    assert s.attention_flops == 8_698_986_496
    assert (s.kv_read_bytes, s.kv_write_bytes) == (287_763_840, 70_272)
    routed = 58 * 256 * 3 * 7168 * 2048 / 8  # fp8, 1 B per weight, split over 8 ranks
    emb = 129_280 * 7168 / 8 * 2
    expected = weights_bytes_per_gpu(spec, "fp8", 8) - 2 * emb - routed + routed * 8 / 256 + emb
    assert s.weight_bytes == pytest.approx(expected, rel=1e-12)


def test_sliding_window_caps_attention_and_kv_reads():
    """Gemma-2-9B alternates sliding (4096) and full layers (21 each). At 10,000 cached positions
    a decode position attends to 10,001 on full layers and 4096 on sliding ones."""
    spec = load_model_spec("gemma-2-9b")
    per_pair = 4 * spec.num_attention_heads * spec.head_dim
    s = decode_step(spec, H100, BF16, batch=3, context=10_000)
    assert s.attention_flops == 3 * per_pair * (21 * 10_001 + 21 * 4096)
    kv = 2 * spec.num_kv_heads * spec.head_dim * 2
    assert s.kv_read_bytes == 3 * kv * (21 * 10_000 + 21 * 4095)


@pytest.mark.parametrize(
    "cached, new, window, expected",
    [(0, 4, math.inf, 10), (10, 1, math.inf, 11), (3, 2, math.inf, 4 + 5), (0, 6, 4, 1 + 2 + 3 + 4 + 4 + 4), (5, 3, 4, 12)],
)
def test_causal_pairs(cached, new, window, expected):
    assert causal_pairs(cached, new, window) == expected


def test_mixed_step_is_decode_plus_chunk_with_weights_read_once():
    spec = load_model_spec("llama-3.1-8b")
    m = mixed_step(spec, H100, BF16, decode_batch=32, decode_context=1000, prefill_chunk=512, prefill_context=256)
    d = decode_step(spec, H100, BF16, batch=32, context=1000)
    p = prefill_step(spec, H100, BF16, prompt=512, cached=256)
    assert m.flops == d.flops + p.flops - p.lm_head_flops  # the chunk does not end its prompt: no logits
    assert m.attention_flops == d.attention_flops + p.attention_flops
    assert m.kv_read_bytes == d.kv_read_bytes + p.kv_read_bytes
    assert m.weight_bytes == d.weight_bytes  # one read of the weights for both


# ------------------------------------------------------------------------------ bounds, ridge


def test_batch1_decode_is_memory_bound_and_large_prefill_compute_bound_on_h100():
    spec = load_model_spec("llama-3.1-8b")
    assert decode_step(spec, H100, BF16, batch=1, context=2048).bound == "memory"
    big = prefill_step(spec, H100, BF16, prompt=4096, batch=8)
    assert big.bound == "compute" and big.mfu > 0.6


@pytest.mark.parametrize("context", [0, 128, 256])
def test_critical_batch_is_where_intensity_crosses_the_ridge(context):
    """bf16 everywhere: compute_time >= memory_time <=> F / bytes >= 989.4e12 x 0.7 / (3.35e12 x 0.8)
    = 258.4 FLOP/B. For a dense model F = f B and bytes = W + a B are linear in the batch, so the
    crossing is B* = ceil(rho W / (f - rho a)); near rho x 2 B/weight / 2 = 258 at context 0."""
    spec = load_model_spec("llama-3.1-8b")
    rho = ridge_point(H100, "bf16", 0.7, 0.8)
    assert rho == pytest.approx(989.4 * 0.7 / (3350 * 0.8) * 1000)
    b = critical_decode_batch(spec, H100, BF16, context)
    below, at = decode_step(spec, H100, BF16, [b - 1, b], context).arithmetic_intensity
    assert below < rho <= at
    one, two = decode_step(spec, H100, BF16, 1, context), decode_step(spec, H100, BF16, 2, context)
    f, a = two.flops - one.flops, two.bytes - one.bytes
    W = one.bytes - a
    assert b == math.ceil(rho * W / (f - rho * a))
    if context == 0:
        assert 258 <= b <= 300


def test_long_context_decode_never_turns_compute_bound():
    """At 8192 cached positions the KV bytes per sequence exceed f / rho: no batch crosses."""
    assert critical_decode_batch(load_model_spec("llama-3.1-8b"), H100, BF16, 8192) == math.inf


def test_fp8_doubles_the_peak_and_halves_linear_weight_bytes_on_h100():
    spec = load_model_spec("llama-3.1-8b")
    bf, f8 = (prefill_step(spec, H100, RooflineInputs(weight_dtype=w), prompt=8192) for w in ("bf16", "fp8"))
    gemm_time_bf = bf.gemm_flops / (989.4e12 * 0.7)
    gemm_time_f8 = f8.gemm_flops / (1978.9e12 * 0.7)
    rest = (bf.attention_flops + bf.lm_head_flops) / (989.4e12 * 0.7)
    assert bf.compute_time_s == pytest.approx(gemm_time_bf + rest)
    assert f8.compute_time_s == pytest.approx(gemm_time_f8 + rest)
    d_bf, d_f8 = (decode_step(spec, H100, RooflineInputs(weight_dtype=w), 1, 0) for w in ("bf16", "fp8"))
    linear = 6_979_321_856  # decoder GEMM weights; norms, head stay 16-bit
    assert d_bf.weight_bytes - d_f8.weight_bytes == linear


@pytest.mark.parametrize("hw, dtype, gemm, unit", [("h100-sxm", "int4", None, 989.4e12), ("a100-80gb", "int4", None, 1248e12), ("a100-80gb", "int4", "bf16", 312e12)])
def test_int4_uses_the_unit_where_the_hardware_has_one(hw, dtype, gemm, unit):
    spec = load_model_spec("llama-3.1-8b")
    h = load_hardware(hw)
    s = prefill_step(spec, h, RooflineInputs(weight_dtype=dtype, gemm_dtype=gemm), prompt=4096)
    rest = (s.attention_flops + s.lm_head_flops) / h.peak_flops("bf16")
    assert s.compute_time_s == pytest.approx((s.gemm_flops / unit + rest) / 0.7)


def test_kv_dtype_changes_kv_bytes_only():
    spec = load_model_spec("llama-3.1-8b")
    a, b = (decode_step(spec, H100, RooflineInputs(kv_dtype=k), 16, 4096) for k in ("bf16", "fp8"))
    assert b.kv_read_bytes == a.kv_read_bytes / 2 and b.weight_bytes == a.weight_bytes and b.flops == a.flops


# ------------------------------------------------------------------------------ API shape


def test_scalar_inputs_give_floats_and_arrays_broadcast():
    spec = load_model_spec("llama-3.1-8b")
    s = decode_step(spec, H100, BF16, 4, 100)
    assert isinstance(s.step_time_s, float) and isinstance(s.bound, str)
    g = decode_step(spec, H100, BF16, np.array([1, 8])[:, None], np.array([0, 100, 1000])[None, :])
    assert g.step_time_s.shape == g.bound.shape == (2, 3)
    assert g.step_time_s[1, 1] == decode_step(spec, H100, BF16, 8, 100).step_time_s


def test_engine_step_default_window_cap_matches_decode():
    spec = load_model_spec("mistral-7b")
    W = spec.sliding_window.window_tokens
    a = engine_step(spec, H100, BF16, new_tokens=4, logits_tokens=4, attention_pairs=4 * 9001, kv_read_tokens=4 * 9000, sequences=4)
    b = decode_step(spec, H100, BF16, 4, 9000)
    assert a.attention_flops == b.attention_flops == 4 * W * 4 * spec.num_attention_heads * spec.head_dim * spec.num_layers


def test_decode_grid_matches_decode_step():
    spec = load_model_spec("llama-3.1-70b")
    hws = [H100, load_hardware("mi300x")]
    g = decode_grid(spec, hws, RooflineInputs(weight_dtype="fp8"), tp=[2, 8], batch=[1, 32, 512], context=[0, 4096])
    assert g.step_time_s.shape == (2, 2, 3, 2)
    one = decode_step(spec, hws[1], RooflineInputs(tp=8, weight_dtype="fp8"), 32, 4096)
    assert g.step_time_s[1, 1, 1, 1] == pytest.approx(one.step_time_s, rel=1e-12)
    assert g.bound[1, 1, 1, 1] == one.bound


def test_million_point_sweep_in_one_call():
    """1,000,000 batch x context x TP x hardware points in one vectorised call (its speed is
    measured by benchmarks/bench_roofline.py, not asserted here)."""
    from capplan.hardware import list_hardware

    hws = list_hardware()
    spec = load_model_spec("llama-3.1-70b")
    g = decode_grid(spec, hws, RooflineInputs(weight_dtype="bf16"), [1, 2, 4, 8], np.arange(1, 129), np.linspace(0, 32768, 163))
    assert g.step_time_s.size == len(hws) * 4 * 128 * 163 >= 1_000_000
    assert np.all(np.isfinite(g.step_time_s)) and np.all(g.step_time_s > 0)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"tp": 3}, r"--tp 3: llama-3.1-8b has 32 attention heads"),
        ({"weight_dtype": "fp6"}, r"--weight-dtype fp6: unknown dtype \(allowed: bf16, fp16, fp8, int8, int4, nvfp4, mxfp4\)"),
        ({"kv_dtype": "nf4"}, r"--kv-dtype nf4: unknown dtype"),
        ({"compute_efficiency": 1.5}, r"--compute-efficiency 1.5: must be in \(0, 1\]"),
        ({"step_overhead_s": -1}, r"--step-overhead-s -1: must be in \[0, 3,600\]"),
    ],
)
def test_invalid_inputs(kwargs, match):
    with pytest.raises(InputError, match=match):
        decode_step(load_model_spec("llama-3.1-8b"), H100, RooflineInputs(**kwargs), 1, 0)


def test_overrides_replace_profile_assumptions():
    spec = load_model_spec("llama-3.1-8b")
    a = decode_step(spec, H100, RooflineInputs(step_overhead_s=0, bandwidth_efficiency=1.0), 1, 0)
    assert a.step_time_s == pytest.approx(a.bytes / 3.35e12)
    assert a.mbu == pytest.approx(1.0)


# ------------------------------------------------------------------------------ CLI


def _run(runner, *args):
    return runner.invoke(app, ["roofline", "-m", "llama-3.1-8b", "--hardware", "h100-sxm", *args])


def test_cli_json_contract(runner):
    result = _run(runner, "--batch", "1,64", "--context", "2048", "--format", "json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [tuple(r) for r in rows] == [(*ROW_KEYS, "fits", "fit_reason")] * 2
    assert tuple(rows[0]) == (
        "kind", "batch", "context", "prompt", "step_time_s", "tokens_per_s", "flops", "bytes",
        "arithmetic_intensity", "bound", "mbu", "mfu", "fits", "fit_reason",
    )
    assert (rows[0]["fits"], rows[0]["fit_reason"]) == (True, "")
    first = rows[0]
    assert (first["kind"], first["batch"], first["context"], first["prompt"], first["bound"]) == ("decode", 1, 2048, 0, "memory")
    s = decode_step(load_model_spec("llama-3.1-8b"), H100, BF16, 1, 2048)
    assert first["step_time_s"] == s.step_time_s and first["tokens_per_s"] == 1 / s.step_time_s
    assert all(0 < r["mbu"] <= 1 and 0 < r["mfu"] <= 1 for r in rows)


def test_cli_csv_and_prefill_rows(runner):
    result = _run(runner, "--kind", "prefill", "--batch", "1,4", "--prompt", "512,2048", "-f", "csv")
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert tuple(rows[0]) == (*ROW_KEYS, "fits", "fit_reason")
    assert [(r["batch"], r["context"], r["prompt"]) for r in rows] == [("1", "0", "512"), ("1", "0", "2048"), ("4", "0", "512"), ("4", "0", "2048")]
    p = prefill_step(load_model_spec("llama-3.1-8b"), H100, BF16, 2048, 0, 4)
    assert float(rows[3]["tokens_per_s"]) == pytest.approx(4 * 2048 / p.step_time_s)


def test_cli_table_lists_ridge_and_critical_batch(runner):
    result = _run(runner, "--batch", "1,512", "--context", "0,8192")
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())  # the table wraps at the terminal width
    assert "258 FLOP/B with GEMM efficiency 0.7 and bandwidth efficiency 0.8 (engine profile assumed)" in text
    assert "context 0: 283; context 8,192: none, memory-bound at every batch" in text


@pytest.mark.parametrize(
    "args, message",
    [
        (["--batch", "1,x"], "Error: --batch 'x': expected integers, a list (1,2,4) or a range (8:512:8)\n"),
        (["--batch", "0"], "Error: --batch 0: every value must be an integer >= 1\n"),
        (["--tp", "3"], "Error: --tp 3: llama-3.1-8b has 32 attention heads, which 3 does not divide (tensor-parallel degrees that divide them: 1, 2, 4, 8, 16, 32)\n"),
        (["--kind", "score", "--context", "100"], "Error: --kind score forwards whole records from position 0; give their length with --prompt, not --context\n"),
        (["--kind", "mixed", "--batch", "9000"], "Error: --batch 9000 exceeds --token-budget 8192: a step forwards at most the budget\n"),
        (["--plot", "x.pdf"], "Error: --plot x.pdf: give a .png or .svg file name\n"),
    ],
)
def test_cli_errors(runner, args, message):
    result = _run(runner, *args)
    assert result.exit_code == 2
    assert result.stderr == message


def test_cli_plot_writes_png(runner, tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "roof.png"
    result = _run(runner, "--batch", "1,64", "--context", "1024", "--plot", str(out), "-f", "csv")
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert result.stderr == f"wrote {out}\n"


def test_cli_plot_without_matplotlib_says_how_to_install(runner, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes "import matplotlib" raise ImportError
    result = _run(runner, "--plot", str(tmp_path / "r.png"))
    assert result.exit_code == 2
    assert result.stderr == "Error: --plot needs matplotlib, which is not installed; install it with: pip install 'capplan[plot]'\n"
    assert not (tmp_path / "r.png").exists()


# ------------------------------------------------------------------------------ published data

GPT_FAST = "GitHub pytorch-labs/gpt-fast model.py @ 03e10bc23f31487a0353f22da7f506f0841ed720 (transformer_configs)"


def _llama2(name: str, hf_id: str, layers: int, d: int, heads: int, kv_heads: int, d_ff: int) -> ModelSpec:
    """Llama-2 geometry from gpt-fast's ``transformer_configs`` (``7B``: d_ff = find_multiple(
    int(2 x 4 x 4096 / 3), 256) = 11008; ``70B``: 8 KV heads, d_ff 28672), vocab 32000, untied head."""
    return ModelSpec(
        name=name, hf_id=hf_id, source=GPT_FAST, architecture="LlamaForCausalLM", num_layers=layers, hidden_size=d,
        num_attention_heads=heads, num_kv_heads=kv_heads, head_dim=d // heads, intermediate_size=d_ff,
        vocab_size=32000, tie_word_embeddings=False, max_position_embeddings=4096,
    )


MIXTRAL = ModelSpec(
    name="mixtral-8x7b", hf_id="mistralai/Mixtral-8x7B-v0.1",
    source="GitHub pytorch-labs/gpt-fast mixtral-moe/model.py @ 0474176566aaeac370e8493e19ffca7c865f5446",
    architecture="MixtralForCausalLM", num_layers=32, hidden_size=4096, num_attention_heads=32, num_kv_heads=8,
    head_dim=128, intermediate_size=14336, vocab_size=32000, tie_word_embeddings=False, max_position_embeddings=32768,
    moe=MoESpec(num_experts=8, experts_per_token=2, expert_intermediate_size=14336),
)
LLAMA2_7B = _llama2("llama-2-7b", "meta-llama/Llama-2-7b-hf", 32, 4096, 32, 32, 11008)
LLAMA2_70B = _llama2("llama-2-70b", "meta-llama/Llama-2-70b-hf", 80, 8192, 64, 8, 28672)
MODELS = {
    "meta-llama/Llama-2-7b-hf": LLAMA2_7B,
    "meta-llama/Llama-2-7b-chat-hf": LLAMA2_7B,
    "meta-llama/Llama-2-70b-hf": LLAMA2_70B,
    "meta-llama/Llama-2-70b-chat-hf": LLAMA2_70B,
    "mistralai/Mixtral-8x7B-v0.1": MIXTRAL,
    "meta-llama/Llama-3.3-70B-Instruct": "llama-3.1-70b",  # same geometry as 3.1-70B
    "amd/Llama-3.1-70B-Instruct-FP8-KV": "llama-3.1-70b",
    "amd/Llama-3.1-405B-Instruct-FP8-KV": "llama-3.1-405b",
}
GPUS = {
    "H100 SXM 80GB (HBM3)": "h100-sxm", "H100 80GB": "h100-sxm", "A100 SXM 80GB": "a100-80gb",
    "A100 SXM 80GB (power-limited to 330 W)": "a100-80gb", "L40S 48GB": "l40s", "H200 SXM 141GB": "h200",
    "MI300X 192GB (750 W)": "mi300x",
}
ASSUMED_KV = "fp8"
"""KV dtype used where a record says ``not_stated`` (FP8 engines of the same tables use FP8 KV;
for the H200 batch-192 row bf16 KV could not fit: 192 x 2176 x 327,680 B = 137 GB on a 141 GB GPU
that also holds 69 GB of FP8 weights)."""


def _records() -> list[dict]:
    recs = yaml.safe_load((REPO / "tests" / "data" / "published_measurements.yaml").read_text())
    # fixed-batch (or concurrency-1) records only: the in-flight-batching rows have no known batch
    return [r for r in recs if r["batch_size"] is not None or r["concurrency"] == 1]


def predict(rec: dict) -> float:
    """The roofline's value of ``rec['metric']`` for one published setup.

    ``e2e = T_prefill(B, ISL) + sum_{i=0}^{OSL-2} T_decode(B, ISL + i)``; static throughput
    ``B x OSL / e2e`` (/ GPUs when per GPU); TTFT = ``T_prefill(1, ISL)``; ITL = the mean decode step.
    """
    spec = MODELS[rec["model_hf_id"]]
    spec = load_model_spec(spec) if isinstance(spec, str) else spec
    hw = load_hardware(GPUS[rec["gpu"]])
    kv = ASSUMED_KV if rec["kv_dtype"] == "not_stated" else rec["kv_dtype"]
    inp = RooflineInputs(tp=rec["tp"], weight_dtype=rec["weight_dtype"], kv_dtype=kv)
    B, isl, osl = rec["batch_size"] or 1, rec["input_tokens"], rec["output_tokens"]
    pre = prefill_step(spec, hw, inp, isl, 0, B).step_time_s
    steps = decode_step(spec, hw, inp, B, isl + np.arange(osl - 1)).step_time_s if osl > 1 else np.zeros(0)
    e2e = pre + float(np.sum(steps))
    metric = rec["metric"]
    if metric == "output_tokens_per_s":
        return B * osl / e2e / (rec["num_gpus"] if rec["per_gpu"] else 1)
    if metric == "ttft_ms":
        return pre * 1e3
    if metric == "time_per_output_token_ms":
        return float(np.mean(steps)) * 1e3
    if metric == "e2e_latency_s":
        return e2e
    raise AssertionError(metric)


def _docs_table() -> dict[str, tuple[float, float]]:
    """id -> (predicted, error %) from the comparison table of docs/roofline.md."""
    text = (REPO / "docs" / "roofline.md").read_text()
    out = {}
    for line in text.splitlines():
        m = re.match(r"\| `([a-z0-9_]+)` \|.*\| ([\d,.]+) \| ([+-][\d.]+)% \|", line)
        if m:
            out[m.group(1)] = (float(m.group(2).replace(",", "")), float(m.group(3)))
    return out


@pytest.mark.parametrize("rec", _records(), ids=lambda r: r["id"])
def test_docs_comparison_table_is_current(rec):
    """Every fixed-batch published measurement is in docs/roofline.md with today's prediction."""
    table = _docs_table()
    assert rec["id"] in table, f"{rec['id']} missing from the docs comparison table"
    predicted, error = table[rec["id"]]
    value = predict(rec)
    assert predicted == pytest.approx(value, rel=5e-3)
    assert error == pytest.approx((value / rec["value"] - 1) * 100, abs=0.15)


def test_at_least_five_comparisons():
    assert len(_docs_table()) >= 5


def test_cli_refuses_flags_a_kind_does_not_take(runner):
    """--prompt on decode steps, and a token budget a whole prefill step exceeds (8 x 2,048 =
    16,384 positions against 512), are refused rather than ignored."""
    result = _run(runner, "--kind", "decode", "--prompt", "4096")
    assert result.exit_code == 2 and "--prompt does not apply to --kind decode" in result.stderr
    result = _run(runner, "--kind", "prefill", "--batch", "8", "--max-num-batched-tokens", "512")
    assert result.exit_code == 2 and "a prefill step of 16,384 positions" in result.stderr
    assert _run(runner, "--kind", "mixed", "--batch", "8", "--max-num-batched-tokens", "512").exit_code == 0


def test_json_says_which_rows_do_not_fit(runner):
    """Batch 256 at 8,192 positions needs 2,097,408 KV positions, more than llama-3.1-8b's KV budget
    on one H100: the JSON marks it as the table's fits column does."""
    rows = json.loads(_run(runner, "--batch", "1,256", "--context", "8192", "--format", "json").stdout)
    assert [r["fits"] for r in rows] == [True, False] and "2,097,408 KV positions" in rows[1]["fit_reason"]
