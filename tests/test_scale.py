"""capplan.scale: one task per item on the serial, process and Ray executors; retries, failures by name, progress.

The Ray tests start one local Ray instance (2 CPUs) for the module and are skipped when Ray is not
installed (``pip install 'capplan[ray]'``).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from capplan.errors import InputError
from capplan.scale import EXECUTORS, TaskFailure, run_tasks


def square(x: int) -> int:
    return x * x


def fail_on_odd(x: int) -> int:
    if x % 2:
        raise ValueError(f"odd input {x}")
    return x


def fail_first_time(marker: str) -> str:
    """Raises the first time it runs for ``marker`` (a file it creates), succeeds the second time."""
    path = Path(marker)
    if not path.exists():
        path.write_text("tried")
        raise RuntimeError("transient failure")
    return path.name


def die_first_time(marker: str) -> str:
    """Kills its worker process the first time (a crash, not an exception), succeeds after."""
    path = Path(marker)
    if not path.exists():
        path.write_text("tried")
        os._exit(1)
    return path.name


LOCAL = ["serial", "process"]


@pytest.mark.parametrize("executor", LOCAL)
def test_results_by_name_in_item_order(executor):
    run = run_tasks(square, [(f"t{i}", i) for i in range(7)], executor=executor, workers=2)
    assert list(run.results) == [f"t{i}" for i in range(7)]
    assert list(run.results.values()) == [i * i for i in range(7)]
    assert run.ok and run.failures == []


@pytest.mark.parametrize("executor", LOCAL)
def test_a_failing_task_is_retried_once_then_reported_by_name(executor):
    """Items 1 and 3 always raise: each runs twice, then is listed with its error; the rest succeed."""
    run = run_tasks(fail_on_odd, {"a": 0, "b": 1, "c": 2, "d": 3}, executor=executor, workers=2)
    assert run.results == {"a": 0, "c": 2}
    assert run.failures == [
        TaskFailure("b", "ValueError: odd input 1", 2),
        TaskFailure("d", "ValueError: odd input 3", 2),
    ]
    assert not run.ok
    assert str(run.failures[0]) == "b: ValueError: odd input 1 (failed 2 time(s))"


@pytest.mark.parametrize("executor", LOCAL)
def test_a_transient_failure_succeeds_on_the_retry(tmp_path, executor):
    run = run_tasks(fail_first_time, [("x", str(tmp_path / "x")), ("y", str(tmp_path / "y"))], executor=executor, workers=2)
    assert run.results == {"x": "x", "y": "y"}


def test_no_retry_means_one_attempt(tmp_path):
    run = run_tasks(fail_first_time, [("x", str(tmp_path / "x"))], executor="serial", retries=0)
    assert run.failures == [TaskFailure("x", "RuntimeError: transient failure", 1)]


def test_a_dead_worker_is_retried_in_a_new_pool(tmp_path):
    """A worker that exits breaks the pool; the task (and any other in flight) runs again in a fresh one."""
    items = [("crash", str(tmp_path / "crash")), ("fine", str(tmp_path / "fine-marker"))]
    (tmp_path / "fine-marker").write_text("already tried")
    run = run_tasks(die_first_time, items, executor="process", workers=2)
    assert run.results == {"crash": "crash", "fine": "fine-marker"}


@pytest.mark.parametrize("executor", LOCAL)
def test_progress_counts_every_task_once(executor):
    calls: list[tuple[int, int]] = []
    run_tasks(fail_on_odd, [(str(i), i) for i in range(5)], executor=executor, workers=2, progress=lambda d, t: calls.append((d, t)))
    assert calls == [(d, 5) for d in range(1, 6)]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"executor": "dask"}, "--executor 'dask': allowed: process, ray, serial"),
        ({"workers": 0}, "--workers 0: must be at least 1"),
        ({"ray_address": "auto"}, "--ray-address needs --executor ray"),
    ],
)
def test_bad_settings(kwargs, message):
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        run_tasks(square, [("a", 1)], **kwargs)


def test_names_must_be_unique():
    with pytest.raises(InputError, match="task names must be unique: 'a' appears twice"):
        run_tasks(square, [("a", 1), ("a", 2)], executor="serial")


def test_executor_names():
    assert EXECUTORS == ("process", "ray", "serial")


def test_ray_missing_is_a_one_line_error(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_ray(name, *args, **kwargs):
        if name == "ray" or name.startswith("ray."):
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    with pytest.raises(InputError, match=r"--executor ray needs Ray, which is not installed: pip install 'capplan\[ray\]'"):
        run_tasks(square, [("a", 1)], executor="ray")


# ---------------------------------------------------------------------------- Ray (local instance)


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'capplan[ray]'); the Ray executor is untested")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    yield ray
    ray.shutdown()


def test_ray_gives_the_serial_results(local_ray):
    items = [(f"t{i}", i) for i in range(6)]
    assert run_tasks(square, items, executor="ray").results == run_tasks(square, items, executor="serial").results


def test_ray_retries_once_and_reports_failures_by_name(local_ray, tmp_path):
    run = run_tasks(fail_on_odd, {"a": 0, "b": 1}, executor="ray")
    assert run.results == {"a": 0}
    assert [(f.name, f.error, f.attempts) for f in run.failures] == [("b", "ValueError: odd input 1", 2)]
    transient = run_tasks(fail_first_time, [("x", str(tmp_path / "x"))], executor="ray")
    assert transient.results == {"x": "x"}


def test_ray_progress(local_ray):
    calls: list[tuple[int, int]] = []
    run_tasks(square, [(str(i), i) for i in range(4)], executor="ray", progress=lambda d, t: calls.append((d, t)))
    assert calls == [(1, 4), (2, 4), (3, 4), (4, 4)]


def test_ray_reconciles_a_directory_like_the_process_pool(local_ray, tmp_path):
    from capplan.reconcile.files import reconcile_files

    fixtures = Path(__file__).parent / "fixtures" / "reconcile"
    for name in ("clean", "stop_reason", "logprobs"):
        (tmp_path / f"{name}.jsonl").write_bytes((fixtures / f"{name}.jsonl").read_bytes())
    on_ray = reconcile_files([tmp_path], executor="ray").as_dict()
    local = reconcile_files([tmp_path], executor="process", workers=2).as_dict()
    on_ray.pop("notes"), local.pop("notes")  # they name the executor
    assert on_ray == local
