"""Serving rows priced with what their sources state: the server's scheduler limits
(``max_num_seqs``, ``max_num_batched_tokens``) and the arrival process (``burstiness``); the
mean prefill queue at a constant rate; and latency rows predicted saturated, counted as misses."""

from __future__ import annotations

import math
import re
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from capplan import benchmark as B
from capplan.engine import default_engine
from capplan.errors import InputError
from capplan.hardware import load_hardware
from capplan.modelspec import load_model_spec


@pytest.fixture(scope="module")
def server() -> B.Server:
    return B.server_for(load_model_spec("llama-3.1-8b"), load_hardware("h100-sxm"), engine=default_engine())


@pytest.fixture(scope="module")
def corpus():
    from capplan.accuracy.corpus import load_corpus

    return {r.id: r for r in load_corpus()}


def test_poisson_arrivals_are_the_default(server):
    """``burstiness`` 1 is Poisson, the M/D/1 queue the open loop always had: the same result."""
    assert B.open_loop(server, 6.0, 1000, 200, burstiness=1.0) == B.open_loop(server, 6.0, 1000, 200)


def test_the_prefill_queue_follows_kingman(server):
    """Kingman's mean wait for fixed-length prefills scales with the gaps' squared coefficient of
    variation, ``1 / burstiness``: a constant rate (``inf``) waits for no earlier prefill, gamma
    shape 2 half of Poisson's ``rho / (2 (1 - rho))`` prefills, which is the whole difference in
    TTFT (the batch and the decode steps do not change)."""
    rate, P, O = 20.0, 1000, 200
    poisson = B.open_loop(server, rate, P, O)
    even = B.open_loop(server, rate, P, O, burstiness=math.inf)
    shape2 = B.open_loop(server, rate, P, O, burstiness=2.0)
    rho = rate / B.offline(server, P, O).requests_per_s
    wait = rho / (2.0 * (1.0 - rho)) * B.prefill_s(server, P)
    assert wait > 0.0
    assert poisson.ttft_s - even.ttft_s == pytest.approx(wait, rel=1e-9)
    assert poisson.ttft_s - shape2.ttft_s == pytest.approx(wait / 2.0, rel=1e-9)
    assert even.concurrency == poisson.concurrency and even.itl_s == poisson.itl_s


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan])
def test_a_burstiness_that_is_not_positive_is_refused(server, bad):
    with pytest.raises(InputError, match="burstiness"):
        B.open_loop(server, 6.0, 1000, 200, burstiness=bad)


def test_stated_limits_match_the_notes(corpus):
    """The scheduler-limit columns hold exactly what each row's notes quote (the inference-sim
    study's ``max_num_seqs 128`` and its per-run ``max_num_batched_tokens``; the ROCm dev-docker
    tables' "Max Num Seqs" and ``--max-num-batched-tokens``; InferenceX's SGLang server flags
    ``--max-running-requests`` and ``--chunked-prefill-size``), and no row states one without them."""
    pats = {"max_num_seqs": r"(?:max_num_seqs|Max Num Seqs|--max-running-requests) (\d+)",
            "max_num_batched_tokens": r"(?:max_num_batched_tokens|--max-num-batched-tokens|--chunked-prefill-size) (\d+)"}
    stated = 0
    for r in corpus.values():
        if r.kind != "serving":
            continue
        for col, pat in pats.items():
            found = set(re.findall(pat, r.get("notes") or ""))
            assert len(found) <= 1, r.id
            want = float(found.pop()) if found else None
            assert r.number(col) == want, (r.id, col)
            stated += want is not None
    assert stated == 2 * 430 + 2 * 8 + 2 * 12


def test_the_inference_sim_runs_arrive_at_a_constant_rate(corpus):
    """inference-perf sends at a constant rate (validation/sources/serving_vllm.md): every
    inference-sim open-loop row says ``burstiness`` inf; rows whose notes say Poisson say 1."""
    for r in corpus.values():
        if r.get("scenario") != "request_rate" or r.kind != "serving":
            continue
        if (r.source or "").startswith("inference-sim"):
            assert r.number("burstiness") == math.inf, r.id
        elif "poisson" in (r.get("notes") or "").lower():
            assert r.number("burstiness") == 1.0, r.id


def test_a_rows_stated_limits_build_its_server(corpus):
    """An inference-sim row's server runs the study's 128 sequences and its run's token budget
    (2,048 here), not the engine profile's defaults for an H100 (1,024 and 8,192)."""
    from capplan.accuracy.predict import prepare_serving
    from capplan.accuracy.report import default_engines

    engine = default_engines()["vllm"]
    row = corpus["vllm0151-isimtrain-h100x1-llama2-7b-tp1-codegen-r5-ttft"]
    assert (row.number("max_num_seqs"), row.number("max_num_batched_tokens")) == (128, 2048)
    s = prepare_serving(row, engine).server
    assert (s.max_num_seqs, s.max_num_batched_tokens) == (128, 2048)
    bare = replace(row, fields={k: v for k, v in row.fields.items() if k not in ("max_num_seqs", "max_num_batched_tokens")})
    d = prepare_serving(bare, engine).server
    assert (d.max_num_seqs, d.max_num_batched_tokens) == (1024, 8192)


def test_a_constant_rate_rows_mean_ttft_has_no_prefill_queue(corpus):
    """The same inference-sim row predicted as a constant-rate run and, without its
    ``burstiness``, as Poisson (said in its assumptions): the constant rate's TTFT is shorter by
    the M/D/1 prefill queue, and the end-to-end latency by the same wait."""
    from capplan.accuracy.predict import predict_serving
    from capplan.accuracy.report import default_engines

    engine = default_engines()["vllm"]
    row = corpus["vllm0151-isimtrain-h100x1-llama2-7b-tp1-codegen-r5-ttft"]
    even = predict_serving(row, engine)
    poisson = predict_serving(replace(row, fields={k: v for k, v in row.fields.items() if k != "burstiness"}), engine)
    assert even.value < poisson.value
    assert any("constant rate" in a for a in even.assumed)
    assert any("Poisson arrivals (burstiness 1; the arrival process is not stated)" in a for a in poisson.assumed)


def test_saturated_latency_rows_are_counted_and_fail_the_worst_error_gate():
    """A latency row the model finds saturated has no error to summarise: the report counts it
    apart (``saturated``), the table says so, and ``--max-error`` fails on it, as on any row
    beyond the bound."""
    from capplan.accuracy.predict import SATURATED
    from capplan.accuracy.report import AccuracyReport, RowResult
    from capplan.cli import accuracy_cmd

    def row(i: str, held: bool, predicted: float | None, why: str = "") -> RowResult:
        err = None if predicted is None else predicted / 100.0 - 1.0
        return RowResult(i, "s", "serving", "ttft_ms", "ms", "h100-sxm", "m", "vllm-0.15", predicted, 100.0, err,
                         None if err is None else abs(err), held, "c", why)

    report = AccuracyReport([row("a", True, 101.0), row("b", True, None, f"{SATURATED}: latency grows with the run's length"),
                             row("c", False, None, "weight dtype not stated")], {})
    assert report.saturated() == {"n": 1, "held_out": 1, "ids": ["b"]}
    assert report.as_dict()["saturated"]["n"] == 1
    accuracy_cmd._gate(report, 0.5, None, None)  # the median of the predicted rows passes
    import typer

    with pytest.raises(typer.Exit):
        accuracy_cmd._gate(report, None, None, 0.5)


def test_the_shipped_report_counts_its_saturated_rows(monkeypatch):
    """``capplan accuracy``'s table names the saturated latency rows and the JSON lists them.
    Both go through the command; the shipped report is computed once for this test and the
    generated pages (``cli.reference.shipped_report``) and handed to the command in place of a
    fresh run over the whole corpus."""
    import json

    import capplan.accuracy
    from capplan.cli.app import app
    from capplan.cli.reference import shipped_report

    report = shipped_report()
    monkeypatch.setattr(capplan.accuracy, "run_accuracy", lambda *a, **k: report)
    out = CliRunner().invoke(app, ["accuracy", "--format", "json"])
    assert out.exit_code == 0, out.output
    sat = json.loads(out.output)["saturated"]
    assert sat["n"] == len(sat["ids"])
    table = CliRunner().invoke(app, ["accuracy"], env={"COLUMNS": "200"})
    line = f"{sat['n']} latency rows ({sat['held_out']} held out) are predicted saturated"
    assert (line in table.output) == (sat["n"] > 0)


def test_a_saturated_run_of_stated_length_is_simulated(corpus):
    """DataCrunch's Llama-3.3-70B at 16 requests/s outruns the engine (3,200 requests completed in
    383 s). Without its ``num_prompts`` (and so without its requests' drawn lengths) the row is
    saturated; with it the run is replayed through the serving simulator and the row's statistic
    read from it (the ITL row is a median, the end-to-end row a mean), and the prediction says how
    it was made."""
    from capplan.accuracy.predict import SATURATED, predict_serving
    from capplan.accuracy.report import default_engines

    engine = default_engines()["sglang"]
    row = corpus["sglang-dch200-h200x4-llama33-70b-tp4-rand1024-1024-r16-itl"]
    assert row.number("num_prompts") == 3200 and row.get("statistic") == "median"
    p = predict_serving(row, engine)
    assert p.value is not None and p.value > 0
    assert any("3,200 requests (num_prompts) replayed through the serving simulator" in a and "median" in a for a in p.assumed)
    bare = replace(row, fields={**{k: v for k, v in row.fields.items() if k != "num_prompts"}, "lengths": "varying"})
    q = predict_serving(bare, engine)
    assert q.value is None and q.reason.startswith(SATURATED)
    mean = predict_serving(replace(row, fields={**row.fields, "statistic": "mean"}), engine)
    assert mean.value != p.value


@pytest.mark.parametrize("column, value, ok", [
    ("burstiness", "inf", True), ("burstiness", "0.5", True), ("burstiness", "fast", False), ("burstiness", "0", False),
    ("max_num_seqs", "128", True), ("max_num_seqs", "12.5", False), ("max_num_batched_tokens", "-1", False),
    ("sampler", "flashinfer", True), ("sampler", "triton", False), ("cached_prefix_tokens", "nan", False),
    ("num_prompts", "3200", True), ("num_prompts", "0", False), ("num_prompts", "12.5", False),
    ("statistic", "median", True), ("statistic", "p50", False),
    ("lengths", "fixed", True), ("lengths", "varying", True), ("lengths", "sglang-random", True), ("lengths", "random", False),
    ("random_input_len", "1000", True), ("random_input_len", "0", False), ("random_output_len", "1.5", False),
    ("random_range_ratio", "0.8", True), ("random_range_ratio", "1.5", False), ("seed", "0", True), ("seed", "-1", False),
])
def test_a_setting_column_outside_what_it_allows_is_refused(tmp_path, column, value, ok):
    """A user's corpus with a setting the model reads: a value it cannot read is a one-line error
    naming the file, the line, the column and what it allows (it would otherwise be taken as not
    stated, and priced with the default)."""
    from capplan.accuracy.corpus import SETTING_COLUMNS, load_corpus

    (tmp_path / "serving.csv").write_text(
        f"id,source,citation,metric,unit,measured,{column}\nr1,s,c,ttft_ms,ms,20,{value}\n", encoding="utf-8")
    if ok:
        assert load_corpus(tmp_path)[0].get(column) == value
    else:
        with pytest.raises(InputError, match=re.escape(f"serving.csv:2: {column} '{value}': expected {SETTING_COLUMNS[column]}")):
            load_corpus(tmp_path)


def test_the_factor_gate_counts_rows_off_either_way(capsys):
    """``--max-factor F`` fails when a prediction is more than F times the measurement or less
    than 1/F of it, on the held-out rows when there are any: 250 and 40 against 100 are both off
    by 2.5x, 150 is within 2x; the not-held-out 1,000 is not gated while held-out rows exist."""
    import typer

    from capplan.accuracy.report import AccuracyReport, RowResult
    from capplan.cli import accuracy_cmd

    def row(i: str, held: bool, predicted: float) -> RowResult:
        err = predicted / 100.0 - 1.0
        return RowResult(i, "s", "serving", "output_tokens_per_s", "tokens/s", "h100-sxm", "m", "vllm-0.15", predicted,
                         100.0, err, abs(err), held, "c", "")

    report = AccuracyReport([row("a", True, 250.0), row("b", True, 40.0), row("c", True, 150.0), row("d", False, 1000.0)], {})
    assert [r.id for r in report.beyond_factor(2.0)] == ["a", "b", "d"]
    assert [r.id for r in report.beyond_factor(2.0, lambda r: r.held_out)] == ["a", "b"]
    accuracy_cmd._gate(report, None, None, None, 3.0)  # 2.5x passes a 3x bound; d (10x) is not held out
    with pytest.raises(typer.Exit):
        accuracy_cmd._gate(report, None, None, None, 2.0)
    err = capsys.readouterr().err
    assert "accuracy gate failed on the held-out rows: 2 rows off by more than 2x (worst: a, predicted 250 against 100 tokens/s)" in err


def test_a_run_shorter_than_its_steady_state_is_replayed(corpus):
    """TensorRT-LLM 0.14 through Triton, Llama-3.1-70B on 4 x H100, 202/214 tokens at 32 requests/s
    for 500 requests (perf-overview, 'Online Serving Measurements'): 42 ms ITL and 116 ms TTFT
    measured. The closed form's steady state holds ~765 requests (rate x end-to-end latency), more
    than the 500 the run sends in 15.6 s, so that state never exists in the run (its ITL 110 ms,
    TTFT 417 ms: -62%, -72%). Replayed through the simulator the run gives an ITL within 15% and a
    TTFT within 30%, and the prediction says why it was replayed. At 16 requests/s the steady
    state fits in the run and the closed form prices it."""
    from capplan.accuracy.predict import SHORT_RUN, Unsupported, predict_serving, prepare_serving
    from capplan.accuracy.report import default_engines

    engine = default_engines()["trtllm"]
    base = "trtllm014-serve-h100x4-llama31-70b-bf16-tp4-202-214-"
    with pytest.raises(Unsupported, match=SHORT_RUN):
        prepare_serving(corpus[base + "qps32-itl"], engine).evaluate()
    itl, ttft = predict_serving(corpus[base + "qps32-itl"], engine), predict_serving(corpus[base + "qps32-ttft"], engine)
    assert itl.value == pytest.approx(42.0, rel=0.15) and ttft.value == pytest.approx(116.0, rel=0.30)
    assert any(a.startswith(SHORT_RUN) and "500 requests (num_prompts) replayed" in a for a in itl.assumed)
    slower = prepare_serving(corpus[base + "qps16-ttft"], engine)
    assert slower.evaluate() == predict_serving(corpus[base + "qps16-ttft"], engine).value


def test_data_parallel_attention_over_tensor_parallel_moe_is_refused(corpus):
    """SGLang ``--enable-dp-attention --dp 8`` without expert parallelism runs attention on eight
    one-GPU ranks and the MoE layers tensor-parallel over all eight GPUs. capplan models a MoE
    model's data-parallel attention with expert parallelism only, so such a row (tp 1, dp 8, ep 1)
    is unsupported with that reason, not priced as one GPU holding the whole model, nor as TP 8
    attention, which keeps a copy of DeepSeek's single MLA KV head on every GPU where the
    data-parallel ranks would each hold their own sequences' KV."""
    from dataclasses import replace

    from capplan.accuracy.predict import predict_serving
    from capplan.accuracy.report import default_engines

    row = corpus["sglang053-gpustack-h200x8-deepseek-v3-dpattn-tp8-rand2000-100-inf-tpot"]
    dp_row = replace(row, fields={**row.fields, "tp": "1", "dp": "8", "ep": "1"})
    p = predict_serving(dp_row, default_engines()["sglang"])
    assert p.value is None
    assert p.reason.startswith("data-parallel attention (dp 8) with tensor-parallel MoE layers (ep 1) is not modelled")
    assert predict_serving(row, default_engines()["sglang"]).value is not None


def test_an_open_loop_run_over_several_instances_is_dealt_round_robin(corpus):
    """A row whose GPUs hold two engine instances (``num_gpus`` twice ``tp``) at 8 requests/s is
    priced as two instances at 4 requests/s each, with gaps of gamma shape 2 (Poisson dealt
    round robin): its TTFT is that of one instance at 4/s and shape 2, and its output rate the
    whole 8/s."""
    from dataclasses import replace

    from capplan.accuracy.predict import predict_serving
    from capplan.accuracy.report import default_engines

    engine = default_engines()["vllm"]
    row = corpus["vllm0151-isimtrain-h100x1-llama2-7b-tp1-codegen-r5-ttft"]
    one = {k: v for k, v in row.fields.items() if k != "num_prompts"}
    two = replace(row, fields={**one, "num_gpus": "2", "request_rate": "8", "burstiness": "1"})
    half = replace(row, fields={**one, "num_gpus": "1", "request_rate": "4", "burstiness": "2"})
    assert predict_serving(two, engine).value == pytest.approx(predict_serving(half, engine).value, rel=1e-9)
    tput = replace(two, metric="output_tokens_per_s", unit="tokens/s")
    assert predict_serving(tput, engine).value == pytest.approx(8 * float(row.fields["output_tokens"]), rel=1e-9)


def test_a_closed_loop_runs_first_wave_weighs_in_its_mean_ttft(corpus):
    """The SGLang Cookbook's Qwen3-235B-A22B run on 8 x B200 at 16 clients sends 80 requests of
    ~3,750/520 tokens: the first 16 at once, the other 64 as requests complete. Priced at its mean
    lengths (``lengths`` ``varying``, as a run whose draws cannot be repeated is), the steady state
    (the median row, which a wave of a fifth of the run does not move) is ~124 ms; the 16 sent at
    once queue for ~60,000 prompt positions, a mean of ~374 ms in the serving simulator; the mean
    row weighs them 16/80: 0.8 x 124 + 0.2 x 374 = ~174 ms (284 ms measured). The assumption says
    so; the median row and a row that does not state its run length keep the steady state."""
    from dataclasses import replace

    from capplan.accuracy.predict import FIRST_WAVE, first_wave_share, predict_serving
    from capplan.accuracy.report import default_engines

    engine = default_engines()["sglang"]
    base = "sglang056-cookbook-b200x8-qwen3-235b-bf16-tp8-8000-1000-c16-ttft"
    mean, median = (replace(corpus[i], fields={**corpus[i].fields, "lengths": "varying"}) for i in (base, base + "-median"))
    assert first_wave_share(mean) == pytest.approx(0.2) and first_wave_share(median) == 0.0
    steady = predict_serving(median, engine).value
    waved = predict_serving(mean, engine)
    assert steady == pytest.approx(124.0, rel=0.05)
    assert (waved.value - 0.8 * steady) / 0.2 == pytest.approx(374.0, rel=0.05)
    assert any(a.startswith(FIRST_WAVE) and "first 16 of its 80 requests" in a for a in waved.assumed)
    unstated = replace(mean, fields={k: v for k, v in mean.fields.items() if k != "num_prompts"})
    assert first_wave_share(unstated) == 0.0
    assert predict_serving(unstated, engine).value == pytest.approx(steady, rel=1e-9)


def test_a_burst_of_stated_size_is_replayed(corpus):
    """TensorRT-LLM 0.14's QPS INF run of the 8B on one H100: 500 requests of 467/256 tokens sent
    at once, 3,335 ms mean TTFT and 39 ms ITL measured. Replayed with every arrival at 0 (KV and
    the engine's batch limit admitting them in waves), the TTFT comes out 2.46 s (+35%) and the ITL
    37 ms (+5%); the prediction names the replay. A burst of variable-length requests (GPUStack's
    ShareGPT runs, ``lengths`` ``varying``: their lengths are means) stays unsupported. GPUStack's random-dataset
    burst of 100 DeepSeek-R1 requests of 32,000/100 tokens on 8 x H200 (vLLM 0.11.0), whose totals
    (3,199,900 input and 10,000 output tokens over 100 requests) show fixed lengths, is replayed:
    101,352 ms mean TTFT measured, about 100 s predicted (the 100 prompts prefilled one after
    another, ~2 s each, so the mean waits for half of them)."""
    from capplan.accuracy.predict import BURST, Unsupported, predict_serving, prepare_serving
    from capplan.accuracy.report import default_engines

    engine = default_engines()["trtllm"]
    base = "trtllm014-serve-h100x1-llama31-8b-bf16-tp1-467-256-qpsinf-"
    ttft, itl = predict_serving(corpus[base + "ttft"], engine), predict_serving(corpus[base + "itl"], engine)
    assert ttft.value == pytest.approx(3335.0 / 1.35, rel=0.05) and itl.value == pytest.approx(39.0 / 1.05, rel=0.05)
    assert any(a.startswith(BURST) and "500 requests (num_prompts) replayed" in a for a in ttft.assumed)
    with pytest.raises(Unsupported, match=BURST):
        prepare_serving(corpus[base + "ttft"], engine).evaluate()
    variable = next(r for r in corpus.values() if r.source == "gpustack-performance-lab" and r.metric == "ttft_ms"
                    and r.get("scenario") == "offline_max" and r.get("lengths") == "varying")
    p = predict_serving(variable, default_engines()["vllm"])
    assert p.value is None and p.reason.startswith("latency with every request queued at once")
    fixed_row = corpus["vllm0110-gpustack-h200x8-deepseek-v3-tp8-rand32000-100-inf-ttft"]
    assert fixed_row.get("lengths") == "fixed"
    fixed = predict_serving(fixed_row, default_engines()["vllm"])
    assert fixed.value == pytest.approx(101351.99, rel=0.10)
    assert any(a.startswith(BURST) and "100 requests (num_prompts) replayed" in a for a in fixed.assumed)


def test_a_burst_throughput_includes_its_ramp_and_drain(corpus):
    """TensorRT-LLM 0.14's QPS INF run of the 8B on one H100 with 202/214 tokens: 500 requests
    sent at once, 8,291 output tokens/s measured. The steady-state offline closed form prices a
    run that never drains (~19,000 tokens/s, +130%); the replay divides the run's 500 x 214
    output tokens by its span, first arrival to last completion, which includes the prefill ramp
    and the drain: lower than the closed form, and within 2x of the measurement."""
    from dataclasses import replace

    from capplan.accuracy.predict import BURST, predict_serving, prepare_serving
    from capplan.accuracy.report import default_engines

    engine = default_engines()["trtllm"]
    row = corpus["trtllm014-serve-h100x1-llama31-8b-bf16-tp1-202-214-qpsinf-out-tput"]
    replayed = predict_serving(row, engine)
    steady = prepare_serving(replace(row, fields={k: v for k, v in row.fields.items() if k != "num_prompts"}), engine).evaluate()
    assert replayed.value < steady
    assert 0.5 < replayed.value / row.measured < 2.0 < steady / row.measured
    assert any(a.startswith(BURST) and "first arrival to the last completion" in a for a in replayed.assumed)


def test_sglang_random_lengths_are_the_runs_draws():
    """``sglang.bench_serving --dataset-name random`` draws its lengths from NumPy's legacy
    generator seeded with ``--seed`` (default 1), prompts before outputs, uniform on
    ``[max(int(L_in x ratio), 1), L_in]`` and ``[int(L_out x ratio), L_out]``. Drawn again, they
    give the totals the SGLang Cookbook's runs print (``validation/serving_vllm.csv``, the
    ``sgl-cookbook-7b5bd9c`` rows): 10 requests of 1000/1000 at range ratio 0, 6,101 prompt and
    4,210 output tokens; 80 requests, 39,668 and 40,725 (means 495.85 / 509.06); 80 of 8000/1000,
    means 3,750.25 / 519.86. Range ratio 1 gives every request the stated lengths."""
    from capplan.sim.serving import sglang_random_lengths

    p, o = sglang_random_lengths(10, 1000, 1000)
    assert (p.sum(), o.sum()) == (6101, 4210)
    p, o = sglang_random_lengths(80, 1000, 1000, 0.0, 1)
    assert (p.sum(), o.sum()) == (39668, 40725) and p.min() >= 1 and o.max() <= 1000
    p, o = sglang_random_lengths(80, 8000, 1000)
    assert (p.mean(), o.mean()) == (3750.25, 519.8625)
    p, o = sglang_random_lengths(5, 128, 4, 1.0, 7)
    assert p.tolist() == [128] * 5 and o.tolist() == [4] * 5
    assert sglang_random_lengths(10, 1000, 1000, 0.0, 2)[0].sum() != 6101


def test_clients_send_each_request_when_one_in_flight_completes():
    """Two clients, requests finishing at 5, 3, 4 and 10 s after the run's start: requests 0 and 1
    start at 0; request 2 when the first of them completes (3 s); request 3 when the next one
    does (request 2 at 4 s). One client sends each request when the one before it completes; as
    many clients as requests send them all at once."""
    import numpy as np

    from capplan.sim.serving import client_arrivals

    finish = np.array([5.0, 3.0, 4.0, 10.0])
    assert client_arrivals(finish, 2).tolist() == [0.0, 0.0, 3.0, 4.0]
    seq = np.array([2.0, 5.0, 9.0])
    assert client_arrivals(seq, 1).tolist() == [0.0, 2.0, 5.0]
    assert client_arrivals(finish, 4).tolist() == [0.0] * 4


def test_a_closed_loop_replay_settles_on_its_own_completions():
    """The replay of a closed-loop run (``replay_clients``) is a fixed point: every request is
    sent when the clients' rule says, given the completions the simulator gives for those sends.
    One client runs the requests one after another (each starts when the last ends, none
    overlaps); as many clients as requests is a burst, the same as the simulator's run with every
    arrival at 0."""
    import numpy as np

    from capplan.benchmark import server_for
    from capplan.hardware import load_hardware
    from capplan.modelspec import load_model_spec
    from capplan.sim.serving import client_arrivals, replay_clients, serving_engine, simulate_replica, sglang_random_lengths

    engine = serving_engine(server_for(load_model_spec("llama-3.1-8b"), load_hardware("h100-sxm")))
    prompt, output = sglang_random_lengths(24, 2000, 300)
    output = np.maximum(output, 1)
    cached = np.zeros_like(prompt)
    arrivals, run = replay_clients(engine, 4, prompt, output, cached)
    assert np.allclose(client_arrivals(run.finish_s, 4), arrivals, atol=1e-9)
    assert arrivals[:4].tolist() == [0.0] * 4 and (arrivals[4:] > 0).all()
    one, solo = replay_clients(engine, 1, prompt, output, cached)
    assert np.allclose(one[1:], solo.finish_s[:-1], atol=1e-9)
    _, burst = replay_clients(engine, 24, prompt, output, cached)
    assert np.allclose(burst.finish_s, simulate_replica(engine, np.zeros(24), prompt, output, cached).finish_s)


def test_a_closed_loop_run_of_drawn_lengths_is_replayed_request_by_request(corpus):
    """The SGLang Cookbook's Qwen3-235B-A22B run on 8 x B200 at 16 clients: 80 requests of
    1000/1000 drawn lengths (means 495.85 / 509.06), 832.04 output tokens/s measured. The
    steady-state closed form at the mean lengths has ~1,011 tokens/s (+21%): it leaves out the
    run's first wave and its drain, the last requests running with fewer than 16 clients busy
    (outputs are uniform on 0-1,000 tokens). Replayed request by request with the drawn lengths,
    the run's 40,725 tokens over its span come out within 10% of the measurement, below the
    closed form. A row whose arguments do not give its mean lengths (seed 2) is refused, and so is
    a static batch (priced at its stated lengths)."""
    from dataclasses import replace

    from capplan.accuracy.predict import Unsupported, predict_serving, prepare_serving
    from capplan.accuracy.report import default_engines

    engine = default_engines()["sglang"]
    row = corpus["sglang056-cookbook-b200x8-qwen3-235b-bf16-tp8-1000-1000-c16-out-tput"]
    assert row.get("lengths") == "sglang-random"
    replayed = predict_serving(row, engine)
    steady = prepare_serving(replace(row, fields={**row.fields, "lengths": "varying"}), engine).evaluate()
    assert replayed.value < steady and abs(replayed.value / row.measured - 1.0) < 0.10 < steady / row.measured - 1.0
    assert any("drawn as sglang.bench_serving draws them" in a and "means 495.85/509.06" in a for a in replayed.assumed)
    assert any("80 requests at 16 clients replayed request by request" in a for a in replayed.assumed)
    with pytest.raises(Unsupported, match="the draws' means"):
        prepare_serving(replace(row, fields={**row.fields, "seed": "2"}), engine)
    static = predict_serving(replace(row, fields={**row.fields, "scenario": "static_batch", "batch": "16"}), engine)
    assert static.value is None and "a static batch is priced at its stated lengths" in static.reason


def test_a_run_of_known_lengths_sent_at_once_is_replayed_with_them(corpus):
    """DataCrunch's offline run of Llama-3.3-70B on 4 x H200 (SGLang, December 2024): 3,000
    requests of ``sglang.bench_serving``'s random 1024/1024 sent at once, 4,520.7 output tokens/s
    measured. Their lengths are known (the draws give the run's printed 1,525,074 prompt and
    1,544,818 output tokens), so the burst is replayed with each request's own lengths, where a
    burst of unknown varied lengths is not predicted at all; capplan is optimistic there (the
    SGLang-on-H200 rows' known bias), within 2x. An open-loop run of known lengths below the
    engine's capacity keeps the closed form at its mean lengths: the same value as with the
    lengths only ``varying``, with the draw noted."""
    from dataclasses import replace

    from capplan.accuracy.predict import KNOWN_LENGTHS, predict_serving
    from capplan.accuracy.report import default_engines
    from capplan.sim.serving import sglang_random_lengths

    engine = default_engines()["sglang"]
    row = corpus["sglang-dch200-h200x4-llama33-70b-tp4-rand1024-1024-inf-out-tput"]
    prompt, output = sglang_random_lengths(3000, 1024, 1024)
    assert (prompt.sum(), output.sum()) == (1525074, 1544818)
    p = predict_serving(row, engine)
    assert p.value is not None and 1.0 < p.value / row.measured < 2.0
    assert any(a.startswith(KNOWN_LENGTHS) and "3,000 requests" in a and "each request's own lengths" in a for a in p.assumed)
    unknown = predict_serving(replace(row, fields={**row.fields, "lengths": "varying"}), engine)
    assert unknown.value is None and "variable-length" in unknown.reason
    online = corpus["sglang-dch200-h200x4-llama33-70b-tp4-rand1024-1024-r4-ttft"]
    known, varying = predict_serving(online, engine), predict_serving(replace(online, fields={**online.fields, "lengths": "varying"}), engine)
    assert known.value == pytest.approx(varying.value, rel=1e-12)
    assert any("drawn as sglang.bench_serving draws them" in a for a in known.assumed)
