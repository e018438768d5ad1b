"""Decode batches beyond the engine's largest CUDA graph (``TimeTerms.cuda_graph_max_batch``).

SGLang captures decode graphs up to ``--cuda-graph-max-bs`` (160 on GPUs of 25 GB or more in the
late-2024 releases, ``SGLANG_CUDA_GRAPH_SOURCE``); a larger batch runs without a graph and pays
the host cost of launching every layer, the ``eager_s_per_layer`` an eager step pays.
"""

from __future__ import annotations

import pytest

from capplan.accuracy.refit import PROFILES, SGLANG_CUDA_GRAPH_MAX_BS
from capplan.engine import load_engine
from capplan.hardware import load_hardware
from capplan.modelspec import load_model_spec
from capplan.roofline import RooflineInputs, step_pricer

H200 = load_hardware("h200")
LLAMA70 = load_model_spec("llama-3.1-70b")


def _pricer(engine):
    return step_pricer(LLAMA70, H200, RooflineInputs(tp=4, engine=engine))


def test_sglang_profile_carries_the_source_default():
    """The bundled SGLang profile names 160 and cites where it comes from; the refit keeps it."""
    sglang = load_engine("sglang")
    assert sglang.time.cuda_graph_max_batch == SGLANG_CUDA_GRAPH_MAX_BS == 160
    assert "cuda_graph_max_bs" in sglang.sources["time.cuda_graph_max_batch"]
    spec = next(p for p in PROFILES if p.name == "sglang")
    assert spec.time["cuda_graph_max_batch"] == 160
    assert all(load_engine(n).time.cuda_graph_max_batch is None for n in ("vllm", "trtllm"))


@pytest.mark.parametrize("batch", [161, 300])
def test_a_batch_beyond_the_largest_graph_pays_the_eager_cost_per_layer(batch):
    """Llama-3.1-70B (80 layers) on 4 x H200: a step of more than 160 sequences is 80 x 0.34 ms
    = 27.2 ms longer than the same step with every batch captured, on both pricing paths."""
    sglang = load_engine("sglang")
    unlimited = sglang.model_copy(update={"time": sglang.time.model_copy(update={"cuda_graph_max_batch": None})})
    extra = _pricer(sglang).decode(batch, 1_000).step_time_s - _pricer(unlimited).decode(batch, 1_000).step_time_s
    assert extra == pytest.approx(LLAMA70.num_layers * sglang.time.eager_s_per_layer, rel=1e-9)
    array = float(_pricer(sglang).decode([float(batch)], [1_000.0]).step_time_s[0])
    assert array == pytest.approx(_pricer(sglang).decode(batch, 1_000).step_time_s, rel=1e-12)


def test_a_batch_within_the_largest_graph_is_unchanged():
    """At 160 sequences the graph covers the batch: no extra host time."""
    sglang = load_engine("sglang")
    unlimited = sglang.model_copy(update={"time": sglang.time.model_copy(update={"cuda_graph_max_batch": None})})
    assert _pricer(sglang).decode(160, 1_000).step_time_s == _pricer(unlimited).decode(160, 1_000).step_time_s


def test_an_eager_engine_pays_the_cost_once():
    """With ``enforce_eager`` every step already pays it; a large batch adds nothing more."""
    eager = load_engine("sglang").model_copy(update={"time": load_engine("sglang").time.model_copy(update={"enforce_eager": True})})
    small, large = _pricer(eager).decode(100, 1_000), _pricer(eager).decode(300, 1_000)
    unlimited = eager.model_copy(update={"time": eager.time.model_copy(update={"cuda_graph_max_batch": None})})
    assert large.step_time_s == _pricer(unlimited).decode(300, 1_000).step_time_s
    assert small.overhead_s == large.overhead_s


def test_the_limit_must_be_a_positive_batch():
    """A zero or negative limit is refused by the profile's schema."""
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        load_engine("sglang").time.model_validate({"cuda_graph_max_batch": 0})


def test_the_simulators_step_prices_take_the_limit():
    """The simulators price steps from affine coefficients probed from the roofline
    (:func:`capplan.sim.stepcost.step_coefficients`): with the sglang profile's limit of 160 they
    carry the graphless cost as a jump at 161 sequences (80 layers x ``eager_s_per_layer`` for
    Llama-3.1-70B), so a step on either side prices as the roofline does."""
    from capplan.engine import load_engine
    from capplan.hardware import load_hardware
    from capplan.modelspec import load_model_spec
    from capplan.roofline import RooflineInputs, engine_step
    from capplan.sim.stepcost import step_coefficients

    spec, hw = load_model_spec("llama-3.1-70b"), load_hardware("h200")
    engine = load_engine("sglang")
    inp = RooflineInputs(tp=4, engine=engine)
    co = step_coefficients(spec, hw, inp)
    assert co.graph_max_seqs == 160
    assert co.graphless_s == pytest.approx(80 * engine.time.eager_s_per_layer, rel=1e-9)
    for seqs in (160.0, 161.0):
        ref = engine_step(spec, hw, inp, new_tokens=seqs, logits_tokens=seqs, attention_pairs=seqs * 1001,
                          kv_read_tokens=seqs * 1000, sequences=seqs)
        got = co.step_time(seqs, seqs, seqs * 1001, 0.0, seqs * 1000, 0.0, seqs)
        assert got == pytest.approx(float(ref.step_time_s), rel=1e-9)


def test_the_serving_simulator_runs_an_engine_with_the_limit():
    """``capplan simulate`` on a serving workload with ``--engine sglang`` runs every request (it once
    stopped on the coefficients' self-check, which did not know the limit)."""
    from typer.testing import CliRunner

    from capplan.cli.app import app

    r = CliRunner().invoke(app, ["simulate", "chat-serving", "-H", "h100-sxm", "--engine", "sglang", "--requests", "4000",
                                 "-f", "json"])
    assert r.exit_code == 0, r.output
    import json

    summary = json.loads(r.stdout)["summary"]
    assert summary["requests"] == 4000 and summary["mean_decode_batch"] > 0


def test_a_bistable_engine_settles_above_the_jump():
    """Llama-3.3-70B on 4 x H200 under the sglang profile, 510-token prompts and 508-token answers
    at 8 requests/s (DataCrunch's run): the arrivals balance completions at a batch of ~108 (ITL
    ~27 ms) and again at ~290 (ITL ~72 ms), with an unstable balance at the CUDA-graph limit of
    160 between. Both open-loop models take the upper balance (the run measured ITL 70.8 ms); at
    4 requests/s there is one balance, below the limit, and they take it."""
    import numpy as np

    from capplan import benchmark as B
    from capplan.benchmark import RequestMix

    s = B.server_for(LLAMA70, H200, tp=4, engine=load_engine("sglang"))
    grid = np.geomspace(1.0, 1024.0, 600)
    gap = 8.0 * B._closed_loop_arrays(s, grid, 510, 508)["e2e"] - grid
    crossings = np.nonzero(np.diff(np.sign(gap)))[0]
    assert len(crossings) == 3 and grid[crossings[0]] < 160 < grid[crossings[2]]
    high = B.open_loop(s, 8.0, 510, 508)
    assert high.decode_batch > 160 and high.itl_s * 1e3 == pytest.approx(71.6, rel=0.05)
    assert B.open_loop(s, 4.0, 510, 508).decode_batch < 160
    q = B.queueing_latency(s, 8.0, RequestMix.fixed(510, 508), 1.0, (50.0,), capacity=False)
    assert q.decode_batch > 160
    assert B.queueing_latency(s, 4.0, RequestMix.fixed(510, 508), 1.0, (50.0,), capacity=False).decode_batch < 160
