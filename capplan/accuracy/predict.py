"""capplan's prediction of one corpus row: the same library calls a user's plan makes.

Serving rows go through :mod:`capplan.benchmark` (a static batch, closed-loop clients, an offline
run or open-loop arrivals; a p99 latency of open-loop arrivals through the queueing model) with
the engine profile of the row's engine; KV rows through
:func:`capplan.kv.compute_kv` with the settings the log shows. A row capplan cannot express (a
model or GPU without a profile, a dtype or parallel layout it does not model) is returned as
unsupported with the reason, never predicted with a silently different setup.

Feature rows (the corpus ``feature`` column: expert parallelism, speculative decoding,
disaggregation, FP8/FP4/INT4, CPU KV offload) take the settings their CSV columns cannot hold
from ``validation/feature_settings.yaml``: the parallel layout, the engine's token budget, and the
*phase* a measurement isolates (a prefill or decode pool of a disaggregated deployment, a
speculative decode, an offload-against-recompute ratio, :func:`predict_phase`), each with its
source and what it assumes. An open-loop run whose arrivals outpace what the instance serves has
no steady state: its latencies grow with the run's length. When the row states that length
(``num_prompts``), the run is replayed through capplan's serving simulator
(:func:`finite_run`) and the row's statistic (``statistic``: mean or median; p99 for a ``_p99``
row) read from it; otherwise the row is counted saturated. A run too short to reach the closed
form's steady state is replayed the same way: one whose steady state would hold more requests in
the system (rate x end-to-end latency) than the run sends in all (:data:`SHORT_RUN`), and so is
a latency row of a run that sends its stated number of fixed-length requests at once
(:data:`BURST`). A closed-loop run that states its length starts with a wave of requests sent at
once, whose share of a mean latency is replayed too (:func:`first_wave_share`). Models with
an architecturally identical preset are priced with it (:data:`MODEL_ALIASES`), and the row says
so among its assumptions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from capplan.errors import CapplanError

if TYPE_CHECKING:
    from capplan.accuracy.corpus import CorpusRow
    from capplan.engine import EngineProfile

LATENCY_METRICS = {"ttft_ms", "e2e_latency_s", "itl_ms", "tpot_ms"}

FEATURES = {None, "fp8", "int4", "fp4", "moe_ep", "spec_decode", "disagg", "kv_offload"}
"""Values of the corpus ``feature`` column capplan predicts (rows without one are plain serving)."""

WEIGHT_DTYPES = {"bf16", "fp16", "fp8", "int8", "int4", "nvfp4", "mxfp4"}

MODEL_ALIASES = {
    "llama-3.3-70b": ("llama-3.1-70b", "Llama 3.3 70B has Llama 3.1 70B's architecture (same config.json dimensions)"),
    "llama-3-70b": ("llama-3.1-70b", "Llama 3 70B has Llama 3.1 70B's dimensions (3.1 adds RoPE scaling to 128k)"),
    "llama-3-8b": ("llama-3.1-8b", "Llama 3 8B has Llama 3.1 8B's dimensions (3.1 adds RoPE scaling to 128k)"),
    "vicuna-13b": ("llama-2-13b", "Vicuna 13B is a LLaMA 13B fine-tune: Llama 2 13B's dimensions (40 layers, 5120 wide, 32k vocabulary)"),
    "deepseek-v3.1": ("deepseek-v3", "DeepSeek-V3.1 is post-trained from a DeepSeek-V3 base: the same architecture (671B parameters, 61 layers, 7,168 wide, 256 routed experts)"),
}
"""Corpus model names priced with the preset of an architecturally identical model (the row
reports the substitution among its assumptions)."""

MXFP4_EXPERT_MODELS = ("gpt-oss",)
"""Models whose checkpoints quantise only the routed experts to mxfp4 (attention, router,
embeddings and head stay bf16: gpt-oss ``quantization_config``, models/gpt-oss-*.yaml notes)."""
KV_DTYPES = {"bf16", "fp16", "fp8", "int8", "int4"}
_SPELLINGS = {"auto": "bf16", "bfloat16": "bf16", "float16": "fp16", "half": "fp16", "awq": "int4", "gptq": "int4"}


def dtype_of(text: str | None) -> str | None:
    """A corpus dtype cell as a capplan dtype: the first word, vLLM spellings mapped
    (``auto`` is the checkpoint's 16-bit dtype; ``awq int4 (w4a16)`` is int4); text that names
    a mixed layout (``mxfp4 experts, bf16 attention``) stays unrecognised."""
    if text is None:
        return None
    word = text.strip().lower().split(" ")[0].rstrip(",")
    if "," in text and word not in ("awq", "gptq"):
        return text.strip().lower()
    return _SPELLINGS.get(word, word)


@dataclass(frozen=True)
class Prediction:
    """capplan's value for one row, or why it has none."""

    value: float | None
    """Predicted value in the row's unit (``None``: unsupported)."""
    reason: str = ""
    """Why the row is unsupported (empty when predicted)."""
    engine_profile: str = ""
    """Engine profile used."""
    assumed: list[str] = field(default_factory=list)
    """Settings the source does not state and the value capplan took for them."""


class Unsupported(Exception):
    """A row capplan cannot express; the message says why."""


class NeedsReplay(Unsupported):
    """A run the closed form cannot price, replayed instead (:func:`finite_run`,
    :func:`clients_run`): ``why`` is :data:`BURST`, :data:`SATURATED`, :data:`SHORT_RUN` or
    :data:`KNOWN_LENGTHS`, and the message starts with it."""

    def __init__(self, why: str, detail: str) -> None:
        super().__init__(f"{why}: {detail}")
        self.why = why


def engine_family(engine: str | None) -> str:
    """``trtllm``, ``vllm``, ``sglang`` or ``other`` from a row's free-text engine column."""
    e = (engine or "").lower()
    if "tensorrt" in e or "nim" in e or "mlperf" in e:
        return "trtllm"
    if "sglang" in e:
        return "sglang"
    if "vllm" in e:
        return "vllm"
    return "other"


@lru_cache(maxsize=None)
def _model(name: str) -> Any:
    from capplan.modelspec import load_model_spec

    try:
        return load_model_spec(name)
    except CapplanError:
        raise Unsupported(f"no model preset {name!r}") from None


@lru_cache(maxsize=None)
def _hardware(name: str) -> Any:
    from capplan.hardware import load_hardware

    try:
        return load_hardware(name)
    except CapplanError:
        raise Unsupported(f"no hardware profile {name!r}") from None


def _int(row: "CorpusRow", name: str, default: int) -> int:
    v = row.number(name)
    return int(v) if v is not None else default


@lru_cache(maxsize=1)
def feature_settings() -> dict[str, dict[str, Any]]:
    """``validation/feature_settings.yaml``: per-row settings of feature rows (layout, phase,
    speculative decoding, engine-term overrides), keyed by row id."""
    import yaml

    from capplan.accuracy.corpus import validation_dir

    path = validation_dir() / "feature_settings.yaml"
    if not path.is_file():
        return {}
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return dict(data.get("rows") or {})


LAYOUT_KEYS = ("ep", "dp", "redundant_experts", "two_batch_overlap", "expert_dtype", "gemm_dtype", "kv_scale",
               "max_num_batched_tokens", "max_num_seqs")
"""Feature settings passed to :func:`capplan.benchmark.server_for`."""

SATURATED = "arrivals exceed what the instance can serve"
"""How an unsupported latency row predicted saturated begins (``capplan accuracy`` counts them)."""

BURST = "every request queued at once"
"""Why a latency row of a run that sends its ``num_prompts`` fixed-length requests at once is
replayed (:func:`finite_run`, all arrivals at 0): the closed form has no such state."""

SHORT_RUN = "the run ends before its steady state"
"""Why a latency row of a finite open-loop run is replayed rather than priced by the steady-state
closed form: at the closed form's steady state more requests would be in the system (arrival
rate x end-to-end latency, Little's law) than the run sends in all (``num_prompts``)."""

KNOWN_LENGTHS = "every request's lengths known"
"""Why a run whose rows give each request's lengths (:data:`DRAWN_LENGTHS`) is replayed request
by request rather than priced by the closed form at the mean lengths."""

FIRST_WAVE = "the run's first wave"
"""How the assumption of a closed-loop mean latency row that states its run length begins
(:func:`first_wave_share`)."""

SCHEDULER_COLUMNS = ("max_num_seqs", "max_num_batched_tokens")
"""Corpus columns (vLLM's engine-argument names) holding the scheduler limits a serving row's
server ran with, where its source states them; a row without them runs the engine profile's
defaults. Unlike a feature setting, a stated limit keeps the row in its family's fit."""


FIT_FEATURES = {None, "fp8", "int4"}
"""Features of the rows the engine families' time terms are fitted on (``refit``): the feature
terms (expert parallelism, FP4, speculative decoding, ...) are derived or fitted apart, so the
rows that exercise them stay out of the family fit."""


def fits_family_terms(row: "CorpusRow") -> bool:
    """Whether a serving row takes part in the fit of its engine family's time terms: no feature
    beyond FP8/INT4, no FP4 weights, no expert parallelism, no phase settings."""
    if row.get("feature") not in FIT_FEATURES or row.id in feature_settings():
        return False
    if (dtype_of(row.get("weight_dtype")) or "") in ("nvfp4", "mxfp4") or row.get("weight_dtype") is None and (row.get("model") or "").startswith(MXFP4_EXPERT_MODELS):
        return False
    return (row.number("ep") or 1) <= 1 and (row.get("model") or "") not in MODEL_ALIASES


def model_name(row: "CorpusRow") -> tuple[str, list[str]]:
    """The preset a row is priced with, and the alias note when it is another model's."""
    name = row.get("model") or "?"
    if name in MODEL_ALIASES:
        preset, why = MODEL_ALIASES[name]
        return preset, [f"model {preset} for {name} ({why})"]
    return name, []


def serving_setup(row: "CorpusRow", family: str) -> tuple[dict[str, Any], list[str]]:
    """The engine settings of a serving row, and what was assumed where the source is silent."""
    assumed: list[str] = []
    if row.get("feature") not in FEATURES:
        raise Unsupported(f"feature {row.get('feature')} is not modelled yet")
    fs = feature_settings().get(row.id, {})
    assumed += list(fs.get("assumed") or [])
    tp, pp = int(fs.get("tp", _int(row, "tp", 1))), _int(row, "pp", 1)
    if pp > 1:
        raise Unsupported("pipeline-parallel serving steps are not modelled")
    name = row.get("model") or ""
    moe = _model(model_name(row)[0]).moe is not None if name else False
    ep, dp = int(fs.get("ep", _int(row, "ep", 1))), int(fs.get("dp", _int(row, "dp", 1)))
    w = fs.get("weight_dtype") or dtype_of(row.get("weight_dtype"))
    settings: dict[str, Any] = {}
    if w is None and name.startswith(MXFP4_EXPERT_MODELS):
        w = "mxfp4"
        assumed.append("weights mxfp4 experts with bf16 attention (the checkpoint's quantization_config); not stated")
    if w is None:
        raise Unsupported("weight dtype not stated")
    if w not in WEIGHT_DTYPES:
        raise Unsupported(f"weight dtype {w} is not modelled yet")
    hw = _hardware(row.get("hardware") or "?")
    if w == "mxfp4" and moe and name.startswith(MXFP4_EXPERT_MODELS):
        w, settings["expert_dtype"] = "bf16", "mxfp4"
    fp4 = settings.get("expert_dtype", w)
    if fp4 in ("nvfp4", "mxfp4") and not hw.has_unit(fp4) and "gemm_dtype" not in fs:
        settings["gemm_dtype"] = "bf16"
        assumed.append(f"{fp4} GEMMs as weight-only W4A16 kernels in bf16: {hw.name} has no FP4 unit")
    if moe and dp > 1 and ep == 1:  # e.g. SGLang --enable-dp-attention without --enable-ep-moe
        raise Unsupported(f"data-parallel attention (dp {dp}) with tensor-parallel MoE layers (ep 1) is not modelled: "
                          "capplan runs a MoE model's data-parallel attention with expert parallelism over the instance")
    if moe and ep > 1:
        settings.update(ep=ep, dp=dp)
    # a dense model's data-parallel ranks are independent replicas: priced one rank at a time
    for k in LAYOUT_KEYS:
        if k in fs and k not in ("ep", "dp"):
            settings[k] = fs[k]
    for k in SCHEDULER_COLUMNS:  # the server's stated limits; the engine profile's defaults otherwise
        if k not in settings and (v := _opt_int(row, k)) is not None:
            settings[k] = v
    kv = fs.get("kv_dtype") or dtype_of(row.get("kv_dtype"))
    if kv is None:
        kv = "fp8" if (family == "trtllm" and w in ("fp8", "nvfp4")) else ("fp16" if w == "fp16" else "bf16")
        assumed.append(f"kv_dtype {kv} (the engine's default for {w} weights)")
    if kv not in KV_DTYPES:
        raise Unsupported(f"KV dtype {kv} is not modelled")
    return {"tp": tp, "weight_dtype": w, "kv_dtype": kv, **settings}, assumed


PINNED_TIME_TERMS = ("gqa_kv_reread",)
"""Time terms that describe an engine release's kernels rather than a fitted efficiency: a row
keeps its own profile's value when a fit prices it at other time terms."""


@dataclass(frozen=True)
class PreparedServing:
    """A serving row turned into a benchmark call, ready to be priced at any time terms."""

    row: "CorpusRow"
    server: Any
    scenario: str
    args: tuple
    instances: float
    divisor: float
    assumed: list[str]
    cached_tokens: float = 0.0
    """Prompt positions every request finds in the prefix cache (:func:`cached_prefix`)."""
    burstiness: float = 1.0
    """Gamma shape of an open-loop run's gaps between arrivals (:func:`arrival_burstiness`)."""
    pinned_time: dict[str, Any] = field(default_factory=dict)
    """Time terms of the row's engine release (:data:`PINNED_TIME_TERMS`), kept whatever engine
    :meth:`evaluate` is given."""
    first_wave: float = 0.0
    """Share of a closed-loop run's requests sent at its start, all at once (:func:`first_wave_share`)."""
    replay: bool = False
    """Whether :meth:`evaluate` replays a run the closed form cannot price (:meth:`priced`), as
    ``capplan calibrate`` has it; the corpus fits leave such runs out (``False``)."""
    requests: tuple[Any, Any, Any] | None = None
    """Each request's prompt, output and cached positions, in send order, where the row gives
    them (:func:`drawn_lengths`)."""

    @property
    def replayed(self) -> bool:
        """A burst (:data:`BURST`) or a closed-loop run whose every request's lengths are known
        (:attr:`requests`): always replayed (:func:`finite_run`, :func:`clients_run`), never
        priced by the closed form; the corpus fits leave them out (:attr:`replay`). An open-loop
        run of known lengths keeps the closed form at its mean lengths, as any open-loop run
        (over thousands of requests the spread of the lengths moves the means little, and the
        closed form takes the engine's upper balance where it has two, which the replay does
        not: ``docs/accuracy.md``); it is replayed with its requests' lengths when the closed
        form cannot price it (saturated, or a run shorter than the steady state)."""
        return self.scenario == "burst" or (self.requests is not None and self.scenario != "open_loop")

    def evaluate(self, engine: "EngineProfile | None" = None) -> float:
        """The predicted value, with ``engine``'s time terms if given (memory as prepared; the
        release's :attr:`pinned_time` kept): the closed form's, or with :attr:`replay` the
        replayed run's where the closed form cannot price it (:meth:`priced`)."""
        if self.replay:
            return self.priced(engine)[0]
        return self._closed_form(self._server_with(engine))

    def priced(self, engine: "EngineProfile | None" = None) -> tuple[float, str | None]:
        """The predicted value and, for a run replayed through the serving simulator (a burst,
        arrivals past the capacity, a run shorter than the steady state, a run of known lengths:
        :class:`NeedsReplay`), the note that says so (else ``None``)."""
        server = self._server_with(engine)
        try:
            return self._closed_form(server), None
        except NeedsReplay as exc:
            if self.scenario == "closed_loop" and self.requests is not None:
                return clients_run(self.row, server, math.ceil(self.args[0]), self.requests, divisor=self.divisor)
            rate, P, O = self.args
            return finite_run(self.row, server, rate, self.instances, P, O, self.cached_tokens, self.burstiness,
                              row_statistic(self.row), why=exc.why, divisor=self.divisor, requests=self.requests)

    def _server_with(self, engine: "EngineProfile | None") -> Any:
        """The prepared server with ``engine``'s time terms (and the release's pinned ones)."""
        server = self.server
        if engine is not None:
            if self.pinned_time:
                engine = engine.model_copy(update={"time": engine.time.model_copy(update=self.pinned_time)})
            t = engine.time_on(server.pricer.hw.name)
            server = replace(server, pricer=server.pricer.with_inputs(server.pricer.inp.model_copy(update={"engine": engine})),
                             **t.schedule())
        return server

    def _closed_form(self, server: Any) -> float:
        from capplan import benchmark

        if self.replayed:
            raise NeedsReplay(KNOWN_LENGTHS if self.requests is not None else BURST, "the run is replayed")
        extra: dict[str, float] = {"cached_tokens": self.cached_tokens} if self.scenario != "static_batch" else {}
        args = self.args
        if self.scenario == "open_loop":
            # the requests are dealt round robin to the instances (as finite_run replays them):
            # each sees rate / instances, with gaps of shape burstiness x instances
            rate, P, O = self.args
            args = (rate / self.instances, P, O)
            extra["burstiness"] = self.burstiness * self.instances
        r = getattr(benchmark, self.scenario)(server, *args, **extra)
        if self.first_wave > 0:  # the wave's clients are the steady state's, on the one instance it prices
            r = with_first_wave(r, server, self.first_wave, math.ceil(args[0]), *args[1:], self.cached_tokens)
        if r.limited_by == "saturated" and self.row.metric in LATENCY_METRICS:
            raise NeedsReplay(SATURATED, "latency grows with the run's length")
        in_system = r.requests_per_s * r.e2e_latency_s * self.instances
        if self.scenario == "open_loop" and self.row.metric in LATENCY_METRICS and ends_before_steady_state(self.row, in_system):
            raise NeedsReplay(SHORT_RUN, f"{in_system:,.0f} requests in the system at the steady state, "
                              f"{self.row.number('num_prompts'):,.0f} in the run")
        return _metric(self.row.metric, r, self.instances, self.divisor)


def first_wave_share(row: "CorpusRow") -> float:
    """The share of a closed-loop run's requests that make up its first wave: ``vllm bench serve``
    and ``sglang.bench_serving`` with ``--max-concurrency C`` start ``C`` requests at once, which
    queue for their prefills as a burst does; the later ones arrive one by one as others complete,
    as the steady-state closed form has them. ``C / num_prompts`` for a mean TTFT or end-to-end
    latency row that states its run length (``num_prompts``), else 0 (a median or a percentile
    is not moved by a wave of at most half the run; a throughput row is left to the steady state)."""
    n, c = row.number("num_prompts"), row.number("concurrency")
    if (n is None or c is None or row.get("scenario") != "concurrency" or row.metric not in ("ttft_ms", "e2e_latency_s")
            or row_statistic(row) != "mean"):
        return 0.0
    return min(1.0, c / n)


def with_first_wave(r: Any, server: Any, share: float, clients: int, prompt: float, output: float, cached: float) -> Any:
    """A closed-loop result ``r`` whose mean TTFT and end-to-end latency weigh in the run's first
    wave (:func:`first_wave_share`): ``share`` of the requests take the means of ``clients``
    requests sent at once, replayed through the serving simulator
    (:func:`capplan.sim.serving.simulate_replica`), the rest the steady state's."""
    import numpy as np

    wave = replay_fixed(server, np.zeros(max(1, clients)), prompt, output, cached)
    ttft, e2e = float(np.mean(wave.ttft_s)), float(np.mean(wave.finish_s))
    return replace(r, ttft_s=(1.0 - share) * r.ttft_s + share * ttft, e2e_latency_s=(1.0 - share) * r.e2e_latency_s + share * e2e)


def replay_fixed(server: Any, arrivals: Any, prompt: float, output: float, cached: float) -> Any:
    """One engine instance replayed by the serving simulator
    (:func:`capplan.sim.serving.simulate_replica`): requests of fixed lengths (``prompt`` /
    ``output`` / ``cached`` positions, rounded) at ``arrivals`` [s]."""
    import numpy as np

    from capplan.sim.serving import serving_engine, simulate_replica

    n = len(arrivals)
    P, O, C = int(round(prompt)), int(round(output)), int(round(cached))
    return simulate_replica(serving_engine(server), arrivals, np.full(n, P), np.full(n, O), np.full(n, C))


DRAWN_LENGTHS = "sglang-random"
"""``lengths`` of a run whose every request's lengths can be drawn again: the random dataset of
``sglang.bench_serving``, from the row's ``num_prompts``, ``random_input_len``,
``random_output_len``, ``random_range_ratio`` (default 0) and ``seed`` (default 1)
(:func:`capplan.sim.serving.sglang_random_lengths`). Such a run is replayed request by request
(:data:`KNOWN_LENGTHS`): at its clients (:func:`clients_run`), or at its request rate or all at
once (:func:`finite_run`), with its first wave, its drain and the spread of its lengths, which the
closed form at the mean lengths leaves out."""


def drawn_lengths(row: "CorpusRow", cached: float, assumed: list[str]) -> tuple[Any, Any, Any]:
    """The prompt, output and cached positions of each request of a :data:`DRAWN_LENGTHS` row,
    in the order the client sends them; the draw is noted in ``assumed``.

    The draws must give the row's mean lengths (within one token a request), so a row whose
    arguments were copied wrong is refused rather than priced at other lengths. A request drawn
    with no output token is counted so (the client's totals count it) and prefilled like one with
    a single token. The client sends its first request once before the run as a warm-up, and the
    engine's prefix cache keeps it: that request's prompt is a cache hit but for its last
    position. ``cached`` positions of every prompt are a hit besides (:func:`cached_prefix`)."""
    import numpy as np

    from capplan.sim.serving import sglang_random_lengths

    n, lin, lout = (row.number(k) for k in ("num_prompts", "random_input_len", "random_output_len"))
    if n is None or lin is None or lout is None:
        raise Unsupported(f"lengths {DRAWN_LENGTHS}: num_prompts, random_input_len and random_output_len are needed to draw them")
    ratio, seed = row.number("random_range_ratio", 0.0) or 0.0, int(row.number("seed", 1.0) or 0)
    prompt, output = sglang_random_lengths(int(n), int(lin), int(lout), ratio, seed)
    P, O = row.number("input_tokens"), row.number("output_tokens")
    if P is None or O is None or abs(prompt.mean() - P) > 1.0 or abs(output.mean() - O) > 1.0:
        raise Unsupported(f"lengths {DRAWN_LENGTHS}: the draws' means, {prompt.mean():.2f}/{output.mean():.2f} tokens, "
                          f"are not the row's {P}/{O}")
    hit = np.minimum(np.full(prompt.shape, cached), prompt - 1)
    hit[0] = prompt[0] - 1
    none = int((output == 0).sum())
    assumed.append(f"each request's lengths drawn as sglang.bench_serving draws them (random {lin:,.0f}/{lout:,.0f} tokens, "
                   f"range ratio {ratio:g}, seed {seed}; means {prompt.mean():,.2f}/{output.mean():,.2f}"
                   + (f"; {none:,} drawn with no output token, prefilled as with one" if none else "")
                   + "), the first request's prompt a prefix-cache hit (the client's warm-up request sent it)")
    return prompt, output, hit


def read_replay(row: "CorpusRow", statistic: str, run: Any, arrivals: Any, prompt: Any, output: Any,
                instances: float = 1.0, divisor: float = 1.0) -> float:
    """A row's value from a replayed run (:func:`capplan.sim.serving.simulate_replica`), read as
    the benchmark client reads it: a throughput as the run's tokens or requests over its span
    (first arrival to last completion), summed over ``instances`` and per ``divisor`` (GPUs for
    a per-GPU figure); a latency as the ``mean``, ``median`` or ``p99`` over the requests
    (``np.percentile``, as ``vllm bench serve`` and ``sglang.bench_serving`` take them) of TTFT,
    end-to-end latency or TPOT (the requests with two or more output tokens), or over the
    inter-token gaps for ITL (every token weighted once). ``output`` counts what the client
    counts."""
    import numpy as np

    work = {"output_tokens_per_s": output.sum(), "input_tokens_per_s": prompt.sum(),
            "total_tokens_per_s": prompt.sum() + output.sum(), "requests_per_s": prompt.shape[0]}
    if row.metric in work:
        return float(work[row.metric] / (run.finish_s.max() - arrivals.min())) * instances / divisor
    if row.metric == "itl_ms":
        values, weights = np.asarray(run.itl_s), np.asarray(run.itl_weight)
        if statistic == "mean":
            return 1e3 * float(np.average(values, weights=weights))
        order = np.argsort(values)
        cum = np.cumsum(weights[order]) / weights.sum()
        return 1e3 * float(values[order][min(int(np.searchsorted(cum, 0.5 if statistic == "median" else 0.99)), order.size - 1)])
    e2e = run.finish_s - arrivals
    long = output > 1
    if row.metric == "tpot_ms" and not long.any():
        raise Unsupported("no request with two or more output tokens: no TPOT")
    values, scale = {"ttft_ms": (run.ttft_s, 1e3), "e2e_latency_s": (e2e, 1.0),
                     "tpot_ms": ((e2e - run.ttft_s)[long] / (output[long] - 1), 1e3)}[row.metric]
    if statistic == "mean":
        return scale * float(np.mean(values))
    return scale * float(np.percentile(values, 50.0 if statistic == "median" else 99.0))


def clients_run(row: "CorpusRow", server: Any, clients: int, requests: tuple[Any, Any, Any],
                divisor: float = 1.0) -> tuple[float, str]:
    """A closed-loop row of known lengths (:data:`DRAWN_LENGTHS`) from its run replayed request by
    request at its ``clients`` (:func:`capplan.sim.serving.replay_clients`), read by
    :func:`read_replay`."""
    import numpy as np

    from capplan.sim.serving import replay_clients, serving_engine

    statistic = row_statistic(row)
    if statistic == "p99":
        raise Unsupported("a p99 latency of a closed-loop run is not predicted")
    prompt, output, cached = requests
    arrivals, run = replay_clients(serving_engine(server), clients, prompt, np.maximum(output, 1), cached)
    value = read_replay(row, statistic, run, arrivals, prompt, output, divisor=divisor)
    return value, (f"{KNOWN_LENGTHS}: a closed-loop run of {prompt.shape[0]:,} requests at {clients:,} clients replayed request "
                   "by request through the serving simulator")


def cached_prefix(row: "CorpusRow", assumed: list[str]) -> float:
    """Prompt positions of a row's requests that are a prefix-cache hit (``cached_prefix_tokens``:
    a system prompt the requests share, in whole KV blocks), noted in ``assumed``; 0 if none."""
    cached = row.number("cached_prefix_tokens", 0.0) or 0.0
    if cached > 0:
        assumed.append(f"the first {cached:.0f} prompt tokens a prefix-cache hit (the shared system prompt, whole KV blocks)")
    return cached


def arrival_burstiness(row: "CorpusRow", assumed: list[str]) -> float:
    """The gamma shape of an open-loop row's gaps between arrivals (``burstiness``, as in ``vllm
    bench serve --burstiness``: ``inf`` a constant rate, as inference-perf sends); a row that
    does not state it is taken as Poisson (1, the ``vllm bench serve`` default), noted in
    ``assumed``."""
    b = row.number("burstiness")
    if b is None:
        assumed.append("Poisson arrivals (burstiness 1; the arrival process is not stated)")
        return 1.0
    if b == math.inf:  # (load_corpus and the calibrate readers allow only b > 0)
        assumed.append("arrivals at a constant rate (burstiness inf)")
    return b


def prepare_serving(row: "CorpusRow", engine: "EngineProfile | None") -> PreparedServing:
    """Resolve a serving row's model, hardware, settings and scenario (raises :class:`Unsupported`)."""
    from capplan import benchmark

    if row.excluded:
        raise Unsupported(f"excluded: {row.excluded}")
    family = engine_family(row.get("engine"))
    model, alias = model_name(row)
    spec, hw = _model(model), _hardware(row.get("hardware") or "?")
    settings, assumed = serving_setup(row, family)
    assumed = alias + assumed
    if feature_settings().get(row.id, {}).get("phase"):
        raise Unsupported("a phase measurement: predicted by predict_phase")
    if row.id.endswith("_p99"):
        raise Unsupported("a p99 latency: the closed form predicts means (percentiles: capplan simulate)")
    P, O = row.number("input_tokens"), row.number("output_tokens")
    if P is None or O is None:
        raise Unsupported("input/output lengths not stated")
    server = _server(model, row.get("hardware"), engine, tuple(sorted(settings.items())))
    cached = cached_prefix(row, assumed)
    scenario = row.get("scenario")
    wave = 0.0  # a closed-loop run's first wave (first_wave_share)
    requests = drawn_lengths(row, cached, assumed) if row.get("lengths") == DRAWN_LENGTHS else None
    if scenario == "static_batch":
        if requests is not None:
            raise Unsupported(f"lengths {DRAWN_LENGTHS}: a static batch is priced at its stated lengths")
        b = row.number("batch")
        if b is None:
            raise Unsupported("batch not stated")
        call, args = "static_batch", (int(b), round(P), round(O))
    elif scenario == "concurrency":
        c = row.number("concurrency")
        if c is None:
            raise Unsupported("concurrency not stated")
        call, args = "closed_loop", (c, round(P), round(O))
        wave = first_wave_share(row) if requests is None else 0.0
        if wave:
            assumed.append(f"{FIRST_WAVE}: the first {c:,.0f} of its {row.number('num_prompts'):,.0f} requests (num_prompts) sent "
                           f"at once, their mean from the serving simulator (at the row's lengths), weighted {wave:.0%}")
    elif scenario == "offline_max":
        call, args = _all_at_once(row, P, O)
    elif scenario == "request_rate":
        rate = row.number("request_rate")
        if rate is None:
            raise Unsupported("request rate not stated")
        if rate == float("inf"):
            call, args = _all_at_once(row, P, O)
        else:
            call, args = "open_loop", (rate, round(P), round(O))
            burstiness = arrival_burstiness(row, assumed)
    else:
        raise Unsupported(f"scenario {scenario} is not modelled")
    _metric(row.metric, None, 1.0, 1.0, check_only=True)
    instances, divisor = _instances(row, settings["tp"], hw)
    if requests is not None and instances != 1:
        raise Unsupported(f"a run of known lengths over {instances:g} engine instances: its replay covers one")
    pinned = {t: getattr(engine.time, t) for t in PINNED_TIME_TERMS} if engine is not None else {}
    return PreparedServing(row, server, call, args, instances, divisor, assumed, cached,
                           burstiness if call == "open_loop" else 1.0, pinned, wave, requests=requests)


def ends_before_steady_state(row: "CorpusRow", in_system: float) -> bool:
    """Whether an open-loop run ends before the closed form's steady state (:data:`SHORT_RUN`):
    that state holds ``in_system`` requests (rate x end-to-end latency, over all instances), at
    least as many as the run sends in all (``num_prompts``). False when the row states no run
    length."""
    n = row.number("num_prompts")
    return n is not None and in_system >= n


def _all_at_once(row: "CorpusRow", P: float, O: float) -> tuple[str, tuple]:
    """The call for a run that queues every request at once: replayed (:data:`BURST`,
    :func:`finite_run`) when the row states how many (``num_prompts``) and their lengths are
    fixed or known (:data:`DRAWN_LENGTHS`), latency and throughput alike (a finite burst's
    throughput includes its ramp and its drain); else the steady-state offline closed form for a throughput row, and unsupported for a
    latency row (it depends on the request count and the engine's batch limit) or for the
    throughput of a burst of variable-length requests (``lengths`` ``varying``: the row's lengths
    are means over requests of different lengths, as :mod:`capplan.calibrate`'s rows say too)."""
    variable = row.get("lengths") == "varying"
    if row.number("num_prompts") is not None and not variable:
        return "burst", (math.inf, round(P), round(O))
    if row.metric in LATENCY_METRICS:
        raise Unsupported("latency with every request queued at once depends on the request count and the engine's batch "
                          "limit" + (": a burst of variable-length requests" if variable and row.number("num_prompts") else ""))
    if variable and row.number("request_rate") == math.inf:
        raise Unsupported("a finite burst of variable-length requests: its throughput includes the ramp and the drain, "
                          "which the steady-state closed form does not model")
    return "offline", (round(P), round(O))


def _instances(row: "CorpusRow", tp: int, hw: Any) -> tuple[float, float]:
    """Engine instances (or data-parallel ranks) a row's figure covers, and what divides it
    (GPUs for a per-GPU figure): a per-node unit covers one node's GPUs."""
    if (row.unit or "").endswith("/node"):
        instances = max(1.0, hw.gpus_per_node / tp)
    else:
        instances = max(1.0, (row.number("num_gpus") or tp) / tp)
    divisor = instances * tp if row.get("per_gpu") == "true" else 1.0
    return instances, divisor


_SERVERS: dict[tuple, tuple[Any, Any]] = {}


def _server(model: str, hardware: str, engine: Any, settings: tuple) -> Any:
    """A cached :class:`capplan.benchmark.Server` (keyed by names, the engine object and settings)."""
    from capplan import benchmark

    key = (model, hardware, id(engine), settings)
    hit = _SERVERS.get(key)
    if hit is None or hit[0] is not engine:
        hit = (engine, benchmark.server_for(_model(model), _hardware(hardware), engine=engine, **dict(settings)))
        _SERVERS[key] = hit
    return hit[1]


FINITE_RUN_SEED = 20240613
"""Seed of a finite run's arrival gaps (:func:`finite_run`): the same inputs give the same answer."""


def finite_run(row: "CorpusRow", server: Any, rate: float, instances: float, prompt: float, output: float,
               cached: float, burstiness: float, statistic: str, why: str = SATURATED,
               divisor: float = 1.0, requests: tuple[Any, Any, Any] | None = None) -> tuple[float, str]:
    """The row's value over a run of its ``num_prompts`` requests, simulated.

    The requests arrive at ``rate`` (gamma gaps of shape ``burstiness``, ``inf`` a constant rate)
    and are dealt round robin to ``instances`` engines, so each sees ``num_prompts / instances``
    of them at ``rate / instances`` with gaps of shape ``burstiness x instances``; one engine is
    replayed by :func:`capplan.sim.serving.simulate_replica` with the row's fixed lengths, or
    with each request's own (``requests``: prompt, output and cached positions, in send order,
    :func:`drawn_lengths`; one instance). ``rate`` ``inf`` sends every request at once. The value
    is read by :func:`read_replay` (``statistic`` ``mean``, ``median`` or ``p99``). ``why`` says
    why the run is replayed, for the note: :data:`SATURATED` (arrivals past the instance's
    capacity), :data:`SHORT_RUN`, :data:`BURST` or :data:`KNOWN_LENGTHS`.

    Returns the value in the row's unit and the assumption to report. Raises
    :class:`Unsupported` when the row states no run length."""
    import numpy as np

    from capplan.sim.serving import serving_engine, simulate_replica

    n_all = row.number("num_prompts")
    if n_all is None:
        raise Unsupported(f"{SATURATED}: latency grows with the run's length, which the row does not state (num_prompts)")
    n = max(1, math.ceil(n_all / instances))
    per_rate, shape = rate / instances, burstiness * instances
    rng = np.random.default_rng(FINITE_RUN_SEED)
    if math.isinf(per_rate):
        arrivals = np.zeros(n)
    else:
        gaps = np.full(n, 1.0 / per_rate) if math.isinf(shape) else rng.gamma(shape, 1.0 / (per_rate * shape), n)
        arrivals = np.cumsum(gaps)
    if requests is None:
        P, O = int(round(prompt)), int(round(output))
        p_arr, o_arr, c_arr = np.full(n, P), np.full(n, O), np.full(n, int(round(cached)))
        lengths = f"fixed {P:,}/{O:,}-token lengths"
    else:
        p_arr, o_arr, c_arr = requests
        lengths = "each request's own lengths"
    # a request with no output token is prefilled like one with a single token (drawn_lengths)
    run = simulate_replica(serving_engine(server), arrivals, p_arr, np.maximum(o_arr, 1), c_arr)
    value = read_replay(row, statistic, run, arrivals, p_arr, o_arr, instances, divisor)
    what = ("its throughput over the first arrival to the last completion" if row.metric not in LATENCY_METRICS
            else f"{statistic} read from it")
    return value, (f"{_REPLAY_REASON[why]}: the run's {int(n_all):,} requests (num_prompts) replayed through the serving "
                   f"simulator, {lengths}, {what}")


_REPLAY_REASON = {
    SHORT_RUN: f"{SHORT_RUN} (more requests in the system at the closed form's steady state than the run sends)",
    BURST: BURST,
    KNOWN_LENGTHS: KNOWN_LENGTHS,
    SATURATED: "arrivals past the instance's capacity",
}
"""The note that opens a replayed row's assumption, by why it was replayed (:func:`finite_run`)."""


def row_statistic(row: "CorpusRow") -> str:
    """The statistic a latency row reports: ``p99`` for a ``_p99`` row, else its ``statistic``
    column (``mean`` when not stated)."""
    return "p99" if row.id.endswith("_p99") else (row.get("statistic") or "mean")


def predict_percentile(row: "CorpusRow", engine: "EngineProfile | None") -> Prediction:
    """Predict a ``_p99`` latency row of an open-loop run with the queueing model
    (:func:`capplan.benchmark.open_loop_latency`); other p99 rows are unsupported.

    Kept apart from :func:`prepare_serving`, so the engine-term fits stay on the means."""
    from capplan import benchmark

    name = engine.name if engine else ""
    try:
        if row.excluded:
            raise Unsupported(f"excluded: {row.excluded}")
        family = engine_family(row.get("engine"))
        spec_name, hw_name = row.get("model") or "?", row.get("hardware") or "?"
        _model(spec_name), _hardware(hw_name)
        settings, assumed = serving_setup(row, family)
        rate, P, O = row.number("request_rate"), row.number("input_tokens"), row.number("output_tokens")
        if row.get("scenario") != "request_rate" or rate is None or rate == float("inf"):
            raise Unsupported("a p99 latency of a closed-loop or offline run: the queueing model covers open-loop arrivals")
        if P is None or O is None:
            raise Unsupported("input/output lengths not stated")
        if row.metric not in ("ttft_ms", "e2e_latency_s", "itl_ms", "tpot_ms"):
            raise Unsupported(f"metric {row.metric} is not predicted at a percentile")
        server = _server(spec_name, hw_name, engine, tuple(sorted(settings.items())))
        instances = max(1.0, (row.number("num_gpus") or settings["tp"]) / settings["tp"])
        cached = cached_prefix(row, assumed)
        # the run's arrivals: the slot wait takes them per instance, a replay all of them (the
        # closed form's assumption is said below, a replay's with the note)
        arrivals_note: list[str] = []
        shape = arrival_burstiness(row, arrivals_note)
        q = benchmark.open_loop_latency(server, rate / instances, round(P), round(O), (99.0,), cached,
                                        slot_burstiness=shape * instances)
        short = q.e2e_s.mean is not None and ends_before_steady_state(row, rate * q.e2e_s.mean)
        if q.saturated or short:
            value, note = finite_run(row, server, rate, instances, P, O, cached, shape, "p99",
                                     why=SATURATED if q.saturated else SHORT_RUN)
            return Prediction(value, "", name, assumed + arrivals_note + [note])
        value = {"ttft_ms": q.ttft_s.at(99.0), "e2e_latency_s": q.e2e_s.at(99.0)}.get(row.metric, q.tpot_s.at(99.0))
        assert value is not None
        value = value if row.metric == "e2e_latency_s" else value * 1e3
    except Unsupported as exc:
        return Prediction(None, str(exc), name)
    except CapplanError as exc:
        return Prediction(None, f"capplan refused the setup: {exc}", name)
    arrivals = "Poisson arrivals (queueing model)"
    if row.number("burstiness") == math.inf:
        arrivals = ("Poisson arrivals for a constant-rate run (queueing model), the wait for a free slot at "
                    "the run's constant rate (docs/accuracy.md, Arrivals)")
    return Prediction(value, "", name, assumed + [f"fixed input/output lengths, {arrivals}"])


def predict_serving(row: "CorpusRow", engine: "EngineProfile | None") -> Prediction:
    """Predict a serving row (see the module notes)."""
    name = engine.name if engine else ""
    if row.id.endswith("_p99"):
        return predict_percentile(row, engine)
    try:
        if feature_settings().get(row.id, {}).get("phase"):
            value, assumed = predict_phase(row, engine)
            return Prediction(value, "", name, assumed)
        prepared = prepare_serving(row, engine)
        value, note = prepared.priced()
    except Unsupported as exc:
        return Prediction(None, str(exc), name)
    except CapplanError as exc:
        return Prediction(None, f"capplan refused the setup: {exc}", name)
    return Prediction(value, "", name, prepared.assumed + ([note] if note else []))


PHASES = ("prefill", "decode", "offload_ttft", "offload_throughput", "decode_ratio")
"""Measurements that isolate one part of serving (``validation/feature_settings.yaml`` ``phase``)."""


def predict_phase(row: "CorpusRow", engine: "EngineProfile | None") -> tuple[float, list[str]]:
    """A row that measures one phase or one feature's effect (``feature_settings.yaml``):

    * ``prefill`` -- a prefill pool alone (PD disaggregation with the decode side unlimited):
      prompt tokens/s at saturation, :func:`capplan.disagg.prefill_capacity`;
    * ``decode`` -- a decode pool alone at ``batch`` sequences of ``context`` cached positions:
      output tokens/s, with speculative decoding when ``spec`` is given
      (:func:`capplan.speculative.spec_step`), or for a ``speedup_x`` row the speculative
      rate over the plain one at the same batch and context, and for a ``tpot_ms`` / ``itl_ms``
      row a sequence's time per output token;
    * ``offload_ttft`` / ``offload_throughput`` -- CPU KV offload against recomputation
      (:mod:`capplan.offload`), a ratio; or, for a ``ttft_ms`` row, one request's TTFT with its
      prefix loaded (``ttft: hit``) or recomputed (``ttft: recompute``), and for an
      ``input_tokens_per_s`` row the prompt tokens per second at ``hit_rate``;
    * ``decode_ratio`` -- the decode speed of the row's setting over ``baseline``'s, a ratio.

    Raises :class:`Unsupported` or a :class:`CapplanError` like :func:`prepare_serving`.
    """
    from capplan import disagg, offload

    fs = feature_settings()[row.id]
    phase = fs["phase"]
    if phase not in PHASES:
        raise Unsupported(f"phase {phase} is not modelled (allowed: {', '.join(PHASES)})")
    if row.excluded:
        raise Unsupported(f"excluded: {row.excluded}")
    family = engine_family(row.get("engine"))
    model, alias = model_name(row)
    spec, hw = _model(model), _hardware(row.get("hardware") or "?")
    settings, assumed = serving_setup(row, family)
    assumed = alias + assumed
    if fs.get("engine_terms"):
        from capplan.engine import default_engine

        base = engine or default_engine()
        engine = base.model_copy(update={"time": base.time.model_copy(update=dict(fs["engine_terms"]))})
    server = _server(model, row.get("hardware"), engine, tuple(sorted(settings.items())))
    instances, divisor = _instances(row, settings["tp"], hw)
    if phase == "prefill":
        if row.metric != "input_tokens_per_s":
            raise Unsupported(f"metric {row.metric} of a prefill measurement is not predicted")
        P = fs.get("input_tokens") or row.number("input_tokens")
        if P is None:
            raise Unsupported("prompt length not stated")
        return disagg.prefill_capacity(server, float(P)).input_tokens_per_s * instances / divisor, assumed
    if phase == "decode":
        B, c = float(fs["batch"]), float(fs["context"])
        if row.metric == "speedup_x":  # decoding with speculation over without, at the same batch
            if not fs.get("spec"):
                raise Unsupported("a speed-up row needs the speculative setting (spec)")
        elif row.metric not in ("output_tokens_per_s", "tpot_ms", "itl_ms"):
            raise Unsupported(f"metric {row.metric} of a decode measurement is not predicted")
        if fs.get("spec"):
            from capplan.speculative import SpecInputs, spec_pricers, spec_step

            sinp = SpecInputs(**fs["spec"])
            target, drafter = spec_pricers(spec, hw, server.pricer.inp, sinp)
            step = spec_step(target, drafter, sinp, B, c)
            if row.metric == "speedup_x":
                return step.speedup, assumed
            per_token = step.time_per_token_s
        else:
            per_token = float(server.pricer.decode(B, c).step_time_s)
        if row.metric in ("tpot_ms", "itl_ms"):  # a sequence's time per output token
            return per_token * 1e3, assumed
        return B / per_token * instances / divisor, assumed
    if phase == "offload_ttft":
        hit = offload.offload_hit(server, float(fs["input_tokens"]) - 1.0)
        if row.metric == "ttft_ms":  # one side of the comparison: the TTFT with the load, or recomputing
            side = fs.get("ttft", "hit")
            if side not in ("hit", "recompute"):
                raise Unsupported(f"offload_ttft side {side!r} (allowed: hit, recompute)")
            return (hit.ttft_hit_s if side == "hit" else hit.ttft_recompute_s) * 1e3, assumed
        return hit.speedup, assumed
    if phase == "offload_throughput":
        P = int(fs["input_tokens"])
        rate = offload.offload_throughput(server, P, float(fs["hit_rate"]))
        if row.metric == "input_tokens_per_s":  # the prompt tokens the instance takes per second
            return rate * P, assumed
        return rate / offload.offload_throughput(server, P, 0.0), assumed
    # decode_ratio: the row's decode speed over the baseline setting's
    B, c = float(fs["batch"]), float(fs["context"])
    base = {**settings, **fs["baseline"]}
    base.pop("gemm_dtype", None)
    other = _server(model, row.get("hardware"), engine, tuple(sorted(base.items())))
    return float(other.pricer.decode(B, c).step_time_s) / float(server.pricer.decode(B, c).step_time_s), assumed


_METRICS = {"ttft_ms", "itl_ms", "tpot_ms", "e2e_latency_s", "output_tokens_per_s", "input_tokens_per_s",
            "total_tokens_per_s", "requests_per_s"}


def _metric(metric: str, r: Any, instances: float, divisor: float, check_only: bool = False) -> float:
    if metric not in _METRICS:
        raise Unsupported(f"metric {metric} is not predicted")
    if check_only:
        return 0.0
    if metric == "ttft_ms":
        return r.ttft_s * 1e3
    if metric in ("itl_ms", "tpot_ms"):
        return r.itl_s * 1e3
    if metric == "e2e_latency_s":
        return r.e2e_latency_s
    if metric == "output_tokens_per_s":
        return r.output_tokens_per_s * instances / divisor
    if metric == "input_tokens_per_s":
        return r.input_tokens_per_s * instances / divisor
    if metric == "total_tokens_per_s":
        return (r.input_tokens_per_s + r.output_tokens_per_s) * instances / divisor
    if metric == "requests_per_s":
        return r.requests_per_s * instances / divisor
    raise Unsupported(f"metric {metric} is not predicted")


@dataclass(frozen=True)
class PreparedKV:
    """A KV row turned into a calculator call, ready to be evaluated with any memory terms."""

    row: "CorpusRow"
    spec: Any
    hw: Any
    inputs: Any
    assumed: list[str]
    draft: Any = None
    """The logged engine's drafter (:class:`capplan.speculative.SpecInputs`), or ``None``."""

    def evaluate(self, engine: "EngineProfile | None" = None) -> float:
        from capplan.kv import compute_kv

        inp = self.inputs if engine is None else self.inputs.model_copy(update={"engine": engine})
        r = compute_kv(self.spec, self.hw, inp)
        if self.draft is not None:  # the drafter's weights and KV layers share the budget
            from capplan.speculative import spec_memory

            m = spec_memory(self.spec, r, self.draft)
            return float(m.kv_capacity_tokens) if self.row.metric == "kv_cache_tokens" else r.kv_budget_gib_per_gpu - m.draft_weights_gib_per_gpu
        return float(r.kv_capacity_tokens) if self.row.metric == "kv_cache_tokens" else r.kv_budget_gib_per_gpu


def release_version(text: str | None) -> tuple[int, int, int] | None:
    """``(0, 19, 1)`` from an engine release cell such as ``0.19.1`` or ``v0.10.1.dev101+g...``
    (vLLM, TensorRT-LLM); ``None`` for vLLM's "v0 engine" or text without a version."""
    import re

    if not text or text.lower().startswith("v0 engine"):
        return None
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    if not m:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def prepare_kv(row: "CorpusRow", engine: "EngineProfile | None") -> PreparedKV:
    """Resolve a KV row's model, hardware and logged settings (raises :class:`Unsupported`)."""
    from capplan.engine import MemoryTerms
    from capplan.kv import KVInputs

    if row.excluded:
        raise Unsupported(f"excluded: {row.excluded}")
    spec, hw = _model(row.get("model") or "?"), _hardware(row.get("hardware") or "?")
    if row.get("engine") != "vllm":
        raise Unsupported(f"engine {row.get('engine')} KV rows are not predicted yet")
    if release_version(row.get("engine_version")) is None and "latest" not in (row.get("engine_version") or ""):
        raise Unsupported("the log shows no V1 version (the v0 engine, or a version not printed)")
    assumed: list[str] = []
    w = dtype_of(row.get("weight_dtype")) or "bf16"
    if w not in WEIGHT_DTYPES:
        raise Unsupported(f"weight dtype {w} is not modelled yet")
    kvd = dtype_of(row.get("kv_dtype"))
    if kvd is None:
        kvd = "bf16"
        assumed.append("kv_dtype bf16 (vLLM auto)")
    if kvd not in KV_DTYPES:
        raise Unsupported(f"KV dtype {kvd} is not modelled")
    if _int(row, "dp", 1) > 1:
        raise Unsupported("data-parallel ranks are not modelled")
    if row.metric not in ("kv_cache_tokens", "available_kv_gib"):
        raise Unsupported(f"metric {row.metric} is not predicted")
    sampler = row.get("sampler")  # the top-k/top-p path the log names
    if sampler not in (None, "pytorch", "flashinfer"):
        raise Unsupported(f"sampler {sampler} is not modelled")
    if sampler is None:
        path = (engine.memory if engine else MemoryTerms()).sampler_path()
        assumed.append(f"the sampler warm-up on the engine profile's {path} path (the log does not say)")
    inp = KVInputs(
        tp=_int(row, "tp", 1), pp=_int(row, "pp", 1), weight_dtype=w, kv_dtype=kvd, engine=engine,
        gpu_mem_util=row.number("gpu_memory_utilization"), usable_mem_gib=row.number("total_mem_gib_logged"),
        max_num_seqs=_opt_int(row, "max_num_seqs"), max_batched_tokens=_opt_int(row, "max_num_batched_tokens"),
        block_size=_int(row, "block_size", engine.memory.block_size if engine else 16),
        context=_int(row, "max_model_len", 8192), sampler=sampler,
    )
    fs = feature_settings().get(row.id.split(":")[0], {})  # a start-up log's rows: <log id>:<metric>
    draft = None
    if fs.get("spec"):
        from capplan.speculative import SpecInputs

        draft = SpecInputs(**fs["spec"])
        assumed += list(fs.get("assumed") or [])
    return PreparedKV(row, spec, hw, inp, assumed, draft)


def predict_kv(row: "CorpusRow", engine: "EngineProfile | None") -> Prediction:
    """Predict a KV-capacity row (``kv_cache_tokens`` or ``available_kv_gib``) from the logged settings."""
    name = engine.name if engine else ""
    try:
        prepared = prepare_kv(row, engine)
        value = prepared.evaluate()
    except Unsupported as exc:
        return Prediction(None, str(exc), name)
    except CapplanError as exc:
        return Prediction(None, f"capplan refused the setup: {exc}", name)
    return Prediction(value, "", name, prepared.assumed)


def _opt_int(row: "CorpusRow", name: str) -> int | None:
    v = row.number(name)
    return int(v) if v is not None else None
