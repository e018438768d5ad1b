"""The simulator's constants: KV bytes and capacity, scheduler limits, step prices and the trainer, from the calculators.

Nothing here is re-derived: KV bytes by layer kind come from :func:`capplan.kv.kv_layout`, the
KV budget and scheduler limits from :func:`capplan.kv.compute_kv`, step prices from
:func:`capplan.sim.stepcost.step_coefficients` (probed from the roofline model), the trainer's
step time and weight push from :mod:`capplan.trainer`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    import numpy as np

    from capplan.engine import EngineProfile

    from capplan.hardware import HardwareProfile
    from capplan.kv import KVLayout
    from capplan.modelspec import ModelSpec
    from capplan.sim.config import SimConfig
    from capplan.sim.speculative import OffloadCosts, SpecCosts
    from capplan.sim.stepcost import StepCoefficients
    from capplan.workload import Workload


@dataclass(frozen=True)
class EngineSetup:
    """Per-replica constants the scheduler and the trainer need."""

    coeffs: "StepCoefficients"
    """Step-price coefficients of one replica."""
    kv_layout: "KVLayout"
    """KV bytes by layer kind on one GPU of a replica."""
    kv_capacity_bytes: float
    """KV budget of one replica's fullest GPU [bytes]."""
    max_num_seqs: int
    """Scheduler cap on running sequences per replica [sequences]."""
    max_batched_tokens: int
    """Scheduler token budget per engine step [positions]."""
    weight_sync_s: float
    """Time to push new weights to the replicas [s]."""
    trainer_time: Callable[["np.ndarray"], float]
    """Trainer step time for records of the given lengths, the framework's per-step time
    included [s]."""
    replica_pause_s: float = 0.0
    """Async: a replica's pause per update to load new weights [s]."""
    step_overhead_s: float = 0.0
    """The framework's time per update outside the GPU phases, at the start of each update: the
    trainer's time includes it and, async, the replicas hold for it [s]."""
    spec: "SpecCosts | None" = None
    """Speculative decoding (``None``: plain decoding)."""
    offload: "OffloadCosts | None" = None
    """The CPU KV tier (``None``: none)."""
    mixed_prefill: bool = True
    """A step with prompt chunks also advances the decoding batch (vLLM V1); ``False``: a step of
    prompt chunks holds no decodes and the decoding batch waits for it (SGLang's default,
    ``time.mixed_prefill`` of the engine profile)."""


@dataclass(frozen=True)
class SetupReport:
    """The set-up figures a simulation reports (the ``setup`` object of the JSON, in this order)."""

    kv_capacity_tokens: int
    """KV capacity of one replica [positions]."""
    kv_budget_gib_per_gpu: float
    """KV budget per GPU [GiB]."""
    max_num_seqs: int
    """Running sequences per replica [sequences]."""
    max_batched_tokens: int
    """Token budget per engine step [positions]."""
    trainer_gpus: int
    """Trainer GPUs [count]."""
    trainer_gpus_sizing: str
    """How ``trainer_gpus`` was chosen."""
    weight_sync_s: float
    """Weight push per update [s]."""
    single_decode_step_s: float
    """One decode step of one sequence at one cached position [s]."""
    rollout_slowdown: float = 1.0
    """Engine step time in the RL framework over the engine profile's [ratio]."""
    step_overhead_s: float = 0.0
    """Framework time per update outside the GPU phases [s]."""
    features: dict[str, Any] = field(default_factory=dict)
    """Figures of the engine features in use (speculative decoding, the CPU KV tier), appended
    to :meth:`as_dict` only when there are any (a plain run's keys are unchanged)."""

    caveats: list[str] = field(default_factory=list)
    """Where the rollout scheduler departs from the engine profile (its schedule, its admission),
    in the JSON (``caveats``) only when there are any; ``capplan simulate`` warns with each."""

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(out.pop("features"))
        if not out["caveats"]:
            del out["caveats"]
        return out


def held_bytes_function(layout: "KVLayout") -> Callable[[float], float]:
    """:meth:`capplan.kv.KVLayout.held_bytes` with its constants bound once, for the hot loop.

    The same formula and operation order (so the same bits), without the per-call property
    look-ups: the scheduler calls it a few times per invocation.
    """
    full = layout.full_bytes_per_token
    window = layout.window_bytes_per_token
    state = layout.state_bytes_per_sequence
    limit = layout.window_tokens - 1.0

    def held_bytes(positions: float) -> float:
        return full * positions + window * (positions if positions < limit else limit) + state

    return held_bytes


def trainer_gpus(
    workload: "Workload", spec: "ModelSpec", trainer_hw: "HardwareProfile", given: int | None, mfu: float | None = None,
    colocated: tuple[int, int] | None = None,
) -> tuple[int, str]:
    """Trainer GPUs and how they were chosen: given, the sane data-parallel minimum, or sized for the step-time target.

    Parameters
    ----------
    colocated : (replicas, tp), optional
        Colocated training on the inference GPUs, ``given = replicas x tp``: the error names those
        settings (and what to give) instead of ``--trainer-gpus``.

    Raises
    ------
    DoesNotFitError
        ``given`` GPUs cannot hold the sharded training state.
    """
    from capplan.trainer import min_trainer_gpus, sane_trainer_gpus, trainer_mfu, trainer_step_time_s, training_flops

    training = workload.training
    fewest = min_trainer_gpus(spec, trainer_hw)
    if given is not None:
        if given < fewest:
            from capplan.errors import DoesNotFitError

            need = f"{spec.name}'s sharded training state needs at least {fewest} {trainer_hw.name} GPUs"
            if colocated is None:
                raise DoesNotFitError(f"--trainer-gpus {given}: {need}")
            replicas, tp = colocated
            raise DoesNotFitError(
                f"--mode colocated trains on the inference GPUs, --inference-replicas {replicas} x --tp {tp} = {given}: {need}; "
                f"give --inference-replicas {-(-fewest // tp)} or more"
            )
        return given, "given"
    sane = sane_trainer_gpus(fewest, trainer_hw.gpus_per_node)
    if training.step_time_target_s is None:
        return sane, "the fewest GPUs that hold the sharded training state, in whole nodes"
    from capplan.ledger import sample_conversations

    conv = sample_conversations(workload, n=workload.volume.conversations_per_step, seed=0)
    flops = training_flops(spec, conv.record_length, training.recompute_logprobs, training.reference_forward)
    one_gpu_s = trainer_step_time_s(flops, trainer_hw, 1, mfu if mfu is not None else trainer_mfu(spec, trainer_hw))
    node = trainer_hw.gpus_per_node
    gpus = max(sane, math.ceil(one_gpu_s / training.step_time_target_s / node) * node)
    return gpus, f"sized in whole nodes for the workload's {training.step_time_target_s:g} s step-time target"


def feature_notes(config: "SimConfig", kv: Any) -> list[str]:
    """The engine features ``config`` runs with, in words (none for a plain replica)."""
    layout = config.layout()
    if not layout:
        return []
    dp = config.data_parallel
    parts = [f"{k}={v}" for k, v in layout.items()]
    return [f"engine features: {', '.join(parts)}; a replica is one data-parallel rank of {config.tp} GPU(s) "
            f"(an instance is {config.tp} x {dp} = {config.tp * dp} GPUs); weights {kv.weights_gib_per_gpu:.2f} GiB per GPU "
            "(capplan.kv.compute_kv), steps priced with the rank's share of the all-to-all and the MoE layers seeing all "
            f"{dp} ranks' positions; the ranks of an instance are simulated as independent replicas (not in lock-step)"]


def engine_setup(
    workload: "Workload", spec: "ModelSpec", hw: "HardwareProfile", trainer_hw: "HardwareProfile", config: "SimConfig"
) -> tuple[EngineSetup, SetupReport, list[str]]:
    """Engine constants from the KV calculator, the roofline model and the trainer model.

    Returns
    -------
    setup : EngineSetup
        What the scheduler and the trainer use.
    report : SetupReport
        What the result reports.
    notes : list of str
        The assumptions the run makes, in words.
    """
    from capplan.kv import KVInputs, compute_kv, kv_layout
    from capplan.roofline import RooflineInputs
    from capplan.sim.stepcost import step_coefficients
    from capplan.trainer import trainer_mfu, trainer_step_time_s, training_flops, weight_sync_time_s

    config.check_model(spec)
    kv = compute_kv(
        spec, hw,
        KVInputs(tp=config.tp, kv_dtype=config.kv_dtype, weight_dtype=config.weight_dtype,
                 gpu_mem_util=config.gpu_mem_util, max_num_seqs=config.max_num_seqs,
                 max_batched_tokens=config.max_batched_tokens, engine=config.engine, **config.layout(roofline=False)),
    )
    roofline_inputs = RooflineInputs(tp=config.tp, weight_dtype=config.weight_dtype, kv_dtype=config.kv_dtype, engine=config.engine,
                                     **config.layout())
    from dataclasses import fields, replace

    from capplan.trainer import RL_FRAMEWORK_FIT

    slowdown = config.rollout_slowdown if config.rollout_slowdown is not None else RL_FRAMEWORK_FIT.slowdown_on(hw.name)
    fitted_overhead = RL_FRAMEWORK_FIT.step_overhead_s
    overhead = config.step_overhead_s if config.step_overhead_s is not None else fitted_overhead
    coeffs = step_coefficients(spec, hw, roofline_inputs)
    if slowdown != 1.0:  # every time term scales, so every step does
        coeffs = replace(coeffs, **{f.name: getattr(coeffs, f.name) * slowdown for f in fields(coeffs) if f.name not in ("q", "window")})
    engine = roofline_inputs.profile()
    capacity_tokens = kv.kv_capacity_tokens
    spec_costs, features, feature_lines = None, {}, []
    if config.speculative is not None:
        spec_costs, capacity_tokens, features, feature_lines = _speculative(spec, hw, roofline_inputs, kv, config, slowdown)
    capacity_bytes = capacity_tokens * kv.kv_bytes_per_token_per_gpu
    offload = None
    if config.kv_offload_gib is not None:
        offload, more, lines = _offload(spec, hw, roofline_inputs, kv, capacity_tokens, coeffs, config.kv_offload_gib)
        features.update(more)
        feature_lines += lines
    colocated = config.mode == "colocated"
    pattern = config.weight_sync if config.weight_sync != "auto" else ("reshard" if colocated else "nccl")
    # each GPU receives what the pattern sends it, under the replica's layout (as the plan prices it)
    sync_s = weight_sync_time_s(spec, config.tp, pattern, config.ep, config.data_parallel, config.redundant_experts)
    if colocated:
        trainer_hw = hw
        gpus, sizing = config.inference_replicas * config.tp, "colocated: every inference GPU"
        trainer_gpus(workload, spec, trainer_hw, gpus, colocated=(config.inference_replicas, config.tp))  # raises when they cannot hold the state
    else:
        gpus, sizing = trainer_gpus(workload, spec, trainer_hw, config.trainer_gpus, config.trainer_mfu)
    training = workload.training
    mfu = config.trainer_mfu if config.trainer_mfu is not None else trainer_mfu(spec, trainer_hw)

    def trainer_time(lengths: "np.ndarray") -> float:
        flops = training_flops(spec, lengths, training.recompute_logprobs, training.reference_forward)
        return trainer_step_time_s(flops, trainer_hw, gpus, mfu) + overhead

    terms = engine.time_on(hw.name)
    setup = EngineSetup(
        coeffs=coeffs,
        kv_layout=kv_layout(spec, config.kv_dtype, config.tp, config.kv_scale),
        kv_capacity_bytes=float(capacity_bytes),
        max_num_seqs=kv.max_num_seqs,
        max_batched_tokens=kv.max_batched_tokens,
        weight_sync_s=float(sync_s),
        trainer_time=trainer_time,
        replica_pause_s=float(sync_s),
        step_overhead_s=float(overhead),
        spec=spec_costs,
        offload=offload,
        mixed_prefill=terms.mixed_prefill,
    )
    report = SetupReport(
        kv_capacity_tokens=capacity_tokens,
        kv_budget_gib_per_gpu=kv.kv_budget_gib_per_gpu,
        max_num_seqs=kv.max_num_seqs,
        max_batched_tokens=kv.max_batched_tokens,
        trainer_gpus=gpus,
        trainer_gpus_sizing=sizing,
        weight_sync_s=sync_s,
        single_decode_step_s=coeffs.step_time(1, 1, 1, 1, 0, 0, 1),
        rollout_slowdown=slowdown,
        step_overhead_s=overhead,
        features=features,
        caveats=rollout_caveats(engine, terms),
    )
    notes = feature_notes(config, kv) + feature_lines + [
        f"RL framework: engine steps {slowdown:.3g}x the engine profile's, {overhead:.3g} s per update outside the GPU "
        "phases (capplan.trainer.RL_FRAMEWORK_FIT unless given)",
        f"engine steps priced by the roofline model with engine profile {engine.name} ({engine.calibration}): "
        f"GEMM efficiency {terms.gemm_efficiency:.3g}, bandwidth {terms.bandwidth_efficiency:.3g}, "
        f"step overhead {terms.step_overhead_s * 1e3:.3g} ms, {terms.per_sequence_s * 1e6:.3g} us per sequence",
        f"trainer: {gpus} x {trainer_hw.name}, MFU {mfu:.3g} ({'given' if config.trainer_mfu is not None else 'fitted, capplan.trainer'}); "
        f"weight {'reshard' if colocated else 'push'} ({pattern}) {sync_s:.2f} s per update",
        "KV accounted in bytes per GPU without block rounding; an admitted invocation reserves its whole input",
        "a preempted sequence is recomputed (prefilled again) from scratch when readmitted",
        "a prompt group goes to the replica with the fewest conversations and stays there (its samples share the "
        "prompt's prefix cache when the workload's cache block says so)",
        "async with in-flight updates (the default) a replica loads new weights at its next step boundary (paused for "
        "the weight push time); with --drain-updates it finishes its running invocations first; replicas also hold "
        "for the framework's per-update time",
        "the trainer is busy for the weight push after each update",
    ]
    notes += report.caveats
    return setup, report, notes


def rollout_caveats(engine: "EngineProfile", terms: Any) -> list[str]:
    """Where the RL rollout scheduler (vLLM V1's chunked prefill and admission) departs from
    ``engine``'s time terms ``terms``: an engine that reserves a request's whole output, one that
    prefills whole prompts. ``capplan simulate``'s serving mode and the plans take both. (An engine
    that does not mix prompt chunks into decode steps is scheduled as it runs:
    :attr:`EngineSetup.mixed_prefill`.)"""
    caveats: list[str] = []
    if terms.capacity_scheduler_policy == "guaranteed_no_evict":
        caveats.append(f"engine profile {engine.name} reserves a request's whole output when admitting it (guaranteed_no_evict); "
                     "the rollout scheduler admits on the prompt and preempts when KV runs out, as vLLM does "
                     "(capplan simulate's serving mode and the plans take the profile's admission)")
    if not terms.chunked_prefill:
        caveats.append(f"engine profile {engine.name} prefills whole prompts; the rollout scheduler splits them into chunks "
                       "of the token budget, as vLLM V1 does (capplan simulate's serving mode and the serving plan take "
                       "the profile's schedule)")
    return caveats


def _speculative(
    spec: "ModelSpec", hw: "HardwareProfile", rinp: Any, kv: Any, config: "SimConfig", slowdown: float,
) -> tuple["SpecCosts", int, dict[str, Any], list[str]]:
    """Speculative decoding of a replica: the drafter's step coefficients (scaled by the rollout
    slowdown, as the target's), the KV capacity with the drafter sharing the budget
    (:func:`capplan.speculative.spec_memory`, as ``capplan plan`` counts it), the figures and notes."""
    from dataclasses import fields, replace

    from capplan.sim.speculative import SpecCosts
    from capplan.sim.stepcost import step_coefficients
    from capplan.speculative import spec_memory, spec_pricers

    setting = config.speculative
    assert setting is not None
    mem = spec_memory(spec, kv, setting)
    _, drafter = spec_pricers(spec, hw, rinp, setting)
    dco = None
    if drafter is not None:
        dco = step_coefficients(drafter.spec, drafter.hw, drafter.inp)
        if slowdown != 1.0:
            dco = replace(dco, **{f.name: getattr(dco, f.name) * slowdown for f in fields(dco) if f.name not in ("q", "window")})
    schedule = config.acceptance_by_step
    costs = SpecCosts(drafter=dco, positions=setting.positions_verified, drafts=setting.num_speculative_tokens,
                      tokens_per_step=setting.tokens_per_step, acceptance_by_step=schedule)
    figures = {
        "spec_method": setting.method,
        "spec_tokens": setting.num_speculative_tokens,
        "spec_tokens_per_step": costs.tokens_at(0),
        "draft_weights_gib_per_gpu": mem.draft_weights_gib_per_gpu,
        "draft_kv_bytes_per_token_per_gpu": mem.draft_kv_bytes_per_token_per_gpu,
        "kv_capacity_tokens_without_spec": mem.kv_capacity_tokens_without,
    }
    acceptance = ("following the acceptance schedule at the policy version of each replica's weights"
                  if schedule is not None else f"{costs.tokens_per_step:.3g} tokens per verify step")
    lines = [f"speculative decoding ({setting.method}, k = {setting.num_speculative_tokens}, {acceptance}): a decode step is "
             f"priced per output token, (verify step of {setting.positions_verified} positions per sequence + the drafts) / "
             "tokens per verify step (capplan.speculative.SpeculativePricer); a decoding sequence takes "
             f"{setting.positions_verified} positions of the token budget; the drafter's weights and KV share the KV budget "
             f"({mem.kv_capacity_tokens:,} positions, {mem.kv_capacity_tokens_without:,} without it)"]
    return costs, mem.kv_capacity_tokens, figures, lines


def _offload(
    spec: "ModelSpec", hw: "HardwareProfile", rinp: Any, kv: Any, capacity_tokens: int, coeffs: "StepCoefficients", gib: float,
) -> tuple["OffloadCosts", dict[str, Any], list[str]]:
    """A replica's CPU KV tier of ``gib`` GiB per GPU (:func:`capplan.offload.offload_tier`, on a
    server of the replica's step prices as ``capplan plan`` builds it), its figures and notes."""
    from capplan.benchmark import Server
    from capplan.offload import offload_tier
    from capplan.roofline import step_pricer
    from capplan.sim.speculative import OffloadCosts, prefill_s_per_token

    terms = rinp.profile().time_on(hw.name)
    server = Server(step_pricer(spec, hw, rinp), kv.max_num_seqs, kv.max_batched_tokens, capacity_tokens,
                    **terms.schedule())
    tier = offload_tier(server, gib)
    costs = OffloadCosts(capacity_tokens=tier.capacity_tokens, load_s_per_token=tier.load_s_per_token,
                         prefill_s_per_token=prefill_s_per_token(coeffs, kv.max_batched_tokens),
                         bytes_per_token=float(kv.kv_bytes_per_token_per_gpu), host_kv_gib_per_gpu=float(gib))
    figures = {
        "kv_offload_gib_per_gpu": float(gib),
        "kv_offload_capacity_tokens": tier.capacity_tokens,
        "kv_offload_load_s_per_token": tier.load_s_per_token,
        "kv_offload_prefill_s_per_token": costs.prefill_s_per_token,
        "kv_offload_used": costs.loads_win,
        "host_link_bandwidth_gbps": tier.host_link_bandwidth_gbps,
    }
    use = ("evicted retained prefixes are kept there (least recently stored dropped first) and loaded back at the next "
           "turn, the load charged with the step that starts the turn's prefill" if costs.loads_win else
           "loading a position is not faster than prefilling it, so the tier is not used (evicted prefixes are recomputed)")
    lines = [f"CPU KV tier: {gib:g} GiB per GPU, {tier.capacity_tokens:,} positions, loads at "
             f"{tier.load_s_per_token * 1e6:.3g} us per position over the {tier.host_link_bandwidth_gbps:g} GB/s host link "
             f"against {costs.prefill_s_per_token * 1e6:.3g} us to prefill one (capplan.offload); {use}"]
    return costs, figures, lines
