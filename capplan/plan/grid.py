"""The sweep: every hardware x tp x dtype x GPU-split plan at once, evaluated as one grid.

The workload is sampled once (the plan's sample and the concurrency model's; see
:func:`capplan.plan.replica.shared_sample`). For each replica configuration (hardware, tp, dtypes) the KV
capacity, concurrency and step costs are set up once (:func:`capplan.plan.replica.replica_setup`)
and the rollout timing is evaluated for every inference size in one vectorised call
(:meth:`capplan.plan.rollout.RolloutModel.times`); trainer times broadcast against it. So a
sweep row is the same arithmetic as ``capplan plan`` with both GPU counts given (tested), and
100,000 combinations take seconds (``benchmarks/bench_sweep.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

from capplan.errors import CapplanError
from capplan.plan.inputs import check_mode

if TYPE_CHECKING:
    import pandas as pd

    from capplan.engine import EngineProfile
    from capplan.hardware import HardwareProfile
    from capplan.modelspec import ModelSpec
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


def default_inference_gpus(tp: int, conversations: float) -> list[int]:
    """Replica counts 1, 2, 4, ... up to one conversation per replica, as GPUs (x tp)."""
    gpus, replicas = [], 1
    while replicas <= max(1.0, conversations):
        gpus.append(replicas * tp)
        replicas *= 2
    return gpus


def default_trainer_gpus(min_gpus: int, gpus_per_node: int) -> list[int]:
    """The fewest GPUs that hold the trainer state, then whole nodes doubling up to 64 nodes."""
    gpus = [min_gpus]
    whole_nodes = gpus_per_node
    while whole_nodes <= 64 * gpus_per_node:
        if whole_nodes > min_gpus:
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
    gpu_hour_price: float | None = None,
    conversations: int | None = None,
    gpu_mem_util: float | None = None,
    engine: "EngineProfile | None" = None,
    on_config: Callable[[int, int], None] | None = None,
) -> "pd.DataFrame":
    """Evaluate every combination and return the full grid as a DataFrame (:data:`COLUMNS`).

    Parameters
    ----------
    inference_gpus, trainer_gpus : sequences of int, optional
        The GPU counts to try [GPUs]; default :func:`default_inference_gpus` (per tp) and
        :func:`default_trainer_gpus`. Inference counts that are not a multiple of ``tp`` and
        trainer counts below the memory minimum are rows with ``feasible = False``.
    gpu_hour_price : float, optional
        Price of one GPU-hour [USD]; fills the cost columns.
    on_config : callable, optional
        Called as ``on_config(done, total)`` after each replica configuration (progress bars).

    Raises
    ------
    InputError
        ``mode`` is neither ``sync`` nor ``async``.
    """
    import numpy as np

    from capplan.plan.replica import replica_setup, shared_sample
    from capplan.plan.sizing import step_time_s
    from capplan.plan.work import prepare
    from capplan.trainer import MICRO_BATCH_TOKENS, TRAIN_MFU, min_trainer_gpus, trainer_step_time_s, weight_sync_time_s

    check_mode(mode)
    prepared = prepare(workload, spec, conversations)
    shared = shared_sample(workload, prepared)  # the workload is sampled once per sweep, not per cell
    work = prepared.work
    trained = work.trained_positions
    parts: list[tuple[dict[str, Any], int]] = []  # per configuration: its columns and row count
    configs = [(h, t, k, w) for h in hardware for t in tps for k in kv_dtypes for w in weight_dtypes]
    has_trainer = workload.has_trainer
    for done, (hw, tp, kv_dtype, weight_dtype) in enumerate(configs, 1):
        trainer_hw = trainer_hardware or hw
        base = {"hardware": hw.name, "tp": tp, "kv_dtype": kv_dtype, "weight_dtype": weight_dtype}
        inference = np.array(list(inference_gpus) if inference_gpus else default_inference_gpus(tp, work.conversations), dtype=float)
        try:
            trainer_min = min_trainer_gpus(spec, trainer_hw, MICRO_BATCH_TOKENS) if has_trainer else 0
        except CapplanError:
            trainer_min = 0  # reported below: no trainer size fits
        trainer = np.array(
            (list(trainer_gpus) if trainer_gpus else default_trainer_gpus(max(trainer_min, 1), trainer_hw.gpus_per_node))
            if has_trainer
            else [0],
            dtype=float,
        )
        inference_grid, trainer_grid = np.meshgrid(inference, trainer, indexing="ij")
        try:
            if has_trainer and trainer_min == 0:
                min_trainer_gpus(spec, trainer_hw, MICRO_BATCH_TOKENS)  # raises the explanation
            setup = replica_setup(workload, prepared, spec, hw, tp, kv_dtype, weight_dtype, gpu_mem_util, engine=engine, shared=shared)
        except CapplanError as exc:
            parts.append(
                (
                    {
                        **base,
                        "inference_gpus": inference_grid.ravel().astype(int),
                        "trainer_gpus": trainer_grid.ravel().astype(int),
                        "feasible": False,
                        "reason": str(exc),
                    },
                    inference_grid.size,
                )
            )
            if on_config:
                on_config(done, len(configs))
            continue
        times = setup.rollout_model(work).times(np.maximum(inference // tp, 1))
        sync_s = weight_sync_time_s(spec, hw, tp) if (has_trainer and workload.has_rollout) else 0.0
        trainer_time = np.where(
            trainer_grid > 0, trainer_step_time_s(prepared.trainer_flops, trainer_hw, np.maximum(trainer_grid, 1), TRAIN_MFU), 0.0
        )
        rollout = times.rollout_time_s[:, None]
        step = step_time_s(mode, workload.has_rollout, has_trainer, rollout, times.work_time_s[:, None], trainer_time, sync_s)
        step = np.broadcast_to(step, inference_grid.shape)
        total = inference_grid + trainer_grid
        trained_per_s = np.where(step > 0, trained / np.where(step > 0, step, 1.0), 0.0)
        multiple = inference_grid % tp == 0
        feasible = multiple & ((trainer_grid >= trainer_min) | (not has_trainer))
        reasons = np.array(["", f"inference GPUs not a multiple of tp {tp}", f"trainer needs >= {trainer_min} GPUs"], dtype=object)
        reason = reasons[np.where(~multiple, 1, np.where(feasible, 0, 2))]  # one object per distinct text
        bindings = np.array([setup.binding, "arrival of work"], dtype=object)
        binding = bindings[times.arrival_binds.astype(int)][:, None]
        cost = step * total * gpu_hour_price / 3600 if gpu_hour_price else np.full(inference_grid.shape, np.nan)
        trainer_busy = trainer_time + (sync_s if mode == "async" else 0.0)
        parts.append(
            (
                {
                    **base,
                    "inference_gpus": inference_grid.ravel().astype(int),
                    "trainer_gpus": trainer_grid.ravel().astype(int),
                    "total_gpus": total.ravel().astype(int),
                    "feasible": feasible.ravel(),
                    "reason": reason.ravel(),
                    "kv_capacity_tokens_per_replica": setup.kv.kv_capacity_tokens,
                    "decode_batch_sequences": np.broadcast_to(times.decode_batch_sequences[:, None], inference_grid.shape).ravel(),
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
                        trainer_grid > 0,
                        (inference_grid / hw.gpus_per_node) / np.maximum(trainer_grid / trainer_hw.gpus_per_node, 1e-12),
                        0.0,
                    ).ravel(),
                    "cost_per_step_usd": cost.ravel(),
                    "cost_per_million_trained_tokens_usd": (cost / max(trained, 1e-12) * 1e6).ravel(),
                },
                inference_grid.size,
            )
        )
        if on_config:
            on_config(done, len(configs))
    return _assemble(parts)


TEXT_COLUMNS = ("hardware", "kv_dtype", "weight_dtype", "reason", "binding_constraint")
"""Columns of :data:`COLUMNS` holding text (categorical, categories in sorted order)."""


def _assemble(parts: list[tuple[dict[str, Any], int]]) -> "pd.DataFrame":
    """One DataFrame of :data:`COLUMNS` from the configurations' columns (arrays or scalars).

    Built column by column in one step (no per-configuration DataFrame, no concatenation):
    a column some configuration lacks is NaN there (numbers become floats, as a concatenation would
    make them); text columns are categorical, so a million rows hold a few strings and one code each.
    """
    import numpy as np
    import pandas as pd

    columns: dict[str, Any] = {}
    for name in COLUMNS:
        pieces = [(values.pop(name, np.nan), rows) for values, rows in parts]  # each piece freed once copied
        if name in TEXT_COLUMNS:
            columns[name] = _categorical([np.broadcast_to(np.asarray(value, dtype=object), (rows,)) for value, rows in pieces])
            continue
        arrays = [np.broadcast_to(np.asarray(value), (rows,)) for value, rows in pieces]
        del pieces
        columns[name] = np.concatenate(arrays) if arrays else np.zeros(0)
        del arrays
    return pd.DataFrame(columns, columns=COLUMNS, copy=False)


def _categorical(arrays: list[Any]) -> "pd.Categorical":
    """Object arrays of text (NaN for missing) as one categorical with sorted categories."""
    import numpy as np
    import pandas as pd

    values = np.concatenate(arrays) if arrays else np.zeros(0, dtype=object)
    codes, uniques = pd.factorize(values, use_na_sentinel=True)
    if len(uniques) == 0:  # every value missing
        return pd.Categorical.from_codes(codes, categories=[])
    order = np.argsort(np.asarray(uniques, dtype=object).astype(str), kind="stable")
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    categories = [uniques[i] for i in order]
    return pd.Categorical.from_codes(np.where(codes >= 0, rank[np.maximum(codes, 0)], -1), categories=categories)


def best(grid: "pd.DataFrame", objective: str, n: int = 10) -> "pd.DataFrame":
    """The ``n`` best feasible rows: highest ``trained_tokens_per_s_per_gpu`` or lowest cost."""
    feasible = grid[grid["feasible"]]
    if objective == "cost":
        return feasible.nsmallest(n, "cost_per_million_trained_tokens_usd")
    if objective == "throughput":
        return feasible.nlargest(n, "trained_tokens_per_s")
    return feasible.nlargest(n, "trained_tokens_per_s_per_gpu")
