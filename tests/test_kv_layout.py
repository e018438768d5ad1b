"""One KV formula for every path: the scalar calculator, the vectorised grid and the roofline.

Every path reads KV bytes from :func:`capplan.kv.kv_layout`; these tests check the paths agree
on every bundled preset and on hybrid layouts (sliding-window and linear-attention layers), which
is where copies of the formula used to drift apart.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capplan.errors import CapplanError
from capplan.hardware import load_hardware
from capplan.kv import KVInputs, compute_kv, kv_bytes_per_token, kv_grid, kv_layout
from capplan.modelspec import ModelSpec, list_models, load_model_spec
from capplan.roofline import RooflineInputs, decode_step

pytestmark = pytest.mark.usefixtures("assumed_engine")


H100 = load_hardware("h100-sxm")


def _hybrid(name: str = "llama-3.1-8b", every: int = 4, state: int = 32 * 128 * 128) -> ModelSpec:
    """``name`` with three of every ``every`` layers turned into linear-attention layers."""
    base = load_model_spec(name)
    layers = [i for i in range(base.num_layers) if i % every != every - 1]
    return ModelSpec.model_validate(
        {
            **base.model_dump(),
            "name": f"{name}-hybrid",
            "sliding_window": None,
            "linear_attention": {"layers": layers, "state_elements_per_layer": state, "mixer_params_per_layer": 1_000_000},
        }
    )


SPECS = [load_model_spec(n) for n in list_models()] + [_hybrid(), _hybrid("qwen3-8b", every=2, state=16 * 128 * 128)]


def test_grid_counts_linear_attention_state():
    """The grid used to leave the linear-attention state out of a sequence's bytes.

    A hybrid Llama-3.1-8B (24 of 32 layers linear, a 32 x 128 x 128 state each) on an H100 at
    32,768 tokens: 8 full layers x 32,768 x 4,096 B = 1 GiB of KV per sequence plus
    24 x 524,288 x 2 B = 24 MiB of state. Without the state the grid over-counted the sequences
    that fit; with it, every cell equals ``compute_kv``'s.
    """
    spec = _hybrid()
    r = compute_kv(spec, H100, KVInputs(context=32768))
    assert r.kv_bytes_per_sequence_per_gpu == 8 * 32768 * 4096 + 24 * 32 * 128 * 128 * 2
    g = kv_grid([spec], [H100], [1], ["bf16"], [32768])
    assert g.max_concurrent_sequences[0, 0, 0, 0, 0] == r.max_concurrent_sequences
    without_state = math.floor(r.kv_budget_gib_per_gpu * 2**30 / (8 * 32768 * 4096))
    assert r.max_concurrent_sequences < without_state


@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_grid_agrees_with_compute_kv_on_every_preset(spec: ModelSpec):
    """Every preset (and two hybrids): the grid equals ``compute_kv`` cell by cell."""
    tps, dts, ctxs = [1, 2, 4, 8], ["bf16", "fp8"], [1000, 8192, 40000]
    hws = [H100, load_hardware("h200")]
    g = kv_grid([spec], hws, tps, dts, ctxs)
    for h, hw in enumerate(hws):
        for t, tp in enumerate(tps):
            for d, dt in enumerate(dts):
                for c, ctx in enumerate(ctxs):
                    try:
                        r = compute_kv(spec, hw, KVInputs(tp=tp, kv_dtype=dt, context=ctx))
                    except CapplanError:
                        assert not g.fits[0, h, t, d, c]
                        continue
                    assert g.fits[0, h, t, d, c]
                    assert g.kv_capacity_tokens[0, h, t, d, c] == r.kv_capacity_tokens
                    assert g.max_concurrent_sequences[0, h, t, d, c] == r.max_concurrent_sequences


@settings(max_examples=60, deadline=None)
@given(
    index=st.integers(0, len(SPECS) - 1),
    tp=st.sampled_from([1, 2, 4, 8]),
    kv_dtype=st.sampled_from(["bf16", "fp8", "int4"]),
    context=st.integers(0, 200_000),
)
def test_roofline_reads_and_writes_the_layout_bytes(index: int, tp: int, kv_dtype: str, context: int):
    """A decode step of one sequence writes one position of KV and reads ``context`` of them.

    ``kv_write = bytes_per_token + state``; ``kv_read = full x c + window x min(c, W - 1) + state``:
    the same bytes the calculator charges, from the same layout.
    """
    spec = SPECS[index]
    try:
        lay = kv_layout(spec, kv_dtype, tp)
        s = decode_step(spec, H100, RooflineInputs(tp=tp, kv_dtype=kv_dtype), 1, context)
    except CapplanError:
        return  # tp does not divide the heads
    assert s.kv_write_bytes == pytest.approx(lay.bytes_per_token + lay.state_bytes_per_sequence)
    assert s.kv_read_bytes == pytest.approx(lay.held_bytes(context))
    assert kv_bytes_per_token(spec, kv_dtype, tp) == (kv_layout(spec, kv_dtype, 1).bytes_per_token, lay.bytes_per_token)


def test_sequence_bytes_rounds_to_blocks_and_caps_the_window():
    """Gemma-2-9B, 8,000 tokens, blocks of 16: full layers hold 500 blocks, sliding layers
    min(500, ceil(4096 / 16) + 1 = 257) blocks; 21 layers of each at 8,192 B per position."""
    lay = kv_layout(load_model_spec("gemma-2-9b"))
    assert lay.sequence_bytes(8000, 16) == 21 * 500 * 16 * 8192 + 21 * 257 * 16 * 8192
    np.testing.assert_array_equal(lay.sequence_bytes(np.array([8000, 16]), 16), [lay.sequence_bytes(8000, 16), 42 * 16 * 8192])
