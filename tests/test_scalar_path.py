"""One configuration at a time: the scalar paths of the roofline and the KV calculator equal the array paths.

``decode_step``/``prefill_step``/``engine_step`` with Python numbers run :func:`_evaluate_one` on
floats and ``compute_kv`` reuses the context-free part of a configuration; both must give exactly
the numbers (same IEEE doubles) of the numpy path, on every kind of bundled model.
"""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

import capplan.kv as kv
from capplan.errors import InputError
from capplan.hardware import load_hardware
from capplan.kv import KVInputs, compute_kv, kv_bytes_per_sequence_per_gpu
from capplan.modelspec import load_model_spec
from capplan.roofline import RooflineInputs, StepCost, StepPricer, decode_step, engine_step, prefill_step, step_pricer

# dense GQA, MLA + MoE, sliding window, MoE + sliding window, MoE
MODELS = ["llama-3.1-8b", "deepseek-v2-lite", "gemma-2-9b", "gpt-oss-20b", "qwen3-30b-a3b"]
HARDWARE = ["h100-sxm", "l4", "b200"]
FIELDS = list(StepCost.__dataclass_fields__)


def _as_array_row(cost: StepCost) -> dict:
    """Field values of a one-element array result, as Python values."""
    return {f: (getattr(cost, f)[0].item() if f != "bound" else str(getattr(cost, f)[0])) for f in FIELDS}


def _as_scalar(cost: StepCost) -> dict:
    values = {f: getattr(cost, f) for f in FIELDS}
    assert all(type(v) is float for k, v in values.items() if k != "bound"), values
    return values


def _inputs(model: str):
    spec = load_model_spec(model)
    tps = [t for t in (1, 2, 8) if spec.num_attention_heads % t == 0 and (spec.mla is not None or spec.num_kv_heads % t == 0 or t % spec.num_kv_heads == 0)]
    return spec, tps


@pytest.mark.parametrize("model", MODELS)
def test_decode_and_prefill_scalars_equal_arrays(model):
    """Random batches, contexts, prompts and cached prefixes (crossing the sliding windows)."""
    spec, tps = _inputs(model)
    rng = random.Random(model)
    for hw_name, tp, (wd, kd) in itertools.product(HARDWARE, tps, [("bf16", "bf16"), ("fp8", "fp8")]):
        hw = load_hardware(hw_name)
        inp = RooflineInputs(tp=tp, weight_dtype=wd, kv_dtype=kd)
        for _ in range(4):
            batch, context = rng.randint(1, 512), rng.choice([0, 1, 4095, 4096, 4097, rng.randint(0, 131072)])
            prompt, cached = rng.randint(1, 32768), rng.choice([0, 7, 4096, rng.randint(0, 65536)])
            assert _as_scalar(decode_step(spec, hw, inp, batch, context)) == _as_array_row(
                decode_step(spec, hw, inp, np.array([batch]), np.array([context]))
            )
            assert _as_scalar(prefill_step(spec, hw, inp, prompt, cached, batch)) == _as_array_row(
                prefill_step(spec, hw, inp, np.array([prompt]), np.array([cached]), np.array([batch]))
            )


@pytest.mark.parametrize("model", MODELS)
def test_engine_step_scalars_equal_arrays(model):
    """Fractional work (a chunked prefill spread over steps) and explicit window counts."""
    spec, tps = _inputs(model)
    hw = load_hardware("h100-sxm")
    inp = RooflineInputs(tp=tps[-1])
    work = dict(new_tokens=1234.5, logits_tokens=3.25, attention_pairs=9.9e6, kv_read_tokens=4321.0, sequences=2.5)
    arrays = {k: np.array([v]) for k, v in work.items()}
    assert _as_scalar(engine_step(spec, hw, inp, **work)) == _as_array_row(engine_step(spec, hw, inp, **arrays))
    windows = dict(window_attention_pairs=1e5, window_kv_read_tokens=100.0)
    assert _as_scalar(engine_step(spec, hw, inp, **work, **windows)) == _as_array_row(
        engine_step(spec, hw, inp, **arrays, **{k: np.array([v]) for k, v in windows.items()})
    )


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda s, h, i: decode_step(s, h, i, 0, 10), "batch: every value must be a finite number >= 1"),
        (lambda s, h, i: decode_step(s, h, i, 4, float("nan")), "context: every value must be a finite number >= 0"),
        (lambda s, h, i: prefill_step(s, h, i, 16, -1), "cached: every value must be a finite number >= 0"),
        (lambda s, h, i: engine_step(s, h, i, new_tokens=1, logits_tokens=1, attention_pairs=1, kv_read_tokens=0,
                                     sequences=float("inf")), "sequences: every value must be a finite number >= 0"),
    ],
)
def test_scalar_errors_equal_array_errors(call, message):
    spec, hw, inp = load_model_spec("llama-3.1-8b"), load_hardware("h100-sxm"), RooflineInputs()
    with pytest.raises(InputError, match=message):
        call(spec, hw, inp)


def test_step_pricer_is_reused_for_the_same_or_equal_inputs():
    spec, hw = load_model_spec("llama-3.1-8b"), load_hardware("h100-sxm")
    first = step_pricer(spec, hw, RooflineInputs(tp=2))
    assert step_pricer(spec, hw, RooflineInputs(tp=2)) is first  # equal inputs built anew
    assert step_pricer(spec, hw, RooflineInputs(tp=4)) is not first
    other = load_hardware("h200")
    assert step_pricer(spec, other, RooflineInputs(tp=2)).hw is other
    assert isinstance(first, StepPricer) and first.inp == RooflineInputs(tp=2)


@pytest.mark.parametrize("model", MODELS)
def test_compute_kv_cached_equals_fresh(model):
    """Many contexts of one configuration: the cached context-free part gives the fresh answer, and
    the per-sequence bytes equal the array formula's."""
    spec, tps = _inputs(model)
    for hw_name, tp in itertools.product(HARDWARE, tps):
        hw = load_hardware(hw_name)
        for context in (1, 15, 16, 17, 4096, 4097, 100_000):
            inp = KVInputs(tp=tp, context=context, kv_dtype="fp8")
            kv._KV_FIXED.clear()
            try:
                fresh = compute_kv(spec, hw, inp)
            except Exception as exc:  # a configuration that does not fit fails the same way cached
                with pytest.raises(type(exc)):
                    compute_kv(spec, hw, inp)
                continue
            assert compute_kv(spec, hw, inp) == fresh  # from the cache
            array_bytes = kv_bytes_per_sequence_per_gpu(spec, np.array([context]), "fp8", tp, 1, fresh.block_size)
            assert fresh.kv_bytes_per_sequence_per_gpu == float(np.max(array_bytes))


def test_compute_kv_cache_tells_inputs_apart():
    spec, hw = load_model_spec("llama-3.1-8b"), load_hardware("h100-sxm")
    a = compute_kv(spec, hw, KVInputs(context=4096, gpu_mem_util=0.9))
    b = compute_kv(spec, hw, KVInputs(context=4096, gpu_mem_util=0.5))
    assert b.kv_budget_gib_per_gpu < a.kv_budget_gib_per_gpu
    assert compute_kv(load_model_spec("qwen3-8b"), hw, KVInputs(context=4096)).model == "qwen3-8b"


def test_kv_cache_key_reads_the_fields_in_declaration_order():
    """compute_kv's cache key drops the context by its position among the fields."""
    assert list(KVInputs(tp=2, context=5).__dict__) == list(KVInputs.model_fields)
    assert list(KVInputs.model_fields)[kv._CONTEXT_FIELD] == "context"


def test_pricer_cache_is_bounded():
    import capplan.roofline as roofline

    spec, hw = load_model_spec("llama-3.1-8b"), load_hardware("h100-sxm")
    for steps in range(roofline._PRICERS_MAX):
        step_pricer(spec, hw, RooflineInputs(step_overhead_s=steps * 1e-6))
    assert len(roofline._PRICERS) < roofline._PRICERS_MAX
