"""The simulator's fast scalar helpers agree with the calculators they stand in for.

The scheduler prices steps and KV one sequence at a time in plain Python; each helper must give
exactly what the vectorised home of the formula gives (:func:`capplan.roofline.causal_pairs`,
:meth:`capplan.kv.KVLayout.held_bytes`, :meth:`StepCoefficients.step_time`).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from capplan.hardware import load_hardware
from capplan.kv import kv_layout
from capplan.modelspec import ModelSpec, load_model_spec
from capplan.roofline import RooflineInputs, causal_pairs, causal_pairs_one
from capplan.sim.setup import held_bytes_function
from capplan.sim.stepcost import step_coefficients

pytestmark = pytest.mark.usefixtures("assumed_engine")



def _hybrid() -> ModelSpec:
    """llama-3.1-8b with three of every four layers linear attention (a fixed state per sequence)."""
    base = load_model_spec("llama-3.1-8b")
    return ModelSpec.model_validate(
        {
            **base.model_dump(),
            "linear_attention": {
                "layers": [i for i in range(32) if i % 4 != 3],
                "state_elements_per_layer": 32 * 128 * 128,
                "mixer_params_per_layer": 1_000_000,
            },
        }
    )


@pytest.mark.parametrize("window", [math.inf, 1.0, 7.0, 4096.0])
def test_causal_pairs_one_equals_the_array_version(window):
    """Same pairs, bit for bit, for cached/new counts below, across and beyond the window edge."""
    rng = np.random.default_rng(3)
    cached = rng.integers(0, 9000, 500)
    new = rng.integers(1, 9000, 500)
    ref = causal_pairs(cached, new, window)
    got = [causal_pairs_one(int(c), int(n), window) for c, n in zip(cached, new)]
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("model", ["llama-3.1-8b", "gemma-2-9b", "olmo-3-7b", "hybrid"])
@pytest.mark.parametrize("tp", [1, 2])
def test_held_bytes_function_equals_kv_layout(model, tp):
    """The scheduler's bound KV formula is ``KVLayout.held_bytes``, at and around the window."""
    spec = _hybrid() if model == "hybrid" else load_model_spec(model)
    layout = kv_layout(spec, "bf16", tp)
    held = held_bytes_function(layout)
    positions = [0, 1, 17, 4094, 4095, 4096, 4097, 100_000]
    assert [held(p) for p in positions] == [layout.held_bytes(p) for p in positions]


@pytest.mark.parametrize("model,tp", [("llama-3.1-8b", 1), ("llama-3.1-70b", 4), ("qwen3-30b-a3b", 2), ("gemma-2-9b", 2)])
def test_decode_coefficients_price_a_decode_step(model, tp):
    """A decode step of ``B`` sequences priced from the folded decode coefficients equals ``step_time``.

    Each sequence forwards one position with one logit; ``B`` sequences with ``S`` cached
    positions in total attend to ``S + B`` pairs (no window crossing here).
    """
    spec = load_model_spec(model)
    c = step_coefficients(spec, load_hardware("h100-sxm"), RooflineInputs(tp=tp))
    batch, cached = 37, 37 * 900
    window_pairs = (cached + batch) if spec.sliding_window else 0.0
    window_read = cached if spec.sliding_window else 0.0
    compute = c.decode_compute_per_sequence * batch + c.c_pair * (cached + batch) + c.c_pair_w * window_pairs
    memory = c.decode_memory_base + c.decode_memory_per_sequence * batch + c.m_read * cached + c.m_read_w * window_read
    if c.m_routed:
        memory += c.m_routed * (1.0 - c.q**batch)
    fixed = c.decode_fixed_base + c.decode_fixed_per_sequence * batch
    ref = c.step_time(batch, batch, cached + batch, window_pairs, cached, window_read, batch)
    assert math.isclose(max(compute, memory) + fixed, ref, rel_tol=1e-12)


def test_capplan_simulate_is_a_deprecated_alias():
    """Old imports keep working, with a DeprecationWarning naming the new home."""
    import capplan.plots
    import capplan.sim
    import capplan.simulate as old

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert old.simulate is capplan.sim.simulate
        assert old.SimConfig is capplan.sim.SimConfig
        assert old.plot_timeline is capplan.plots.plot_timeline
    assert [w.category for w in caught] == [DeprecationWarning] * 3
    assert "capplan.sim" in str(caught[0].message)
    with pytest.raises(AttributeError):
        old.Core  # noqa: B018
