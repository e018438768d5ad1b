"""The simulator's fast paths give the previous paths' results, and its memory follows the work in flight.

The hot loop was reworked for speed (one :class:`capplan.sim.conversations.Sequence` per
conversation in flight, helpers written inline, a heap of its own for the ends of runs) and for
memory (compact per-conversation columns, the trajectory log streamed to disk). None of it may
move a number: ``tests/test_golden.py`` pins whole outputs, and the figures below were produced
by the code before the rework (commit ``a1a3b04``), run on the same inputs. No test here times
anything (``benchmarks/bench_simulate.py`` does).
"""

from __future__ import annotations

import gc
import json

import pytest

import capplan.sim.output as sim_output
from capplan.hardware import load_hardware
from capplan.sim import SimConfig, simulate, trajectory_records, write_trajectories
from capplan.workload import load_workload

pytestmark = pytest.mark.usefixtures("assumed_engine", "pinned_framework")

PINNED_KEYS = (
    "completed_trajectories", "accepted_trajectories", "engine_steps", "engine_forwarded_tokens", "preemptions",
    "retained_kv_evictions", "simulated_s", "step_time_s",
)
"""Summary figures compared with the pre-rework code's."""


@pytest.mark.parametrize(
    "workload,hardware,kw,expected",
    [
        # multi-turn with tool waits, KV retained during waits (evictions), prefix reuse
        ("agentic-tool-rl", "h100-sxm", dict(inference_replicas=4, steps=3, mode="sync"),
         (768, 768, 45467, 18331538, 11, 1315, 1050.321469117242, 355.83505463154086)),
        ("agentic-tool-rl", "h100-sxm", dict(inference_replicas=4, steps=3, mode="async", max_staleness=1),
         (1014, 768, 34090, 48957652, 71, 5452, 1173.1344405692141, 436.3652894511106)),
        # long reasoning on a sliding-window model: window crossings and preemptions
        ("reasoning-rl-olmo3-7b", "h100-sxm", dict(inference_replicas=4, steps=2, mode="sync"),
         (1024, 1024, 841087, 21995395, 2601, 0, 13963.047962780185, 6953.646613069137)),
        ("reasoning-rl-olmo3-7b", "h100-sxm", dict(inference_replicas=4, steps=2, mode="async", max_staleness=1),
         (1114, 1024, 789011, 25974138, 4421, 0, 13199.151577631355, 5806.357008024277)),
        # a teacher scores each finished record on the same replica
        ("distillation", "h100-sxm", dict(inference_replicas=2, steps=2, mode="sync"),
         (512, 512, 28570, 2460038, 0, 0, 559.4905256113209, 271.6112546875552)),
        ("distillation", "l4", dict(inference_replicas=2, steps=2, mode="async", max_staleness=0),
         (512, 512, 97131, 3396868, 1059, 0, 10610.606940672102, 4746.672223134068)),
    ],
)
def test_summary_equals_the_pre_rework_code(workload, hardware, kw, expected):
    """Bundled RL workloads, sync and async: the figures of :data:`PINNED_KEYS` are exactly (bit
    for bit, floats included) what commit ``a1a3b04``'s simulator gave for the same inputs:
    ``simulate(load_workload(w), load_hardware(hw), SimConfig(**kw))`` under this file's
    ``assumed_engine`` and ``pinned_framework`` fixtures (a fixed engine profile and the RL
    framework terms of that time, so a refit of either does not move them), run with that commit's ``capplan`` on ``PYTHONPATH``. A deliberate change of the
    pricing model moves them as it moves the golden files; otherwise they must hold. (agentic-tool-rl's
    forwarded tokens moved by one position per GRPO sibling (672 and 896, its times by 0.001%) when a sibling's shared
    prompt began forwarding its last position again, as vLLM does on a full prefix hit.)"""
    r = simulate(load_workload(workload), load_hardware(hardware), SimConfig(**kw))
    assert tuple(r.summary[k] for k in PINNED_KEYS) == expected


@pytest.mark.parametrize(
    "workload,hardware,kw",
    [
        ("agentic-tool-rl", "h100-sxm", dict(inference_replicas=4, steps=4, mode="async", max_staleness=1)),
        ("agentic-tool-rl", "h100-sxm", dict(inference_replicas=3, steps=3, mode="sync", chunk_conversations=100)),
        ("distillation", "l4", dict(inference_replicas=2, steps=2, mode="async", max_staleness=0)),
        ("reasoning-rl-olmo3-7b", "h100-sxm", dict(inference_replicas=4, steps=2, mode="async", sampling="oversample")),
    ],
)
def test_streamed_trajectories_equal_the_in_memory_records(tmp_path, workload, hardware, kw):
    """``simulate(..., trajectories=path)`` writes, during the run, exactly the bytes
    :func:`write_trajectories` writes from the finished result (records by end time, verdicts
    included), and streaming changes nothing else in the result."""
    w, hw, cfg = load_workload(workload), load_hardware(hardware), SimConfig(**kw)
    in_memory = simulate(w, hw, cfg)
    streamed = simulate(w, hw, cfg, trajectories=tmp_path / "streamed.jsonl")
    written = write_trajectories(in_memory, w, tmp_path / "after.jsonl")
    text = (tmp_path / "streamed.jsonl").read_text()
    assert text == written.read_text()
    lines = text.splitlines()
    assert len(lines) == in_memory.summary["completed_trajectories"] > 0
    dumps = json.JSONEncoder(separators=(",", ":")).encode
    assert lines == [dumps(record) for record in trajectory_records(in_memory, w)]
    assert streamed.as_dict() == in_memory.as_dict()


def test_streamed_trajectories_hold_only_the_work_in_flight(tmp_path, monkeypatch):
    """While streaming, ended trajectories wait in memory only until the trainer's verdict: at
    most ``(K + 2) x conversations_per_step`` = 3 x 256 = 768 at once for async K = 1 (the gate
    keeps ``K + 1`` steps of groups generating, plus the batch being judged), far fewer than the
    run completes."""
    most = {"pending": 0}
    ended = sim_output.TrajectoryStream.ended

    def spy(self, seq):  # noqa: ANN001
        ended(self, seq)
        most["pending"] = max(most["pending"], len(self.pending))

    monkeypatch.setattr(sim_output.TrajectoryStream, "ended", spy)
    w = load_workload("agentic-tool-rl")
    r = simulate(w, load_hardware("h100-sxm"), SimConfig(inference_replicas=4, steps=8, mode="async", max_staleness=1),
                 trajectories=tmp_path / "t.jsonl")
    bound = 3 * w.volume.conversations_per_step
    assert 0 < most["pending"] <= bound
    assert r.summary["completed_trajectories"] > 2 * bound
    assert sum(1 for _ in open(tmp_path / "t.jsonl")) == r.summary["completed_trajectories"]


def test_no_conversation_objects_outlive_the_run():
    """After a run the result keeps compact columns only: no
    :class:`~capplan.sim.conversations.Sequence` survives, and of the drawn chunks (their per-turn
    lists) at most the last, partly dispatched one is kept."""
    r = simulate(load_workload("agentic-tool-rl"), load_hardware("h100-sxm"),
                 SimConfig(inference_replicas=2, steps=2, chunk_conversations=256))
    gc.collect()
    alive = [o for o in gc.get_objects() if type(o).__name__ == "Sequence" and type(o).__module__ == "capplan.sim.conversations"]
    assert alive == []
    assert r.table is not None and len(r.table.chunks) <= 1 and r.table.chunks_drawn >= 2
    assert r.table.count == len(r.table.end_s) == len(r.table.outcome)


def test_trajectory_file_that_exists_is_refused_before_the_run(tmp_path):
    """Streaming opens the file first: an existing file without ``force`` fails before any work."""
    from capplan.errors import OutputExistsError

    path = tmp_path / "t.jsonl"
    path.write_text("keep\n")
    with pytest.raises(OutputExistsError, match="exists"):
        simulate(load_workload("seed-replay-auto"), load_hardware("h100-sxm"), SimConfig(steps=1),
                 model="llama-3.1-8b", trajectories=path)
    assert path.read_text() == "keep\n"
