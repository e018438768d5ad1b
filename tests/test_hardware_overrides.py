"""Per-hardware overrides of an engine profile's time terms: a chip's kernels and its collective
library reach a different share of its peaks than the family's average chip."""

from __future__ import annotations

import pytest

from capplan.engine import TimeOverrides, load_engine, list_engines
from capplan.hardware import load_hardware
from capplan.modelspec import load_model_spec
from capplan.roofline import RooflineInputs, decode_step


def test_collective_override_prices_every_all_reduce():
    """Llama-3.1-70B (80 layers) at TP 8, one decode token: a step runs ``2 L + 1 = 161``
    all-reduces and one logit gather, each paying ``allreduce_latency_us`` once, so raising the
    latency from 10 to 30 us on this chip adds ``162 x 20 us = 3.24 ms`` and nothing else; the
    same profile on another chip keeps the family value."""
    base = load_engine("vllm-0.19")
    base = base.model_copy(update={"time": base.time.model_copy(update={"allreduce_latency_us": 10.0}), "hardware": {}})
    slow = base.model_copy(update={"hardware": {"mi300x": TimeOverrides(allreduce_latency_us=30.0)}})
    spec = load_model_spec("llama-3.1-70b")
    mi300x, h100 = load_hardware("mi300x"), load_hardware("h100-sxm")

    def comm(engine, hw):
        return float(decode_step(spec, hw, RooflineInputs(tp=8, engine=engine), batch=1, context=1024).comm_time_s)

    assert comm(slow, mi300x) - comm(base, mi300x) == pytest.approx(162 * 20e-6, rel=1e-9)
    assert comm(slow, h100) == pytest.approx(comm(base, h100), rel=1e-12)
    assert slow.time_on("mi300x").allreduce_latency_us == 30.0
    assert slow.time_on("h100-sxm").allreduce_latency_us == 10.0


def test_interconnect_override_scales_the_bytes_term_only():
    """Halving ``interconnect_efficiency`` doubles the bandwidth part of every all-reduce and
    leaves its latency part: with latency set to 0 the whole communication time doubles."""
    base = load_engine("vllm-0.19")
    base = base.model_copy(update={"time": base.time.model_copy(update={"allreduce_latency_us": 0.0, "interconnect_efficiency": 0.8}),
                                   "hardware": {}})
    half = base.model_copy(update={"hardware": {"mi300x": TimeOverrides(interconnect_efficiency=0.4)}})
    spec, hw = load_model_spec("llama-3.1-70b"), load_hardware("mi300x")
    a = float(decode_step(spec, hw, RooflineInputs(tp=8, engine=base), batch=64, context=1024).comm_time_s)
    b = float(decode_step(spec, hw, RooflineInputs(tp=8, engine=half), batch=64, context=1024).comm_time_s)
    assert a > 0 and b == pytest.approx(2 * a, rel=1e-9)


def test_vllm_profiles_share_one_fitted_mi300x_override():
    """Every bundled vLLM profile carries the same MI300X override (the time terms are the
    family's), each term fitted on the same non-held-out MI300X rows, recorded in ``fitted_on``."""
    names = [n for n in list_engines() if n.startswith("vllm")]
    overrides = {n: load_engine(n).hardware.get("mi300x") for n in names}
    assert all(o is not None for o in overrides.values())
    assert len({o.model_dump_json() for o in overrides.values()}) == 1
    engine = load_engine("vllm-0.19")
    for term, value in engine.hardware["mi300x"].model_dump(exclude_none=True).items():
        ids = engine.fitted_on[f"hardware.mi300x.{term}"]
        assert ids and all("mi300x" in i for i in ids), term
        assert value != getattr(engine.time, term)


def test_override_terms_add_the_all_reduce_only_for_tensor_parallel_chips():
    """The full refit and ``refit --hardware`` pick a chip's override terms alike: the kernel
    efficiencies always, the all-reduce terms when at least half of the chip's rows run at TP > 1
    (a chip measured only at TP 1 says nothing about its all-reduce)."""
    from types import SimpleNamespace

    from capplan.accuracy.refit import COLLECTIVE_TERMS, HARDWARE_TERMS, override_terms

    def rows(*tps):
        return [SimpleNamespace(server=SimpleNamespace(pricer=SimpleNamespace(inp=SimpleNamespace(tp=tp)))) for tp in tps]

    assert override_terms(rows(1, 1, 8)) == HARDWARE_TERMS
    assert override_terms(rows(1, 8)) == HARDWARE_TERMS + COLLECTIVE_TERMS
    assert override_terms(rows(8, 8, 8)) == HARDWARE_TERMS + COLLECTIVE_TERMS


def test_a_family_with_few_rows_takes_the_base_families_chip_overrides_of_the_terms_it_does_not_fit():
    """SGLang fits only its host terms (``FAMILY_TERMS``) and keeps vLLM's kernel and all-reduce
    terms, so it keeps vLLM's per-chip values of them too: a base override of a fitted term
    (``bandwidth_efficiency``) stays out, one of a kept term (``allreduce_latency_us``) comes in
    with the base's ``fitted_on`` rows; a chip whose overrides are all fitted terms gets none. The
    bundled ``sglang`` profile carries exactly vLLM's H100 and MI300X overrides of the terms it
    does not fit (what ``write_inherited_overrides`` wrote)."""
    from capplan.accuracy.refit import FAMILY_TERMS, inherited_overrides

    base = load_engine("vllm-0.19").model_copy(update={
        "hardware": {"mi300x": TimeOverrides(bandwidth_efficiency=0.6, allreduce_latency_us=30.0),
                     "b200": TimeOverrides(bandwidth_efficiency=0.9)},
        "fitted_on": {"hardware.mi300x.allreduce_latency_us": ["row-a"], "hardware.mi300x.bandwidth_efficiency": ["row-b"]}})
    hardware, fitted_on = inherited_overrides(base, FAMILY_TERMS)
    assert set(hardware) == {"mi300x"}
    assert hardware["mi300x"].allreduce_latency_us == 30.0 and hardware["mi300x"].bandwidth_efficiency is None
    assert fitted_on == {"hardware.mi300x.allreduce_latency_us": ["row-a"]}

    vllm, sglang = load_engine("vllm-latest"), load_engine("sglang")
    for chip, overrides in vllm.hardware.items():
        kept = {t: v for t, v in overrides.set_terms().items() if t not in FAMILY_TERMS}
        mine = sglang.hardware[chip].set_terms()
        assert mine == kept
        assert all(sglang.fitted_on[f"hardware.{chip}.{t}"] == vllm.fitted_on[f"hardware.{chip}.{t}"] for t in kept)


def test_the_full_refit_starts_from_the_bundled_terms(monkeypatch):
    """``python -m capplan.accuracy.refit`` refines the bundled profiles rather than starting over:
    the vLLM family fit (the first, on ``vllm-0.10``) starts at that profile's bundled time terms
    and chip overrides, with the overrides' ``fitted_on`` rows. The fit's loss is not convex in
    the terms: started from the engine defaults it stopped in a worse optimum (docs/accuracy.md,
    "Which rows fitted which term")."""
    import capplan.accuracy.fit as fit
    from capplan.accuracy.refit import TIME_TERMS, refit

    class Started(Exception):
        pass

    seen = {}

    def capture(engine, rows, terms, **kwargs):
        seen["engine"], seen["terms"] = engine, list(terms)
        raise Started

    monkeypatch.setattr(fit, "fit_time_terms", capture)
    with pytest.raises(Started):
        refit(write=False)
    bundled, start = load_engine("vllm-0.10"), seen["engine"]
    assert seen["terms"] == TIME_TERMS
    assert {t: getattr(start.time, t) for t in TIME_TERMS} == {t: getattr(bundled.time, t) for t in TIME_TERMS}
    assert start.hardware == bundled.hardware and set(bundled.hardware) == {"h100-sxm", "mi300x"}
    assert all(start.fitted_on[k] == v for k, v in bundled.fitted_on.items() if k.startswith("hardware."))
