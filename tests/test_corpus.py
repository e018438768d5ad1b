"""The validation corpus (``validation/``): every scored row cited, every measurement scored once,
held-out rows outside every fit."""

from __future__ import annotations

import json

from collections import defaultdict

import pytest


@pytest.fixture(scope="module")
def rows():
    from capplan.accuracy.corpus import load_corpus

    return load_corpus()


def _measurement(r, model_key="model"):
    """What identifies one published measurement, whichever file entered it (by the model preset,
    or by the checkpoint's Hugging Face id: one file may name a checkpoint by the preset of the
    same architecture, e.g. Llama-3.3-70B as ``llama-3.1-70b``)."""
    keys = (model_key, "hardware", "input_tokens", "output_tokens", "concurrency", "tp", "kv_dtype", "weight_dtype")
    return (r.kind, r.metric, round(r.measured, 4), *(r.get(k) for k in keys))


def test_every_row_is_cited(rows):
    assert rows and all(r.citation and r.source for r in rows)


def test_no_measurement_is_scored_twice(rows):
    """``features.csv`` repeats some rows of the serving corpora; ``validation/split.yaml`` leaves
    one copy out of the score (a duplicate would count twice, and a held-out copy of a fit row
    would leak the fit into the held-out error)."""
    for model_key in ("model", "model_hf_id"):
        seen = defaultdict(list)
        for r in rows:
            if not r.excluded and r.get(model_key):
                seen[_measurement(r, model_key)].append(r)
        twice = [[r.id for r in group] for group in seen.values() if len({r.source for r in group}) > 1]
        assert not twice, (model_key, twice)


def test_held_out_rows_are_in_no_fit(rows):
    """No engine profile term was fitted on a held-out row."""
    from capplan.engine import list_engines, load_engine

    held = {r.id for r in rows if r.held_out}
    for name in list_engines():
        for term, ids in load_engine(name).fitted_on.items():
            assert not held & set(ids), (name, term, sorted(held & set(ids))[:5])


def test_no_held_out_measurement_was_fitted_under_another_id(rows):
    """A held-out row whose twin (the same measurement entered by another source, scored or not) is in an
    engine profile's fit would carry the fit into the held-out error."""
    from capplan.engine import list_engines, load_engine

    fitted = {i for name in list_engines() for ids in load_engine(name).fitted_on.values() for i in ids}
    for model_key in ("model", "model_hf_id"):
        by_measurement = defaultdict(list)
        for r in rows:
            if r.get(model_key):
                by_measurement[_measurement(r, model_key)].append(r)
        leaks = [
            r.id for r in rows
            if r.held_out and not r.excluded and r.get(model_key)
            and any(t.id in fitted for t in by_measurement[_measurement(r, model_key)] if t.source != r.source)
        ]
        assert not leaks, (model_key, leaks)


def test_accuracy_names_the_profile_each_family_was_priced_with():
    """The header's family -> profile map names the profile that priced the family's serving
    rows, not the last KV log's version profile (vLLM serving rows use the default profile)."""
    from capplan.accuracy.corpus import load_corpus
    from capplan.accuracy.report import default_engines, run_accuracy
    from capplan.engine import DEFAULT_ENGINE

    rows = [r for r in load_corpus() if r.id.startswith(("vllm-v0101-qwen2-7b", "vllm0110-gpustack-h100x1-qwen3-8b-tp1-sharegpt-c1"))]
    report = run_accuracy(rows, default_engines())
    assert report.engines["vllm"] == DEFAULT_ENGINE
    assert "vllm start-up logs" in report.engines
    assert {r.engine_profile for r in report.rows if r.kind == "serving" and r.predicted} == {DEFAULT_ENGINE}


def test_a_dtype_fallback_is_an_assumption_of_its_row_not_a_warning():
    """FP8 weights on a chip without an FP8 unit are priced on BF16 GEMMs: ``capplan accuracy``
    records that in the row's ``assumed`` list instead of warning the reader."""
    import warnings

    from capplan.accuracy.corpus import load_corpus
    from capplan.accuracy.report import default_engines, run_accuracy

    rows = [r for r in load_corpus() if r.kind == "serving" and r.get("hardware", "").startswith("a100")
            and "fp8" in (r.get("weight_dtype") or "")][:3]
    assert rows, "the corpus has FP8 rows on A100s"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = run_accuracy(rows, default_engines())
    assert any("no fp8 tensor unit" in a for r in report.rows for a in r.assumed)


def test_a_start_up_log_with_a_drafter_is_priced_with_it(rows):
    """The EAGLE log (``vllm-llama31-8b-h100-eagle``): vLLM sized its cache with the one-layer
    draft head as a 33rd KV layer (135,168 bytes a position: 410,128 positions exactly) and its
    weights loaded before profiling. Predicted with the drafter (``feature_settings.yaml``), the
    tokens and the available GiB both fall (the draft layer's KV and weights), and the assumption
    is stated; without it the prediction is the plain target's."""
    from dataclasses import replace

    from capplan.accuracy import predict
    from capplan.accuracy.report import default_engines

    engine = default_engines()["vllm-0.10"]
    row = next(r for r in rows if r.id == "vllm-llama31-8b-h100-eagle:kv_cache_tokens")
    with_draft = predict.prepare_kv(row, engine)
    assert with_draft.draft is not None and with_draft.draft.method == "eagle"
    plain = replace(with_draft, draft=None)
    assert with_draft.evaluate(engine) < plain.evaluate(engine)
    assert abs(with_draft.evaluate(engine) / row.measured - 1) < abs(plain.evaluate(engine) / row.measured - 1)
    assert any("neither changes the KV budget" in a for a in with_draft.assumed)
    gib = next(r for r in rows if r.id == "vllm-llama31-8b-h100-eagle:available_kv_gib")
    g = predict.prepare_kv(gib, engine)
    assert g.evaluate(engine) < replace(g, draft=None).evaluate(engine)


def test_warm_up_tails_are_excluded_by_their_rule_and_only_they():
    """A first load stage's p99 is left out exactly when the same experiment's next stage, offered
    more requests per second, has a p99 of the same metric more than 10% shorter (a tail that
    falls as the load rises is warm-up, not a steady state): the rule, recomputed from the rows'
    notes, gives the same rows ``validation/split.yaml`` lists, and every such listing states it."""
    import re
    from collections import defaultdict

    from capplan.accuracy.corpus import load_corpus, load_split

    rows = load_corpus()
    stages: dict[tuple, dict[str, object]] = defaultdict(dict)
    for r in rows:
        notes = r.get("notes") or ""
        m = re.search(r"stage_index (\d)", notes) or re.search(r"inference-perf stage (\d)", notes)
        if not r.id.endswith("_p99") or not m:
            continue
        folder = re.search(r"experiment folder '([^']+)'", notes)
        exp = folder.group(1) if folder else re.sub(r"-r\d+(p\d)?-", "-", r.id.rsplit("-", 1)[0] + "-")
        stages[(r.source, exp, r.metric)][m.group(1)] = r
    rule = {v["0"].id for v in stages.values() if "0" in v and "1" in v and v["1"].measured < 0.9 * v["0"].measured}
    listed = {k for k, why in load_split()["excluded_rows"].items() if str(why).startswith("first load stage")}
    assert rule and rule == listed


def test_accuracy_kind_is_checked_and_its_help_lists_every_kind(rows):
    """--kind takes the kinds the corpus holds (each has rows) and names them all in its help; an
    unknown kind is a one-line error listing them, not an empty table that passes a gate."""
    from typer.testing import CliRunner

    from capplan.accuracy.corpus import KINDS, KIND_OF_FILE
    from capplan.cli.app import app

    assert set(KINDS) == set(KIND_OF_FILE.values()) and {r.kind for r in rows} == set(KINDS)
    import typer.main

    command = typer.main.get_command(app).commands["accuracy"]  # type: ignore[attr-defined]
    help_text = next(p for p in command.params if p.name == "kind").help
    assert all(k in help_text for k in KINDS), help_text
    r = CliRunner().invoke(app, ["accuracy", "--kind", "bogus", "--max-median-error", "0.01"])
    assert r.exit_code == 2
    assert r.stderr.strip() == f"Error: --kind bogus: unknown kind (allowed: {', '.join(KINDS)})"


def test_an_accuracy_bound_over_no_rows_fails():
    """A filter that matches nothing says so; a bound checked over zero rows fails (exit 1)
    rather than passing a CI gate on an empty table."""
    from typer.testing import CliRunner

    from capplan.cli.app import app

    r = CliRunner().invoke(app, ["accuracy", "--source", "nonesuch", "--max-median-error", "0.01"])
    assert r.exit_code == 1, r.output
    assert "no corpus rows match --source nonesuch" in r.stderr
    assert "accuracy gate failed: no rows matched" in r.stderr
    r = CliRunner().invoke(app, ["accuracy", "--source", "nonesuch"])
    assert r.exit_code == 0 and "no corpus rows match --source nonesuch" in r.stderr  # no bound: said, not failed


def test_accuracy_output_format_follows_the_file_extension(tmp_path):
    """``-o x.json`` writes the JSON object and ``-o x.csv`` the rows (``--format`` defaults to the
    extension, as every other command's does); a clash with ``--format`` is refused."""
    from typer.testing import CliRunner

    from capplan.cli.app import app

    r = CliRunner().invoke(app, ["accuracy", "--kind", "kv", "-o", str(tmp_path / "a.json")])
    assert r.exit_code == 0, r.output
    assert set(json.loads((tmp_path / "a.json").read_text())) >= {"rows", "summary"}
    r = CliRunner().invoke(app, ["accuracy", "--kind", "kv", "-o", str(tmp_path / "a.csv")])
    assert (tmp_path / "a.csv").read_text().startswith("id,source,kind,metric")
    r = CliRunner().invoke(app, ["accuracy", "--kind", "kv", "-o", str(tmp_path / "b.csv"), "--format", "json"])
    assert r.exit_code == 2 and "is a .csv file but --format is json" in r.stderr


def test_a_family_fit_claims_only_the_terms_it_fitted(rows):
    """SGLang's profile fits only the host terms (``refit.FAMILY_TERMS``) on its few rows; its kernel
    efficiencies and collectives are vLLM's fitted values, so their ``fitted_on`` must name the vLLM
    rows that set them, not the SGLang rows that never moved them (validation's record of which rows
    fitted which term)."""
    from capplan.accuracy.predict import engine_family
    from capplan.accuracy.refit import FAMILY_TERMS, FEATURE_TIME_TERMS
    from capplan.engine import load_engine

    by_id = {r.id: r for r in rows}
    sglang, vllm = load_engine("sglang"), load_engine("vllm-0.19")
    for key, ids in sglang.fitted_on.items():
        section, _, term = key.partition(".")
        if section != "time" or term in FEATURE_TIME_TERMS:
            continue
        families = {engine_family(by_id[i].get("engine")) for i in ids if i in by_id}
        if term in FAMILY_TERMS:
            assert families == {"sglang"}, (term, families)
        else:
            assert getattr(sglang.time, term) == getattr(vllm.time, term), term
            assert ids == vllm.fitted_on[key], term
            assert families == {"vllm"}, (term, families)


def test_accuracy_groups_by_the_engine_profile_that_priced_each_row():
    """``--by engine`` summarises per engine profile: the LMSYS gpt-oss rows (SGLang) land in the
    ``sglang`` group, four rows, and no other group appears for them."""
    import re

    from typer.testing import CliRunner

    from capplan.cli.app import app

    r = CliRunner().invoke(app, ["accuracy", "--source", "lmsys-blog-2025-08-gpt-oss", "--by", "engine"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "Error by engine" in r.output
    groups = re.findall(r"│ (\S+)\s+│\s+(\d+) │", r.output)
    assert ("sglang", "4") in groups and not any(g.startswith(("vllm", "trtllm")) for g, _ in groups), groups


def test_a_chip_where_an_engines_published_rows_are_far_off_is_named_on_stderr(tmp_path):
    """``validation/coverage.yaml`` (generated with the docs) records, per engine, chip and
    architecture (dense or MoE), the published serving rows capplan predicts and their error.
    SGLang on MI300X: 16 held-out MoE rows of the SGLang Cookbook (DeepSeek-V3.1), median signed
    error +203%, 19% within 2x, so ``capplan roofline`` of a MoE model with ``--engine sglang -H
    mi300x`` says so on standard error; a dense model there has no such rows and prints nothing,
    as does vLLM on H100 (dense rows +5%, 92% within 2x) and a profile the user calibrated, which
    those rows did not test. The thresholds: at least 5 rows, and |median| > 25% or fewer than 75%
    within 2x."""
    from typer.testing import CliRunner

    from capplan.accuracy.coverage import Coverage, known_error
    from capplan.accuracy.refit import write_profile
    from capplan.cli.app import app
    from capplan.engine import load_engine

    c = known_error("sglang", "mi300x", moe=True)
    assert c is not None and c.rows >= 5 and c.median_signed_error > 1.0 and c.architecture == "moe"
    assert known_error("sglang", "mi300x", moe=False) is None
    assert known_error("vllm", "h100-sxm", moe=False) is None and known_error("sglang", "no-such-chip", moe=True) is None
    assert not Coverage("e", "h", "dense", 4, 0, 3.0, 0.0).warrants_warning
    assert Coverage("e", "h", "moe", 5, 0, -0.26, 1.0).warrants_warning and Coverage("e", "h", "dense", 5, 0, 0.0, 0.7).warrants_warning
    assert not Coverage("e", "h", "dense", 5, 0, 0.25, 0.75).warrants_warning

    args = ["roofline", "--batch", "1", "--context", "1024"]
    far = CliRunner().invoke(app, [*args, "-m", "qwen3-30b-a3b", "-H", "mi300x", "--engine", "sglang"])
    assert far.exit_code == 0
    assert "Warning: engine profile sglang: on mi300x, 16 published sglang serving measurements of MoE models" in far.stderr
    dense = CliRunner().invoke(app, [*args, "-m", "llama-3.1-8b", "-H", "mi300x", "--engine", "sglang"])
    assert dense.exit_code == 0 and "Warning" not in dense.stderr
    near = CliRunner().invoke(app, [*args, "-m", "llama-3.1-8b", "-H", "h100-sxm"])
    assert near.exit_code == 0 and "Warning" not in near.stderr
    mine = load_engine("sglang").model_copy(update={"name": "my-sglang", "calibration": "calibrated on my files"})
    path = write_profile(mine, tmp_path)
    own = CliRunner().invoke(app, [*args, "-m", "qwen3-30b-a3b", "-H", "mi300x", "--engine", str(path)])
    assert own.exit_code == 0 and "Warning" not in own.stderr
