"""A grid of simulation settings (``capplan simulate --sweep``): the cartesian product of axes, one simulation task per point.

:func:`simulate_grid` expands axes over :class:`~capplan.sim.config.SimConfig` fields (plus
``inference_gpus``, converted to replicas), validates every point before any work, and runs one
task per point through :func:`capplan.scale.run_tasks` (serially, on a local process pool or on
Ray). Each task is :func:`simulate_point`, a module-level function of picklable arguments; it
returns the point's summary only, so what travels back from a worker is small. The rows come
back in grid order whatever order the tasks finished in, and a simulation is deterministic for
its seed, so every executor gives the same rows.

Examples
--------
>>> from capplan.workload import load_workload
>>> from capplan.hardware import load_hardware
>>> g = simulate_grid(load_workload("seed-replay-auto"), load_hardware("h100-sxm"), SimConfig(steps=1),
...                   {"inference_replicas": [1, 2]}, model="llama-3.1-8b", executor="serial")
>>> [row["inference_replicas"] for row in g.rows], g.ok
([1, 2], True)
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping

from capplan.errors import InputError
from capplan.sim.config import SimConfig

if TYPE_CHECKING:
    import pandas as pd

    from capplan.hardware import HardwareProfile
    from capplan.modelspec import ModelSpec
    from capplan.scale import TaskFailure
    from capplan.workload import Workload

GRID_AXES: dict[str, str] = {
    "inference_replicas": "int",
    "inference_gpus": "int",
    "tp": "int",
    "trainer_gpus": "int",
    "env_workers": "int",
    "mode": "choice",
    "max_staleness": "int",
    "max_inflight_groups": "int",
    "sampling": "choice",
    "oversample": "float",
    "weight_sync": "choice",
    "trainer_mfu": "float",
    "rollout_slowdown": "float",
    "step_overhead_s": "float",
    "max_num_seqs": "int",
    "max_batched_tokens": "int",
    "gpu_mem_util": "float",
    "kv_dtype": "choice",
    "weight_dtype": "choice",
    "steps": "int",
    "seed": "int",
}
"""Settings a grid may sweep, by name -> value kind (``int``, ``float`` or ``choice``, a word).

Every name is a :class:`SimConfig` field except ``inference_gpus``: inference GPUs as
``capplan plan`` counts them, run as ``inference_gpus / tp`` replicas."""

MAX_GRID_POINTS = 10_000
"""Most points one grid may have (each is a whole simulation)."""


@dataclass(frozen=True)
class SimGrid:
    """The outcome of :func:`simulate_grid`."""

    axes: dict[str, list[Any]]
    """The swept settings, by name, with their values, in the order given."""
    rows: list[dict[str, Any]]
    """One row per point that ran, in grid order (the last axis varies fastest): the point's
    settings (the swept names first), then :data:`capplan.sim.result.SUMMARY_KEYS`."""
    failures: list["TaskFailure"] = field(default_factory=list)
    """Points that failed on every attempt, by name (``key=value`` pairs), in grid order."""
    executor: str = "serial"
    """Where the tasks ran (``serial``, ``process`` or ``ray``)."""
    workers: int = 1
    """Processes (or Ray CPUs) the tasks ran on [count]."""

    @property
    def ok(self) -> bool:
        """True when every point ran."""
        return not self.failures

    def as_frame(self) -> "pd.DataFrame":
        """The rows as a DataFrame (one column per setting and summary key)."""
        import pandas as pd

        from capplan.sim.result import SUMMARY_KEYS

        return pd.DataFrame(self.rows, columns=[*self.axes, *SUMMARY_KEYS])

    def as_dict(self) -> dict[str, Any]:
        """The JSON document: the axes, the rows and the failures."""
        return {
            "axes": self.axes,
            "rows": self.rows,
            "failures": [{"name": f.name, "error": f.error, "attempts": f.attempts} for f in self.failures],
        }


def point_name(point: Mapping[str, Any]) -> str:
    """A point's name: its settings as ``key=value`` pairs, e.g. ``tp=2 mode=async``."""
    return " ".join(f"{key}={value}" for key, value in point.items())


def grid_points(axes: Mapping[str, list[Any]]) -> list[dict[str, Any]]:
    """The cartesian product of ``axes``, in order (the last axis varies fastest).

    Raises
    ------
    InputError
        An unknown setting, an axis without values or with a value twice, both
        ``inference_gpus`` and ``inference_replicas``, or more than :data:`MAX_GRID_POINTS` points.

    Examples
    --------
    >>> grid_points({"tp": [1, 2], "mode": ["sync", "async"]})[1]
    {'tp': 1, 'mode': 'async'}
    """
    if not axes:
        raise InputError("--sweep: give at least one setting, e.g. --sweep max_staleness=0,1,2")
    for key, values in axes.items():
        if key not in GRID_AXES:
            raise InputError(f"--sweep {key}: unknown setting (allowed: {', '.join(GRID_AXES)})")
        if not values:
            raise InputError(f"--sweep {key}: give at least one value, e.g. {key}=V1,V2")
    count = math.prod(len(values) for values in axes.values())  # before any per-value work
    if count > MAX_GRID_POINTS:
        raise InputError(f"--sweep: {count:,} points, more than {MAX_GRID_POINTS:,}; narrow the axes")
    for key, values in axes.items():
        seen: set[str] = set()
        for v in map(str, values):
            if v in seen:
                raise InputError(f"--sweep {key}: {v} appears twice (each value names one point)")
            seen.add(v)
    if "inference_gpus" in axes and "inference_replicas" in axes:
        raise InputError("--sweep inference_gpus with inference_replicas: sweep one (GPUs = replicas x tp)")
    keys = list(axes)
    return [dict(zip(keys, values)) for values in itertools.product(*(axes[k] for k in keys))]


def point_config(config: SimConfig, point: Mapping[str, Any]) -> SimConfig:
    """``config`` with ``point``'s settings applied (``inference_gpus`` as ``inference_gpus / tp`` replicas).

    Raises
    ------
    InputError
        A value the setting does not take, or inference GPUs that are not a multiple of tp; the
        message names the point.
    """
    changes = {k: v for k, v in point.items() if k != "inference_gpus"}
    try:
        if "inference_gpus" in point:
            gpus, tp = int(point["inference_gpus"]), int(changes.get("tp", config.tp))
            if gpus % tp:
                raise InputError(f"inference_gpus {gpus} is not a multiple of tp {tp}")
            changes["inference_replicas"] = gpus // tp
        return config.replace(**changes)
    except InputError as exc:
        raise InputError(f"--sweep point {point_name(point)}: {exc}") from None


def simulate_point(task: tuple[Any, ...]) -> dict[str, Any]:
    """One point of a grid: ``simulate(workload, hardware, config, ...)``'s summary (a
    :func:`capplan.scale.run_tasks` task; ``task`` is ``(workload, hardware, config, model,
    trainer_hardware)``, all picklable)."""
    from capplan.sim.run import simulate

    workload, hardware, config, model, trainer_hardware = task
    result = simulate(workload, hardware, config, model=model, trainer_hardware=trainer_hardware)
    return dict(result.summary)


def simulate_grid(
    workload: "Workload",
    hardware: "HardwareProfile",
    config: SimConfig,
    axes: Mapping[str, list[Any]],
    *,
    model: "str | ModelSpec | None" = None,
    trainer_hardware: "HardwareProfile | None" = None,
    executor: str = "process",
    workers: int | None = None,
    ray_address: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> SimGrid:
    """Simulate every point of the cartesian product of ``axes`` over ``config``, one task each.

    Parameters
    ----------
    workload : Workload
        A workload with a rollout and a trainer.
    hardware : HardwareProfile
        Inference GPUs (and trainer GPUs unless ``trainer_hardware`` is given).
    config : SimConfig
        The settings every point shares; each point replaces the swept ones.
    axes : mapping of str to list
        Setting name (:data:`GRID_AXES`) -> its values, e.g. ``{"tp": [1, 2], "max_staleness": [0, 1]}``.
    model : str or ModelSpec, optional
        Overrides the workload's ``model``.
    trainer_hardware : HardwareProfile, optional
        Trainer GPUs; default ``hardware``.
    executor : {"process", "ray", "serial"}
        Where the tasks run (:func:`capplan.scale.run_tasks`).
    workers : int, optional
        Processes, or CPUs of a local Ray instance [processes]; default the CPUs available.
    ray_address : str, optional
        ``"auto"`` or ``"HOST:PORT"`` of an existing Ray cluster (with ``executor="ray"``).
    progress : callable, optional
        ``progress(points_done, points_total)`` as points finish.

    Returns
    -------
    SimGrid
        The rows in grid order and the points that failed twice, by name.

    Raises
    ------
    InputError
        A bad axis or value (every point's settings are checked before any simulation), a
        workload without a rollout and a trainer, or a bad executor setting (see
        :func:`capplan.scale.run_tasks`).

    Notes
    -----
    A point that raises while it runs (for instance a model that does not fit a replica at
    that point's tp) is run once more and then reported in :attr:`SimGrid.failures`, never
    dropped. The default engine profile is resolved here, once, so a worker on another machine
    prices steps with the same profile.
    """
    from capplan.engine import default_engine
    from capplan.scale import run_tasks

    axes = {key: list(values) for key, values in axes.items()}
    points = grid_points(axes)
    config.validate(workload)
    if config.engine is None:
        config = config.replace(engine=default_engine())
    tasks = [(point_name(p), (workload, hardware, point_config(config, p), model, trainer_hardware)) for p in points]
    run = run_tasks(simulate_point, tasks, executor=executor, workers=workers, ray_address=ray_address, progress=progress)
    rows = [{**point, **run.results[name]} for point, (name, _) in zip(points, tasks) if name in run.results]
    return SimGrid(axes, rows, list(run.failures), run.executor, run.workers)
