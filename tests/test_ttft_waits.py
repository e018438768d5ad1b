"""The closed form's time to first token: the wait for a step under way, and a prompt prefix the
requests share (a prefix-cache hit); and the corpus rows that feed both."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from capplan import benchmark as B
from capplan.engine import default_engine
from capplan.hardware import load_hardware
from capplan.modelspec import load_model_spec


@pytest.fixture(scope="module")
def server() -> B.Server:
    return B.server_for(load_model_spec("llama-3.1-8b"), load_hardware("h100-sxm"), engine=default_engine())


def test_one_client_finds_the_engine_idle(server):
    """One client sends its next request when the last ends: no other request runs, so nothing
    is under way when it arrives (no other decodes: busy with probability ``1 - exp(0) = 0``)."""
    a = B._closed_loop_arrays(server, 1.0, 1000, 200)
    assert float(B.step_wait_s(a, 0.0)[0]) == 0.0
    assert B.closed_loop(server, 1, 1000, 200).ttft_s == pytest.approx(float(a["ttft"][0]), rel=1e-12)


def test_a_request_waits_half_a_step_when_steps_are_alike(server):
    """One-token prompts make a mixed step a decode step with one more sequence, so every step
    lasts about the same ``T`` and the mean residual ``E[T^2] / (2 E[T])`` is ``T / 2``; a
    client finds the other 31 clients' share of the batch ``b`` decoding, busy with probability
    ``1 - exp(-31 b / 32)``: half an inter-token latency, within the 1% the steps differ by."""
    a = B._closed_loop_arrays(server, 32.0, 1, 400)
    b, itl = float(a["b"][0]), float(a["itl"][0])
    residual = float(B.step_wait_s(a, b * 31 / 32)[0])
    assert float(a["step_residual"][0]) == pytest.approx(itl / 2.0, rel=0.01)
    assert residual == pytest.approx(-math.expm1(-b * 31 / 32) * itl / 2.0, rel=0.01)
    r = B.closed_loop(server, 32, 1, 400)
    assert r.ttft_s == pytest.approx(float(a["ttft"][0]) + residual, rel=1e-12)
    assert r.e2e_latency_s == pytest.approx(float(a["e2e"][0]) + residual, rel=1e-12)


def test_the_residual_is_at_least_half_the_mean_step(server):
    """``E[T^2] >= E[T]^2``: mixed steps longer than decode steps only lengthen the wait."""
    a = B._closed_loop_arrays(server, np.array([2.0, 8.0, 64.0]), 2000, 200)
    assert np.all(a["step_residual"] >= a["itl"] / 2.0 * (1 - 1e-12))
    assert np.all(a["step_residual"] > a["itl"] / 2.0)  # 2,000-token prompts: mixed steps are longer


def test_queued_requests_do_not_wait_for_a_step_under_way(server):
    """An offline run keeps every request queued at the engine: each is admitted at a step's
    end, so the engine's throughput is ``c / E2E`` with the E2E of the engine alone."""
    c, _ = B.max_concurrency(server, 1000, 200)
    a = B._closed_loop_arrays(server, c, 1000, 200)
    off = B.offline(server, 1000, 200)
    assert off.requests_per_s == pytest.approx(c / float(a["e2e"][0]), rel=1e-12)
    assert off.ttft_s == pytest.approx(float(a["ttft"][0]), rel=1e-12)


def test_open_loop_occupancy_leaves_out_the_wait(server):
    """Little's law counts the requests in the engine's batch: ``c = rate x E2E in the engine``;
    the wait for a step under way is added to what the client sees, not to the batch."""
    r = B.open_loop(server, 4.0, 1000, 200)
    a = B._closed_loop_arrays(server, r.concurrency, 1000, 200)
    assert 4.0 * float(a["e2e"][0]) == pytest.approx(r.concurrency, rel=0.05)
    assert r.ttft_s > float(a["ttft"][0]) + float(B.step_wait_s(a, a["b"])[0])


def test_a_cached_prefix_is_attended_to_not_recomputed(server):
    """900 of 1,000 prompt tokens cached: the prefill forwards 100 positions that attend to all
    1,000, so it costs more than a bare 100-token prompt and less than the whole one."""
    full, bare = B.prefill_s(server, 1000), B.prefill_s(server, 100)
    hit = B.prefill_s(server, 1000, cached_tokens=900)
    assert bare < hit < full
    assert B.prefill_s(server, 1000, cached_tokens=0.0) == full


def test_a_shared_prefix_shortens_ttft_and_leaves_decode_alone(server):
    """A 96-token shared system prompt of a 600-token request: TTFT falls (fewer positions to
    prefill), decode steps are unchanged (every position is still in context), and no cache
    at all is the same call as before."""
    plain = B.open_loop(server, 6.0, 600, 250)
    assert B.open_loop(server, 6.0, 600, 250, cached_tokens=0.0) == plain
    hit = B.open_loop(server, 6.0, 600, 250, cached_tokens=96.0)
    assert hit.ttft_s < plain.ttft_s
    d = B._closed_loop_arrays(server, 30.0, 600, 250)
    h = B._closed_loop_arrays(server, 30.0, 600, 250, 96.0)
    assert float(h["ttft"][0]) < float(d["ttft"][0])
    assert B.closed_loop(server, 1, 600, 250, cached_tokens=96.0).itl_s == pytest.approx(B.closed_loop(server, 1, 600, 250).itl_s, rel=0.02)


def test_a_rows_cached_prefix_is_priced_and_said():
    """A corpus row with ``cached_prefix_tokens`` (inference-sim's shared system prompts, whole
    16-token blocks) is predicted with that prefix cached, and says so in its assumptions."""
    from capplan.accuracy.corpus import load_corpus
    from capplan.accuracy.predict import predict_serving
    from capplan.accuracy.report import default_engines

    row = next(r for r in load_corpus() if r.id == "vllm0151-s2r61-h100x4-llama31-70b-tp4-codegen-r5-ttft")
    assert row.number("cached_prefix_tokens") == 96
    engine = default_engines()["vllm"]
    hit = predict_serving(row, engine)
    miss = predict_serving(replace(row, fields={k: v for k, v in row.fields.items() if k != "cached_prefix_tokens"}), engine)
    assert hit.value < miss.value
    assert any("96 prompt tokens a prefix-cache hit" in a for a in hit.assumed)
    assert not any("prefix-cache" in a for a in miss.assumed)


def test_no_latency_of_an_overloaded_run_is_scored():
    """A stage whose completions fall below the offered rate (>5% short) was overloaded: its
    latency grows with the run's length, so its latency rows are excluded with that reason
    (its throughput rows stay scored)."""
    from capplan.accuracy.corpus import load_corpus

    rows = [r for r in load_corpus() if r.kind == "serving" and r.get("scenario") == "request_rate"]
    stage = {r.id.rsplit("-", 1)[0]: r for r in rows if r.metric == "requests_per_s"}
    overloaded = {k for k, r in stage.items() if r.measured < 0.95 * (r.number("request_rate") or math.inf)}
    assert overloaded  # inference-sim's codellama-34b reasoning stage: 3.22 of 4 requests/s
    for r in rows:
        if r.id.rsplit("-", 1)[0] in overloaded and r.metric in ("ttft_ms", "e2e_latency_s", "itl_ms", "tpot_ms"):
            assert "overloaded" in r.excluded, r.id
    assert all(not stage[k].excluded for k in overloaded)


def test_family_terms_refit_on_a_small_corpus(tmp_path):
    """``refit --terms``: the request overhead refitted on a family's fit rows of a corpus folder
    (one source's H100 rows here), nothing written; an unknown term is refused by name."""
    import csv
    import shutil

    from capplan.accuracy.corpus import validation_dir
    from capplan.accuracy.refit import fit_family_terms

    src = validation_dir()
    shutil.copy(src / "split.yaml", tmp_path / "split.yaml")
    with (src / "serving_vllm.csv").open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        keep = [r for r in reader if r["id"].startswith("vllm0151-s2r16-")]
        fields = reader.fieldnames
    with (tmp_path / "serving_vllm.csv").open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        w.writerows(keep)
    out = fit_family_terms("vllm", ["request_overhead_s"], folder=tmp_path, write=False)
    assert out["rows"] and all(i.startswith("vllm0151-s2r16-") for i in out["rows"])
    from capplan.engine import load_engine

    fitted = out["terms"]["request_overhead_s"]
    assert 0.0 <= fitted <= 0.1 and fitted != load_engine("vllm-0.19").time.request_overhead_s
    from capplan.errors import InputError

    with pytest.raises(InputError, match=r"^cannot fit speed \(fittable: "):
        fit_family_terms("vllm", ["speed"], folder=tmp_path, write=False)


def test_arrivals_decide_how_often_a_step_is_under_way(server):
    """At the same 8 requests in the engine, a Poisson arrival finds all of the batch decoding
    (busy ``1 - exp(-b)``), a closed-loop client only the other 7 clients' share (``7 b / 8``),
    and a queued request is admitted at a step's end; everything else is the same engine."""
    a = B._closed_loop_arrays(server, 8.0, 1000, 200)
    base = float(a["ttft"][0])
    expect = {"queued": 0.0, "clients": float(B.step_wait_s(a, a["b"] * 7 / 8)[0]), "poisson": float(B.step_wait_s(a, a["b"])[0])}
    for arrivals, wait in expect.items():
        assert B.closed_loop(server, 8, 1000, 200, arrivals=arrivals).ttft_s == pytest.approx(base + wait, rel=1e-12)
    assert 0.0 < expect["clients"] < expect["poisson"]
    from capplan.errors import InputError

    with pytest.raises(InputError, match=r"^arrivals 'bursty': one of clients, poisson, queued$"):
        B.closed_loop(server, 8, 1000, 200, arrivals="bursty")
