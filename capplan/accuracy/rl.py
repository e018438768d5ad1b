"""RL corpus rows through the plan: step times, trainer phases and weight syncs, and the fits of the trainer constants.

Three kinds of row meet capplan's RL arithmetic here:

* ``rl`` rows (``validation/rl_steps.csv``): each published run is turned into a workload and
  :class:`~capplan.plan.PlanInputs` with the row's settings (GPU counts, mode, staleness,
  generation tensor parallelism, prompts, samples, lengths) and planned with
  :func:`capplan.plan.plan_workload`; the metric is read off the plan. A run the plan cannot
  express (no model preset or hardware profile, a split or batch the source does not state, a
  whole-run duration, a token ledger without a step) is returned unsupported with the reason.
* ``trainer`` rows (``validation/trainer.csv``): the fitted trainer MFU
  (:data:`capplan.trainer.TRAINER_MFU_FIT`) against the published MFU or model TFLOP/s.
* ``weight_sync`` rows (``validation/weight_sync.csv``): the fitted weight-sync patterns
  (:data:`capplan.trainer.WEIGHT_SYNC_FITS`) against the published refit times.

:func:`fit_trainer_mfu` and :func:`fit_weight_sync` recompute those two fits from the corpus rows
that ``validation/split.yaml`` leaves in the fit (the held-out rows are never seen);
``python -m capplan.accuracy.rl`` prints the constants to paste into :mod:`capplan.trainer`, and a
test checks that the shipped constants are what the fit gives.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from capplan.accuracy.predict import Prediction, Unsupported, _hardware, _model, model_name

if TYPE_CHECKING:
    from capplan.accuracy.corpus import CorpusRow
    from capplan.engine import EngineProfile

# ------------------------------------------------------------------------------------- trainer MFU

MFU_PRECISIONS = frozenset({"bf16"})
"""Training precisions whose rows fit the MFU function (a BF16 trainer, as RL runs use); FP8 and
FP4 rows measure a different peak and are left out of the fit (they are still reported)."""


@dataclass(frozen=True)
class MFUPoint:
    """One trainer row as a point of the MFU fit."""

    row_id: str
    held_out: bool
    features: tuple[float, ...]
    """(1, log sparsity, log machine balance / H100, log context parallel, log model parallel, log active billions)."""
    mfu: float
    """Measured BF16 MFU [fraction]."""


def mfu_features(spec: Any, hw: Any, tp: int = 1, pp: int = 1, cp: int = 1) -> tuple[float, ...]:
    """The regressors of :class:`capplan.trainer.MFUModel` (see there)."""
    from capplan.trainer import mfu_features as features

    return features(spec, hw, tp, pp, cp)


def _size_from_name(name: str) -> float | None:
    """Parameters of a model named like ``megatron-gpt-7.1b`` or ``gpt1p7b`` [params], else None."""
    m = re.search(r"(\d+(?:[.p]\d+)?)b$", name or "")
    return float(m.group(1).replace("p", ".")) * 1e9 if m else None


def trainer_point(row: "CorpusRow") -> MFUPoint:
    """A trainer row as an MFU point (raises :class:`Unsupported` with the reason).

    MFU rows are taken as published; model TFLOP/s rows are divided by the GPU's dense BF16
    peak; tokens/s rows are converted with capplan's forward FLOPs at the row's sequence length
    (``3 x forward`` per trained token).
    """
    import numpy as np

    from capplan.trainer import forward_flops, mfu_features as features

    precision = row.get("precision")
    if precision is not None and precision not in MFU_PRECISIONS:
        raise Unsupported(f"precision {precision}: the trainer MFU is fitted and predicted for BF16 training")
    if row.metric not in ("mfu", "model_tflops_per_gpu", "tokens_per_s_per_gpu"):
        raise Unsupported(f"metric {row.metric} is not a throughput of one training step")
    hw = _hardware(row.get("hardware") or "?")
    name = row.get("model") or ""
    try:
        spec = _model(name)
    except Unsupported:
        size = _size_from_name(name)
        if size is None or row.metric == "tokens_per_s_per_gpu":
            raise
        spec = None
    n = lambda key: int(row.number(key, 1) or 1)  # noqa: E731
    tp, pp, cp = n("tp"), n("pp"), n("cp")
    peak = hw.peak_flops("bf16")
    if row.metric == "mfu":
        mfu = row.measured / 100.0 if row.unit == "percent" else row.measured
    elif row.metric == "model_tflops_per_gpu":
        mfu = row.measured * 1e12 / peak
    else:
        length = row.number("seq_len")
        if length is None:
            raise Unsupported("sequence length not stated: tokens/s cannot be turned into FLOP/s")
        mfu = row.measured * 3.0 * forward_flops(spec, np.array([length])) / length / peak
    if spec is None:
        feats = (1.0, 0.0, math.log(hw.peak_flops("bf16") / hw.hbm_bandwidth_bytes_per_s / _H100_BALANCE),
                 math.log(cp), math.log(tp * pp), math.log(size / 1e9))
    else:
        feats = features(spec, hw, tp, pp, cp)
    return MFUPoint(row.id, row.held_out, feats, mfu)


_H100_BALANCE = 989.4e12 / 3.35e12
"""H100 SXM dense BF16 FLOP/s per HBM byte/s (the reference machine balance)."""


def fit_trainer_mfu(rows: "list[CorpusRow] | None" = None) -> tuple[tuple[float, ...], list[str]]:
    """Least squares of ``log MFU`` on :func:`capplan.trainer.mfu_features` over the fit rows.

    Returns
    -------
    (coefficients, fitted_on)
        The six coefficients (rounded to 4 decimals) and the ids of the rows fitted.
    """
    import numpy as np

    from capplan.accuracy.corpus import load_corpus

    rows = load_corpus(kinds={"trainer"}) if rows is None else rows
    points = []
    for row in rows:
        if row.held_out or row.excluded:
            continue
        try:
            points.append(trainer_point(row))
        except Unsupported:
            continue
    X = np.array([p.features for p in points])
    y = np.log([p.mfu for p in points])
    coef, *_ = np.linalg.lstsq(X, y, rcond=None)
    return tuple(round(float(c), 4) for c in coef), [p.row_id for p in points]


def predict_trainer(row: "CorpusRow") -> Prediction:
    """A trainer row: capplan's fitted BF16 MFU (as MFU, model TFLOP/s or tokens/s)."""
    import numpy as np

    from capplan.trainer import TRAINER_MFU_FIT, forward_flops

    try:
        point = trainer_point(row)
        hw = _hardware(row.get("hardware") or "?")
        mfu = TRAINER_MFU_FIT.from_features(point.features)
        if row.metric == "mfu":
            value = mfu * 100.0 if row.unit == "percent" else mfu
        elif row.metric == "model_tflops_per_gpu":
            value = mfu * hw.peak_flops("bf16") / 1e12
        else:
            spec = _model(row.get("model") or "?")
            length = float(row.number("seq_len") or 0)
            value = mfu * hw.peak_flops("bf16") / (3.0 * forward_flops(spec, np.array([length])) / length)
    except Unsupported as exc:
        return Prediction(None, str(exc), "trainer MFU fit")
    return Prediction(value, "", "trainer MFU fit")


# ------------------------------------------------------------------------------------- weight sync

SYNC_METHODS: list[tuple[str, str]] = [
    ("xferdtensor", "nccl"),
    ("nccl reshard", "nccl"),
    ("nixl", "nixl"),
    ("checkpoint-engine", "checkpoint-engine"),
    ("per-tensor", "per-tensor"),
]
"""How a weight-sync row's ``method`` text names its pattern (first match wins)."""


def sync_pattern(method: str) -> str:
    """The weight-sync pattern of a row's method text (raises :class:`Unsupported`)."""
    text = (method or "").lower()
    if "sparse-delta" in text or "cpu offload" in text or "sync_weights" in text:
        raise Unsupported(f"{method}: a transfer through host memory or object storage is not modelled")
    for key, pattern in SYNC_METHODS:
        if key in text:
            return pattern
    raise Unsupported(f"{method}: no weight-sync pattern of capplan's matches it")


def sync_setup(row: "CorpusRow") -> tuple[str, Any, int, float]:
    """(pattern, model, receiving tensor-parallel degree, bytes per weight) of a weight-sync row.

    The receiving replica's tensor parallelism is read from the row's mapping (``→ TP8``,
    ``8xH800 TP8``); weights travel in the precision the row names (FP8 rows carry 1 byte per
    parameter, BF16 rows 2).
    """
    if row.metric != "refit_time_s":
        raise Unsupported(f"metric {row.metric}: only whole refit times are predicted")
    pattern = sync_pattern(row.get("method") or "")
    if "shard_expert_weights=false" in (row.get("method") or "").replace(" ", "").lower():
        raise Unsupported(
            "shard_expert_weights=false: NeMo RL's full-weight loader sends every rank every expert "
            "whole; one published run, no fit of its own (the nixl pattern sends each rank its slice)"
        )
    spec = _model(model_name(row)[0])
    notes = row.get("notes") or ""
    mapping = re.search(r"(?:→|->)\s*TP ?(\d+)", notes) or re.search(r"TP ?(\d+)'", notes) or re.search(r"vLLM TP(\d+)", notes)
    if mapping is None:
        raise Unsupported("the receiving replica's tensor parallelism is not stated")
    if "precision FP8" in notes:
        raise Unsupported("an FP8 refit quantises on the way (not modelled)")
    byte = 1.0 if "(FP8)" in notes else 2.0
    return pattern, spec, int(mapping.group(1)), byte


def _sync_bytes(pattern: str, spec: Any, tp: int, byte: float) -> float:
    """Bytes each receiving GPU of a weight-sync row gets under its pattern's ``receives``."""
    from capplan.trainer import WEIGHT_SYNC_FITS, sync_bytes_per_gpu

    return sync_bytes_per_gpu(spec, tp, WEIGHT_SYNC_FITS[pattern].receives, byte)


SYNC_LATENCY_BOUNDS_S = (0.0, 1.0)
"""Range of the fitted fixed cost of one weight sync [s]."""


def fit_weight_sync(rows: "list[CorpusRow] | None" = None) -> dict[str, tuple[float, float, list[str]]]:
    """Per pattern, ``latency + bytes_per_receiving_gpu / bandwidth`` fitted to the fit rows.

    The fit minimises ``sum log(predicted / measured)^2`` over the two terms, the latency within
    :data:`SYNC_LATENCY_BOUNDS_S` (the smallest published refit, NeMo RL's Qwen3-4B reshard, takes
    0.21 s: a fit over rows of similar sizes must not read their time as a fixed cost). A pattern whose fit rows all move the same bytes
    (``nixl``: one published DeepSeek-V3 deployment) cannot separate the two terms: its latency is
    0 and its bandwidth the geometric mean of ``bytes / time``.

    Returns
    -------
    dict
        pattern -> (latency [s], bandwidth [bytes/s], fitted_on): the latency rounded to the
        millisecond, the bandwidth to 3 significant digits.
    """
    import numpy as np
    from scipy.optimize import least_squares

    from capplan.accuracy.corpus import load_corpus

    rows = load_corpus(kinds={"weight_sync"}) if rows is None else rows
    by_pattern: dict[str, list[tuple[str, float, float]]] = {}
    for row in rows:
        if row.held_out or row.excluded:
            continue
        try:
            pattern, spec, tp, byte = sync_setup(row)
        except Unsupported:
            continue
        by_pattern.setdefault(pattern, []).append((row.id, _sync_bytes(pattern, spec, tp, byte), row.measured))
    out: dict[str, tuple[float, float, list[str]]] = {}
    for pattern, points in sorted(by_pattern.items()):
        size = np.array([p[1] for p in points])
        measured = np.array([p[2] for p in points])

        def residual(x: "np.ndarray") -> "np.ndarray":
            return np.log((x[0] + size / (x[1] * 1e9)) / measured)

        if np.ptp(size) <= 1e-6 * size.max():  # one size: the two terms are not separable
            latency, bandwidth = 0.0, float(np.exp(np.mean(np.log(size / measured))))
        else:
            low, high = SYNC_LATENCY_BOUNDS_S
            fit = least_squares(residual, x0=[0.2, 10.0], bounds=([low, 0.01], [high, 1000.0]))
            latency, bandwidth = float(fit.x[0]), float(fit.x[1]) * 1e9
        out[pattern] = (round(latency, 3), float(f"{bandwidth:.3g}"), [p[0] for p in points])
    return out


def predict_weight_sync(row: "CorpusRow") -> Prediction:
    """A weight-sync row: the fitted pattern's time for the row's model and receiving layout."""
    from capplan.trainer import WEIGHT_SYNC_FITS

    try:
        pattern, spec, tp, byte = sync_setup(row)
        if pattern not in WEIGHT_SYNC_FITS:
            raise Unsupported(f"pattern {pattern}: no fit")
        value = WEIGHT_SYNC_FITS[pattern].time_s(_sync_bytes(pattern, spec, tp, byte))
    except Unsupported as exc:
        return Prediction(None, str(exc), "weight-sync fit")
    return Prediction(value, "", f"weight-sync fit ({pattern})", model_name(row)[1])


# ------------------------------------------------------------------------------------- RL step rows

RL_METRICS = {
    "step_time_s": "step_time_s",
    "tokens_per_s_per_gpu": "tokens_per_s_per_gpu",
    "trainer_wait_fraction": "trainer_idle_fraction",
    "generation_time_s": "generation_time_s",
    "training_time_s": "training_time_s",
    "logprob_time_s": "logprob_time_s",
    "refit_time_s": "weight_sync_time_s",
    "inference_training_gpu_use_ratio": "inference_training_gpu_use_ratio",
    "samples_per_s": "samples_per_s",
}
"""Metrics of ``rl_steps.csv`` the plan predicts, and the figure each reads."""

OLMO3_FOOTNOTE_RUN = "olmo-3-32b"
"""Footnote 41 of the OLMo 3 report ("each training step averaged 1000 seconds, of which 125
seconds was spent running training") does not name its run; capplan compares it with the 32B
Think run (the issue's reading), and says so in ``assumed``."""


def _rl_workload(row: "CorpusRow", assumed: list[str]) -> Any:
    """The workload of a published run: prompts x samples, and lengths from the row."""
    from capplan.distributions import lognormal_mean_before_clip
    from capplan.workload import Workload

    prompts, samples = row.number("prompts_per_step"), row.number("samples_per_prompt")
    if prompts is None or samples is None:
        raise Unsupported("prompts per step and samples per prompt not stated")
    max_prompt, max_response = row.number("max_prompt_tokens"), row.number("max_response_tokens")
    mean_prompt, mean_response, mean_seq = (row.number(k) for k in ("mean_prompt_tokens", "mean_response_tokens", "mean_seq_tokens"))
    if mean_prompt is None:
        mean_prompt = RL_PROMPT_TOKENS
        if max_prompt is not None:
            mean_prompt = min(mean_prompt, max_prompt)
        assumed.append(f"mean prompt {mean_prompt:g} tokens (not stated; OpenMathInstruct-2-sized problems)")
    if mean_response is None:
        if mean_seq is not None:
            mean_response = mean_seq - mean_prompt
        elif row.get("model") in ("olmo-3-7b", "olmo-3-32b") or row.id.startswith("olmo3_"):
            mean_response = OLMO3_MEAN_RESPONSE
            assumed.append(f"mean response {OLMO3_MEAN_RESPONSE:,} tokens (OLMo 3 section 4.4.3)")
        else:
            raise Unsupported("mean response length not stated")
    if max_response is None:
        raise Unsupported("maximum response length not stated")
    cap = max_response
    if row.source.startswith("NeMo RL") and max_prompt is not None:
        cap = max_response - mean_prompt  # prompt + response <= max_total_sequence_length (the recipe)
    if not 0 < mean_response < cap:
        raise Unsupported(f"mean response {mean_response:g} tokens is not below the generation limit {cap:g}")
    # a published mean is measured after the limit cut the long responses: the lognormal's mean
    # before the cut is larger (15% on NeMo RL's 4,096-token rows)
    before = lognormal_mean_before_clip(float(mean_response), RL_RESPONSE_SIGMA, float(cap))
    assumed.append(f"response lengths lognormal with sigma {RL_RESPONSE_SIGMA:g}, cut at {cap:,.0f} tokens; "
                   f"mean {before:,.0f} before the cut so that the cut responses average the published {mean_response:,.0f}")
    return Workload.model_validate({
        "name": row.id,
        "method": "outcome-rl",
        "volume": {"prompts_per_step": int(prompts), "samples_per_prompt": int(samples)},
        "conversation": {
            "prompt_tokens": round(mean_prompt),
            "turns": [{"action_tokens": {"dist": "lognormal", "mean": before, "sigma": RL_RESPONSE_SIGMA}}],
            "max_response_tokens": int(cap),
        },
        "cache": {"reuse": "none"},
        "sampling": {"conversations": RL_SAMPLE, "seed": 0},
    })


RL_PROMPT_TOKENS = 200.0
"""Mean prompt length taken when a run states only the maximum [tokens] (ASSUMPTION: a math
problem of OpenMathInstruct-2 or DAPO is a few hundred tokens)."""
RL_RESPONSE_SIGMA = 0.6
"""Log-space spread of response lengths when only the mean is published (ASSUMPTION; the
OLMo 3 workloads use 0.5, reasoning traces spread widely)."""
OLMO3_MEAN_RESPONSE = 14_628
"""OLMo 3, section 4.4.3: "a mean generation length of 14628" at a 32K limit [tokens]."""
RL_SAMPLE = 4000
"""Conversations sampled per RL row [conversations]."""
REASONING_SHAPE = {
    "prompts_per_step": 128, "samples_per_prompt": 8, "max_prompt_tokens": 2048, "max_response_tokens": 32768,
    "mean_response_tokens": OLMO3_MEAN_RESPONSE, "gen_tp": 8, "max_staleness": 8,
}
"""What a reasoning-RL row that publishes only its split is planned with (ASSUMPTION, stated in
the row's ``assumed``): OLMo 3 Think's batch and lengths (Table 49, section 4.4.3)."""


def _int_field(row: "CorpusRow", name: str) -> int | None:
    v = row.number(name)
    return int(v) if v is not None else None


def rl_inputs(row: "CorpusRow", engine: "EngineProfile | None", assumed: list[str]) -> tuple[Any, Any]:
    """(workload, PlanInputs) of an ``rl`` row; raises :class:`Unsupported` with the reason."""
    from capplan.engine import default_engine
    from capplan.errors import CapplanError
    from capplan.plan import PlanInputs

    if row.metric not in RL_METRICS:
        raise Unsupported(f"metric {row.metric}: a whole-run duration or a token count, not a step figure")
    if "Training FP8" in (row.get("notes") or ""):
        raise Unsupported("FP8 training: the trainer MFU is fitted on BF16 training rows")
    if "dynamic sampling" in (row.get("notes") or "") or "dapo" in row.id:
        raise Unsupported("dynamic sampling: the generations per step depend on the reward filter, which the row does not state")
    model = row.get("model")
    if model is None and row.id.startswith("olmo3_fn41"):
        model = OLMO3_FOOTNOTE_RUN
        assumed.append("footnote 41's run taken to be OLMo 3 Think 32B at 64 : 160 H100, max asynchrony 8")
        fields = {"trainer_gpus": 64, "inference_gpus": 160, "gen_tp": 8, "mode": "async", "max_staleness": 8,
                  "prompts_per_step": 128, "samples_per_prompt": 8, "max_prompt_tokens": 2048, "max_response_tokens": 32768}
        row = _with_fields(row, {**fields, "model": model})
    spec = _model(model or "?")
    hw = _hardware(row.get("hardware") or "?")
    if row.source.startswith("SemiAnalysis"):
        # a reasoning run whose batch and lengths are not published: OLMo 3 Think's shape
        row = _with_fields(row, REASONING_SHAPE)
        assumed.append(
            "workload not published: OLMo 3 Think's shape (128 prompts x 8, prompts <= 2,048, responses <= 32,768 "
            "with mean 14,628), generation TP 8, max staleness 8 (OLMo 3 Think 32B's)"
        )
    workload = _rl_workload(row, assumed)
    mode = row.get("mode")
    total, trainer, inference = (_int_field(row, k) for k in ("total_gpus", "trainer_gpus", "inference_gpus"))
    tp = _int_field(row, "gen_tp")
    if tp is None:
        raise Unsupported("the generation tensor parallelism is not stated")
    if mode not in ("colocated", "sync", "async"):
        raise Unsupported(f"mode {mode!r} not stated")
    if mode == "colocated":
        if total is None:
            raise Unsupported("GPU count not stated")
        counts = {"total_gpus": total}
    else:
        if trainer is None or inference is None:
            raise Unsupported("the trainer : inference split is not stated")
        counts = {"trainer_gpus": trainer, "inference_gpus": inference}
    staleness = _int_field(row, "max_staleness") if mode == "async" else 0
    if mode == "async" and staleness is None:
        raise Unsupported("the staleness bound is not stated")
    framework = (row.get("framework") or "").lower()
    if "open-instruct" in framework and mode != "colocated":
        cap = open_instruct_max_num_seqs(workload, inference // tp)
        engine = (engine or default_engine()).with_settings(max_num_seqs=cap)
        assumed.append(
            f"open-instruct's engines admit at most {cap} sequences each (one step's prompts x samples over its "
            f"{inference // tp} engines: grpo_fast.py inference_batch_size before open-instruct commit f87c667)"
        )
    if "open-instruct" in framework and (row.get("model") or model) == "olmo-3-32b":
        engine = (engine or default_engine()).with_settings(enforce_eager=True)
        assumed.append(
            f"vLLM engines in eager mode ({OPEN_INSTRUCT_32B_EAGER_SOURCE}; that script's topology is not the paper's), "
            "each step paying the engine profile's eager_s_per_layer per layer"
        )
    sync_pattern_name = "reshard" if mode == "colocated" else "nccl"
    # NeMo RL's async GRPO trains each step's batch whole (max_trajectory_age_steps); OLMo 3 streams groups
    ingest = "batches" if ("nemo rl" in framework or "verl" in framework) else "groups"
    try:
        inputs = PlanInputs(
            hardware=hw, model=spec, tp=tp, mode=mode, max_staleness=staleness or 0, engine=engine,
            weight_sync=sync_pattern_name, async_ingest=ingest, **counts,
        )
    except CapplanError as exc:
        raise Unsupported(str(exc)) from None
    if "nemo rl" in framework and row.get("train_parallelism"):
        assumed.append("trainer MFU at the plan's FSDP layout (the run's Megatron layout is not modelled)")
    return workload, inputs


OPEN_INSTRUCT_32B_EAGER_SOURCE = (
    "https://github.com/allenai/open-instruct/blob/00d42c4e8a334217847172f94001f89c8cc3796d/scripts/train/olmo3/32b_think_rl.sh "
    "(grpo_fast.py ... --vllm_enforce_eager; scripts/train/olmo3/7b_think_rl.sh @ 0483eb19 has no such flag)"
)
"""Where the OLMo-3-32B rows' eager-mode engines come from."""


OPEN_INSTRUCT_BATCH_CAP_SOURCE = (
    "https://github.com/allenai/open-instruct/blob/f87c66771f202e30ea14d1eb9c0f34df7349feb4~1/open_instruct/grpo_fast.py "
    "(Args.__post_init__: inference_batch_size = ceil(num_samples_per_prompt_rollout x num_unique_prompts_rollout / "
    "vllm_num_engines)) and open_instruct/vllm_utils.py (_prefetch_worker admits a prompt only while an engine has "
    "fewer active sequences than inference_batch_size)"
)
"""Where :func:`open_instruct_max_num_seqs` comes from: open-instruct as the OLMo 3 runs used it
(commit f87c667 of 2025-11-17 replaced the rule by vLLM's KV-cache concurrency)."""


def open_instruct_max_num_seqs(workload: Any, engines: int) -> int:
    """Sequences one open-instruct vLLM engine runs at once: one step's prompts x samples over the
    engines, rounded up (:data:`OPEN_INSTRUCT_BATCH_CAP_SOURCE`); the queue refills an engine as
    its sequences finish, so the engine stays at this batch while prompts remain.

    >>> from types import SimpleNamespace
    >>> open_instruct_max_num_seqs(SimpleNamespace(volume=SimpleNamespace(conversations_per_step=1024)), 20)
    52
    """
    return max(1, math.ceil(workload.volume.conversations_per_step / max(engines, 1)))


def _with_fields(row: "CorpusRow", extra: dict[str, Any]) -> "CorpusRow":
    from dataclasses import replace

    return replace(row, fields={**row.fields, **{k: str(v) for k, v in extra.items()}})


def predict_rl(row: "CorpusRow", engine: "EngineProfile | None") -> Prediction:
    """An ``rl`` row planned with its settings; the metric read off the plan."""
    from capplan.errors import CapplanError
    from capplan.plan import plan_workload

    assumed: list[str] = []
    name = engine.name if engine is not None else "default"
    try:
        if row.excluded:
            raise Unsupported(f"excluded: {row.excluded}")
        workload, inputs = rl_inputs(row, engine, assumed)
        try:
            plan = _plan(workload, inputs)
        except CapplanError as exc:
            raise Unsupported(str(exc)) from None
        value = rl_metric(row, plan)
    except Unsupported as exc:
        return Prediction(None, str(exc), name, assumed)
    return Prediction(value, "", plan.engine_profile, assumed)


def _plan(workload: Any, inputs: Any) -> Any:
    from capplan.plan import plan_workload

    return plan_workload(workload, inputs, conversations=RL_SAMPLE)


def rl_metric(row: "CorpusRow", plan: Any) -> float:
    """The figure of ``plan`` that ``row.metric`` measures."""
    m = row.metric
    phases = plan.phases
    if m == "step_time_s":
        return plan.step_time_s
    if m == "tokens_per_s_per_gpu":
        return plan.trainer_record_tokens_per_s / max(plan.inference_gpus + (0 if plan.mode == "colocated" else plan.trainer_gpus), 1)
    if m == "trainer_wait_fraction":
        return plan.trainer_idle_fraction
    if m == "generation_time_s":
        return phases["generation_s"]
    if m == "training_time_s":
        return phases["training_s"]
    if m == "logprob_time_s":
        return phases["logprob_s"]
    if m == "refit_time_s":
        return phases["weight_sync_s"]
    if m == "inference_training_gpu_use_ratio":
        busy_trainer = plan.trainer_gpus * (1 - plan.trainer_idle_fraction)
        busy_inference = plan.inference_gpus * (1 - plan.inference_idle_fraction)
        return busy_inference / busy_trainer if busy_trainer else math.inf
    if m == "samples_per_s":
        if "trainer" in row.id:
            return plan.trainer_capacity_samples_per_s
        return plan.generation_samples_per_s
    raise Unsupported(f"metric {m} is not predicted")


RL_CHIP_MIN_ROWS = 5
"""A chip other than the reference (the one with most fit rows) gets its own rollout slowdown
when at least this many fit rows run on it."""


def fit_rl_framework(
    rows: "list[CorpusRow] | None" = None, engine: "EngineProfile | None" = None, conversations: int = 2000
) -> tuple[float, float, dict[str, float], list[str]]:
    """The RL framework's rollout slowdown ``A``, per-step overhead ``C`` and per-chip slowdowns
    fitted to published step times.

    Every fit row (``step_time_s`` of ``rl_steps.csv`` that the plan can express; held-out rows
    excluded) is planned in full with its settings at each trial; :func:`scipy.optimize.least_squares`
    minimises ``sum log(planned / measured)^2`` over ``A >= 1``, ``C >= 0`` and, for every chip
    with at least :data:`RL_CHIP_MIN_ROWS` fit rows other than the reference chip (the one with
    the most), a factor in ``[0.5, 5]`` on ``A`` for that chip. A maintenance fit (a few minutes):
    ``python -m capplan.accuracy.rl``.

    Returns
    -------
    (A, C, chips, fitted_on)
        [ratio], [s], ``{hardware: ratio}`` (3 significant digits) and the row ids.
    """
    from collections import Counter

    import numpy as np
    from scipy.optimize import least_squares

    from capplan.accuracy.corpus import load_corpus
    from capplan.engine import load_engine
    from capplan.errors import CapplanError
    from capplan.plan import plan_workload

    rows = load_corpus(kinds={"rl"}) if rows is None else rows
    engine = engine or load_engine("vllm")
    cases = []
    for row in rows:
        if row.held_out or row.excluded or row.metric != "step_time_s":
            continue
        try:
            workload, inputs = rl_inputs(row, engine, [])
            plan_workload(workload, inputs, conversations)
        except (Unsupported, CapplanError):
            continue
        cases.append((row, workload, inputs))
    counts = Counter(inputs.hardware.name for _, _, inputs in cases)
    reference = counts.most_common(1)[0][0] if counts else ""
    chips = sorted(hw for hw, n in counts.items() if hw != reference and n >= RL_CHIP_MIN_ROWS)

    def residuals(x: "np.ndarray") -> "np.ndarray":
        factor = dict(zip(chips, x[2:]))
        out = []
        for row, workload, inputs in cases:
            slowdown = float(x[0]) * float(factor.get(inputs.hardware.name, 1.0))
            plan = plan_workload(workload, inputs.replace(rollout_slowdown=slowdown, step_overhead_s=float(x[1])), conversations)
            out.append(np.log(plan.step_time_s / row.measured))
        return np.array(out)

    n = len(chips)
    fit = least_squares(residuals, x0=[2.0, 20.0] + [1.0] * n, bounds=([1.0, 0.0] + [0.5] * n, [20.0, 600.0] + [5.0] * n),
                        diff_step=[0.02, 0.05] + [0.02] * n, xtol=1e-3, ftol=1e-4)
    three = [float(f"{v:.3g}") for v in fit.x]
    return three[0], three[1], dict(zip(chips, three[2:])), [row.id for row, _, _ in cases]


@lru_cache(maxsize=1)
def _main() -> None:  # pragma: no cover - a maintenance entry point
    coef, fitted = fit_trainer_mfu()
    print("TRAINER_MFU_FIT coefficients:", coef)
    print("fitted_on:", fitted)
    for pattern, (latency, bandwidth, ids) in fit_weight_sync().items():
        print(f"WEIGHT_SYNC_FITS[{pattern!r}]: latency {latency} s, bandwidth {bandwidth:.3g} B/s, fitted_on {ids}")
    slowdown, overhead, chips, ids = fit_rl_framework()
    print(f"RL_FRAMEWORK_FIT: rollout_slowdown {slowdown}, step_overhead_s {overhead}, chip_slowdown {chips}, fitted_on {ids}")


if __name__ == "__main__":  # pragma: no cover
    _main()
