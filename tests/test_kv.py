"""KV calculator formulas, pinned against hand-derived numbers (arithmetic in each docstring)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capplan.errors import DoesNotFitError, InputError
from capplan.hardware import load_hardware
from capplan.kv import (
    GIB,
    KVInputs,
    compute_kv,
    kv_bytes_per_sequence_per_gpu,
    kv_bytes_per_token,
    weights_bytes_per_gpu,
)
from capplan.modelspec import load_model_spec

pytestmark = pytest.mark.usefixtures("assumed_engine")


H100 = load_hardware("h100-sxm")


def spec(name: str):
    return load_model_spec(name)


def test_seed_teaching_case_is_8_gib():
    """The teaching case: L=32, B=8, S=8192, H_kv=8, d_h=128, BF16:
    2 x 32 x 8 x 8192 x 8 x 128 x 2 = 8,589,934,592 bytes = 8 GiB (Llama-3.1-8B has that shape)."""
    per_seq = kv_bytes_per_sequence_per_gpu(spec("llama-3.1-8b"), 8192)
    assert 8 * per_seq == 8_589_934_592 == 8 * GIB


@pytest.mark.parametrize(
    "name, tp, whole, per_gpu",
    [
        # 2 x 32 layers x 8 heads x 128 x 2 B
        ("llama-3.1-8b", 1, 131_072, 131_072),
        # 80 layers, 8 KV heads split over 4 GPUs -> 2 each: 2 x 80 x 2 x 128 x 2
        ("llama-3.1-70b", 4, 327_680, 81_920),
        # tp 16 > 8 KV heads: each GPU keeps one (replicated): 2 x 80 x 1 x 128 x 2
        ("llama-3.1-70b", 16, 327_680, 40_960),
        # Qwen2.5-7B: 28 layers x 4 KV heads: 2 x 28 x 4 x 128 x 2; tp 4 -> 1 head
        ("qwen2.5-7b", 4, 57_344, 14_336),
        # MLA: 61 layers x (512 + 64) x 2 B, not split across tensor-parallel ranks
        ("deepseek-v3", 8, 70_272, 70_272),
        # Gemma-2-9B: 42 layers (21 sliding + 21 full) x 2 x 8 x 256 x 2 B per token in the window
        ("gemma-2-9b", 1, 344_064, 344_064),
    ],
)
def test_kv_bytes_per_token(name, tp, whole, per_gpu):
    assert kv_bytes_per_token(spec(name), "bf16", tp) == (whole, per_gpu)


def test_fp8_and_int4_kv_halve_and_quarter():
    """fp8 KV is 1 byte per element, int4 half a byte: 65,536 and 32,768 bytes for Llama-3.1-8B."""
    assert kv_bytes_per_token(spec("llama-3.1-8b"), "fp8")[0] == 65_536
    assert kv_bytes_per_token(spec("llama-3.1-8b"), "int4")[0] == 32_768


def test_sliding_window_caps_per_sequence_memory():
    """Gemma-2-9B at 32,768 tokens: 21 full layers hold 32,768 positions, 21 sliding layers hold
    ceil(4096/16)+1 = 257 blocks = 4,112 positions; 8,192 bytes per layer per token:
    (21 x 32768 + 21 x 4112) x 8192 = 6,344,867,840 bytes."""
    got = kv_bytes_per_sequence_per_gpu(spec("gemma-2-9b"), 32768)
    assert got == (21 * 32768 + 21 * 4112) * 8192


def test_pipeline_parallel_uses_fullest_stage():
    """Llama-3.1-8B, pp=3: 32 layers split 11/11/10; the fullest stage holds 11 layers of 4,096 B."""
    assert kv_bytes_per_token(spec("llama-3.1-8b"), "bf16", 1, 3)[1] == 11 * 4096


def test_weights_per_gpu_tp_and_quantisation():
    """Llama-3.1-8B: 8,030,261,248 params x 2 B = 14.96 GiB; at tp 2 the decoder linears and the
    vocab-parallel embedding/head halve, norms are replicated. fp8 quantises only the decoder's
    linear layers: (8,030,261,248 - 1,050,673,152 emb - 266,240 norms) x 1 B + the rest x 2 B."""
    s = spec("llama-3.1-8b")
    assert weights_bytes_per_gpu(s) == pytest.approx(8_030_261_248 * 2)
    linear = 8_030_261_248 - 1_050_673_152 - 266_240
    assert weights_bytes_per_gpu(s, "fp8") == pytest.approx(linear * 1 + (1_050_673_152 + 266_240) * 2)
    tp2 = weights_bytes_per_gpu(s, "bf16", tp=2)
    assert tp2 == pytest.approx((8_030_261_248 - 266_240) + 266_240 * 2)


def test_budget_with_explicit_terms_is_exact():
    """79.19 GiB x 0.9 = 71.271; - 14.99 - 4.76 - 0.13 = 51.391 GiB.
    Blocks = floor(51.391 x 2^30 / (16 x 131,072)) = 26,312; tokens = 420,992; at 8,192 tokens
    per sequence: 420,992 / 8,192 = 51.39x and floor(51.391 GiB / 1 GiB) = 51 sequences."""
    r = compute_kv(
        spec("llama-3.1-8b"),
        H100,
        KVInputs(usable_mem_gib=79.19, weights_gib=14.99, activation_gib=4.76, runtime_overhead_gib=0.13),
    )
    assert r.kv_budget_gib_per_gpu == pytest.approx(51.391)
    assert r.kv_capacity_blocks == 26_312
    assert r.kv_capacity_tokens == 420_992
    assert r.max_concurrency_x == pytest.approx(420_992 / 8192)
    assert r.max_concurrent_sequences == 51


def test_model_that_does_not_fit_suggests_tp():
    with pytest.raises(DoesNotFitError) as info:
        compute_kv(spec("llama-3.1-70b"), H100, KVInputs(tp=1))
    msg = str(info.value)
    # tp 2 holds the weights but not one 8K sequence (0 sequences): the suggestion is the smallest tp that does
    assert "weights 131." in msg and "--tp 4 fits one sequence of 8,192 tokens" in msg


def test_impossible_tp_is_rejected_with_reason():
    with pytest.raises(InputError) as info:
        compute_kv(spec("qwen2.5-7b"), H100, KVInputs(tp=3))
    assert "28 attention heads, which 3 does not divide" in str(info.value)
    assert "1, 2, 4" in str(info.value)


def test_unknown_dtype():
    with pytest.raises(InputError, match="--kv-dtype fp6: unknown dtype"):
        compute_kv(spec("llama-3.1-8b"), H100, KVInputs(kv_dtype="fp6"))


def test_context_longer_than_capacity_gives_zero_sequences():
    """A 1M-token context does not fit: capacity is still reported, with 0 whole sequences."""
    r = compute_kv(spec("llama-3.1-8b"), H100, KVInputs(context=1_000_000))
    assert r.max_concurrent_sequences == 0 and r.kv_capacity_tokens > 0


@settings(max_examples=60, deadline=None)
@given(
    mem=st.floats(40, 200),
    extra=st.floats(0, 50),
    ctx=st.integers(512, 131072),
    tp=st.sampled_from([1, 2, 4, 8]),
    kv_dtype=st.sampled_from(["bf16", "fp8"]),
)
def test_more_memory_never_lowers_capacity(mem, extra, ctx, tp, kv_dtype):
    s = spec("llama-3.1-8b")
    base = KVInputs(tp=tp, context=ctx, kv_dtype=kv_dtype, usable_mem_gib=mem)
    more = KVInputs(tp=tp, context=ctx, kv_dtype=kv_dtype, usable_mem_gib=mem + extra)
    a, b = compute_kv(s, H100, base), compute_kv(s, H100, more)
    assert b.kv_capacity_tokens >= a.kv_capacity_tokens
    assert b.max_concurrent_sequences >= a.max_concurrent_sequences


def test_workload_concurrency_retain_vs_evict():
    """One-turn-plus-tool workload, fixed counts, constant 10 ms step:
    turn 1: input 1,000, 100 actions; tool wait 9 s; turn 2: input 1,100 + 100 obs = 1,200, 100 actions.
    decode time = 200 x 0.01 = 2 s; lifetime = 2 + 9 = 11 s.
    decoding area = (1000 + 50) x 100 + (1200 + 50) x 100 = 230,000 token-steps -> x 0.01 s = 2,300
    retain: waiting holds 1,100 tokens for 9 s = 9,900 -> held = (2,300 + 9,900) / 11 = 1,109.1
    evict: held = 2,300 / 11 = 209.1; with capacity C, resident = C / held, runnable = resident x 2/11.
    """
    from capplan.concurrency import workload_concurrency
    from capplan.workload import Workload

    def wl(policy: str) -> Workload:
        return Workload.model_validate(
            {
                "name": "t",
                "method": "multi-turn-rl",
                "conversation": {
                    "prompt_tokens": 1000,
                    "turns": [{"action_tokens": 100, "tool_tokens": 100, "tool_wait_s": 9}, {"action_tokens": 100}],
                },
                "cache": {"reuse": "auto", "kv_during_tool_wait": policy},
            }
        )

    kv = compute_kv(spec("llama-3.1-8b"), H100, KVInputs())
    C = kv.kv_capacity_tokens
    for policy, held in (("retain", 12_200 / 11), ("evict", 2_300 / 11)):
        c = workload_concurrency(spec("llama-3.1-8b"), H100, kv, wl(policy), max_num_seqs=10**9, step_time=lambda b, x: 0.01)
        assert c.mean_kv_tokens_held == pytest.approx(held)
        assert c.resident_conversations == pytest.approx(C / held)
        assert c.runnable_sequences == pytest.approx(C / held * 2 / 11)
        assert c.waiting_conversations == pytest.approx(C / held * 9 / 11)
        assert c.binding == "memory"


def test_workload_concurrency_scheduler_cap_binds():
    from capplan.concurrency import workload_concurrency
    from capplan.workload import load_workload

    kv = compute_kv(spec("llama-3.1-8b"), H100, KVInputs())
    c = workload_concurrency(spec("llama-3.1-8b"), H100, kv, load_workload("seed-replay"), max_num_seqs=8, step_time=lambda b, x: 0.01)
    assert c.binding == "max_num_seqs" and c.runnable_sequences == 8


def test_kv_cli_json_contract(runner):
    from capplan.cli.app import app

    result = runner.invoke(app, ["kv", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--context", "8192,32768", "--tp", "1,2", "-f", "json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert len(rows) == 4
    for key in (
        "kv_bytes_per_token",
        "kv_bytes_per_token_per_gpu",
        "weights_gib_per_gpu",
        "activation_gib_per_gpu",
        "runtime_overhead_gib_per_gpu",
        "kv_budget_gib_per_gpu",
        "kv_capacity_tokens",
        "kv_capacity_blocks",
        "max_concurrency_x",
        "max_concurrent_sequences",
        "tp",
        "context",
        "model",
        "hardware",
    ):
        assert key in rows[0]
    assert [(r["tp"], r["context"]) for r in rows] == [(1, 8192), (1, 32768), (2, 8192), (2, 32768)]


def test_kv_cli_errors(runner):
    from capplan.cli.app import app

    r = runner.invoke(app, ["kv", "-m", "llama-3.1-70b", "-H", "h100-sxm"])
    assert r.exit_code == 2 and "--tp 4 fits one sequence" in r.stderr
    r = runner.invoke(app, ["kv", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--tp", "3"])
    assert r.exit_code == 2 and r.stderr.startswith("Error: --tp 3: llama-3.1-8b has 32 attention heads")
    r = runner.invoke(app, ["kv", "-m", "llama-3.1-8b", "-H", "h200x"])
    assert r.exit_code == 2 and "did you mean 'h200'?" in r.stderr
    r = runner.invoke(app, ["kv", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--context", "lots"])
    assert r.exit_code == 2 and "--context 'lots': expected integers" in r.stderr


def test_kv_cli_table(runner):
    from capplan.cli.app import app

    r = runner.invoke(app, ["kv", "-m", "llama-3.1-8b", "-H", "h100-sxm"])
    assert r.exit_code == 0
    assert "KV capacity [tokens]" in r.stdout and "GiB = 2^30 bytes" in r.stdout


def test_profiles_list_and_show(runner):
    from capplan.cli.app import app

    r = runner.invoke(app, ["profiles", "list"])
    assert r.exit_code == 0 and "h100-sxm" in r.stdout and "deepseek-v3" in r.stdout
    r = runner.invoke(app, ["profiles", "list", "hardware"])
    assert "h100-sxm" in r.stdout and "deepseek-v3" not in r.stdout
    r = runner.invoke(app, ["profiles", "show", "h100-sxm"])
    assert r.exit_code == 0 and "hbm_bandwidth_gbps" in r.stdout and "3350" in r.stdout
    r = runner.invoke(app, ["profiles", "show", "qwen3-30b-a3b"])
    assert r.exit_code == 0 and "derived active params" in r.stdout
    r = runner.invoke(app, ["profiles", "show", "nope"])
    assert r.exit_code == 2 and "no hardware profile, model preset or engine profile" in r.stderr


def test_profiles_list_and_show_engines(runner):
    """Every --engine help points at `capplan profiles list engines`, which used to be refused ('engines'
    is not one of all, hardware, models); `show` reads an engine profile, its fitted terms as row counts."""
    from capplan.cli.app import app
    from capplan.engine import list_engines, load_engine

    r = runner.invoke(app, ["profiles", "list", "engines"], env={"COLUMNS": "200"})
    assert r.exit_code == 0 and all(name in r.stdout for name in list_engines()) and "h100-sxm" not in r.stdout
    r = runner.invoke(app, ["profiles", "show", "vllm-0.19"], env={"COLUMNS": "250"})
    n = len(load_engine("vllm-0.19").fitted_on["time.gemm_efficiency"])
    assert r.exit_code == 0 and "time.gemm_efficiency" in r.stdout and f"fitted on {n:,} validation corpus rows" in r.stdout


def test_model_import_roundtrip(runner, tmp_path):
    from pathlib import Path

    from capplan.cli.app import app

    cfgs = sorted((Path(__file__).parent / "data" / "hf_configs").glob("*.json"))
    assert cfgs
    out = tmp_path / "m.yaml"
    r = runner.invoke(app, ["model", "import", str(cfgs[0]), "--name", "my-model", "--output", str(out)])
    assert r.exit_code == 0, r.output
    assert load_model_spec(str(out)).name == "my-model"
    r = runner.invoke(app, ["model", "import", str(cfgs[0]), "--name", "my-model", "--output", str(out)])
    assert r.exit_code == 2 and "file exists" in r.stderr
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({"architectures": ["BertForMaskedLM"]}))
    r = runner.invoke(app, ["model", "import", str(bad)])
    assert r.exit_code == 2 and "not supported" in r.stderr and "LlamaForCausalLM" in r.stderr


def test_grid_agrees_with_compute_kv_cell_by_cell():
    """The vectorised grid is the same arithmetic as compute_kv: check every cell of a small grid."""
    import numpy as np

    from capplan.errors import CapplanError
    from capplan.kv import kv_grid

    specs = [spec("llama-3.1-8b"), spec("gemma-2-9b"), spec("deepseek-v3"), spec("qwen2.5-7b")]
    hws = [H100, load_hardware("l40s")]
    tps, dts, ctxs = [1, 3, 8], ["bf16", "fp8"], [1000, 8192, 40000]
    g = kv_grid(specs, hws, tps, dts, ctxs)
    for m, s in enumerate(specs):
        for h, hw in enumerate(hws):
            for t, tp in enumerate(tps):
                for d, dt in enumerate(dts):
                    for c, ctx in enumerate(ctxs):
                        try:
                            r = compute_kv(s, hw, KVInputs(tp=tp, kv_dtype=dt, context=ctx))
                        except CapplanError:
                            assert not g.fits[m, h, t, d, c]
                            continue
                        assert g.fits[m, h, t, d, c]
                        assert g.kv_capacity_tokens[m, h, t, d, c] == r.kv_capacity_tokens
                        assert g.max_concurrent_sequences[m, h, t, d, c] == r.max_concurrent_sequences
                        assert np.isclose(g.kv_budget_gib_per_gpu[m, h, t, d, c], r.kv_budget_gib_per_gpu)
