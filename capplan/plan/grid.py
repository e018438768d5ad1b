"""The sweep: every hardware x tp x dtype x GPU-split plan at once, evaluated as one grid.

The workload is sampled once (the plan's sample and the concurrency model's; see
:func:`capplan.plan.replica.shared_sample`). For each replica configuration (hardware, tp, dtypes) the KV
capacity, concurrency and step costs are set up once (:func:`capplan.plan.replica.replica_setup`)
and the rollout timing is evaluated for every inference size in one vectorised call
(:meth:`capplan.plan.rollout.RolloutModel.times`); trainer times broadcast against it. So a
sweep row is the same arithmetic as ``capplan plan`` with both GPU counts given (tested), and
100,000 combinations take seconds (``benchmarks/bench_sweep.py``).

An infeasible row keeps its identity columns and its ``reason``; its figures are blank (NaN), so
no spreadsheet sums a step time that cannot happen. A grid larger than ``max_cells`` is refused
before any work (:func:`check_grid_size`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

from capplan.errors import CapplanError, InputError
from capplan.plan.inputs import check_mode

if TYPE_CHECKING:
    import pandas as pd

    from capplan.engine import EngineProfile
    from capplan.hardware import HardwareProfile
    from capplan.modelspec import ModelSpec
    from capplan.speculative import SpecInputs
    from capplan.workload import Workload

#: Columns of the sweep grid, units in the names (a CSV contract).
COLUMNS = [
    "hardware",
    "tp",
    "kv_dtype",
    "weight_dtype",
    "inference_gpus",
    "trainer_gpus",
    "total_gpus",
    "feasible",
    "reason",
    "kv_capacity_tokens_per_replica",
    "decode_batch_sequences",
    "binding_constraint",
    "rollout_time_s",
    "trainer_time_s",
    "weight_sync_time_s",
    "step_time_s",
    "trained_tokens_per_s",
    "trained_tokens_per_s_per_gpu",
    "trainer_idle_fraction",
    "node_ratio",
    "cost_per_step_usd",
    "cost_per_million_trained_tokens_usd",
]


FEATURE_COLUMNS = [
    "ep",
    "dp",
    "inference_instances",
    "spec_method",
    "spec_num_speculative_tokens",
    "spec_acceptance_rate",
    "spec_tokens_per_step",
    "spec_speedup",
    "kv_offload_gib_per_gpu",
    "kv_offload_loaded_tokens_per_step",
]
"""Columns appended to :data:`COLUMNS` when a sweep uses an engine feature (an expert-parallel
degree, speculative decoding, a CPU KV tier, or another feature option): ``ep`` and ``dp`` of an
instance of ``tp x dp`` GPUs, the speculative setting with its tokens per verify step and its
decode speed-up at the row's batch, the CPU tier and the positions loaded from it per step."""

FIGURES = COLUMNS[COLUMNS.index("reason") + 1:] + ["inference_instances", "spec_speedup", "kv_offload_loaded_tokens_per_step"]
"""Columns blanked (NaN) on an infeasible row."""

MAX_GRID_CELLS = 250_000
"""Default limit on the rows of one sweep [rows] (``--max-grid-cells`` raises it). Measured on
this repository's reference machine: a 1,000,000-row sweep written to CSV took 78 s at a 2.6 GB
peak and wrote 210 MB; the limit keeps a default sweep near a quarter of that."""



def check_grid_size(cells: int, max_cells: int = MAX_GRID_CELLS, what: str = "the sweep") -> None:
    """Refuse a grid of more than ``max_cells`` rows before it is built.

    Raises
    ------
    InputError
        With the row count, the limit and how to narrow the grid or raise the limit.
    """
    if cells > max_cells:
        raise InputError(
            f"{what} has {cells:,} combinations, above --max-grid-cells {max_cells:,}: give fewer --hardware, "
            "--tensor-parallel-size, dtype or GPU-count values (a coarser range step), or raise --max-grid-cells deliberately"
        )


def check_sweep_inputs(
    spec: "ModelSpec", tps: Sequence[int], layout: "dict[str, Any] | None" = None, kv_offload_gib: float | None = None,
) -> None:
    """Refuse, before the sweep, a setting that no point of the grid can take: a feature option
    out of its range or set (:meth:`capplan.options.Options.check` on
    :class:`capplan.plan.inputs.PlanInputs`' fields), a tensor-parallel degree the model cannot
    run (:func:`capplan.kv.check_parallelism`), an expert dtype on a dense model. These are errors
    of the input, not infeasible rows; what depends on the point (a model that does not fit a
    GPU, an expert-parallel degree only some ``tp`` can take) stays a row's ``reason``.

    Raises
    ------
    InputError
        Naming the flag and what it allows.
    """
    from capplan.kv import check_expert_dtype, check_parallelism
    from capplan.plan.inputs import PlanInputs

    layout = layout or {}
    PlanInputs.check(kv_offload_gib=kv_offload_gib, **{k: v for k, v in layout.items() if k in PlanInputs.model_fields})
    for tp in tps:
        PlanInputs.check(tp=tp)
        check_parallelism(spec, tp)
    check_expert_dtype(spec, layout.get("expert_dtype"))


def hourly_price(hw: "HardwareProfile", price: "float | dict[str, float] | None") -> float | None:
    """USD per GPU-hour of ``hw``: a single ``price`` for every profile, the entry for its name in a
    per-profile mapping, else the profile's own ``price_usd_per_gpu_hour`` when it has one."""
    if isinstance(price, (int, float)):
        return float(price)
    if isinstance(price, dict) and hw.name in price:
        return float(price[hw.name])
    own = getattr(hw, "price_usd_per_gpu_hour", None)
    return float(own) if own is not None else None


def default_inference_gpus(tp: int, conversations: float) -> list[int]:
    """Replica counts 1, 2, 4, ... up to one conversation per replica, as GPUs (x tp; with
    data-parallel ranks, pass the instance's GPUs and the conversations per rank... per instance)."""
    gpus, replicas = [], 1
    while replicas <= max(1.0, conversations):
        gpus.append(replicas * tp)
        replicas *= 2
    return gpus


def default_trainer_gpus(min_gpus: int, gpus_per_node: int) -> list[int]:
    """Trainer sizes a sweep tries: the sane data-parallel minimum (the memory minimum in whole
    nodes, :func:`capplan.trainer.sane_trainer_gpus`), then whole nodes doubling up to 64 nodes."""
    from capplan.trainer import sane_trainer_gpus

    first = sane_trainer_gpus(min_gpus, gpus_per_node)
    gpus = [first]
    whole_nodes = first * 2
    while whole_nodes <= 64 * gpus_per_node:
        gpus.append(whole_nodes)
        whole_nodes *= 2
    return gpus


def sweep(
    workload: "Workload",
    spec: "ModelSpec",
    hardware: Sequence["HardwareProfile"],
    tps: Sequence[int],
    kv_dtypes: Sequence[str] = ("bf16",),
    weight_dtypes: Sequence[str] = ("bf16",),
    inference_gpus: Sequence[int] | None = None,
    trainer_gpus: Sequence[int] | None = None,
    trainer_hardware: "HardwareProfile | None" = None,
    mode: str = "sync",
    gpu_hour_price: "float | dict[str, float] | None" = None,
    conversations: int | None = None,
    gpu_mem_util: float | None = None,
    engine: "EngineProfile | None" = None,
    on_config: Callable[[int, int], None] | None = None,
    max_total_gpus: int | None = None,
    max_cells: int = MAX_GRID_CELLS,
    max_staleness: int = 1,
    eps: Sequence[int | None] = (1,),
    dp: int | None = None,
    spec_tokens: Sequence[int | None] = (None,),
    speculative: "SpecInputs | None" = None,
    layout: dict[str, Any] | None = None,
    kv_offload_gib: float | None = None,
) -> "pd.DataFrame":
    """Evaluate every combination and return the full grid as a DataFrame (:data:`COLUMNS`, then
    :data:`FEATURE_COLUMNS` when an engine feature is in use).

    Parameters
    ----------
    inference_gpus, trainer_gpus : sequences of int, optional
        The GPU counts to try [GPUs]; default :func:`default_inference_gpus` (per tp) and
        :func:`default_trainer_gpus`. Inference counts that are not a multiple of ``tp`` and
        trainer counts below the memory minimum are rows with ``feasible = False``.
    mode : str
        ``sync``, ``async`` (bounded by ``max_staleness``) or ``colocated`` (each inference count
        is also the trainer's: both phases on the same GPUs; ``trainer_gpus`` is ignored).
    max_staleness : int
        Async: the staleness bound ``K`` [policy versions] (``K = 0`` is synchronous).
    gpu_hour_price : float or dict, optional
        Price of one GPU-hour [USD]: one price for every profile, or a price per profile name;
        a profile not named uses its own ``price_usd_per_gpu_hour`` when it has one
        (:func:`hourly_price`). Fills the cost columns of rows whose inference and trainer
        hardware both have a price.
    on_config : callable, optional
        Called as ``on_config(done, total)`` after each replica configuration (progress bars).
    max_total_gpus : int, optional
        Rows using more GPUs in total are infeasible ("total GPUs ... above --max-total-gpus").
    max_cells : int
        Most rows the grid may have (:func:`check_grid_size`).
    eps : sequence of int or None
        Expert-parallel degrees [GPUs], a dimension of the grid: each is an instance of ``tp x dp``
        GPUs with ``dp = ep / tp`` data-parallel ranks (a replica each); ``None`` is ``tp x dp``
        (expert parallelism over the instance, whatever its ``tp``). A degree the model or ``tp``
        cannot take is a row with ``feasible = False`` and the reason.
    dp : int, optional
        Data-parallel ranks of every instance [count] (default ``ep / tp``).
    spec_tokens : sequence of int or None
        Tokens drafted per verify step [tokens], a dimension of the grid, with the drafter and
        acceptance of ``speculative`` (``None``: ``speculative`` as it is).
    speculative : SpecInputs, optional
        Speculative decoding of the engines (:class:`capplan.speculative.SpecInputs`).
    layout : dict, optional
        Other feature options of :class:`capplan.roofline.RooflineInputs` for every row
        (``expert_dtype``, ``redundant_experts``, ``kv_scale``, ``two_batch_overlap``,
        ``alltoall_mode``, ``gemm_dtype``).
    kv_offload_gib : float, optional
        A CPU KV tier per GPU [GiB] (:func:`capplan.plan.replica.replica_setup`).

    Notes
    -----
    The trainer's MFU and the RL framework terms (rollout slowdown, per-step overhead) are the
    fitted defaults of :mod:`capplan.trainer`, as in ``capplan plan``.

    Raises
    ------
    InputError
        ``mode`` is not ``colocated``, ``sync`` or ``async``; the grid is larger than ``max_cells``;
        a setting no point can take (:func:`check_sweep_inputs`); every configuration refused
        for an input reason (none is a model that does not fit), so the grid would hold no figure.
    """
    import numpy as np

    from capplan.kv import resolve_dp
    from capplan.plan.replica import replica_setup, shared_sample
    from capplan.plan.sizing import step_time_s
    from capplan.plan.work import prepare
    from capplan.trainer import (
        MICRO_BATCH_TOKENS,
        RL_FRAMEWORK_FIT,
        min_trainer_gpus,
        trainer_mfu,
        trainer_step_time_s,
        weight_sync_time_s,
    )

    check_mode(mode)
    check_sweep_inputs(spec, tps, layout, kv_offload_gib)
    eps, spec_tokens = list(eps) or [1], list(spec_tokens) or [None]
    if any(k is not None for k in spec_tokens) and speculative is None:
        raise InputError("--spec-tokens needs --spec-method and an acceptance (or the workload's speculative: block)")
    features = eps != [1] or dp not in (None, 1) or speculative is not None or bool(layout) or kv_offload_gib is not None
    per_config = len(hardware) * len(tps) * len(kv_dtypes) * len(weight_dtypes) * len(eps) * len(spec_tokens)
    if inference_gpus and trainer_gpus:
        check_grid_size(per_config * len(inference_gpus) * len(trainer_gpus), max_cells)
    elif inference_gpus:  # the other axis is a doubling series: at most 10 trainer counts
        check_grid_size(per_config * len(inference_gpus) * 10, max_cells)
    elif trainer_gpus:  # ... or at most 32 inference counts
        check_grid_size(per_config * len(trainer_gpus) * 32, max_cells)
    rl = workload.has_rollout and workload.has_trainer
    overhead = RL_FRAMEWORK_FIT.step_overhead_s if rl else 0.0
    colocated = mode == "colocated"
    k = max_staleness if mode == "async" else 0
    prepared = prepare(workload, spec, conversations)
    shared = shared_sample(workload, prepared)  # the workload is sampled once per sweep, not per cell
    work = prepared.work
    trained = work.trained_positions
    parts: list[tuple[dict[str, Any], int]] = []  # per configuration: its columns and row count
    configs = [(h, t, k, w, e, n) for h in hardware for t in tps for k in kv_dtypes for w in weight_dtypes for e in eps for n in spec_tokens]
    has_trainer = workload.has_trainer
    failures: list[CapplanError] = []  # configurations that could not be priced, with why
    for done, (hw, tp, kv_dtype, weight_dtype, ep_cell, k_spec) in enumerate(configs, 1):
        slowdown = RL_FRAMEWORK_FIT.slowdown_on(hw.name) if rl else 1.0
        trainer_hw = hw if colocated else (trainer_hardware or hw)
        base: dict[str, Any] = {"hardware": hw.name, "tp": tp, "kv_dtype": kv_dtype, "weight_dtype": weight_dtype}
        ranks, ep, cell_layout, sinp = 1, 1, None, speculative
        if features:
            ep = tp * (dp or 1) if ep_cell is None else ep_cell
            ranks = dp if dp is not None else resolve_dp(tp, ep, None)
            cell_layout = {**(layout or {}), **({"ep": ep} if ep != 1 else {}), **({"dp": dp} if dp is not None else {})}
            try:
                sinp = _spec_at(speculative, k_spec)
            except CapplanError:
                sinp = None  # reported below as the row's reason
            base.update(_feature_base(ep, ranks, sinp or (speculative if k_spec is None else None), k_spec, kv_offload_gib))
        unit = tp * ranks  # GPUs of an instance: counts come in multiples of it
        inference = np.array(  # a workload without a rollout engine (sft) has no inference GPUs to sweep
            (list(inference_gpus) if inference_gpus else default_inference_gpus(unit, work.conversations / ranks))
            if workload.has_rollout else [0],
            dtype=float,
        )
        try:
            trainer_min = min_trainer_gpus(spec, trainer_hw, MICRO_BATCH_TOKENS) if has_trainer else 0
        except CapplanError:
            trainer_min = 0  # reported below: no trainer size fits
        trainer = np.array(
            (list(trainer_gpus) if trainer_gpus else default_trainer_gpus(max(trainer_min, 1), trainer_hw.gpus_per_node))
            if has_trainer and not colocated
            else [0],
            dtype=float,
        )
        inference_grid, trainer_grid = np.meshgrid(inference, trainer, indexing="ij")
        if colocated and has_trainer:
            trainer_grid = inference_grid.copy()
        try:
            if has_trainer and trainer_min == 0:
                min_trainer_gpus(spec, trainer_hw, MICRO_BATCH_TOKENS)  # raises the explanation
            if features:
                sinp = _spec_at(speculative, k_spec)
                setup = replica_setup(workload, prepared, spec, hw, tp, kv_dtype, weight_dtype, gpu_mem_util, engine=engine,
                                      time_scale=slowdown, shared=shared, layout=cell_layout, speculative=sinp,
                                      kv_offload_gib=kv_offload_gib)
            else:
                setup = replica_setup(workload, prepared, spec, hw, tp, kv_dtype, weight_dtype, gpu_mem_util, engine=engine,
                                      time_scale=slowdown, shared=shared)
        except CapplanError as exc:
            failures.append(exc)
            parts.append(
                (
                    {
                        **base,
                        "inference_gpus": inference_grid.ravel().astype(int),
                        "trainer_gpus": trainer_grid.ravel().astype(int),
                        "total_gpus": (inference_grid + trainer_grid).ravel().astype(int),
                        "feasible": False,
                        "reason": str(exc),
                    },
                    inference_grid.size,
                )
            )
            if on_config:
                on_config(done, len(configs))
            continue
        pattern = "reshard" if colocated else "nccl"
        sync_s = weight_sync_time_s(spec, tp, pattern, ep, ranks, (layout or {}).get("redundant_experts", 0)) if (
            has_trainer and workload.has_rollout) else 0.0
        busy_extra = sync_s + (overhead if has_trainer else 0.0)
        model = setup.rollout_model(work, weight_load_s=busy_extra if mode == "async" else 0.0)
        replicas = np.maximum(inference // tp, 1)
        times = model.times(replicas, in_flight_steps=k + 1)
        mfu = trainer_mfu(spec, trainer_hw)
        trainer_time = np.where(
            trainer_grid > 0, trainer_step_time_s(prepared.trainer_flops, trainer_hw, np.maximum(trainer_grid, 1), mfu), 0.0
        )
        rollout = times.rollout_time_s[:, None]
        # the decode batch the replicas run at and the share of the step's samples trained: an
        # async steady state's own (the period's), as capplan plan reports it
        batch = np.broadcast_to(times.decode_batch_sequences[:, None], inference_grid.shape)
        trained_share: Any = 1.0
        if mode == "async" and k > 0 and has_trainer and workload.has_rollout:
            period = model.async_period(replicas, k + 1, trainer_time + busy_extra)
            step = period.step_time_s
            batch = np.broadcast_to(period.batch_sequences, inference_grid.shape)
            trained_share = np.broadcast_to(period.trained_share, inference_grid.shape)
        else:
            step = step_time_s(mode, workload.has_rollout, has_trainer, rollout, times.production_time_s[:, None], trainer_time, busy_extra)
        step = np.broadcast_to(step, inference_grid.shape)
        total = inference_grid if colocated else inference_grid + trainer_grid
        trained_per_s = np.where(step > 0, trained * trained_share / np.where(step > 0, step, 1.0), 0.0)
        multiple = inference_grid % unit == 0
        trainer_ok = (trainer_grid >= trainer_min) | (not has_trainer)
        within = total <= max_total_gpus if max_total_gpus is not None else np.ones(total.shape, dtype=bool)
        feasible = multiple & trainer_ok & within
        reasons = np.array(
            ["", f"inference GPUs not a multiple of tp {tp}" if unit == tp else f"inference GPUs not a multiple of an instance (tp x dp = {unit})",
             f"trainer needs >= {trainer_min} GPUs", f"total GPUs above --max-total-gpus {max_total_gpus}"], dtype=object,
        )
        reason = reasons[np.where(~multiple, 1, np.where(~trainer_ok, 2, np.where(within, 0, 3)))]  # one object per distinct text
        bindings = np.array([setup.binding, "arrival of work"], dtype=object)
        binding = bindings[times.arrival_binds.astype(int)][:, None]
        price_inference, price_trainer = hourly_price(hw, gpu_hour_price), hourly_price(trainer_hw, gpu_hour_price)
        if price_inference is not None and (colocated or price_trainer is not None or not has_trainer):
            trainer_cost = 0.0 if colocated else trainer_grid * (price_trainer or 0.0)
            cost = step * (inference_grid * price_inference + trainer_cost) / 3600
        else:
            cost = np.full(inference_grid.shape, np.nan)
        trainer_busy = trainer_time + busy_extra
        extra: dict[str, Any] = {}
        if features:
            extra = _feature_figures(setup, times, batch, inference_grid, unit)
        parts.append(
            (
                {
                    **base,
                    **extra,
                    "inference_gpus": inference_grid.ravel().astype(int),
                    "trainer_gpus": trainer_grid.ravel().astype(int),
                    "total_gpus": total.ravel().astype(int),
                    "feasible": feasible.ravel(),
                    "reason": reason.ravel(),
                    "kv_capacity_tokens_per_replica": setup.kv.kv_capacity_tokens,
                    "decode_batch_sequences": batch.ravel(),
                    "binding_constraint": np.broadcast_to(binding, inference_grid.shape).ravel(),
                    "rollout_time_s": np.broadcast_to(rollout, inference_grid.shape).ravel(),
                    "trainer_time_s": np.broadcast_to(trainer_time, inference_grid.shape).ravel(),
                    "weight_sync_time_s": sync_s,
                    "step_time_s": step.ravel(),
                    "trained_tokens_per_s": trained_per_s.ravel(),
                    "trained_tokens_per_s_per_gpu": (trained_per_s / np.maximum(total, 1)).ravel(),
                    "trainer_idle_fraction": np.where(step > 0, 1 - trainer_busy / np.where(step > 0, step, 1.0), 0.0).ravel()
                    if has_trainer
                    else 0.0,
                    "node_ratio": np.where(
                        (trainer_grid > 0) & (not colocated),
                        (inference_grid / hw.gpus_per_node) / np.maximum(trainer_grid / trainer_hw.gpus_per_node, 1e-12),
                        0.0,
                    ).ravel(),
                    "cost_per_step_usd": cost.ravel(),
                    "cost_per_million_trained_tokens_usd": (cost / np.maximum(trained * trained_share, 1e-12) * 1e6).ravel(),
                },
                inference_grid.size,
            )
        )
        if on_config:
            on_config(done, len(configs))
    if len(failures) == len(configs) and all(isinstance(exc, InputError) for exc in failures):
        # every point refused for an input reason: the input is wrong, not one configuration
        reasons = list(dict.fromkeys(str(exc) for exc in failures))
        raise InputError("no configuration of the sweep can be planned: " + "; ".join(reasons[:3])
                         + (f" (and {len(reasons) - 3} more reasons)" if len(reasons) > 3 else ""))
    return _assemble(parts, COLUMNS + FEATURE_COLUMNS if features else COLUMNS)


def _spec_at(speculative: "SpecInputs | None", tokens: int | None) -> "SpecInputs | None":
    """``speculative`` with ``tokens`` drafted per verify step (validated again; ``None`` keeps it)."""
    if speculative is None or tokens is None:
        return speculative
    from capplan.speculative import SpecInputs

    return SpecInputs(**{**speculative.model_dump(), "num_speculative_tokens": tokens})


def _feature_base(ep: int, dp: int, sinp: "SpecInputs | None", tokens: int | None, offload: float | None) -> dict[str, Any]:
    """A configuration's feature columns that do not depend on the GPU counts."""
    return {
        "ep": ep, "dp": dp, "spec_method": sinp.method if sinp is not None else "",
        "spec_num_speculative_tokens": sinp.num_speculative_tokens if sinp is not None else (tokens if tokens is not None else 0),
        "spec_acceptance_rate": sinp.acceptance_rate if sinp is not None and sinp.acceptance_rate is not None else float("nan"),
        "spec_tokens_per_step": sinp.tokens_per_step if sinp is not None else 1.0,
        "kv_offload_gib_per_gpu": offload if offload is not None else 0.0,
    }


def _feature_figures(setup: Any, times: Any, batch: Any, inference_grid: Any, unit: int) -> dict[str, Any]:
    """A configuration's feature columns over its GPU counts: instances, the speculative decode
    speed-up at each row's decode ``batch`` (plain decode step over the speculative time per
    token, as :func:`capplan.plan.features.speculative_figures`), the positions loaded from the
    CPU tier."""
    import numpy as np

    shape = inference_grid.shape
    out: dict[str, Any] = {"inference_instances": (inference_grid // unit).ravel().astype(int)}
    pricer = setup.replica.speculative
    if pricer is not None:
        b = np.maximum(np.asarray(batch, dtype=float), 1.0)
        context = setup.decode_context_tokens
        plain = np.asarray(pricer.target.decode(b, context).step_time_s, dtype=float)
        spec = np.asarray(pricer.decode(b, context).step_time_s, dtype=float)
        out["spec_speedup"] = np.broadcast_to(plain / spec, shape).ravel()
    else:
        out["spec_speedup"] = 1.0
    loaded = np.asarray(times.loaded_tokens, dtype=float)
    out["kv_offload_loaded_tokens_per_step"] = np.broadcast_to(loaded.reshape(-1, 1) if loaded.ndim else loaded, shape).ravel()
    return out


TEXT_COLUMNS = ("hardware", "kv_dtype", "weight_dtype", "reason", "binding_constraint", "spec_method")
"""Columns of :data:`COLUMNS` and :data:`FEATURE_COLUMNS` holding text (categorical, categories in sorted order)."""


def _assemble(parts: list[tuple[dict[str, Any], int]], columns_out: list[str] = COLUMNS) -> "pd.DataFrame":
    """One DataFrame of :data:`COLUMNS` from the configurations' columns (arrays or scalars).

    Built column by column in one step (no per-configuration DataFrame, no concatenation):
    a column some configuration lacks is NaN there (numbers become floats, as a concatenation would
    make them); text columns are categorical, so a million rows hold a few strings and one code each.
    On an infeasible row every figure (:data:`FIGURES`) is blank; the KV capacity, a count, is
    categorical too so that it stays an integer on the other rows.
    """
    import numpy as np
    import pandas as pd

    columns: dict[str, Any] = {}
    infeasible = None
    for name in columns_out:
        pieces = [(values.pop(name, np.nan), rows) for values, rows in parts]  # each piece freed once copied
        if name in TEXT_COLUMNS or name == "kv_capacity_tokens_per_replica":
            column = _categorical([np.broadcast_to(np.asarray(value, dtype=object), (rows,)) for value, rows in pieces])
            if infeasible is not None and name in FIGURES and infeasible.any():
                codes = np.where(infeasible, -1, column.codes)
                column = pd.Categorical.from_codes(codes, categories=column.categories)
            columns[name] = column
            continue
        arrays = [np.broadcast_to(np.asarray(value), (rows,)) for value, rows in pieces]
        del pieces
        values = np.concatenate(arrays) if arrays else np.zeros(0)
        del arrays
        if name == "feasible":
            infeasible = ~values.astype(bool)
        elif infeasible is not None and name in FIGURES and infeasible.any():
            values = np.where(infeasible, np.nan, values.astype(float))
        columns[name] = values
    return pd.DataFrame(columns, columns=columns_out, copy=False)


def _categorical(arrays: list[Any]) -> "pd.Categorical":
    """Object arrays (text or counts; NaN for missing) as one categorical with sorted categories."""
    import numpy as np
    import pandas as pd

    values = np.concatenate(arrays) if arrays else np.zeros(0, dtype=object)
    codes, uniques = pd.factorize(values, use_na_sentinel=True)
    if len(uniques) == 0:  # every value missing
        return pd.Categorical.from_codes(codes, categories=[])
    keys = list(uniques)
    try:
        order = sorted(range(len(keys)), key=keys.__getitem__)  # texts alphabetically, counts by value
    except TypeError:  # mixed kinds
        order = sorted(range(len(keys)), key=lambda i: str(keys[i]))
    rank = np.empty(len(order), dtype=np.int64)
    rank[np.asarray(order, dtype=np.int64)] = np.arange(len(order))
    categories = [keys[i] for i in order]
    return pd.Categorical.from_codes(np.where(codes >= 0, rank[np.maximum(codes, 0)], -1), categories=categories)


def best(grid: "pd.DataFrame", objective: str, n: int = 10) -> "pd.DataFrame":
    """The ``n`` best feasible rows: highest ``trained_tokens_per_s_per_gpu`` or lowest cost."""
    feasible = grid[grid["feasible"]]
    if objective == "cost":
        return feasible.nsmallest(n, "cost_per_million_trained_tokens_usd")
    if objective == "throughput":
        return feasible.nlargest(n, "trained_tokens_per_s")
    return feasible.nlargest(n, "trained_tokens_per_s_per_gpu")
