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
    """Break (or merely vary) one field of a record, chosen at random (the hardening cases among
    them: a trainer version older than the policy version, positive log-probs at sampled positions
    or elsewhere, control characters in ids)."""
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
        rec["logprobs"] = rng.choice([
            None, [-0.1] * 7, [-0.1] * 25, [1e308] * 8, [-1.5e-05] * 8, [-0.1] * 7 + [None],
            [-0.1] * 7 + [0.5], [0.0] * 8, [0.0] * 12 + [-0.1] * 4 + [0.5] * 5 + [-0.1] * 4,
            [0.0] * 12 + [-0.1] * 3 + [2.0] + [0.0] * 5 + [-0.1] * 4,
        ])
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
    elif choice == 14:
        rec["id"] = rng.choice(["x\x1b[2K\r\nok   all checks passed\n", "\u202eevil", "caf\u00e9"])
    elif choice == 15:
        version = rec.get("policy_version")
        rec["trainer_version"] = (version if type(version) is int else 7) - rng.choice([1, 0, -1])  # older, equal, newer
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
    ("raws", "nested", "exact", "values"),
    [
        ([b"555", b"[1,2]"], False, [False, True], [1, 2]),  # a number is not an array of one
        ([b"5", b"[1,2]"], False, [False, True], [1, 2]),
        ([b"[16]", b"[[1,2]]"], True, [False, True], [1, 2]),  # a number where pairs belong
        ([b"[[1,2],3]", b"[[4,5]]"], True, [False, True], [4, 5]),
        ([b"[[1,2,3]]", b"[[4,5]]"], True, [False, True], [4, 5]),
    ],
)
def test_raw_integer_lists_not_read_exactly(raws, nested, exact, values):
    """A value that is not an array of integers (of pairs) is not exact, and the values of the
    others stay in their places."""
    import msgspec

    _present, read, _offsets, parsed = parse_int_lists([msgspec.Raw(r) for r in raws], nested)
    assert read.tolist() == exact and parsed.tolist() == values


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


# ---------------------------------------------------------------------------- the hardening cases
#
# Each case is a file built to break what the record-by-record reader and checks were hardened
# against. The batch path must give exactly the record-by-record report (failures with their
# lines and messages, counters, lines read); each test also checks the failures are there, so
# that "equal" cannot mean "equally blind".


def _seed(i: int, **changes: object) -> dict:
    rec = copy.deepcopy(SEED)
    rec["id"] = f"r{i}"
    rec.update(changes)
    return rec


def _failed(doc: dict, check: str) -> list[int]:
    """Lines (rows) of the listed failures of ``check``."""
    return [f.get("line", f.get("row")) for f in doc["failures"] if f["check"] == check]


@pytest.fixture
def small_batches(monkeypatch):
    """Batches of 16 records and 64-byte blocks, so a few hundred records cross many batch and
    block boundaries (Parquet: batches of 8 rows in the record-by-record path, of 16 in the batch
    path, which reads a row group that breaks in batches of 8 too)."""
    import capplan.reconcile.batch as batch
    import capplan.reconcile.readers as readers

    monkeypatch.setattr(batch, "BATCH_RECORDS", 16)
    monkeypatch.setattr(batch, "PARQUET_CHECK_ROWS", 16)
    monkeypatch.setattr(readers, "BLOCK_BYTES", 64)
    monkeypatch.setattr(readers, "GZIP_BLOCK_BYTES", 64)
    monkeypatch.setattr(readers, "PARQUET_BATCH_ROWS", 8)


@pytest.mark.parametrize("max_staleness", [None, 3])
def test_negative_staleness(tmp_path, small_batches, max_staleness):
    """A trainer_version older than the policy_version fails staleness (lines 5 and 33: versions 9
    against 4, 8 against 7); a record without a trainer_version is measured against the newest
    version so far, never behind."""
    records = [_seed(i) for i in range(40)]
    records[4].update(policy_version=9, trainer_version=4)
    records[32].update(policy_version=8, trainer_version=7)
    records[20].pop("trainer_version")
    doc = _same(_write_jsonl(tmp_path / "r.jsonl", records), max_staleness=max_staleness)
    assert _failed(doc, "staleness") == [5, 33]
    assert doc["records_failed"] == 2
    doc = _same(_write_parquet(tmp_path / "r.parquet", records), max_staleness=max_staleness)
    assert _failed(doc, "staleness") == [5, 33]


POSITIVE_LOGPROBS = [
    # (raw JSON of logprobs, the record fails): one per sampled position (8), or one per position (25)
    ("[-0.1,-0.1,-0.1,-0.1,-0.1,-0.1,-0.1,2.5]", True),
    ("[1,-0.1,-0.1,-0.1,-0.1,-0.1,-0.1,-0.1]", True),
    ("[-0.1,-0.1,-0.1,1e-5,-0.1,-0.1,-0.1,-0.1]", True),
    ("[-0.1,-0.1,-0.1,0.000001E+2,-0.1,-0.1,-0.1,-0.1]", True),
    ("[0,0.0,0e5,-0.0,0E-3,-0,0.000,-0.1]", False),  # zeros are log-probs of probability 1
    ("[-0.1,-0.1,-0.1,-0.1,-0.1,-0.1,-0.1,-1e-05]", False),
    ("[ -0.1, -0.1 , -0.1,-0.1,-0.1,-0.1,-0.1, 0.5 ]", True),  # spaces: read the slow way
    # one per position: only the sampled positions (12-15, 21-24) are checked
    ("[" + ",".join(["0.7"] * 12 + ["-0.1"] * 4 + ["3"] * 5 + ["-0.1"] * 4) + "]", False),
    ("[" + ",".join(["0.0"] * 12 + ["-0.1"] * 3 + ["0.25"] + ["0.0"] * 5 + ["-0.1"] * 4) + "]", True),
]


@pytest.mark.parametrize(("raw", "fails"), POSITIVE_LOGPROBS, ids=[f"lp{i}" for i in range(len(POSITIVE_LOGPROBS))])
def test_positive_logprobs(tmp_path, small_batches, raw, fails):
    """Positive log-probs at sampled positions fail; zeros, negative exponents and positive values
    at positions nobody sampled do not. The record sits among clean ones, on line 7."""
    lines = [json.dumps(_seed(i)) for i in range(30)]
    rec = _seed(6)
    rec.pop("logprobs")
    lines[6] = json.dumps(rec)[:-1] + ', "logprobs": ' + raw + "}"
    doc = _same(_write_jsonl(tmp_path / "r.jsonl", lines))
    assert _failed(doc, "logprobs") == ([7] if fails else [])
    assert json.loads(lines[6])["logprobs"]  # the line is valid JSON
    records = [json.loads(line) for line in lines]
    doc = _same(_write_parquet(tmp_path / "r.parquet", records))
    assert _failed(doc, "logprobs") == ([7] if fails else [])


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize(
    ("where", "depth", "unreadable"),
    [
        ("extra", 100_000, True),  # past the interpreter's recursion limit
        ("extra", 600, True),  # past MAX_JSON_DEPTH (512), within the recursion limit: decoders accept it
        ("extra", 511, False),  # 511 + the record's object = 512 levels
        ("extra", 512, True),
        ("id", 700, True),
        ("turns", 600, True),
        ("logprobs", 2000, True),
    ],
)
def test_deep_nesting(tmp_path, small_batches, where, depth, unreadable):
    """A line nested deeper than MAX_JSON_DEPTH is one failed record, "nested too deeply", at any
    depth of the caller's stack; one within it is read (and fails whatever check its value fails)."""
    lines = [json.dumps(_seed(i)) for i in range(20)]
    rec = _seed(9)
    rec.pop(where, None)
    lines[9] = json.dumps(rec)[:-1] + f', "{where}": {_deep(depth)}' + "}"
    doc = _same(_write_jsonl(tmp_path / "r.jsonl", lines))
    deep = [f for f in doc["failures"] if f["message"] == "not readable JSON: nested too deeply"]
    assert [f["line"] for f in deep] == ([10] if unreadable else [])
    assert doc["records"] == 20 and doc["lines"] == 20
    if not unreadable:
        assert doc["records_failed"] == 0 and doc["records_counted"] == 20


def test_deep_nesting_does_not_depend_on_the_stack(tmp_path):
    """A 600-deep line is unreadable whether reconcile is called at the top of the stack or 300
    frames down (the json module alone would read it at the top and fail at the bottom)."""
    lines = [json.dumps(_seed(0)), json.dumps(_seed(1))[:-1] + f', "x": {_deep(600)}' + "}"]
    path = _write_jsonl(tmp_path / "r.jsonl", lines)

    def nested(frames: int, batches: bool) -> dict:
        return nested(frames - 1, batches) if frames else reconcile(path, batches=batches).as_dict()

    docs = [nested(frames, batches) for frames in (0, 300) for batches in (True, False)]
    assert all(doc == docs[0] for doc in docs)
    assert [f["message"] for f in docs[0]["failures"]] == ["not readable JSON: nested too deeply"]


def test_brackets_inside_strings_are_not_nesting(tmp_path, small_batches):
    """An id of 2,000 brackets is one string: the record is read and counted."""
    lines = [json.dumps(_seed(0)), json.dumps(_seed(1, id="[" * 1000 + "{" * 1000, note=["]" * 3000]))]
    doc = _same(_write_jsonl(tmp_path / "r.jsonl", lines))
    assert doc["records_counted"] == 2 and doc["failures"] == []


def _gzip_with_flushes(lines: list[bytes], every: int) -> tuple[bytes, list[int]]:
    """A gzip file of ``lines`` with a full flush every ``every`` lines; returns it and the byte
    offset after each flush (where a new deflate block starts, byte-aligned)."""
    import zlib

    compressor = zlib.compressobj(wbits=31)
    data, marks = b"", []
    for k in range(0, len(lines), every):
        data += compressor.compress(b"".join(lines[k:k + every])) + compressor.flush(zlib.Z_FULL_FLUSH)
        marks.append(len(data))
    return data + compressor.flush(), marks


@pytest.mark.parametrize("batch_records", [16, 2048])
@pytest.mark.parametrize("damage", ["cut-0.3", "cut-0.7", "cut-0.999", "bad-block", "bad-crc"])
def test_truncated_or_corrupt_gzip(tmp_path, monkeypatch, batch_records, damage):
    """The lines before the break are counted; the break is one failed record on the next line,
    naming the file and the byte, with the message of the record-by-record reader. A corrupt
    deflate block (block type 3, reserved) breaks the stream in the middle: the lines decompressed
    before the error depend on how the stream is read, and both paths read it alike."""
    import capplan.reconcile.batch as batch

    monkeypatch.setattr(batch, "BATCH_RECORDS", batch_records)
    lines = [(json.dumps(_seed(i)) + "\n").encode() for i in range(1200)]
    data, marks = _gzip_with_flushes(lines, 200)
    damaged = bytearray(data)
    if damage.startswith("cut-"):
        damaged = damaged[: int(len(data) * float(damage[4:]))]
    elif damage == "bad-block":
        damaged[marks[2]] = 0x07  # BFINAL=1, BTYPE=11
    else:
        damaged[-5] ^= 0xFF  # the CRC-32 of the trailer
    path = tmp_path / "r.jsonl.gz"
    path.write_bytes(bytes(damaged))
    doc = _same(path)
    broken = [f for f in doc["failures"] if "compressed stream broken after line" in f["message"]]
    assert len(broken) == 1 and broken[0]["line"] == doc["lines"] == doc["records"]
    assert broken[0]["message"].startswith(f"r.jsonl.gz: compressed stream broken after line {doc['lines'] - 1:,} (byte ")
    assert doc["records_counted"] == doc["lines"] - 1
    if damage == "bad-block":
        assert "invalid block type" in broken[0]["message"] and 400 < doc["lines"] <= 601
    if damage == "bad-crc":
        assert doc["records_counted"] == 1200


def test_gzip_unreadable_from_the_start_is_an_input_error(tmp_path):
    path = tmp_path / "r.jsonl.gz"
    path.write_bytes(b"\x1f\x8b\x08\x00garbage")
    for batches in (True, False):
        with pytest.raises(InputError, match="r.jsonl.gz: unreadable after line 0"):
            reconcile(path, batches=batches)


def _damage_parquet(path: Path, group: int, column: str | None = None, from_fraction: float = 0.0) -> None:
    """Overwrite the pages of row group ``group`` (only ``column``'s, when given) with 0xff from
    ``from_fraction`` of each column chunk on; the footer stays intact."""
    pq = pytest.importorskip("pyarrow.parquet")
    meta = pq.ParquetFile(path).metadata.row_group(group)
    data = bytearray(path.read_bytes())
    for i in range(meta.num_columns):
        chunk = meta.column(i)
        if column is not None and chunk.path_in_schema.split(".")[0] != column:
            continue
        start = chunk.dictionary_page_offset or chunk.data_page_offset
        begin = start + int(chunk.total_compressed_size * from_fraction)
        data[begin:start + chunk.total_compressed_size] = b"\xff" * (start + chunk.total_compressed_size - begin)
    path.write_bytes(bytes(data))


def _parquet_pages(path: Path, records: list[dict], extra: bool = False) -> Path:
    """200 records in 4 row groups of 50, in small uncompressed pages (a column chunk has many)."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    table = pa.Table.from_pylist(records)
    if extra:
        table = table.append_column("reward", pa.array([float(i) for i in range(len(records))]))
    pq.write_table(table, path, row_group_size=50, data_page_size=128, compression="none", use_dictionary=False)
    return path


@pytest.mark.parametrize(
    ("group", "column", "from_fraction", "row"),
    [
        (1, None, 0.0, 51),  # the whole group: unreadable from its first row
        (2, "logprobs", 0.5, None),  # a page header in the second half: unreadable part-way
        (3, "origin", 0.0, 151),
    ],
)
def test_corrupt_parquet_page(tmp_path, small_batches, group, column, from_fraction, row):
    """A corrupt page costs its row group from the batch it lies in on (one failed record, at the
    first row not read), not the file: the other groups are counted, with their own row numbers."""
    path = _parquet_pages(tmp_path / "r.parquet", [_seed(i) for i in range(200)])
    _damage_parquet(path, group, column, from_fraction)
    doc = _same(path, max_errors=100)
    broken = [f for f in doc["failures"] if "is unreadable from row" in f["message"]]
    assert len(broken) == 1
    first = group * 50 + 1
    assert broken[0]["message"].startswith(f"r.parquet: Parquet row group {group} (rows {first}-{first + 49}) is unreadable from row ")
    if row is not None:
        assert broken[0]["row"] == row
    else:
        assert first < broken[0]["row"] <= first + 49
    # rows are numbered as in the file; a file ends at its last row, or at a break in its last group
    assert doc["lines"] == (200 if group < 3 else broken[0]["row"])
    not_counted = first + 50 - broken[0]["row"]
    assert doc["records"] == 200 - not_counted + 1


def test_corrupt_page_in_a_column_not_read(tmp_path, small_batches):
    """A column capplan's format does not have is never read: its corrupt pages cost nothing."""
    path = _parquet_pages(tmp_path / "r.parquet", [_seed(i) for i in range(200)], extra=True)
    _damage_parquet(path, 2, "reward")
    doc = _same(path)
    assert doc["records_counted"] == 200 and doc["failures"] == []


def test_parquet_string_not_utf8(tmp_path, small_batches):
    """An id that is not UTF-8 makes its batch unconvertible: the record-by-record reader reports
    the row group unreadable from that batch on, and so does the batch path (rows 9-16 of group 0)."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    import numpy as np

    records = [_seed(i) for i in range(40)]
    table = pa.Table.from_pylist(records)
    ids = [f"r{i}".encode() for i in range(40)]
    ids[12] = b"r\xff"
    offsets = np.cumsum([0] + [len(x) for x in ids]).astype(np.int32)
    bad = pa.Array.from_buffers(pa.string(), 40, [None, pa.py_buffer(offsets.tobytes()), pa.py_buffer(b"".join(ids))])
    table = table.set_column(table.schema.get_field_index("id"), "id", bad)
    pq.write_table(table, tmp_path / "r.parquet", row_group_size=20)
    doc = _same(tmp_path / "r.parquet")
    assert [(f["row"], f["message"].split(" (")[0]) for f in doc["failures"]] == [
        (9, "r.parquet: Parquet row group 0")
    ]
    assert doc["records_counted"] == 8 + 20


@pytest.mark.parametrize("kind", ["binary", "large_binary"])
def test_parquet_binary_masks(tmp_path, kind):
    """Masks stored as binary hold codes (0/1/2) or letters, record by record; a byte that is
    neither fails well_formed. The batch path reads them from the buffers, not row by row."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from capplan.reconcile.columns import from_arrow

    codes = bytes([0] * 12 + [1] * 4 + [2] * 5 + [1] * 4)
    records = []
    for i in range(30):
        rec = _seed(i)
        rec["origin"] = codes if i % 2 else rec["origin"].encode()
        rec["loss_mask"] = rec["loss_mask"].encode() if i % 3 else bytes(b - 48 for b in rec["loss_mask"].encode())
        records.append(rec)
    records[7]["origin"] = codes[:3] + b"\x09" + codes[4:]
    records[8]["loss_mask"] = b"0" * 24 + b"\x01"  # letters and a code: neither coding
    table = pa.Table.from_pylist(records)
    for name in ("origin", "loss_mask"):
        table = table.set_column(table.schema.get_field_index(name), name, table.column(name).cast(getattr(pa, kind)()))
    pq.write_table(table, tmp_path / "r.parquet")
    doc = _same(tmp_path / "r.parquet")
    assert [(f["row"], f["field"]) for f in doc["failures"]] == [(8, "origin"), (9, "loss_mask")]
    assert doc["records_counted"] == 28
    assert doc["per_conversation"] == reconcile(FIX / "clean.jsonl").as_dict()["per_conversation"]
    cols = from_arrow(table.to_batches()[0])
    assert bool(cols.exact.all()) and cols.origin.max() == 255  # read from the buffers; row 8's byte 9 flagged


def test_areal_left_padding(tmp_path):
    """AReaL pads left for generation and right in batches: both trim to the one run of 1s of the
    attention mask; a hole inside it fails. (Mappings are read record by record in both paths.)"""
    base = json.loads((FIX / "areal.jsonl").read_text().splitlines()[0])

    def padded(left: int, right: int, hole: bool = False) -> dict:
        rec = copy.deepcopy(base)
        for key, pad in (("input_ids", 0), ("loss_mask", 0), ("logprobs", 0.0), ("versions", -1)):
            rec[key] = [[pad] * left + rec[key][0] + [pad] * right]
        mask = [0] * left + [1] * 25 + [0] * right
        if hole:
            mask[left + 3] = 0
        rec["attention_mask"] = [mask]
        return rec

    path = _write_jsonl(tmp_path / "a.jsonl", [base, padded(4, 0), padded(0, 3), padded(2, 2), padded(2, 0, hole=True)])
    doc = _same(path, mapping="areal")
    assert [(f["line"], f["field"]) for f in doc["failures"]] == [(5, "attention_mask")]
    assert doc["records_counted"] == 4
    assert doc["per_conversation"] == reconcile(FIX / "areal.jsonl", mapping="areal").as_dict()["per_conversation"]


CONTROL_IDS = ["x\x1b[2K\r\nok   all checks passed\n", "\x07bell\x00nul", "\u202eevil", "tab\there"]


def test_control_characters_in_ids(tmp_path, small_batches):
    """Ids with control characters, line breaks and bidirectional overrides: reported alike by both
    paths, kept as given in JSON, escaped in the one-line form."""
    records = [_seed(i) for i in range(20)]
    for k, record_id in enumerate(CONTROL_IDS):
        records[3 + 4 * k].update(id=record_id, stop_reason="eos")
    for path in (_write_jsonl(tmp_path / "r.jsonl", records), _write_parquet(tmp_path / "r.parquet", records)):
        doc = _same(path)
        assert [f["id"] for f in doc["failures"]] == CONTROL_IDS
        for failure in reconcile(path).failures:
            text = str(failure)
            assert not any(c in text for c in "\x1b\x07\x00\r\n\t\u202e"), text


def test_lines_not_utf8(tmp_path, small_batches):
    """A byte that is not UTF-8 in a field msgspec skips (an unknown field, the id) makes the line
    unreadable for the record-by-record reader; the batch path sends it there. Valid non-ASCII
    text is read. Blocks of 64 bytes put the bytes at every position relative to a block."""
    lines = [json.dumps(_seed(i), ensure_ascii=False).encode() for i in range(40)]
    lines[5] = lines[5][:-1] + b', "note": "caf\xe9"}'  # latin-1, not UTF-8
    lines[17] = lines[17].replace(b'"r17"', b'"r\xc3\xa9\xff"')
    lines[23] = lines[23][:-1] + ', "note": "café ✓"}'.encode()
    lines[31] = lines[31][:-1] + b', "note": "\xed\xa0\x80"}'  # an encoded surrogate: json.loads accepts it
    path = tmp_path / "r.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    doc = _same(path)
    assert _failed(doc, "well_formed") == [6, 18]
    assert doc["records_counted"] == 38


def test_values_past_int64(tmp_path, small_batches):
    """Integers the columns cannot hold go record by record, where they are read as Python ints."""
    records = [_seed(i) for i in range(20)]
    records[3].update(policy_version=2**70, trainer_version=2**70 + 1)
    records[6]["counts"] = {"prompt": 2**64, "action": 8, "tool": 5}
    records[9].update(policy_version=2**53 + 1, trainer_version=2**53 + 1)
    doc = _same(_write_jsonl(tmp_path / "r.jsonl", records))
    assert _failed(doc, "mask_lengths") == [7]
    assert str(2**70) in doc["policy_versions"]
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    table = pa.Table.from_pylist([_seed(i) for i in range(20)])
    versions = pa.array([7] * 19 + [2**64 - 1], type=pa.uint64())
    table = table.set_column(table.schema.get_field_index("trainer_version"), "trainer_version", versions)
    pq.write_table(table, tmp_path / "r.parquet")
    doc = _same(tmp_path / "r.parquet")
    assert doc["failures"] == [] and doc["records_counted"] == 20


def test_line_record_field_order():
    """from_line_records reads LineRecord's fields by name; this pins the record's fields."""
    from capplan.reconcile.columns import LineRecord

    assert LineRecord.__struct_fields__ == (
        "origin", "loss_mask", "counts", "token_ids", "turns", "cached_tokens", "prefill_tokens", "logprobs",
        "policy_version", "trainer_version", "stop_reason", "tool_wait_s", "n_tokens", "lp_offset", "stop_logged",
    )


def _line(i: int, **changes: object) -> str:
    return json.dumps(_seed(i, **changes), separators=(",", ":"))


@pytest.mark.parametrize(
    "variant",
    ["plain", "crlf", "blank", "leading-space", "two-on-a-line", "split-across-lines", "no-final-feed", "long-line", "not-ascii-id"],
)
@pytest.mark.parametrize("blocks", ["default", "small"])
def test_lines_read_alike_in_groups(tmp_path, monkeypatch, variant, blocks):
    """The batch path decodes a read's lines in one call only when that reads each line as
    decoding it alone would; otherwise it goes line by line. Either way the report is the
    record-by-record report, line numbers included."""
    if blocks == "small":
        import capplan.reconcile.batch as batch
        import capplan.reconcile.readers as readers

        monkeypatch.setattr(batch, "BATCH_RECORDS", 16)
        monkeypatch.setattr(readers, "BLOCK_BYTES", 256)
    lines = [_line(i) for i in range(60)]
    lines[7] = _line(7, stop_reason="eos")  # a failure whose line number must survive
    if variant == "crlf":
        lines = [line + "\r" for line in lines]
    elif variant == "blank":
        lines[20:20] = ["", "   "]
    elif variant == "leading-space":
        lines[30] = "  " + lines[30]
    elif variant == "two-on-a-line":
        lines[40] = lines[40] + lines[41]  # not JSON as a line: one failed record
    elif variant == "split-across-lines":
        head, tail = lines[45].split('"turns":', 1)
        lines[45:46] = [head + '"turns":', tail]  # neither half is JSON
    elif variant == "long-line":
        lines[50] = _line(50, note="x" * 5000)
    elif variant == "not-ascii-id":
        lines[12] = _line(12, id="caf\u00e9 \u2713")
    text = "\n".join(lines) + ("" if variant == "no-final-feed" else "\n")
    path = tmp_path / "r.jsonl"
    path.write_bytes(text.encode())
    doc = _same(path)
    assert 7 + 1 in _failed(doc, "stop_reason")
    assert doc["records_counted"] >= 55


@pytest.mark.parametrize(
    "changes",
    [
        {"origin": "ppppppppppppaaaatttttaa\\u0061a"},  # an escape: read record by record, counted
        {"loss_mask": "00000000000011110000011\\u00311"},
        {"origin": [0] * 12 + [1] * 4 + [2] * 5 + [1] * 4},  # codes instead of letters
        {"origin": "ppppppppppppaaaatttttaa\u00e9a"},  # a letter that is not ASCII: fails well_formed
        {"logprobs": [-0.5] * 7 + [-1e-3]},
        {"logprobs": []},
        {"logprobs": [-0.25]},
        {"cached_tokens": [3], "prefill_tokens": [9]},
        {"cached_tokens": None},
        {"turns": [[12, 16], [21, 25]], "cached_tokens": [0, 1234567890123456789]},
        {"cached_tokens": 555},  # a number, not an array of one
        {"cached_tokens": 5, "prefill_tokens": 12},
        {"turns": [16]},
        {"turns": [[12, 16], 21]},
        {"turns": [[12, 16, 21]]},
    ],
    ids=lambda c: "-".join(f"{k}" for k in c),
)
def test_raw_values_read_alike(tmp_path, changes):
    """Masks read from raw JSON strings, and lists read without a length per value, give the
    record-by-record report for values they do not read exactly too."""
    lines = [_line(i) for i in range(30)]
    raw = json.dumps(_seed(11, **changes), ensure_ascii=False)
    if any(isinstance(v, str) and "\\u" in v for v in changes.values()):
        raw = raw.replace("\\\\u", "\\u")  # keep the escape as written
    lines[11] = raw
    path = tmp_path / "r.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    doc = _same(path)
    assert doc["records"] == 30


@pytest.mark.parametrize(
    ("raws", "codes", "exact"),
    [
        ([b'"pa"', b'"t"'], [42, 0, 21], [True, True]),
        ([b'"pa"', b"[0,1]"], [42, 0], [True, False]),  # codes, not letters: record by record
        ([b'["p","a"]', b"5"], [], [False, False]),  # quotes that pair up, but not as the values do
        ([b'"p\\u0061"', b'"t"'], [21], [False, True]),  # an escape
        ([b'""', b'""'], [], [True, True]),
    ],
)
def test_mask_codes(raws, codes, exact):
    import msgspec

    from capplan.reconcile.columns import ORIGIN_CODE_FROM_STR, mask_codes

    got, offsets, read, lengths = mask_codes([msgspec.Raw(r) for r in raws], ORIGIN_CODE_FROM_STR)
    assert got.tolist() == codes and read.tolist() == exact and lengths.tolist() == [len(r) for r in raws]
    assert offsets[-1] == len(codes)
