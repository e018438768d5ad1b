"""One configuration at a time through the Python API: capplan's scalar path against llm-analysis, in the same run.

Run by hand (not in CI)::

    python benchmarks/bench_scalar.py            # target: >= 20,000 configurations/s, >= 3x llm-analysis

A configuration is (model, GPU, tp, batch, context); pricing it means what llm-analysis'
``LLMAnalysis(...).inference(batch_size_per_gpu=B, seq_len=S, num_tokens_to_generate=1)``
returns: the KV and weight memory per GPU and how many sequences fit, the prefill latency of the
``S``-token prompts and the decode latency of the next token. capplan's equivalent is
``compute_kv(spec, hw, KVInputs(tp=..., context=S))`` + ``prefill_step(spec, hw, inp, S, 0, B)`` +
``decode_step(spec, hw, inp, B, S)``, with a fresh ``KVInputs`` and ``RooflineInputs`` per
configuration (the objects a user builds for each call).

llm-analysis (``pip install llm-analysis``) is measured when it imports; it is given
Llama-3.1-8B's dimensions directly (its own model lookup would fetch a config from the Hugging
Face hub) and its bundled ``h100-sxm-80gb`` and ``w16a16e16`` configurations. It is timed two
ways: a new ``LLMAnalysis`` per configuration (what pricing independent configurations costs)
and one per tensor-parallel degree reused across batches and contexts (its fastest use); the
ratio is quoted against the faster. "previous path" is capplan's numpy path for the same
configurations (one-element arrays, caches cleared), what one configuration cost before.
"""

from __future__ import annotations

import argparse
import itertools
import logging
import os
import sys
import time
from typing import Any, Callable

import numpy as np

from capplan.hardware import load_hardware
from capplan.kv import KVInputs, compute_kv
from capplan.modelspec import load_model_spec
from capplan.roofline import RooflineInputs, decode_step, prefill_step


def configurations(n: int) -> list[tuple[int, int, int]]:
    """``n`` (tp, batch, context) triples cycling over tp 1/2/4/8, batch 1-256, context 128-32768."""
    grid = list(itertools.product((1, 2, 4, 8), (1, 4, 16, 64, 256), (128, 512, 2048, 8192, 32768)))
    return [(tp, batch, context + k // len(grid)) for k, (tp, batch, context) in zip(range(n), itertools.cycle(grid))]


def rate(price: Callable[[int, int, int], Any], configs: list[tuple[int, int, int]], repeat: int) -> float:
    """Best configurations/s over ``repeat`` passes."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for tp, batch, context in configs:
            price(tp, batch, context)
        best = min(best, time.perf_counter() - start)
    return len(configs) / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", type=int, default=4000, help="configurations per pass")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    spec, hw = load_model_spec("llama-3.1-8b"), load_hardware("h100-sxm")
    configs = configurations(args.configs)

    def ours(tp: int, batch: int, context: int) -> tuple[float, float, float, int]:
        kv = compute_kv(spec, hw, KVInputs(tp=tp, context=context))
        inp = RooflineInputs(tp=tp)
        prefill = prefill_step(spec, hw, inp, context, 0, batch)
        decode = decode_step(spec, hw, inp, batch, context)
        return kv.weights_gib_per_gpu, prefill.step_time_s, decode.step_time_s, kv.max_concurrent_sequences

    def previous(tp: int, batch: int, context: int) -> tuple[Any, ...]:
        import capplan.kv
        import capplan.roofline

        capplan.kv._KV_FIXED.clear()
        capplan.roofline._PRICERS.clear()
        kv = compute_kv(spec, hw, KVInputs(tp=tp, context=context))
        inp = RooflineInputs(tp=tp)
        prefill = prefill_step(spec, hw, inp, np.array([context]), np.array([0]), np.array([batch]))
        decode = decode_step(spec, hw, inp, np.array([batch]), np.array([context]))
        return kv.weights_gib_per_gpu, prefill.step_time_s[0], decode.step_time_s[0], kv.max_concurrent_sequences

    for tp, batch, context in configs[:50]:  # the scalar path gives the numpy path's numbers
        assert ours(tp, batch, context) == previous(tp, batch, context)
    ours_rate = rate(ours, configs, args.repeat)
    previous_rate = rate(previous, configs[: max(len(configs) // 10, 50)], max(args.repeat // 2, 1))
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; {len(configs):,} configurations of llama-3.1-8b on h100-sxm")
    print(f"capplan scalar path:          {ours_rate:>10,.0f} configurations/s  (target >= 20,000)")
    print(f"capplan previous path:        {previous_rate:>10,.0f} configurations/s  ({ours_rate / previous_rate:,.1f}x faster now)")

    from report import record

    name = "one configuration through the Python API: KV + prefill + decode (`bench_scalar.py`)"
    target = ">= 20,000/s and >= 3x llm-analysis"
    try:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        logging.disable(logging.WARNING)
        from llm_analysis.analysis import LLMAnalysis
        from llm_analysis.config import ModelConfig, ParallelismConfig, get_dtype_config_by_name, get_gpu_config_by_name
    except ImportError as exc:
        print(f"llm-analysis: not measured ({exc.__class__.__name__}: {exc}; pip install llm-analysis)")
        record("scalar", name, f"{ours_rate:,.0f} configurations/s ({ours_rate / previous_rate:,.0f}x the numpy path); "
               "llm-analysis not installed, not compared", target, None, headline=f"{ours_rate:,.0f} configs/s")
        return
    model = ModelConfig(
        name=spec.name, num_layers=spec.num_layers, n_head=spec.num_attention_heads, hidden_dim=spec.hidden_size,
        vocab_size=spec.vocab_size, max_seq_len=131072, num_key_value_heads=spec.num_kv_heads,
        ffn_embed_dim=spec.intermediate_size, expansion_ratio=spec.intermediate_size / spec.hidden_size, model_type="llama",
    )
    gpu, dtype = get_gpu_config_by_name("h100-sxm-80gb"), get_dtype_config_by_name("w16a16e16")

    def theirs_fresh(tp: int, batch: int, context: int) -> Any:
        analysis = LLMAnalysis(model, gpu, dtype, ParallelismConfig(tp_size=tp))
        try:
            return analysis.inference(batch_size_per_gpu=batch, seq_len=context, num_tokens_to_generate=1)
        except AssertionError:  # its answer for a batch whose prefill activations do not fit
            return None

    reused = {tp: LLMAnalysis(model, gpu, dtype, ParallelismConfig(tp_size=tp)) for tp in (1, 2, 4, 8)}

    def theirs_reused(tp: int, batch: int, context: int) -> Any:
        try:
            return reused[tp].inference(batch_size_per_gpu=batch, seq_len=context, num_tokens_to_generate=1)
        except AssertionError:
            return None

    sample = configs[: max(len(configs) // 4, 50)]
    fresh_rate = rate(theirs_fresh, sample, args.repeat)
    reused_rate = rate(theirs_reused, sample, args.repeat)
    best = max(fresh_rate, reused_rate)
    print(f"llm-analysis, new per config: {fresh_rate:>10,.0f} configurations/s")
    print(f"llm-analysis, reused per tp:  {reused_rate:>10,.0f} configurations/s")
    print(f"capplan / llm-analysis (faster use): {ours_rate / best:.1f}x  (target >= 3x)")
    record("scalar", name, f"{ours_rate:,.0f} configurations/s, {ours_rate / best:.1f}x llm-analysis in the same run "
           f"({best:,.0f}/s), {ours_rate / previous_rate:,.0f}x the numpy path", target, ours_rate >= 20_000 and ours_rate / best >= 3,
           headline=f"{ours_rate:,.0f} configs/s, {ours_rate / best:.1f}x llm-analysis")


if __name__ == "__main__":
    main()
