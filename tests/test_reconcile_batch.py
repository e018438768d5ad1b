"""The batch path of ``capplan ledger reconcile`` equals the record-by-record path; several files at once.

The batch path (:mod:`capplan.reconcile.batch`) must give exactly the reconciliation the
record-by-record checker gives: the same counters, histograms, failures (in the same order, with
the same messages) and notes. It is compared on every bundled workload's planned records, on every
fixture, and on records broken at random, as JSONL and as Parquet.
"""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path

import pytest

from capplan.cli.app import app
from capplan.errors import InputError
from capplan.reconcile import plan_records, reconcile
from capplan.reconcile.columns import count_numbers, parse_int_lists
from capplan.reconcile.files import expand_inputs, reconcile_files
from capplan.resources import bundled_names
from capplan.workload import load_workload

FIX = Path(__file__).parent / "fixtures" / "reconcile"
SEED = json.loads((FIX / "clean.jsonl").read_text().splitlines()[0])


def _same(path: Path, workload=None, **options) -> dict:
    batched = reconcile(path, workload, batches=True, **options).as_dict()
    one_by_one = reconcile(path, workload, batches=False, **options).as_dict()
    assert batched == one_by_one
    return batched


def _write_jsonl(path: Path, records: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


def _write_parquet(path: Path, records: list[dict]) -> Path | None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    try:
        table = pa.Table.from_pylist(records)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError):
        return None  # records of mixed types have no Parquet schema
    pq.write_table(table, path)
    return path


@pytest.mark.parametrize("name", bundled_names("workloads"))
def test_batches_equal_records_on_every_bundled_workload(tmp_path, name):
    """80 planned records of each bundled workload (with log-probs, so most pass every check)."""
    w = load_workload(name)
    records = list(plan_records(w, n=80, seed=5))
    doc = _same(_write_jsonl(tmp_path / "plan.jsonl", records), w, plan_conversations=80)
    assert doc["records"] == 80
    parquet = _write_parquet(tmp_path / "plan.parquet", records)
    if parquet is not None:
        _same(parquet, w, plan_conversations=80)


@pytest.mark.parametrize("fixture", sorted(p.name for p in FIX.glob("*.jsonl")))
@pytest.mark.parametrize("max_staleness", [None, 0, 2])
def test_batches_equal_records_on_every_fixture(fixture, max_staleness):
    mapping = fixture.removesuffix(".jsonl") if fixture.removesuffix(".jsonl") in ("verl", "openrlhf", "areal") else "capplan"
    _same(FIX / fixture, max_staleness=max_staleness, mapping=mapping)
    _same(FIX / fixture, load_workload(str(FIX / "seed-replay-drop-truncated.yaml")), max_staleness=max_staleness, mapping=mapping)


def _mutate(rng: random.Random, record: dict) -> dict:
    """Break (or merely vary) one field of a record, chosen at random."""
    rec = copy.deepcopy(record)
    choice = rng.randrange(16)
    if choice == 0:
        rec.pop(rng.choice(list(rec)))
    elif choice == 1:
        rec["turns"] = None  # derived from the action runs
    elif choice == 2:
        rec[rng.choice(["cached_tokens", "prefill_tokens"])] = rng.choice([None, [0], [0, 16], [12, 9]])
    elif choice == 3:
        rec["policy_version"] = rng.choice([None, 0, 5, 9, -1, "7", True])
    elif choice == 4:
        rec["trainer_version"] = rng.choice([None, 0, 9, 12])
    elif choice == 5:
        rec["stop_reason"] = rng.choice([None, "length", "abort", "eos"])
    elif choice == 6:
        rec["tool_wait_s"] = rng.choice([None, 0, 2, 1.25, -1.0, 2e9])
    elif choice == 7:
        rec["logprobs"] = rng.choice([None, [-0.1] * 7, [-0.1] * 25, [1e308] * 8, [-1.5e-05] * 8, [-0.1] * 7 + [None]])
    elif choice == 8:
        rec["loss_mask"] = rng.choice(["0000000000001111000001111", "1000000000001111000001111", "000000000000111100000111x"])
    elif choice == 9:
        rec["origin"] = rng.choice(["ppppppppppppaaaatttttaaaa", "ppppppppppppaaaaatttttaaa", [0] * 12 + [1] * 4 + [2] * 5 + [1] * 4])
    elif choice == 10:
        rec["counts"] = rng.choice([{"prompt": 12, "action": 8, "tool": 5}, {"prompt": 12}, {"prompt": 12, "action": 8, "tool": 6}])
    elif choice == 11:
        rec["turns"] = rng.choice([[[12, 16], [21, 25]], [[12, 16]], [[12, 16], [20, 25]], [[12, 16, 1], [21, 25]], []])
    elif choice == 12:
        rec["_lp_offset"] = 0
    elif choice == 13:
        rec["token_ids"] = rng.choice([list(range(25)), list(range(24)), None])
    return rec


@pytest.mark.parametrize("seed", range(6))
def test_batches_equal_records_on_broken_records(tmp_path, seed):
    """Records with zero, one or two random defects, blank and non-JSON lines, shuffled together."""
    rng = random.Random(seed)
    pool = [SEED] + [json.loads(line) for line in (FIX / "clean.jsonl").read_text().splitlines()]
    lines: list = []
    for i in range(400):
        rec = dict(rng.choice(pool), id=i)
        for _ in range(rng.choice([0, 0, 1, 2])):
            rec = _mutate(rng, rec)
        lines.append(rec if rng.random() > 0.03 else rng.choice(["", "{not json", "[1, 2]"]))
    path = _write_jsonl(tmp_path / "mixed.jsonl", lines)
    for workload in (None, load_workload("seed-replay-auto"), load_workload("sft")):
        _same(path, workload, max_staleness=rng.choice([None, 1]), max_errors=50)
    parquet = _write_parquet(tmp_path / "mixed.parquet", [r for r in lines if isinstance(r, dict)])
    if parquet is not None:
        _same(parquet, load_workload("seed-replay-auto"), max_staleness=1)


@pytest.mark.parametrize(
    ("raws", "nested", "counts", "values"),
    [
        ([b"[0,44]", b"", b"[]", b"[7]"], False, [2, 0, 0, 1], [0, 44, 7]),
        ([b"[[40,45],[64,79]]", b"", b"[]", b"[[0,0]]"], True, [2, 0, 0, 1], [40, 45, 64, 79, 0, 0]),
        ([b"[ 3 , 4 ]", b"null"], False, [2, 0], [3, 4]),
    ],
)
def test_raw_integer_lists(raws, nested, counts, values):
    import msgspec
    import numpy as np

    present, exact, offsets, parsed = parse_int_lists([msgspec.Raw(r) for r in raws], nested)
    assert np.diff(offsets).tolist() == counts and parsed.tolist() == values
    assert exact.all() and present.tolist() == [r not in (b"", b"null") for r in raws]


@pytest.mark.parametrize(
    ("raw", "count", "exact"),
    [(b"[-0.1,-2.5e-05,3]", 3, True), (b"[]", 0, True), (b"[1e400]", 1, False), (b"[1,[2]]", 2, False), (b"null", -1, True)],
)
def test_raw_number_counts(raw, count, exact):
    """1e400 overflows to inf (not finite), so it is left to the record-by-record checker."""
    import msgspec

    counted, read = count_numbers([msgspec.Raw(raw)], integers=False)
    assert (int(counted[0]), bool(read[0])) == (count, exact)


# ---------------------------------------------------------------------------- several files


@pytest.fixture
def log_dir(tmp_path):
    """Two files: clean.jsonl (3 clean records) and stop_reason.jsonl (line 2 fails stop_reason)."""
    folder = tmp_path / "runs"
    folder.mkdir()
    for name in ("clean", "stop_reason"):
        (folder / f"{name}.jsonl").write_bytes((FIX / f"{name}.jsonl").read_bytes())
    (folder / "notes.txt").write_text("not a log")
    return folder


@pytest.mark.parametrize("executor", ["serial", "process"])
def test_a_directory_merges_to_the_concatenated_file(tmp_path, log_dir, executor):
    """The merged counters equal those of one file holding both files' lines one after the other."""
    both = tmp_path / "both.jsonl"
    both.write_bytes((log_dir / "clean.jsonl").read_bytes() + (log_dir / "stop_reason.jsonl").read_bytes())
    merged = reconcile_files([log_dir], executor=executor, workers=2).as_dict()
    whole = reconcile(both).as_dict()
    for key in ("per_conversation", "per_conversation_p50", "per_conversation_p95", "totals", "failure_counts",
                "stop_reasons", "policy_versions", "response_length", "records", "records_counted", "lines"):
        assert merged[key] == whole[key], key
    assert [(f["file"], f["line"], f["check"]) for f in merged["failures"]] == [(str(log_dir / "stop_reason.jsonl"), 2, "stop_reason")]
    assert [f["file"] for f in merged["files"]] == [str(log_dir / "clean.jsonl"), str(log_dir / "stop_reason.jsonl")]
    assert merged["files_failed"] == []


def test_expand_inputs(log_dir):
    assert expand_inputs([log_dir]) == [log_dir / "clean.jsonl", log_dir / "stop_reason.jsonl"]
    assert expand_inputs([str(log_dir / "s*.jsonl")]) == [log_dir / "stop_reason.jsonl"]
    assert expand_inputs([log_dir / "clean.jsonl", log_dir]) == [log_dir / "clean.jsonl", log_dir / "stop_reason.jsonl"]
    with pytest.raises(InputError, match=r"x\*.jsonl: no file matches this pattern"):
        expand_inputs([str(log_dir / "x*.jsonl")])
    with pytest.raises(InputError, match="missing.jsonl: no such file"):
        expand_inputs([log_dir / "missing.jsonl"])


def test_cli_names_file_and_line_of_each_failure(runner, log_dir):
    result = runner.invoke(app, ["ledger", "reconcile", str(log_dir / "*.jsonl"), "--workers", "2", "-f", "json"])
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith(f"check failed: {log_dir / 'stop_reason.jsonl'} line 2 (id seed-2): stop_reason: ")
    doc = json.loads(result.stdout)
    assert doc["records"] == 6 and doc["notes"][0] == "2 file(s) read on process (2 worker(s))"


def test_an_unreadable_file_is_reported_not_dropped(runner, log_dir):
    (log_dir / "empty.jsonl").write_text("")
    result = runner.invoke(app, ["ledger", "reconcile", str(log_dir), "--executor", "serial", "-f", "json"])
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert doc["ok"] is False
    assert doc["files_failed"] == [
        {"file": str(log_dir / "empty.jsonl"), "error": f"InputError: {log_dir / 'empty.jsonl'}: no records "
         "(an empty file cannot show that a pipeline works)", "attempts": 2}
    ]
    assert f"file failed: {log_dir / 'empty.jsonl'}: InputError" in result.stderr


def test_one_file_is_reported_as_before(runner):
    """One file named as a file: no per-file keys, the JSON of the single-file report."""
    result = runner.invoke(app, ["ledger", "reconcile", str(FIX / "clean.jsonl"), "-f", "json"])
    assert result.exit_code == 0
    assert "files" not in json.loads(result.stdout)
