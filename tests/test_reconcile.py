"""``capplan ledger reconcile``: per-record checks, the observed ledger, mappings, exit codes.

Every fixture in ``tests/fixtures/reconcile/`` holds the replay example's record (12 prompt tokens,
two turns of 4 sampled actions, 5 tool tokens between them, turn 2 reusing the 15 positions turn 1
computed) on lines 1 and 3; line 2 breaks exactly one check.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capplan.cli.app import app
from capplan.errors import InputError
from capplan.ledger import COUNTERS, compute_ledger
from capplan.reconcile import MAPPINGS, RECORD_CHECKS, plan_records, reconcile
from capplan.reconcile.histograms import bin_index as _bins
from capplan.reconcile.histograms import bin_value as _bin_value
from capplan.reconcile.histograms import percentiles as _percentiles
from capplan.resources import bundled_names
from capplan.workload import load_workload

FIX = Path(__file__).parent / "fixtures" / "reconcile"
DROP_TRUNCATED = FIX / "seed-replay-drop-truncated.yaml"
SEED = json.loads((FIX / "clean.jsonl").read_text().splitlines()[0])


def _write(path: Path, records: list[object]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


def _record(**changes: object) -> dict:
    rec = json.loads(json.dumps(SEED))
    rec.update(changes)
    return rec


# ---------------------------------------------------------------- the observed ledger


def test_clean_fixture_is_the_planned_ledger_exactly():
    """Three forms of one record (token IDs and strings; counts and int lists; no turns and
    per-position log-probs) count to the ledger ``capplan ledger seed-replay-auto`` computes:
    prefill 12 + (21 - 15) = 18, cache hit 12 prompt + 3 action = 15, decode 3 + 3 = 6."""
    w = load_workload("seed-replay-auto")
    r = reconcile(FIX / "clean.jsonl", w)
    assert r.ok and r.records == r.records_counted == 3
    assert r.ledger.per_conversation == compute_ledger(w).per_conversation
    assert r.ledger.per_conversation["cache_hit"] == {"prompt": 12, "action": 3, "tool": 0, "total": 15}
    assert r.totals["prefill_forwarded"]["total"] == 3 * 18
    assert r.ledger.per_conversation_p95["decode_forwarded"]["total"] == 6
    stats = r.ledger.conversation_stats
    assert (stats["invocations"], stats["tool_calls"], stats["tool_wait_s"]) == (2, 1, 2.5)
    assert r.response_length["p50"] == 13  # 8 actions + 5 tool positions after the prompt
    assert all(p.status == "ok" for p in r.plan or [])


@pytest.mark.parametrize("name", bundled_names("workloads"))
def test_records_of_a_plan_reconcile_to_the_plan_exactly(tmp_path, name):
    """Records written for the 200 conversations compute_ledger samples (seed 3) count to exactly its
    per-conversation ledger: truncation, auto/explicit reuse, eviction, scorers, sft and serving alike."""
    w = load_workload(name)
    path = _write(tmp_path / "plan.jsonl", list(plan_records(w, n=200, seed=3, logprobs=False)))
    r = reconcile(path, w, plan_conversations=200)
    assert r.ledger.per_conversation == compute_ledger(w, conversations=200, seed=3).per_conversation
    expected = set()
    if w.method in ("outcome-rl", "multi-turn-rl"):
        expected.add("logprobs")  # written without log-probs, which these methods need
    if name == "seed-replay-claim16":
        expected.add("cache_hits")  # claims 16 positions where 15 were computed, on purpose
    assert {k for k, v in r.failure_counts.items() if v} == expected


def test_without_reuse_logged_every_invocation_prefills_its_input(tmp_path):
    """No cached/prefill counts: seed-replay's 12 + 21 = 33 prefill positions, no hits, with a note."""
    rec = _record()
    del rec["cached_tokens"], rec["prefill_tokens"]
    r = reconcile(_write(tmp_path / "n.jsonl", [rec]))
    assert r.ledger.per_conversation["prefill_forwarded"]["total"] == 33
    assert r.ledger.per_conversation["cache_hit"]["total"] == 0
    assert any("log neither cached_tokens nor prefill_tokens" in n for n in r.notes)


@pytest.mark.parametrize(
    ("fixture", "check", "field"),
    [
        ("well_formed", "well_formed", "line"),
        ("mask_lengths", "mask_lengths", "loss_mask"),
        ("sampled_are_actions", "sampled_are_actions", "turns[0]"),
        ("loss_classes", "loss_classes", "loss_mask"),
        ("logprobs", "logprobs", "logprobs"),
        ("turn_boundaries", "turn_boundaries", "turns[1]"),
        ("cache_hits", "cache_hits", "cached_tokens[1]"),
        ("staleness", "staleness", "policy_version"),
        ("stop_reason", "stop_reason", "stop_reason"),
        ("truncated_trained", "truncated_trained", "loss_mask"),
    ],
)
def test_each_fixture_breaks_exactly_its_check(runner, fixture, check, field):
    """Line 2 fails ``check`` on ``field``; nothing else fails; exit code 1."""
    args = ["ledger", "reconcile", str(FIX / f"{fixture}.jsonl"), "--max-staleness", "2", "-f", "json"]
    if check == "truncated_trained":
        args += ["--workload", str(DROP_TRUNCATED)]
    result = runner.invoke(app, args)
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    assert {k for k, v in doc["failure_counts"].items() if v} == {check}
    assert [(f["line"], f["check"], f["field"]) for f in doc["failures"]] == [(2, check, field)]
    assert result.stderr.startswith("check failed: line 2")
    assert f": {field}: " in result.stderr
    failed = [c["name"] for c in doc["checks"] if not c["ok"]]
    assert failed == [check]


def test_clean_fixture_passes_every_check(runner):
    result = runner.invoke(
        app, ["ledger", "reconcile", str(FIX / "clean.jsonl"), "--max-staleness", "2", "-w", str(DROP_TRUNCATED)]
    )
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    for name in RECORD_CHECKS:
        assert f"ok   {name}:" in result.stdout


def test_every_check_has_a_fixture():
    assert {p.stem for p in FIX.glob("*.jsonl")} >= set(RECORD_CHECKS) | {"clean"}


# ---------------------------------------------------------------- individual rules


@pytest.mark.parametrize(
    ("changes", "check", "message"),
    [
        ({"origin": "ppppppppppppaaaatttttaaaap"}, "mask_lengths", "26 entries for 25 tokens"),
        ({"counts": {"prompt": 12, "action": 9, "tool": 4}}, "mask_lengths", "counts.action: 9 but the origin mask has 8"),
        ({"origin": "ppppppppppppaaaatttttaaax"}, "well_formed", "position 24 is 'x'"),
        ({"loss_mask": [0] * 12 + [1] * 4 + [0] * 5 + [1, 1, 1, 2]}, "well_formed", "position 24 is 2"),
        ({"turns": [[12, 16], [21, 26]]}, "turn_boundaries", "span [21, 26) is not inside the record"),
        ({"cached_tokens": [0]}, "turn_boundaries", "needs one entry per turn: 2 turns, got 1"),
        ({"origin": "pppppppppppaaaaptttttaaaa", "loss_mask": "0000000000011110000001111",
          "turns": [[11, 15], [21, 25]], "prefill_tokens": [11, 7], "cached_tokens": [0, 14]},
         "turn_boundaries", "prompt position 15 comes after a non-prompt position (11)"),
        ({"cached_tokens": [0, 15], "prefill_tokens": [12, 5]}, "cache_hits", "prefill 5 + cached 15 = 20, but its input is 21"),
        ({"logprobs": [-0.1] * 7}, "logprobs", "7 values match neither the 8 sampled positions nor the 25"),
        ({"logprobs": None}, "logprobs", "missing; 8 sampled positions need a behaviour log-prob"),
        ({"logprobs": [-0.1] * 7 + [float("nan")]}, "logprobs", "no finite log-prob (nan"),
        ({"stop_reason": None}, "stop_reason", "missing; allowed: stop, length, tool_calls, abort"),
        ({"stop_reason": ["stop"]}, "stop_reason", "['stop'] is not one of"),
        ({"policy_version": "7"}, "staleness", "'7' is not a non-negative integer"),
        ({"prefill_tokens": [12, "6"]}, "turn_boundaries", "prefill_tokens[1]: '6' is not a non-negative integer"),
        ({"tool_wait_s": float("inf")}, "well_formed", "tool_wait_s: inf is not a number of seconds"),
        ({"_lp_offset": "x", "logprobs": [-0.1] * 25}, "well_formed", "record: cannot be read (TypeError"),
    ],
)
def test_rule_messages(tmp_path, changes, check, message):
    r = reconcile(_write(tmp_path / "t.jsonl", [_record(**changes)]))
    assert [f.check for f in r.failures] == [check], [str(f) for f in r.failures]
    assert message in f"{r.failures[0].field}: {r.failures[0].message}"


def test_sampled_action_outside_every_span(tmp_path):
    """Turn 2 claims only [22, 25): action position 21 was sampled by nobody; 7 log-probs fit the 7 sampled."""
    rec = _record(turns=[[12, 16], [22, 25]], logprobs=[-0.1] * 7, cached_tokens=[0, 15], prefill_tokens=[12, 7])
    r = reconcile(_write(tmp_path / "t.jsonl", [rec]))
    assert [(f.check, f.message) for f in r.failures] == [
        ("sampled_are_actions", "action position 21 lies outside every turn's sampled span")
    ]


def test_tool_observation_before_the_first_turn(tmp_path):
    rec = _record(
        origin="ppppppppppppttttaaaatttta", loss_mask="0000000000000000111100001",
        turns=[[16, 20], [24, 25]], cached_tokens=None, prefill_tokens=None, logprobs=[-0.1] * 5,
    )
    r = reconcile(_write(tmp_path / "t.jsonl", [rec]))
    assert [f.message for f in r.failures] == [
        "tool position 12 precedes the first turn (starts at 16): no tool was called yet"
    ]


def test_staleness_against_newest_version_so_far(tmp_path):
    """Without trainer_version the reference is the newest version seen so far: versions 5, 9, 6 with
    --max-staleness 2 fail only the third record (9 - 6 = 3); the first is 0 behind at its time."""
    recs = [_record(id=i, policy_version=v, trainer_version=None) for i, v in enumerate((5, 9, 6))]
    r = reconcile(_write(tmp_path / "t.jsonl", recs), max_staleness=2)
    assert [(f.line, f.message) for f in r.failures] == [
        (3, "version 6 is 3 behind the newest policy version so far (9); --max-staleness is 2")
    ]
    assert r.policy_versions == {"5": 1, "6": 1, "9": 1}
    assert r.staleness == {"0": 2, "3": 1}


def test_staleness_needs_a_version(tmp_path):
    r = reconcile(_write(tmp_path / "t.jsonl", [_record(policy_version=None)]), max_staleness=1)
    assert [f.message for f in r.failures] == ["missing (needed by --max-staleness)"]


def test_loss_on_tool_allowed_by_the_workload(tmp_path, write_yaml):
    """loss_on [action, tool]: training on the 5 tool positions is allowed; on the prompt it is not."""
    w = load_workload(
        write_yaml(
            """
            version: 1
            name: tool-loss
            method: multi-turn-rl
            conversation: {prompt_tokens: 12, turns: [{action_tokens: 4, tool_tokens: 5}, {action_tokens: 4}]}
            cache: {reuse: auto}
            training: {loss_on: [action, tool]}
            """
        )
    )
    ok = _record(loss_mask="0000000000001111111111111")
    bad = _record(loss_mask="0100000000001111111111111")
    r = reconcile(_write(tmp_path / "t.jsonl", [ok, bad]), w)
    assert r.ledger.per_conversation["trained"]["tool"] == 5
    assert [(f.line, f.message) for f in r.failures] == [
        (2, "1 prompt position(s) carry loss, the first at position 1; the workload trains action/tool")
    ]


def test_sft_has_no_rollout(tmp_path):
    """sft: nothing is sampled or forwarded by a rollout engine; no stop reason or log-prob is needed."""
    rec = {"counts": {"prompt": 12, "action": 8}, "origin": "p" * 12 + "a" * 8, "loss_mask": "0" * 12 + "1" * 8}
    r = reconcile(_write(tmp_path / "t.jsonl", [rec]), load_workload("sft"))
    pc = r.ledger.per_conversation
    assert r.failures_total == 0
    assert (pc["sampled"]["total"], pc["prefill_forwarded"]["total"], pc["trained"]["action"]) == (0, 0, 8)


def test_scored_follows_the_workload_scorers(tmp_path, write_yaml):
    """A reference forward scores the whole 25-position record once per kept record."""
    w = load_workload(
        write_yaml(
            """
            version: 1
            name: ref
            method: multi-turn-rl
            conversation: {prompt_tokens: 12, turns: [{action_tokens: 4, tool_tokens: 5}, {action_tokens: 4}]}
            cache: {reuse: auto}
            training: {reference_forward: true}
            """
        )
    )
    r = reconcile(FIX / "clean.jsonl", w)
    assert r.ledger.per_conversation["scored"] == {"prompt": 12, "action": 8, "tool": 5, "total": 25}
    assert r.ok


def test_malformed_lines_do_not_stop_the_run(tmp_path):
    lines = [SEED, "{broken", "", "[1, 2]", "\xff not utf-8", SEED]
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"".join((json.dumps(x) if isinstance(x, dict) else x).encode("utf-8", "surrogateescape") + b"\n" for x in lines))
    r = reconcile(path)
    assert r.records == 5 and r.records_counted == 2 and r.lines == 6
    assert [(f.line, f.check) for f in r.failures] == [(2, "well_formed"), (4, "well_formed"), (5, "well_formed")]
    assert r.failures[1].message == "not a JSON object (got list)"


@pytest.mark.parametrize(
    ("line", "depth"),
    [
        (b"{}", 1),
        (b"[[], [[]]]", 3),
        (b'[{"a": [1, {"b": null}]}]', 4),
        (b'{"id": "[[[[{{{{"}', 1),
        (b'{"id": "\\"[[", "x": ["\\\\", [2]]}', 3),  # escaped quote, escaped backslash
        (b"7", 0),
    ],
)
def test_json_depth(line, depth):
    from capplan.reconcile.readers import json_depth

    assert json_depth(line) == depth


def test_lines_deeper_than_the_bound_are_unreadable():
    """The bound is MAX_JSON_DEPTH = 512 levels, whatever the recursion limit left to the caller."""
    from capplan.reconcile.readers import MAX_JSON_DEPTH, NotJSON, decode_line

    assert MAX_JSON_DEPTH == 512
    assert isinstance(decode_line(b"[" * 512 + b"]" * 512), list)
    deeper = decode_line(b"[" * 513 + b"]" * 513)
    assert isinstance(deeper, NotJSON) and deeper.message == "not readable JSON: nested too deeply"
    assert isinstance(decode_line(b"[" * 100_000), NotJSON)  # not even closed


def test_max_errors_lists_the_first_and_counts_the_rest(runner, tmp_path):
    path = _write(tmp_path / "t.jsonl", [_record(stop_reason="eos")] * 5)
    result = runner.invoke(app, ["ledger", "reconcile", str(path), "--max-errors", "2", "-f", "csv"])
    assert result.exit_code == 1
    lines = result.stderr.splitlines()
    assert [ln.split(":")[0] for ln in lines[:2]] == ["check failed"] * 2
    assert lines[2] == "... and 3 more failure(s) not listed (--max-errors 2)"
    rows = list(csv.reader(io.StringIO(result.stdout)))
    assert rows[0] == ["scope", "counter", "token_class", "value"]
    assert ["check", "stop_reason", "failures", "5"] in rows


# ---------------------------------------------------------------- formats and mappings


def test_gzip_reads_like_plain(tmp_path):
    gz = tmp_path / "clean.jsonl.gz"
    with gzip.open(gz, "wb") as fh:
        fh.write((FIX / "clean.jsonl").read_bytes())
    assert reconcile(gz).as_dict()["per_conversation"] == reconcile(FIX / "clean.jsonl").as_dict()["per_conversation"]


@pytest.mark.parametrize("mapping", ["verl", "openrlhf", "areal"])
def test_framework_dumps_count_like_the_seed(mapping):
    """The seed record dumped by each framework: 25 recorded, 8 sampled and trained, and (no reuse
    logged) seed-replay's 33 prefill positions and 6 decode positions."""
    r = reconcile(FIX / f"{mapping}.jsonl", mapping=mapping)
    plan = compute_ledger(load_workload("seed-replay")).per_conversation
    assert r.failures_total == 0
    for counter in COUNTERS:
        assert r.ledger.per_conversation[counter] == plan[counter], counter


def test_mapping_without_stop_reason_is_noted_not_failed():
    r = reconcile(FIX / "verl.jsonl", mapping="verl")
    assert r.stop_reasons == {"(not logged)": 2}
    assert any("the verl format does not log one" in n for n in r.notes)


def test_verl_response_mask_must_match_response_ids(tmp_path):
    rec = json.loads((FIX / "verl.jsonl").read_text().splitlines()[0])
    rec["response_mask"] = rec["response_mask"][:-1]
    r = reconcile(_write(tmp_path / "v.jsonl", [rec]), mapping="verl")
    assert [(f.check, f.field, f.message) for f in r.failures] == [
        ("mask_lengths", "response_mask", "12 entries for 13 response_ids")
    ]


def test_areal_versions_give_the_policy_version_and_origin(tmp_path):
    """The oldest generated token's version (7) is the record's; a loss on an input position fails."""
    rec = json.loads((FIX / "areal.jsonl").read_text().splitlines()[0])
    rec["loss_mask"][0][16] = 1  # position 16 is a tool observation (version -1)
    r = reconcile(_write(tmp_path / "a.jsonl", [rec]), mapping="areal")
    assert r.policy_versions == {"7": 1}
    assert [f.message for f in r.failures] == [
        "1 tool position(s) carry loss, the first at position 16; the workload trains action"
    ]


def test_unknown_mapping():
    with pytest.raises(InputError, match="unknown mapping 'slime'; allowed: capplan, verl, openrlhf, areal"):
        reconcile(FIX / "clean.jsonl", mapping="slime")
    assert list(MAPPINGS) == ["capplan", "verl", "openrlhf", "areal"]


def test_parquet(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rows = [json.loads(line) for line in (FIX / "clean.jsonl").read_text().splitlines()[:1]] * 3
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "t.parquet")
    r = reconcile(tmp_path / "t.parquet", load_workload("seed-replay-auto"))
    assert r.ok and r.records == 3
    bad = rows[:1] + [_record(stop_reason="eos")]
    pq.write_table(pa.Table.from_pylist(bad), tmp_path / "b.parquet")
    assert [str(f).split(":")[0] for f in reconcile(tmp_path / "b.parquet").failures] == ["row 2 (id seed-1)"]


def test_parquet_without_pyarrow(tmp_path, monkeypatch):
    import builtins

    real = builtins.__import__

    def no_pyarrow(name, *args, **kwargs):
        if name.startswith("pyarrow"):
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pyarrow)
    path = tmp_path / "t.parquet"
    path.write_bytes(b"PAR1" + b"\0" * 16)
    with pytest.raises(InputError, match=r"reading Parquet needs pyarrow, which is not installed: pip install 'capplan\[parquet\]'"):
        reconcile(path)


# ---------------------------------------------------------------- the plan, the command line


def test_plan_mismatch_fails(runner):
    """Against seed-replay (no reuse) the logged 15 cache hits were planned as 0: no tolerance covers it."""
    result = runner.invoke(app, ["ledger", "reconcile", str(FIX / "clean.jsonl"), "-w", "seed-replay", "-f", "json"])
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    rows = {(p["counter"], p["token_class"]): p for p in doc["plan"]}
    assert rows[("cache_hit", "total")]["relative_error"] is None
    assert rows[("prefill_forwarded", "total")]["relative_error"] == pytest.approx((18 - 33) / 33)
    assert rows[("recorded", "total")]["status"] == "ok"
    assert "check failed: matches_plan_within_tolerance: " in result.stderr


def test_tolerance(tmp_path):
    """Two records with 8 and 9 actions against the plan's 8. Decode forwards 6 and 7 positions (each
    turn's last token is never forwarded): mean 6.5 against 6, +8.3%, the largest difference (sampled
    8.5 against 8 is +6.25%). It fails at 8% and passes at 9%."""
    longer = _record(
        token_ids=list(range(26)), origin="ppppppppppppaaaatttttaaaaa", loss_mask="0000000000001111000001111" + "1",
        turns=[[12, 16], [21, 26]], logprobs=[-0.1] * 9,
    )
    path = _write(tmp_path / "t.jsonl", [SEED, longer])
    w = load_workload("seed-replay-auto")
    failing = reconcile(path, w, tolerance=0.08)
    assert [(p.counter, p.token_class) for p in failing.plan or [] if p.status == "FAIL"] == [
        ("decode_forwarded", "action"),
        ("decode_forwarded", "total"),
    ]
    assert reconcile(path, w, tolerance=0.09).ok


def test_unlogged_reuse_is_not_compared(tmp_path):
    """verl logs no cache counts: against seed-replay-auto, prefill and cache-hit rows are 'not logged'."""
    r = reconcile(FIX / "verl.jsonl", load_workload("seed-replay-auto"), mapping="verl")
    status = {(p.counter, p.token_class): p.status for p in r.plan or []}
    assert status[("cache_hit", "total")] == "not logged"
    assert status[("sampled", "total")] == "ok"
    assert r.ok


def test_json_contract_extends_the_ledger(runner):
    ledger = json.loads(runner.invoke(app, ["ledger", "seed-replay-auto", "-f", "json"]).stdout)
    result = runner.invoke(app, ["ledger", "reconcile", str(FIX / "clean.jsonl"), "-f", "json"])
    doc = json.loads(result.stdout)
    assert set(ledger) <= set(doc)
    for scope in ("per_conversation", "per_step", "per_conversation_p50", "per_conversation_p95"):
        assert list(doc[scope]) == list(COUNTERS)
        assert all(set(v) == {"prompt", "action", "tool", "total"} for v in doc[scope].values())
    assert doc["per_conversation"]["prefill_forwarded"] == ledger["per_conversation"]["prefill_forwarded"]
    assert doc["ok"] is True and doc["failures"] == [] and doc["failures_not_listed"] == 0


def test_table_output(runner, tmp_path):
    out = tmp_path / "report.txt"
    result = runner.invoke(app, ["ledger", "reconcile", str(FIX / "clean.jsonl"), "-w", "seed-replay-auto", "-o", str(out)])
    assert result.exit_code == 0, result.output
    text = " ".join(out.read_text().split())
    assert "observed per conversation [positions], mean of 3 counted records" in text
    assert "Against the plan of seed-replay-auto (tolerance 5.0%)" in text
    assert "Stop reasons: stop: 3 (100.0%)" in text


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: d / "missing.jsonl", "missing.jsonl: no such file"),
        (lambda d: _write(d / "empty.jsonl", []), "empty.jsonl: no records"),
        (lambda d: (d / "bad.jsonl.gz").write_bytes(b"\x1f\x8b\x08\x00garbage") and d / "bad.jsonl.gz", "unreadable after line"),
    ],
)
def test_unreadable_input_exits_2(runner, tmp_path, make, message):
    path = make(tmp_path)
    result = runner.invoke(app, ["ledger", "reconcile", str(path)])
    assert result.exit_code == 2
    assert result.stderr.startswith("Error: ") and message in result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_bad_workload_exits_2(runner):
    result = runner.invoke(app, ["ledger", "reconcile", str(FIX / "clean.jsonl"), "-w", "no-such-workload"])
    assert result.exit_code == 2


def test_progress_is_reported(tmp_path):
    calls = []
    path = tmp_path / "many.jsonl"
    shutil.copy(FIX / "clean.jsonl", path)
    with path.open("a") as fh:
        fh.write((FIX / "clean.jsonl").read_text() * 3000)
    r = reconcile(path, progress=lambda done, total: calls.append((done, total)))
    size = path.stat().st_size
    assert r.records == 9003 and len(calls) == 3 and calls[-1] == (size, size)
    assert all(0 < d <= size for d, _ in calls)


def test_no_progress_bar_off_a_terminal(tmp_path):
    """Under pytest standard error is not a terminal: no bar, even for a file past the size threshold."""
    from capplan.cli.reconcile_cmd import PROGRESS_MIN_BYTES, _progress

    big = tmp_path / "big.jsonl"
    with big.open("wb") as fh:
        fh.truncate(PROGRESS_MIN_BYTES)
    with _progress(big) as update:
        assert update is None


# ---------------------------------------------------------------- histograms


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 2047), min_size=1, max_size=300), st.sampled_from([0, 50, 90, 95, 99, 100]))
def test_percentiles_are_exact_below_2048(values, q):
    """Below 2,048 every value has its own bin, so the binned percentile is numpy's (linear)."""
    hist = np.bincount(_bins(np.array(values, dtype=np.int64)), minlength=4096)
    assert _percentiles(hist, (q,))[0] == pytest.approx(np.percentile(values, q))


@settings(max_examples=60, deadline=None)
@given(st.integers(2048, 2**40))
def test_bins_above_2048_are_within_2_to_the_minus_10(value):
    rep = float(_bin_value(_bins(np.array([value], dtype=np.int64)))[0])
    assert abs(rep - value) / value < 2**-10
