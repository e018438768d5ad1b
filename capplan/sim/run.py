"""The simulator's entry points: :func:`simulate` (one run) and :func:`sweep_staleness` (sync against async bounds).

The analytic plan (:mod:`capplan.plan`) estimates averages. The simulator plays a workload's
sampled conversations through inference replicas with continuous (or static) batching,
environment workers and a trainer. It shows what the averages hide: queues, tails, KV pressure
and preemption, trainer stalls, and the gap between *completed* and *accepted* throughput when
a freshness bound rejects stale trajectories.

Inputs come from the other modules and are not re-derived here:

* the conversations from :func:`capplan.ledger.sample_conversations` (the same draws, hence the
  same token counters, as ``capplan ledger``), and each invocation's cache hit from
  :func:`capplan.ledger.count_positions` (:mod:`capplan.sim.conversations`);
* KV bytes by layer kind from :func:`capplan.kv.kv_layout`; the KV budget, ``max_num_seqs`` and
  the scheduler token budget from :func:`capplan.kv.compute_kv` (:mod:`capplan.sim.setup`);
* each engine step's time from :func:`capplan.roofline.engine_step`, through coefficients
  probed once (:mod:`capplan.sim.stepcost`);
* the trainer's step time and the weight sync from :mod:`capplan.trainer`.

The model itself is described in :mod:`capplan.sim.loop`, :mod:`capplan.sim.scheduler`,
:mod:`capplan.sim.controller` and ``docs/simulate.md``.

Examples
--------
>>> from capplan.workload import load_workload
>>> from capplan.hardware import load_hardware
>>> r = simulate(load_workload("seed-replay-auto"), load_hardware("h100-sxm"), SimConfig(steps=2),
...              model="llama-3.1-8b")
>>> r.summary["accepted_trajectories"], r.summary["rejected_stale_fraction"]
(2, 0.0)
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable

from capplan.errors import InputError
from capplan.sim.config import SimConfig
from capplan.sim.result import SimResult

if TYPE_CHECKING:
    from capplan.hardware import HardwareProfile
    from capplan.modelspec import ModelSpec
    from capplan.workload import Workload


def simulate(
    workload: "Workload",
    hardware: "HardwareProfile",
    config: SimConfig = SimConfig(),
    *,
    model: "str | ModelSpec | None" = None,
    trainer_hardware: "HardwareProfile | None" = None,
    progress: Callable[[int, int], None] | None = None,
    trajectories: str | Path | None = None,
    force: bool = False,
) -> SimResult:
    """Simulate ``config.steps`` trainer updates of ``workload`` on ``hardware``.

    Parameters
    ----------
    workload : Workload
        A workload with a rollout and a trainer (distillation, outcome-rl, multi-turn-rl).
    hardware : HardwareProfile
        Inference GPUs (and trainer GPUs unless ``trainer_hardware`` is given).
    config : SimConfig
        Replicas, mode, staleness, batching, steps, seed.
    model : str or ModelSpec, optional
        Overrides the workload's ``model``.
    trainer_hardware : HardwareProfile, optional
        Trainer GPUs; default ``hardware``.
    progress : callable, optional
        Called with ``(updates_done, updates_total)`` after each update.
    trajectories : str or Path, optional
        Stream the completed trajectories to this JSONL file as the run goes
        (:class:`capplan.sim.output.TrajectoryStream`; the same records as
        :func:`capplan.sim.output.write_trajectories` after the run), atomically.
    force : bool
        Overwrite an existing ``trajectories`` file.

    Returns
    -------
    SimResult

    Raises
    ------
    InputError
        Invalid configuration, a workload without a rollout or trainer, no model, a stalled run.
    DoesNotFitError
        The model or one conversation's KV does not fit a replica.
    OutputExistsError
        ``trajectories`` exists and ``force`` is false (checked before the run).

    Notes
    -----
    Throughputs are counts over the simulated time ``T`` (start to the end of the last
    update): ``completed_trajectories_per_s = completed / T``, ``accepted_... = accepted / T``;
    tokens are sampled (policy) tokens of those trajectories. The same seed gives the same
    result, bit for bit.
    """
    from capplan.modelspec import ModelSpec, load_model_spec
    from capplan.sim.config import run_options
    from capplan.sim.conversations import chunk_drawer
    from capplan.sim.loop import Simulation
    from capplan.sim.result import build_result
    from capplan.sim.setup import engine_setup

    config.validate(workload)
    if model is None:
        if workload.model is None:
            raise InputError(f"workload {workload.name} names no model: give --model")
        model = workload.model
    spec = model if isinstance(model, ModelSpec) else load_model_spec(model)
    teacher = workload.training.teacher_model
    if workload.teacher_scores and teacher is not None and load_model_spec(teacher).name != spec.name:
        raise InputError(
            f"workload {workload.name}: training.teacher_model {teacher} differs from the policy {spec.name}; the simulator "
            "prices the teacher's forward with the policy's step costs (use capplan plan for a separate teacher)"
        )
    trainer_hw = hardware if config.mode == "colocated" else (trainer_hardware or hardware)
    options = run_options(config, workload)
    setup, report, notes = engine_setup(workload, spec, hardware, trainer_hw, config)
    draw = chunk_drawer(workload, options.chunk_conversations, options.seed)
    if trajectories is None:
        sim = Simulation(workload, setup, options, draw, progress)
        sim.run()
    else:
        from capplan.output import atomic_file
        from capplan.sim.output import TrajectoryStream

        with atomic_file(trajectories, force) as fh:
            sim = Simulation(workload, setup, options, draw, progress)
            sim.stream = TrajectoryStream(fh, workload, sim.table)
            sim.run()
            sim.stream.close()
    return build_result(workload, spec, hardware, trainer_hw, config, options, report, notes, sim)


def sweep_staleness(
    workload: "Workload",
    hardware: "HardwareProfile",
    config: SimConfig,
    bounds: list[int],
    *,
    model: "str | ModelSpec | None" = None,
    trainer_hardware: "HardwareProfile | None" = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[SimResult]:
    """One synchronous run, then one asynchronous run per staleness bound, on the same tasks.

    Parameters
    ----------
    bounds : list of int
        Staleness bounds ``K`` of the asynchronous runs [policy versions].
    progress : callable, optional
        Called with ``(updates_done, updates_total)`` over all runs.

    Returns
    -------
    list of SimResult
        The synchronous run first, then one per bound, in order.
    """
    runs = [config.replace(mode="sync", max_inflight_groups=None, inflight_updates=None)]
    runs += [config.replace(mode="async", max_staleness=k) for k in bounds]
    total = len(runs) * config.steps
    out = []
    for n, cfg in enumerate(runs):
        callback = None if progress is None else (lambda done, _total, n=n: progress(n * config.steps + done, total))
        out.append(simulate(workload, hardware, cfg, model=model, trainer_hardware=trainer_hardware, progress=callback))
    return out
