"""Sweeps: every (hardware x tp x KV dtype x weight dtype x inference GPUs x trainer GPUs) plan at once.

The workload is sampled once. For each replica configuration (hardware, tp, dtypes) the KV
capacity, concurrency and step costs are set up once (:func:`capplan.plan.replica_setup`) and
the rollout timing is evaluated for every inference size in one vectorised call
(:meth:`capplan.plan.RolloutModel.times`); trainer times broadcast against it. So a sweep row is
the same arithmetic as ``capplan plan`` with both GPU counts given (tested), and 100,000
combinations take seconds (``benchmarks/bench_sweep.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Sequence

from capplan.errors import CapplanError, InputError

if TYPE_CHECKING:
    import pandas as pd

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
    out, r = [], 1
    while r <= max(1.0, conversations):
        out.append(r * tp)
        r *= 2
    return out


def default_trainer_gpus(min_gpus: int, gpus_per_node: int) -> list[int]:
    """The fewest GPUs that hold the trainer state, then whole nodes doubling up to 64 nodes."""
    out = [min_gpus]
    g = gpus_per_node
    while g <= 64 * gpus_per_node:
        if g > min_gpus:
            out.append(g)
        g *= 2
    return out


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
    gpu_mem_util: float = 0.9,
    on_config: Callable[[int, int], None] | None = None,
) -> "pd.DataFrame":
    """Evaluate every combination and return the full grid as a DataFrame (:data:`COLUMNS`).

    Parameters
    ----------
    inference_gpus, trainer_gpus : sequences of int, optional
        The GPU counts to try; default :func:`default_inference_gpus` (per tp) and
        :func:`default_trainer_gpus`. Inference counts that are not a multiple of ``tp`` and
        trainer counts below the memory minimum are rows with ``feasible = False``.
    gpu_hour_price : float, optional
        Price of one GPU-hour [USD]; fills the cost columns.
    on_config : callable, optional
        Called as ``on_config(done, total)`` after each replica configuration (progress bars).
    """
    import numpy as np
    import pandas as pd

    from capplan.plan import prepare, replica_setup, step_time_s
    from capplan.trainer import MICRO_BATCH_TOKENS, TRAIN_MFU, min_trainer_gpus, trainer_step_time_s, weight_sync_time_s

    if mode not in ("sync", "async"):
        raise InputError(f"--mode {mode}: allowed sync, async")
    prep = prepare(workload, spec, conversations)
    work = prep.work
    trained = work.trained_positions
    frames: list[pd.DataFrame] = []
    configs = [(h, t, k, w) for h in hardware for t in tps for k in kv_dtypes for w in weight_dtypes]
    trainer_needed = workload.has_trainer
    for done, (hw, tp, kvd, wd) in enumerate(configs, 1):
        thw = trainer_hardware or hw
        base = {"hardware": hw.name, "tp": tp, "kv_dtype": kvd, "weight_dtype": wd}
        inf = np.array(list(inference_gpus) if inference_gpus else default_inference_gpus(tp, work.conversations), dtype=float)
        try:
            t_min = min_trainer_gpus(spec, thw, MICRO_BATCH_TOKENS) if trainer_needed else 0
        except CapplanError:
            t_min = 0  # reported below: no trainer size fits
        trn = np.array(
            (list(trainer_gpus) if trainer_gpus else default_trainer_gpus(max(t_min, 1), thw.gpus_per_node)) if trainer_needed else [0],
            dtype=float,
        )
        I, T = np.meshgrid(inf, trn, indexing="ij")
        try:
            if trainer_needed and t_min == 0:
                min_trainer_gpus(spec, thw, MICRO_BATCH_TOKENS)  # raises the explanation
            rs = replica_setup(workload, prep, spec, hw, tp, kvd, wd, gpu_mem_util)
        except CapplanError as exc:
            frames.append(
                pd.DataFrame({**base, "inference_gpus": I.ravel().astype(int), "trainer_gpus": T.ravel().astype(int), "feasible": False, "reason": str(exc)})
            )
            if on_config:
                on_config(done, len(configs))
            continue
        times = rs.rollout_model(work).times(np.maximum(inf // tp, 1))
        sync_s = weight_sync_time_s(spec, hw, tp) if (trainer_needed and workload.has_rollout) else 0.0
        t_train = np.where(T > 0, trainer_step_time_s(prep.trainer_flops, thw, np.maximum(T, 1), TRAIN_MFU), 0.0)
        rollout = times["rollout"][:, None]
        step = step_time_s(mode, workload.has_rollout, trainer_needed, rollout, times["t_work"][:, None], t_train, sync_s)
        step = np.broadcast_to(step, I.shape)
        total = I + T
        tps_trained = np.where(step > 0, trained / np.where(step > 0, step, 1.0), 0.0)
        feasible = (I % tp == 0) & ((T >= t_min) | (not trainer_needed))
        reason = np.where(I % tp != 0, f"inference GPUs not a multiple of tp {tp}", np.where(feasible, "", f"trainer needs >= {t_min} GPUs"))
        binding = np.where(times["arrival"], "arrival of work", rs.binding)[:, None]
        cost = step * total * gpu_hour_price / 3600 if gpu_hour_price else np.full(I.shape, np.nan)
        frames.append(
            pd.DataFrame(
                {
                    **base,
                    "inference_gpus": I.ravel().astype(int),
                    "trainer_gpus": T.ravel().astype(int),
                    "total_gpus": total.ravel().astype(int),
                    "feasible": feasible.ravel(),
                    "reason": reason.ravel(),
                    "kv_capacity_tokens_per_replica": rs.kv.kv_capacity_tokens,
                    "decode_batch_sequences": np.broadcast_to(times["b"][:, None], I.shape).ravel(),
                    "binding_constraint": np.broadcast_to(binding, I.shape).ravel(),
                    "rollout_time_s": np.broadcast_to(rollout, I.shape).ravel(),
                    "trainer_time_s": np.broadcast_to(t_train, I.shape).ravel(),
                    "weight_sync_time_s": sync_s,
                    "step_time_s": step.ravel(),
                    "trained_tokens_per_s": tps_trained.ravel(),
                    "trained_tokens_per_s_per_gpu": (tps_trained / np.maximum(total, 1)).ravel(),
                    "trainer_idle_fraction": np.where(step > 0, 1 - (t_train + (sync_s if mode == "async" else 0.0)) / np.where(step > 0, step, 1.0), 0.0).ravel()
                    if trainer_needed
                    else 0.0,
                    "node_ratio": np.where(T > 0, (I / hw.gpus_per_node) / np.maximum(T / thw.gpus_per_node, 1e-12), 0.0).ravel(),
                    "cost_per_step_usd": cost.ravel(),
                    "cost_per_million_trained_tokens_usd": (cost / max(trained, 1e-12) * 1e6).ravel(),
                }
            )
        )
        if on_config:
            on_config(done, len(configs))
    grid = pd.concat(frames, ignore_index=True)
    for col in COLUMNS:
        if col not in grid:
            grid[col] = np.nan
    return grid[COLUMNS]


def best(grid: "pd.DataFrame", objective: str, n: int = 10) -> "pd.DataFrame":
    """The ``n`` best feasible rows: highest ``trained_tokens_per_s_per_gpu`` or lowest cost."""
    feasible = grid[grid["feasible"]]
    if objective == "cost":
        return feasible.nsmallest(n, "cost_per_million_trained_tokens_usd")
    if objective == "throughput":
        return feasible.nlargest(n, "trained_tokens_per_s")
    return feasible.nlargest(n, "trained_tokens_per_s_per_gpu")
