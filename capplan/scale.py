"""Running many independent tasks on a local process pool or a Ray cluster: one task per item, each retried once, failures named.

:func:`run_tasks` is the one entry point. Every item is a ``(name, argument)`` pair and becomes one
task ``fn(argument)``; the results come back by name, in the order of the items, whatever order the
tasks finished in, so every executor gives the same result. A task that raises (or whose worker
process dies) is run once more; if it fails again it is reported in :attr:`TaskRun.failures` by
name with its error, never dropped. ``progress(done, total)`` is called as tasks finish, for a
progress bar across tasks.

Executors:

* ``serial``: in this process, one task after the other (tests, debugging, one worker);
* ``process``: a local pool of ``workers`` processes (:mod:`concurrent.futures`);
* ``ray``: one Ray task per item on a cluster (``ray_address="auto"`` or ``"HOST:PORT"``) or,
  without an address, on a local Ray instance with ``workers`` CPUs. Ray is an optional extra:
  ``pip install 'capplan[ray]'``.

``fn`` must be importable by name (a module-level function) and its arguments and results
picklable; on a Ray cluster every node needs capplan installed and the files it reads.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Mapping, Sequence, TypeVar

from capplan.errors import InputError

A = TypeVar("A")
R = TypeVar("R")

EXECUTORS: tuple[str, ...] = ("process", "ray", "serial")
"""Executor names accepted by :func:`run_tasks` (``--executor``)."""


@dataclass(frozen=True)
class TaskFailure:
    """A task that failed on every attempt."""

    name: str
    """The item's name (a file, a simulation setting)."""
    error: str
    """The last attempt's exception, as ``Type: message``."""
    attempts: int
    """How many times the task was run."""

    def __str__(self) -> str:
        return f"{self.name}: {self.error} (failed {self.attempts} time(s))"


@dataclass(frozen=True)
class TaskRun(Generic[R]):
    """The outcome of :func:`run_tasks`."""

    results: dict[str, R]
    """Results of the tasks that succeeded, by name, in the order of the items."""
    failures: list[TaskFailure] = field(default_factory=list)
    """Tasks that failed on every attempt, in the order of the items."""
    executor: str = "serial"
    workers: int = 1

    @property
    def ok(self) -> bool:
        """True when every task succeeded."""
        return not self.failures


def default_workers() -> int:
    """CPUs this process may use [processes]."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # not on Linux
        return max(os.cpu_count() or 1, 1)


def _describe(exc: BaseException) -> str:
    cause = getattr(exc, "cause", None)  # a Ray task error wraps the task's own exception
    if isinstance(cause, BaseException):
        exc = cause
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def run_tasks(
    fn: Callable[[A], R],
    items: Sequence[tuple[str, A]] | Mapping[str, A],
    *,
    executor: str = "process",
    workers: int | None = None,
    ray_address: str | None = None,
    retries: int = 1,
    progress: Callable[[int, int], None] | None = None,
) -> TaskRun[R]:
    """Run ``fn(argument)`` for every ``(name, argument)`` item, one task per item.

    Parameters
    ----------
    fn : callable
        A module-level function (picklable by name).
    items : sequence of (str, argument) or mapping
        The tasks, by unique name.
    executor : {"process", "ray", "serial"}
        Where the tasks run (see the module docstring).
    workers : int, optional
        Processes of the local pool, or CPUs of a local Ray instance [processes]; default the
        CPUs available. Ignored with ``ray_address`` (the cluster decides).
    ray_address : str, optional
        ``"auto"`` or ``"HOST:PORT"`` (or ``"ray://HOST:PORT"``) of an existing Ray cluster;
        without it the ``ray`` executor starts a local instance and stops it afterwards.
    retries : int
        Further attempts of a task that failed [attempts].
    progress : callable, optional
        ``progress(done, total)`` after each task that finished (succeeded or finally failed).

    Returns
    -------
    TaskRun

    Raises
    ------
    InputError
        An unknown executor, fewer than one worker, duplicate names, ``ray_address`` without the
        ``ray`` executor, or the ``ray`` executor without Ray installed.

    Examples
    --------
    >>> run = run_tasks(abs, [("a", -1), ("b", 2)], executor="serial")
    >>> run.results, run.ok
    ({'a': 1, 'b': 2}, True)
    """
    pairs = list(items.items()) if isinstance(items, Mapping) else [(str(name), arg) for name, arg in items]
    names = [name for name, _ in pairs]
    if len(set(names)) != len(names):
        duplicate = next(name for name in names if names.count(name) > 1)
        raise InputError(f"task names must be unique: {duplicate!r} appears twice")
    if executor not in EXECUTORS:
        raise InputError(f"--executor {executor!r}: allowed: {', '.join(EXECUTORS)}")
    if workers is not None and workers < 1:
        raise InputError(f"--workers {workers}: must be at least 1")
    if ray_address is not None and executor != "ray":
        raise InputError("--ray-address needs --executor ray")
    if retries < 0:
        raise InputError(f"retries {retries}: must be at least 0")
    count = workers or default_workers()
    if executor == "ray":
        outcomes, used = _run_ray(fn, pairs, count, ray_address, retries, progress)
    elif executor == "process" and count > 1 and len(pairs) > 1:
        outcomes, used = _run_pool(fn, pairs, count, retries, progress), min(count, len(pairs))
    else:
        outcomes, used = _run_serial(fn, pairs, retries, progress), 1
    results: dict[str, R] = {}
    failures: list[TaskFailure] = []
    for name in names:
        outcome = outcomes[name]
        if isinstance(outcome, TaskFailure):
            failures.append(outcome)
        else:
            results[name] = outcome
    return TaskRun(results, failures, executor, used)


class _Progress:
    """Counts finished tasks and reports them."""

    def __init__(self, total: int, report: Callable[[int, int], None] | None) -> None:
        self.done, self.total, self.report = 0, total, report

    def step(self) -> None:
        self.done += 1
        if self.report is not None:
            self.report(self.done, self.total)


def _run_serial(
    fn: Callable[[A], R], pairs: list[tuple[str, A]], retries: int, progress: Callable[[int, int], None] | None
) -> dict[str, Any]:
    tick = _Progress(len(pairs), progress)
    out: dict[str, Any] = {}
    for name, arg in pairs:
        for attempt in range(1, retries + 2):
            try:
                out[name] = fn(arg)
                break
            except Exception as exc:  # noqa: BLE001 (any failure of a task is reported by name)
                out[name] = TaskFailure(name, _describe(exc), attempt)
        tick.step()
    return out


def _run_pool(
    fn: Callable[[A], R],
    pairs: list[tuple[str, A]],
    workers: int,
    retries: int,
    progress: Callable[[int, int], None] | None,
) -> dict[str, Any]:
    """Rounds on a fresh process pool: every task, then the failed ones again (a dead worker
    breaks a pool, so a retry never shares a pool with the attempt that broke it)."""
    from concurrent.futures import ProcessPoolExecutor, as_completed

    tick = _Progress(len(pairs), progress)
    arguments = dict(pairs)
    attempts = {name: 0 for name, _ in pairs}
    out: dict[str, Any] = {}
    todo = [name for name, _ in pairs]
    while todo:
        again: list[str] = []
        with ProcessPoolExecutor(max_workers=min(workers, len(todo))) as pool:
            futures = {pool.submit(fn, arguments[name]): name for name in todo}
            for future in as_completed(futures):
                name = futures[future]
                attempts[name] += 1
                try:
                    out[name] = future.result()
                except Exception as exc:  # noqa: BLE001 (BrokenProcessPool included: a worker died)
                    out[name] = TaskFailure(name, _describe(exc), attempts[name])
                    if attempts[name] <= retries:
                        again.append(name)
                        continue
                tick.step()
        order = {name: i for i, (name, _) in enumerate(pairs)}
        todo = sorted(again, key=order.__getitem__)
    return out


def _run_ray(
    fn: Callable[[A], R],
    pairs: list[tuple[str, A]],
    workers: int,
    address: str | None,
    retries: int,
    progress: Callable[[int, int], None] | None,
) -> tuple[dict[str, Any], int]:
    """One Ray task per item; Ray re-runs a task whose worker died or that raised (``max_retries``
    with ``retry_exceptions``)."""
    try:
        import ray
    except ImportError:
        raise InputError("--executor ray needs Ray, which is not installed: pip install 'capplan[ray]'") from None
    started = not ray.is_initialized()
    if started:
        import logging

        # Ray's own start-up lines (token authentication, "Started a local Ray instance") would
        # interleave with capplan's output; its errors still show
        options: dict[str, Any] = {"ignore_reinit_error": True, "include_dashboard": False, "log_to_driver": False,
                                   "logging_level": logging.ERROR}
        if address is None:
            options["num_cpus"] = workers
        else:
            options["address"] = address
        try:
            ray.init(**options)
        except Exception as exc:  # noqa: BLE001 (no cluster at the address, or Ray cannot start)
            where = f"the Ray cluster at {address}" if address else "a local Ray instance"
            raise InputError(f"cannot connect to {where}: {_describe(exc)}") from None
    try:
        remote = ray.remote(num_cpus=1, max_retries=retries, retry_exceptions=True)(fn)
        tick = _Progress(len(pairs), progress)
        refs = {remote.remote(arg): name for name, arg in pairs}
        out: dict[str, Any] = {}
        waiting = list(refs)
        while waiting:
            ready, waiting = ray.wait(waiting, num_returns=1)
            for ref in ready:
                name = refs[ref]
                try:
                    out[name] = ray.get(ref)
                except Exception as exc:  # noqa: BLE001 (a task error, or a worker that died)
                    out[name] = TaskFailure(name, _describe(exc), retries + 1)
                tick.step()
        used = int(ray.cluster_resources().get("CPU", workers))
    finally:
        if started:
            ray.shutdown()
    return out, used
