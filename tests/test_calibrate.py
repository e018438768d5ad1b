"""``capplan calibrate``: the readers on the bundled example files, the fit on data with known
answers, the error messages for bad input, and the calibrated profile on points it never saw."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from capplan.calibrate import CalibrateSettings, calibrate, profile_yaml, read_file
from capplan.cli.app import app
from capplan.errors import InputError

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "calibrate"


def _by_metric(data):
    return {r.metric: r for r in data.rows}


# ---------------------------------------------------------------------------------------------
# Readers: each bundled example file, keys exact
# ---------------------------------------------------------------------------------------------


def test_vllm_bench_serve_reader():
    """Lengths without --save-detailed are totals / completed: 65537 / 64 = 1024.015625 prompt and
    8192 / 64 = 128 output tokens; whether they vary is unknown. The run length is num_prompts, 64."""
    d = read_file(EXAMPLES / "vllm-bench-serve.json")
    assert d.format == "vllm bench serve"
    assert [r.id for r in d.rows] == ["vllm-bench-serve.json:c8:ttft_ms", "vllm-bench-serve.json:c8:tpot_ms",
                                      "vllm-bench-serve.json:c8:output_tokens_per_s"]
    m = _by_metric(d)
    assert m["ttft_ms"].measured == 160.62801042188113
    assert m["tpot_ms"].measured == 7.848318019807933
    assert m["output_tokens_per_s"].measured == 884.0477040899472
    assert {k: v for k, v in m["ttft_ms"].fields.items() if k != "file"} == {
        "model_named": "meta-llama/Llama-3.1-8B-Instruct", "input_tokens": 1024.015625, "output_tokens": 128.0,
        "lengths": None, "num_prompts": 64, "scenario": "concurrency", "concurrency": 8.0, "closed_loop": True,
    }


def test_vllm_bench_serve_detailed_reader_sees_fixed_lengths():
    """A --save-detailed file lists every request's lengths: all 1024 and 128, so 'fixed'."""
    d = read_file(EXAMPLES / "vllm-bench-serve-c32-detailed.json")
    f = d.rows[0].fields
    assert (f["concurrency"], f["input_tokens"], f["output_tokens"], f["lengths"]) == (32.0, 1024.0, 128.0, "fixed")
    assert _by_metric(d)["ttft_ms"].measured == 722.2300877812273


def test_guidellm_reader_one_point_set_per_benchmark():
    """ITL is metrics.inter_token_latency_ms (7.71 ms at 8 streams), not time_per_output_token_ms
    (8.89 ms), which GuideLLM computes with the first token included."""
    d = read_file(EXAMPLES / "guidellm-benchmarks.json")
    assert d.format == "GuideLLM"
    assert [r.id.split(":", 1)[1] for r in d.rows] == [
        "0-c8:ttft_ms", "0-c8:itl_ms", "0-c8:output_tokens_per_s", "1-c32:ttft_ms", "1-c32:itl_ms", "1-c32:output_tokens_per_s"]
    assert [r.measured for r in d.rows] == [158.4448292851448, 7.7101423984437485, 885.5519025978961,
                                           585.2640047669411, 10.624883329774452, 2069.958673091804]
    assert {(r.fields["concurrency"], r.fields["lengths"], r.fields["model_named"]) for r in d.rows} == {
        (8.0, "fixed", "meta-llama/Llama-3.1-8B-Instruct"), (32.0, "fixed", "meta-llama/Llama-3.1-8B-Instruct")}
    assert {r.fields["num_prompts"] for r in d.rows} == {64}  # metrics.request_totals.total


def test_aiperf_reader():
    """Concurrency 8 from input_config.phases[0].concurrency; lengths' std 0, so fixed."""
    d = read_file(EXAMPLES / "aiperf-profile_export_aiperf.json")
    assert d.format == "AIPerf"
    m = _by_metric(d)
    assert (m["ttft_ms"].measured, m["itl_ms"].measured, m["output_tokens_per_s"].measured) == (
        117.50302290625, 8.275203394192912, 864.4063282445708)
    f = m["ttft_ms"].fields
    assert (f["concurrency"], f["input_tokens"], f["output_tokens"], f["lengths"], f["model_named"], f["num_prompts"]) == (
        8.0, 1024.0, 128.0, "fixed", "meta-llama/Llama-3.1-8B-Instruct", 64)  # request_count.avg


def test_vllm_startup_log_reader():
    """The published log is hard-wrapped ('tensor_parallel_si' / 'ze=1'); the settings survive.
    Block size: 464,848 tokens / 29,053 blocks = 16. The sampler: 'Using FlashInfer for top-p &
    top-k sampling'."""
    d = read_file(EXAMPLES / "vllm-startup.log")
    assert d.format == "vLLM start-up log"
    assert d.settings == {
        "engine_version": "0.10.1.1", "tp": 1, "pp": 1, "weight_dtype": "bf16", "kv_dtype": "bf16",
        "gpu_memory_utilization": 0.5, "max_num_seqs": None, "max_num_batched_tokens": 2048.0, "max_model_len": 16384.0,
        "block_size": 16.0, "weights_gib": 14.2488, "kv_cache_tokens": 464848.0, "model_named": "Qwen2-7B-Instruct",
        "sampler": "flashinfer",
    }
    assert [(r.metric, r.measured) for r in d.rows] == [("available_kv_gib", 24.83), ("kv_cache_tokens", 464848.0)]


def test_vllm_startup_log_with_no_kv_cache_is_refused(tmp_path):
    """'GPU KV cache size: 0 tokens' constrains nothing; it used to reach the fit and fail inside scipy
    (non-finite residuals) as an internal error."""
    text = (EXAMPLES / "vllm-startup.log").read_text().replace("GPU KV cache size: 464,848 tokens", "GPU KV cache size: 0 tokens")
    (tmp_path / "zero.log").write_text(text)
    with pytest.raises(InputError, match=r"zero.log: 'GPU KV cache size: 0 tokens': the engine found no memory"):
        read_file(tmp_path / "zero.log")


def test_vllm_startup_log_of_a_future_version_uses_the_newest_profile(tmp_path):
    """A version past every profile's upper bound (here 9.9.9) is priced with vllm-latest; it used to
    stop the run with StopIteration."""
    from capplan.accuracy.report import VLLM_VERSION_PROFILES, kv_profile_name

    text = (EXAMPLES / "vllm-startup.log").read_text().replace("server version 0.10.1.1", "server version 9.9.9")
    (tmp_path / "future.log").write_text(text)
    row = read_file(tmp_path / "future.log").rows[0]
    assert kv_profile_name(row) == VLLM_VERSION_PROFILES[-1][1] == "vllm-latest"


def test_step_csv_reader_and_its_label():
    """The bundled step CSV says it is synthetic; row 1 is 6.0 + 0.05 + 0.00002 x 1024 = 6.07048 ms."""
    assert (EXAMPLES / "step-times.csv").read_text().startswith("# SYNTHETIC, not a measurement.")
    d = read_file(EXAMPLES / "step-times.csv")
    assert len(d.rows) == 14
    r = d.rows[0]
    assert (r.id, r.metric, r.measured, r.fields["batch"], r.fields["context_tokens"]) == (
        "step-times.csv:8:step_time_ms", "step_time_ms", 6.07048, 1.0, 1024.0)


def test_step_csv_rows_at_one_point_are_merged_at_their_median(tmp_path):
    """A profiler's repeated samples of one (batch, context) fit as one point at their median:
    (1, 1024) sampled at 6, 7 and 9 ms is one 7 ms point; (8, 1024) stays as given."""
    f = tmp_path / "s.csv"
    f.write_text("batch,context_tokens,step_ms\n1,1024,6\n1,1024,9\n8,1024,6.5\n1,1024,7\n")
    d = read_file(f)
    assert [(r.fields["batch"], r.measured) for r in d.rows] == [(1.0, 7.0), (8.0, 6.5)]
    assert d.rows[0].id == "s.csv:2:step_time_ms"
    assert any("4 rows at 2 distinct" in n for n in d.notes)


# ---------------------------------------------------------------------------------------------
# Bad input: one line naming the file, the key and what to do
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name, text, message", [
    ("r.json", '{"foo": 1}', "{f}: not a vllm bench serve, GuideLLM or AIPerf result (no 'mean_ttft_ms' key)"),
    ("r.json", '{"mean_ttft_ms": 1', "{f}: not valid JSON (line 1: Expecting ',' delimiter)"),
    ("r.json", '{"mean_ttft_ms": 10, "max_concurrency": 4}', "{f}: vllm bench serve result has no 'completed' key"),
    ("s.csv", "batch,step_ms\n1,6\n", "{f}: a step-time CSV needs columns batch,context_tokens,step_ms; missing context_tokens"),
    ("s.csv", "batch,context_tokens,step_ms\n1,1024,fast\n", "{f}:2: step_ms 'fast': expected a number > 0"),
    ("a.csv", "Metric,avg,min\nTime to First Token (ms),1,1\n",
     "{f}: AIPerf CSV export has no concurrency; give the JSON export (profile_export_aiperf.json)"),
    ("v.log", "INFO vLLM API server version 0.10.1\n",
     "{f}: vLLM start-up log has no 'Available KV cache memory' or 'GPU KV cache size' line (did the engine finish starting?)"),
])
def test_unreadable_files(tmp_path, name, text, message):
    f = tmp_path / name
    f.write_text(text)
    with pytest.raises(InputError) as exc:
        read_file(f)
    assert str(exc.value) == message.format(f=f)


def test_bundled_aiperf_csv_is_refused_with_the_fix():
    f = EXAMPLES / "aiperf-profile_export_aiperf.csv"
    with pytest.raises(InputError, match=r"AIPerf CSV export has no concurrency; give the JSON export"):
        read_file(f)


def _bench(tmp_path: Path, concurrency: int, name: str = "b.json", **extra) -> Path:
    data = {"model_id": "meta-llama/Llama-3.1-8B-Instruct", "completed": 4, "total_input_tokens": 4096,
            "total_output_tokens": 512, "request_rate": "inf", "max_concurrency": concurrency, "mean_ttft_ms": 30.0,
            "mean_tpot_ms": 7.0, "output_throughput": 140.0, **extra}
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("terms, message", [
    (("per_sequence_s",), "all points at batch 1: cannot fit per_sequence_s (give measurements at two or more "
                          "concurrencies, or --terms without it)"),
    (("bandwidth_efficiency", "step_overhead_s"), "all decode points at one setting: cannot fit both bandwidth_efficiency "
                                                  "and step_overhead_s (give measurements at two or more concurrencies or "
                                                  "contexts, or --terms with one of them)"),
    (("allreduce_latency_us",), "all points at tensor-parallel size 1: cannot fit allreduce_latency_us (no all-reduce runs "
                                "at tp 1; give measurements at --tp 2 or more, or --terms without it)"),
    (("sampler_bytes_per_seq_vocab",), "no vLLM start-up log among the files: cannot fit sampler_bytes_per_seq_vocab (give "
                                       "the server's start-up log, or --terms without it)"),
    (("moe_gemm_efficiency",), "no mixture-of-experts model among the points: cannot fit moe_gemm_efficiency (--terms without it)"),
    (("speed",), "--terms speed: not a fittable term"),
])
def test_terms_the_data_do_not_constrain_are_refused(tmp_path, terms, message):
    f = _bench(tmp_path, 1)
    with pytest.raises(InputError) as exc:
        calibrate([f], CalibrateSettings(hardware="h100-sxm", terms=terms))
    assert str(exc.value).startswith(message)


def test_no_ttft_no_gemm_efficiency(tmp_path):
    f = tmp_path / "s.csv"
    f.write_text("batch,context_tokens,step_ms\n1,1024,7\n8,1024,8\n")
    with pytest.raises(InputError, match=r"^no TTFT measurement: cannot fit gemm_efficiency \(give a benchmark result "
                                         r"with a mean TTFT, or --terms without it\)$"):
        calibrate([f], CalibrateSettings(hardware="h100-sxm", model="llama-3.1-8b", terms=("gemm_efficiency",)))


@pytest.mark.parametrize("settings, message", [
    (CalibrateSettings(hardware="h100-sxm"), "{f}: the file names no model; give --model"),
    (CalibrateSettings(model="llama-3.1-8b"), "{f}: the file does not name the hardware; give --hardware"),
])
def test_model_and_hardware_must_come_from_somewhere(tmp_path, settings, message):
    f = tmp_path / "s.csv"
    f.write_text("batch,context_tokens,step_ms\n1,1024,7\n")
    with pytest.raises(InputError) as exc:
        calibrate([f], settings)
    assert str(exc.value).startswith(message.format(f=f))


def test_a_model_the_file_names_but_capplan_lacks_needs_the_flag(tmp_path):
    f = _bench(tmp_path, 1, model_id="acme/Secret-9B")
    with pytest.raises(InputError, match=r"names 'acme/Secret-9B', which is no bundled model preset; give --model$"):
        calibrate([f], CalibrateSettings(hardware="h100-sxm"))


# ---------------------------------------------------------------------------------------------
# The fit recovers known terms from data generated through the same predictor
# ---------------------------------------------------------------------------------------------

KNOWN = {"bandwidth_efficiency": 0.72, "step_overhead_s": 0.0015, "per_sequence_s": 3e-5, "gemm_efficiency": 0.78,
         "request_overhead_s": 0.02}


def _synthetic_files(tmp_path: Path) -> tuple[list[Path], Path]:
    """Step times at batch 1, 8, 64 x context 512, 4096 and `vllm bench serve` files at 1, 4 and 16
    clients (1024 / 128 tokens, every request alike: waves), all priced by a vllm-0.19 profile with
    the KNOWN terms; and a start profile with each known term off by -20% or +25%."""
    import yaml

    from capplan import benchmark
    from capplan.accuracy.fit import with_time_terms
    from capplan.engine import load_engine
    from capplan.hardware import load_hardware
    from capplan.modelspec import load_model_spec
    from capplan.roofline import RooflineInputs, StepPricer

    base = load_engine("vllm-0.19").model_copy(update={"hardware": {}})  # the known terms are the chip's: no override
    truth = with_time_terms(base, KNOWN)
    start = with_time_terms(base, {k: v * (1.25 if i % 2 else 0.8) for i, (k, v) in enumerate(KNOWN.items())})
    spec, hw = load_model_spec("llama-3.1-8b"), load_hardware("h100-sxm")
    pricer = StepPricer(spec, hw, RooflineInputs(engine=truth))
    steps = tmp_path / "steps.csv"
    steps.write_text("batch,context_tokens,step_ms\n" + "".join(
        f"{b},{c},{pricer.decode(b, c).step_time_s * 1e3!r}\n" for b in (1, 8, 64) for c in (512, 4096)))
    files = [steps]
    server = benchmark.server_for(spec, hw, engine=truth)
    for c in (1, 4, 16):
        r = benchmark.static_batch(server, c, 1024, 128)
        files.append(_bench(tmp_path, c, name=f"c{c}.json", completed=c, total_input_tokens=1024 * c, total_output_tokens=128 * c,
                            input_lens=[1024] * c, output_lens=[128] * c, mean_ttft_ms=r.ttft_s * 1e3,
                            mean_tpot_ms=r.itl_s * 1e3, output_throughput=r.output_tokens_per_s))
    start_path = tmp_path / "start.yaml"
    start_path.write_text(yaml.safe_dump(start.model_dump(mode="json")))
    return files, start_path


def test_fit_recovers_known_terms_within_one_percent(tmp_path):
    """Six step times and three benchmarks (TTFT, TPOT, throughput each) constrain all five
    default terms: decode at 9 settings over batches 1-64, TTFT at 3 settings."""
    files, start = _synthetic_files(tmp_path)
    cal = calibrate(files, CalibrateSettings(hardware="h100-sxm", model="llama-3.1-8b", engine=str(start)))
    fitted = {t.name.split(".", 1)[1]: t.after for t in cal.terms}
    assert set(fitted) == set(KNOWN)
    for term, value in KNOWN.items():
        assert fitted[term] == pytest.approx(value, rel=0.01), term
    assert cal.median_abs_error_before > 0.05
    assert cal.median_abs_error_after < 1e-3


def test_default_terms_follow_the_data():
    """One closed-loop run (one decode setting, one TTFT setting): bandwidth and GEMM efficiency
    only; add a second concurrency and the step overhead and request overhead become fittable."""
    from capplan.calibrate.terms import data_shape, default_terms

    one = read_file(EXAMPLES / "vllm-bench-serve.json").rows
    two = one + read_file(EXAMPLES / "vllm-bench-serve-c32-detailed.json").rows
    assert default_terms(data_shape(one, [], set())) == (["bandwidth_efficiency", "gemm_efficiency"], [])
    assert default_terms(data_shape(two, [], set()))[0] == [
        "bandwidth_efficiency", "step_overhead_s", "gemm_efficiency", "request_overhead_s"]
    steps = read_file(EXAMPLES / "step-times.csv").rows
    assert default_terms(data_shape(steps, [], set()))[0] == ["bandwidth_efficiency", "step_overhead_s", "per_sequence_s"]


def test_startup_log_fits_one_memory_term():
    """One log constrains one number. The log runs FlashInfer's sampler, whose warm-up (5.96 B x
    256 x 152,064 = 0.22 GiB with the bundled vllm-0.10 profile) peaks below the forward pass
    (2,048 x (3 x 3,584 + 3 x 18,944) x 2 B = 0.26 GiB), so the sampler term cannot move the
    budget: the log's one-GPU non-torch term moves instead, until the KV budget is the logged
    24.83 GiB (the token count follows: 24.83 GiB / 57,344 B per token ~ 464,9xx). The bundled
    profile was fitted on this log among others (with the weights capplan counts, 0.1 GiB off the
    logged 14.25 GiB the calibration uses), so it starts within 1%."""
    cal = calibrate([EXAMPLES / "vllm-startup.log"], CalibrateSettings(hardware="a100-80gb"))
    assert cal.base == "vllm-0.10"
    assert [t.name for t in cal.terms] == ["memory.non_torch_gib_single"]
    kv = {p.metric: p for p in cal.points}
    assert kv["available_kv_gib"].after == pytest.approx(24.83, rel=1e-3)
    assert kv["kv_cache_tokens"].after == pytest.approx(464848, rel=1e-3)
    assert abs(kv["available_kv_gib"].error_before) < 0.01


# ---------------------------------------------------------------------------------------------
# The calibrated profile: written, loadable, and right on points it never saw
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def one_run(tmp_path_factory):
    """Calibrate on the vLLM benchmark at 8 clients only; write the profile."""
    cal = calibrate([EXAMPLES / "vllm-bench-serve.json"], CalibrateSettings(hardware="h100-sxm", name="c8-only"))
    path = tmp_path_factory.mktemp("cal") / "c8-only.yaml"
    path.write_text(profile_yaml(cal))
    return cal, path


def test_one_run_fits_its_own_points(one_run):
    cal, _ = one_run
    assert [t.name for t in cal.terms] == ["time.bandwidth_efficiency", "time.gemm_efficiency"]
    assert all(p.setting.startswith("waves of 8") for p in cal.points)
    assert cal.median_abs_error_after < 0.01 < cal.median_abs_error_before
    assert any("priced as waves" in n for n in cal.notes)


def test_written_profile_loads_and_records_its_origin(one_run):
    from capplan.engine import load_engine

    cal, path = one_run
    eng = load_engine(path)
    assert eng.name == "c8-only"
    assert eng.calibration == str(EXAMPLES / "vllm-bench-serve.json")
    ids = ["vllm-bench-serve.json:c8:ttft_ms", "vllm-bench-serve.json:c8:tpot_ms", "vllm-bench-serve.json:c8:output_tokens_per_s"]
    assert eng.fitted_on["time.bandwidth_efficiency"] == ids
    assert eng.time.bandwidth_efficiency == pytest.approx(cal.engine.time.bandwidth_efficiency, rel=1e-6)


def test_calibrated_on_one_run_predicts_the_others_within_ten_percent(one_run):
    """The README's test server ran one formula for every file; a profile fitted on the vLLM run at
    8 clients must price the runs at 32 clients and the GuideLLM and AIPerf runs (12 points)
    within 10% (median). Their 'before' column is the calibrated profile's prediction."""
    _, path = one_run
    others = [EXAMPLES / f for f in ("vllm-bench-serve-c32-detailed.json", "guidellm-benchmarks.json",
                                     "aiperf-profile_export_aiperf.json")]
    check = calibrate(others, CalibrateSettings(hardware="h100-sxm", engine=str(path), terms=()))
    assert check.terms == [] and len(check.points) == 12
    assert check.median_abs_error_before < 0.10
    assert all(p.after == p.before for p in check.points)


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------


def test_cli_writes_the_profile_and_reports(runner, tmp_path):
    out = tmp_path / "My_Engine.yaml"
    result = runner.invoke(app, ["calibrate", str(EXAMPLES / "vllm-bench-serve.json"), "--hardware", "h100-sxm",
                                 "--arrivals", "waves", "-o", str(out), "--format", "json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["profile"] == "my-engine" and report["base"] == "vllm-0.19"
    assert [t["name"] for t in report["terms"]] == ["time.bandwidth_efficiency", "time.gemm_efficiency"]
    assert report["median_abs_error_after"] < 0.01
    assert result.stderr == f"wrote {out}\n"
    assert out.read_text().startswith("# my-engine: vllm-0.19 calibrated on vllm-bench-serve.json (h100-sxm)")


def test_cli_refuses_to_overwrite_and_bad_files_exit_2(runner, tmp_path):
    out = tmp_path / "e.yaml"
    out.write_text("keep")
    result = runner.invoke(app, ["calibrate", str(EXAMPLES / "vllm-bench-serve.json"), "--hardware", "h100-sxm", "-o", str(out)])
    assert result.exit_code == 2 and result.stderr == f"Error: {out}: file exists; pass --force to overwrite it\n"
    csv = EXAMPLES / "aiperf-profile_export_aiperf.csv"
    result = runner.invoke(app, ["calibrate", str(csv), "--hardware", "h100-sxm", "-o", str(tmp_path / "n.yaml")])
    assert result.exit_code == 2
    assert result.stderr == f"Error: {csv}: AIPerf CSV export has no concurrency; give the JSON export (profile_export_aiperf.json)\n"
    assert out.read_text() == "keep" and not (tmp_path / "n.yaml").exists()


def test_cli_refuses_a_fit_that_does_not_describe_its_data(runner, tmp_path):
    """Step times a million times too long (seconds written as ms, say): every term ends on a bound and the
    points stay ~100% off; the profile used to be written with exit 0. Now: exit 3, nothing written."""
    csv = tmp_path / "steps.csv"
    csv.write_text("batch,context_tokens,step_ms\n8,1024,1e9\n16,2048,1e9\n32,1024,1e9\n")
    out = tmp_path / "e.yaml"
    result = runner.invoke(app, ["calibrate", str(csv), "-m", "llama-3.1-8b", "--hardware", "h100-sxm", "-o", str(out)])
    assert result.exit_code == 3, result.output
    assert "the fit leaves the points 100% off" in result.stderr and "time.bandwidth_efficiency" in result.stderr
    assert result.stderr.rstrip().endswith("the profile is not written") and not out.exists()


def test_profile_yaml_keeps_small_terms_precise(one_run):
    """6 significant digits, not 6 decimals: per_sequence_s 8e-06 and the like survive."""
    cal, _ = one_run
    import yaml

    data = yaml.safe_load(profile_yaml(cal))
    assert data["time"]["per_sequence_s"] == cal.engine.time.per_sequence_s
    assert not math.isnan(data["time"]["bandwidth_efficiency"])


def test_cli_compare_only(runner, tmp_path, one_run):
    """--terms none prices the files with --engine and writes nothing; --output is refused there."""
    _, path = one_run
    f = str(EXAMPLES / "guidellm-benchmarks.json")
    result = runner.invoke(app, ["calibrate", f, "--hardware", "h100-sxm", "--engine", str(path), "--terms", "none"])
    assert result.exit_code == 0, result.output
    assert "Profile c8-only against 1 file(s), nothing fitted:" in result.stdout
    assert "median |predicted / measured - 1| over 6 point(s): " in result.stdout
    result = runner.invoke(app, ["calibrate", f, "--hardware", "h100-sxm", "--terms", "none", "-o", str(tmp_path / "x.yaml")])
    assert result.exit_code == 2
    assert result.stderr == "Error: --output: --terms none fits nothing, so there is no profile to write; drop --output\n"
    result = runner.invoke(app, ["calibrate", f, "--hardware", "h100-sxm"])
    assert result.exit_code == 2
    assert result.stderr == "Error: --output: give the file to write the calibrated profile to (or --terms none to only compare)\n"


def test_model_and_hardware_files_are_accepted(tmp_path):
    """A user's own model or hardware YAML works like a bundled name (here: the bundled files by path)."""
    repo = EXAMPLES.parent.parent
    f = tmp_path / "s.csv"
    f.write_text("batch,context_tokens,step_ms\n1,1024,7\n8,1024,8\n")
    cal = calibrate([f], CalibrateSettings(model=str(repo / "models" / "llama-3.1-8b.yaml"),
                                           hardware=str(repo / "hardware_profiles" / "h100-sxm.yaml")))
    assert [t.name for t in cal.terms] == ["time.bandwidth_efficiency", "time.step_overhead_s"]
    assert "s.csv: model llama-3.1-8b from --model (the file names no model)" in cal.notes
    assert "(h100-sxm)" in cal.engine.description


def test_same_file_twice_is_refused():
    f = EXAMPLES / "vllm-bench-serve.json"
    with pytest.raises(InputError, match=r"vllm-bench-serve.json: given twice; give each file once$"):
        calibrate([f, f], CalibrateSettings(hardware="h100-sxm"))


def test_notes_of_several_files_are_merged():
    cal = calibrate([EXAMPLES / "guidellm-benchmarks.json", EXAMPLES / "aiperf-profile_export_aiperf.json"],
                    CalibrateSettings(hardware="h100-sxm", terms=()))
    assert "guidellm-benchmarks.json, aiperf-profile_export_aiperf.json: hardware h100-sxm from --hardware" in cal.notes


def test_a_startup_log_of_the_same_model_sets_the_benchmark_server(tmp_path):
    """A log of the benchmarked model and tp gives its server the logged token budget: 512 tokens a
    step prefill a wave of 8 x 1,024-token prompts in 16 chunks instead of 1 (8,192, the H100
    default), so the predicted TTFT grows by the 15 extra steps' fixed costs."""
    log = tmp_path / "server.log"
    log.write_text(
        "INFO 01-01 00:00:00 [api_server.py:1] vLLM API server version 0.10.1.1\n"
        "INFO 01-01 00:00:00 [utils.py:1] non-default args: {'model': 'meta-llama/Llama-3.1-8B-Instruct', "
        "'max_num_batched_tokens': 512}\n"
        "INFO 01-01 00:00:01 [gpu_worker.py:1] Available KV cache memory: 50.00 GiB\n"
        "INFO 01-01 00:00:01 [kv_cache_utils.py:1] GPU KV cache size: 409,600 tokens\n")
    bench = EXAMPLES / "vllm-bench-serve.json"
    settings = CalibrateSettings(hardware="h100-sxm", arrivals="waves", terms=(), engine="vllm-0.19")
    alone = {p.metric: p.before for p in calibrate([bench], settings).points}
    paired = calibrate([log, bench], settings)
    assert "vllm-bench-serve.json: scheduler limits and KV capacity from server.log (same model and tp)" in paired.notes
    ttft = next(p.before for p in paired.points if p.metric == "ttft_ms")
    assert ttft > alone["ttft_ms"] * 1.02


def test_rate_runs_have_no_throughput_point(tmp_path):
    """At 2 requests/s the output rate is 2 x 256 = 512 tokens/s whatever the engine: not a point."""
    f = _bench(tmp_path, 1, request_rate=2.0, max_concurrency=None)
    d = read_file(f)
    assert [r.metric for r in d.rows] == ["ttft_ms", "tpot_ms"]
    assert d.rows[0].fields["scenario"] == "request_rate" and d.rows[0].fields["request_rate"] == 2.0


def test_a_chips_overrides_are_the_starting_terms_on_that_chip():
    """The bundled vLLM profiles override MI300X's all-reduce latency (RCCL over Infinity
    Fabric). Calibrating a run on MI300X fits the bandwidth and GEMM efficiencies; the terms it
    does not fit keep the MI300X values (not the family's NVLink-dominated ones), and the written
    profile has no MI300X override left to shadow the calibrated terms."""
    from capplan.engine import load_engine

    base = load_engine("vllm-0.19")
    chip = base.time_on("mi300x")
    assert chip.allreduce_latency_us != base.time.allreduce_latency_us
    cal = calibrate([EXAMPLES / "vllm-bench-serve.json"], CalibrateSettings(hardware="mi300x", name="mi300x-run"))
    assert [t.name for t in cal.terms] == ["time.bandwidth_efficiency", "time.gemm_efficiency"]
    assert cal.engine.time.allreduce_latency_us == pytest.approx(chip.allreduce_latency_us)
    assert cal.engine.time.interconnect_efficiency == pytest.approx(chip.interconnect_efficiency)
    assert "mi300x" not in cal.engine.hardware
    assert any("mi300x overrides are folded" in n for n in cal.notes)


def test_a_rate_runs_burstiness_is_its_arrival_process(tmp_path):
    """``vllm bench serve --burstiness`` (gamma-shaped gaps) is carried to the point and priced:
    at shape 4 the mean prefill queue is a quarter of Poisson's, so TTFT is shorter; a file
    without the key is Poisson (vLLM's default); a burstiness that is not a positive number is
    refused with the file and the key."""
    from capplan.errors import InputError

    long_run = {"completed": 1000, "total_input_tokens": 1024 * 1000, "total_output_tokens": 128 * 1000}  # steady state
    even = read_file(_bench(tmp_path, None, "even.json", request_rate=8.0, burstiness=4.0, **long_run))
    plain = read_file(_bench(tmp_path, None, "plain.json", request_rate=8.0, **long_run))
    assert even.rows[0].fields["burstiness"] == 4.0 and plain.rows[0].fields["burstiness"] == 1.0
    assert not any("burstiness" in n for n in even.notes)
    settings = CalibrateSettings(hardware="h100-sxm", terms=())
    ttft = lambda f: next(p.before for p in calibrate([f], settings).points if p.metric == "ttft_ms")  # noqa: E731
    assert ttft(tmp_path / "even.json") < ttft(tmp_path / "plain.json")
    with pytest.raises(InputError, match=r"bad\.json: burstiness 0: expected a number > 0"):
        read_file(_bench(tmp_path, None, "bad.json", request_rate=8.0, burstiness=0))


def test_a_flashinfer_log_on_a_profile_without_its_term(tmp_path):
    """A base profile that has not measured the FlashInfer sampler (the term removed from a copy of
    vllm-0.10) starts the log's FlashInfer term from its PyTorch bytes per entry and says so:
    32.7 B x 256 x 152,064 = 1.19 GiB reserved against ~0.2 GiB, so the start is more than 3% low.
    The fit lowers the term until the forward pass (0.26 GiB) sets the peak: within 0.5% of the
    logged 24.83 GiB, the rest the non-torch term's (not fitted from one log)."""
    import yaml

    from capplan.engine import load_engine

    data = load_engine("vllm-0.10").model_dump(mode="json")
    data["name"] = "no-flashinfer"
    data["memory"]["flashinfer_sampler_bytes_per_seq_vocab"] = None
    path = tmp_path / "no-flashinfer.yaml"
    path.write_text(yaml.safe_dump(data))
    cal = calibrate([EXAMPLES / "vllm-startup.log"], CalibrateSettings(hardware="a100-80gb", engine=str(path)))
    assert any("no FlashInfer sampler term" in n for n in cal.notes)
    assert [t.name for t in cal.terms] == ["memory.flashinfer_sampler_bytes_per_seq_vocab"]
    kv = {p.metric: p for p in cal.points}
    assert kv["available_kv_gib"].error_before < -0.03
    assert kv["available_kv_gib"].after == pytest.approx(24.83, rel=5e-3)
    assert cal.engine.memory.flashinfer_sampler_bytes_per_seq_vocab < 2048 * (3 * 3584 + 3 * 18944) * 2 / (256 * 152064)


def _graph_log(tmp_path: Path, version: str, graph_line: str, kv_gib: float, tokens: int) -> Path:
    """A start-up log shaped as vLLM prints one (Qwen3-8B on an A100-40GB, the figures of the
    0.19.1 log in validation/kv_capacity.csv with a later version's graph lines)."""
    log = tmp_path / f"server-{version}.log"
    log.write_text(
        f"(APIServer pid=1) INFO 05-28 08:00:00 [utils.py:1] vLLM API server version {version}\n"
        "(APIServer pid=1) INFO 05-28 08:00:00 [utils.py:1] non-default args: {'model': 'Qwen/Qwen3-8B'}\n"
        "(EngineCore pid=2) INFO 05-28 08:00:10 [gpu_model_runner.py:1] Model loading took 15.27 GiB memory\n"
        "(EngineCore pid=2) INFO 05-28 08:00:24 [gpu_model_runner.py:1] Profiling CUDA graph memory: PIECEWISE=51 "
        "(largest=512), FULL=35 (largest=256)\n"
        "(EngineCore pid=2) INFO 05-28 08:00:25 [gpu_model_runner.py:1] Estimated CUDA graph memory: 0.52 GiB total\n"
        f"(EngineCore pid=2) INFO 05-28 08:00:26 [gpu_worker.py:1] Available KV cache memory: {kv_gib} GiB\n"
        f"(EngineCore pid=2) INFO 05-28 08:00:26 [gpu_worker.py:1] {graph_line}\n"
        f"(EngineCore pid=2) INFO 05-28 08:00:26 [kv_cache_utils.py:1] GPU KV cache size: {tokens:,} tokens\n")
    return log


SUBTRACTED = ("CUDA graph memory profiling is enabled (default since v0.21.0). The current --gpu-memory-utilization=0.9200 "
              "is equivalent to --gpu-memory-utilization=0.9068 without CUDA graph memory profiling.")
NOT_YET = ("In v0.19, CUDA graph memory profiling will be enabled by default (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1), "
           "which more accurately accounts for CUDA graph memory during KV cache allocation.")


def test_a_log_that_subtracts_its_graph_estimate_sets_the_profiles_graph_term(tmp_path):
    """From vLLM 0.20 the engine takes its 'Estimated CUDA graph memory' out of the KV budget; a
    log that says so pins memory.cudagraph_gib of the calibrated profile to the printed 0.52 GiB
    (read, not fitted), in place of the base profile's 2.35. Budget of the constructed log:
    0.92 x 39.43 GiB - 15.27 weights - 0.86 activation and non-torch (the 0.19.1 log's residual)
    - 0.52 graph = 19.63 GiB, 142,944 positions of 147,456 B. A 0.19 log prints the estimate and
    says the subtraction is still to come: nothing is read."""
    later = _graph_log(tmp_path, "0.21.0", SUBTRACTED, 19.63, 142944)
    assert read_file(later).settings["cudagraph_gib"] == 0.52
    assert "cudagraph_gib" not in read_file(_graph_log(tmp_path, "0.19.1", NOT_YET, 19.36, 140960)).settings
    # the version alone decides when the log has neither line
    assert read_file(_graph_log(tmp_path, "0.22.0", "", 19.63, 142944)).settings["cudagraph_gib"] == 0.52

    from capplan.accuracy.refit import write_profile
    from capplan.engine import load_engine

    latest = load_engine("vllm-latest")
    base = write_profile(latest.model_copy(update={"name": "base", "memory": latest.memory.model_copy(
        update={"cudagraph_gib": 2.35})}), tmp_path)
    cal = calibrate([later], CalibrateSettings(hardware="a100-40gb", engine=str(base)))
    assert cal.engine.memory.cudagraph_gib == 0.52
    assert "server-0.21.0.log 0.52 GiB" in cal.engine.sources["memory.cudagraph_gib"]
    assert any("memory.cudagraph_gib 0.52 GiB" in n for n in cal.notes)
    kv = [p for p in cal.points if p.metric == "available_kv_gib"][0]
    assert abs(kv.after / kv.measured - 1) < 0.02 < abs(kv.before / kv.measured - 1)
    # a compare-only run changes nothing
    same = calibrate([later], CalibrateSettings(hardware="a100-40gb", engine=str(base), terms=()))
    assert same.engine.memory.cudagraph_gib == 2.35


def test_a_burst_is_replayed_and_its_terms_recovered(tmp_path):
    """``vllm bench serve`` with no --max-concurrency and no --request-rate (its defaults) sends all
    ``num_prompts`` requests at once. Such a file is priced as the corpus prices a fixed-length burst:
    its 48 requests replayed through the serving simulator (before, with no run length, only its
    throughput had a price, the steady-state closed form's, and TTFT and TPOT had none). The
    measured values here are that replay with the KNOWN bandwidth and GEMM efficiencies; calibrating
    from a start 20% / 25% off recovers both within 1%."""
    import numpy as np
    import yaml

    from capplan import benchmark
    from capplan.accuracy.fit import with_time_terms
    from capplan.accuracy.predict import replay_fixed
    from capplan.engine import load_engine
    from capplan.hardware import load_hardware
    from capplan.modelspec import load_model_spec

    base = load_engine("vllm-0.19").model_copy(update={"hardware": {}})
    known = {"bandwidth_efficiency": KNOWN["bandwidth_efficiency"], "gemm_efficiency": KNOWN["gemm_efficiency"]}
    truth = with_time_terms(base, known)
    server = benchmark.server_for(load_model_spec("llama-3.1-8b"), load_hardware("h100-sxm"), engine=truth)
    n, P, O = 48, 1024, 128
    run = replay_fixed(server, np.zeros(n), P, O, 0.0)
    ttft = float(np.mean(run.ttft_s)) * 1e3
    tpot = float(np.mean((run.finish_s - run.ttft_s) / (O - 1))) * 1e3  # every arrival at 0: e2e is finish_s
    path = _bench(tmp_path, None, "burst.json", num_prompts=n, completed=n, total_input_tokens=P * n,
                  total_output_tokens=O * n, input_lens=[P] * n, output_lens=[O] * n, mean_ttft_ms=ttft,
                  mean_tpot_ms=tpot, output_throughput=n * O / float(run.finish_s.max()))
    start = with_time_terms(base, {"bandwidth_efficiency": known["bandwidth_efficiency"] * 0.8,
                                   "gemm_efficiency": known["gemm_efficiency"] * 1.25})
    start_path = tmp_path / "start.yaml"
    start_path.write_text(yaml.safe_dump(start.model_dump(mode="json")))
    cal = calibrate([path], CalibrateSettings(hardware="h100-sxm", engine=str(start_path),
                                              terms=("bandwidth_efficiency", "gemm_efficiency")))
    assert [p.setting for p in cal.points] == ["all 48 at once, 1024 in / 128 out"] * 3
    assert sum("48 requests (num_prompts) replayed through the serving simulator" in n for n in cal.notes) == 1
    fitted = {t.name.split(".", 1)[1]: t.after for t in cal.terms}
    for term, value in known.items():
        assert fitted[term] == pytest.approx(value, rel=0.01), term
    assert cal.median_abs_error_before > 0.05 and cal.median_abs_error_after < 1e-3


def test_a_burst_of_varied_lengths_is_not_priced(tmp_path):
    """A burst whose requests differ in length (a --save-detailed file's lists) has no price: its
    TTFT and TPOT depend on the order the requests are served, its throughput on the ramp and the
    drain the steady state does not have; the corpus refuses such rows for the same reasons."""
    path = _bench(tmp_path, None, "varied.json", num_prompts=4, input_lens=[512, 1536, 1024, 1024],
                  output_lens=[128] * 4)
    with pytest.raises(InputError, match="no point capplan can price.*variable-length"):
        calibrate([path], CalibrateSettings(hardware="h100-sxm", terms=()))
