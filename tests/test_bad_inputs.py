"""The bad-input corpus (``tests/bad_inputs/*.yaml``): every case ends in one line and an exit code.

Each corpus file lists cases; each case is a command line, the files it reads (literal text, a
bundled file with edits, or a generated file), and what must happen. An error case (the default)
must exit with its code (2 unless given), print exactly one ``Error:`` line on standard error
(click's usage lines aside) containing ``error``, raise no exception, and take under
:data:`CASE_SECONDS`. A case with ``exit: 0`` (user text that must print escaped, a device
that must stay a device) checks ``stdout``/``stderr`` substrings and its ``check`` instead; a
case with ``exit: 1`` (a failed reconcile check) checks that every standard-error line is a
one-line failure. ``tests/bad_inputs/README.md`` describes the format.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import stat
import time
from pathlib import Path
from typing import Any, Callable

import pytest
import typer.main
import typer.testing
import yaml

from capplan.cli.app import app

CORPUS = Path(__file__).resolve().parent / "bad_inputs"
REPO = Path(__file__).resolve().parent.parent
CASE_SECONDS = 60.0
"""A hang guard, not a speed target [s]: a refused input is refused before any work, so a case
that runs this long is stuck (an alias bomb expanding, a runaway grid). How fast refusals are is
not asserted here (machines differ); the inputs that used to hang are in the corpus."""

USAGE_LINES = ("Usage: ", "Try '")
COMMAND = typer.main.get_command(app)
"""The click command, built once (typer's runner rebuilds it on every call, ~0.1 s)."""


def _cases() -> list[dict[str, Any]]:
    out = []
    for path in sorted(CORPUS.glob("*.yaml")):
        for case in yaml.safe_load(path.read_text(encoding="utf-8")):
            case["_file"] = path.stem
            out.append(case)
    return out


CASES = _cases()


# ------------------------------------------------------------------------------ file builders


def _base_text(ref: str) -> str:
    kind, _, name = ref.partition(":")
    folders = {"workload": "workloads", "hardware": "hardware_profiles", "model": "models", "engine": "engine_profiles"}
    if kind in folders:
        return (REPO / folders[kind] / f"{name}.yaml").read_text(encoding="utf-8")
    if kind == "hf":
        return (REPO / "tests" / "data" / "hf_configs" / f"{name}.json").read_text(encoding="utf-8")
    if kind == "fixture":
        return (REPO / "tests" / "fixtures" / name).read_text(encoding="utf-8")
    if kind == "example":
        return (REPO / "examples" / name).read_text(encoding="utf-8")
    raise ValueError(f"unknown base {ref!r}")


def _parquet(path: Path, records: list[dict[str, Any]], row_group_size: int | None = None) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(records), path, row_group_size=row_group_size)


def _corrupt_parquet(path: Path, records: list[dict[str, Any]]) -> None:
    """Two row groups; the second group's data pages overwritten with garbage (the footer intact)."""
    import pyarrow.parquet as pq

    _parquet(path, records, row_group_size=max(len(records) // 2, 1))
    group = pq.ParquetFile(path).metadata.row_group(1)
    data = bytearray(path.read_bytes())
    for i in range(group.num_columns):
        column = group.column(i)
        start = column.dictionary_page_offset or column.data_page_offset
        data[start:start + column.total_compressed_size] = b"\xff" * column.total_compressed_size
    path.write_bytes(bytes(data))


MAKERS: dict[str, Callable[..., Any]] = {
    "deep_yaml": lambda depth, key="name": f"{key}: " + "[" * depth + "]" * depth + "\n",
    "deep_map_yaml": lambda depth: "".join(f"{'  ' * i}k{i}:\n" for i in range(depth)) + "  " * depth + "v: 1\n",
    "alias_bomb": lambda levels=9, prefix="": prefix
    + "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"
    + "".join(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, levels)),
    "deep_json": lambda depth: '{"architectures": ["LlamaForCausalLM"], "x": ' + "[" * depth + "]" * depth + "}",
    "big": lambda mib, line="# padding\n": line * int(mib * 2**20 / len(line) + 1),
    "long_list": lambda n, key="samples": f"{key}: [" + ", ".join(["1"] * n) + "]\n",
    "step_points": lambda n: "batch,context_tokens,step_ms\n" + "".join(f"{1 + i % 64},{100 + i},{7.5 + i / n}\n" for i in range(n)),
}


def _write(tmp: Path, name: str, spec: Any) -> Path:
    path = tmp / name
    if isinstance(spec, str):
        path.write_text(spec, encoding="utf-8")
        return path
    if "base" in spec:
        text = _base_text(spec["base"])
        if "json_set" in spec:
            data = json.loads(text)
            for key, value in spec["json_set"].items():
                if value == "__delete__":
                    data.pop(key, None)
                else:
                    data[key] = value
            text = json.dumps(data, indent=2)
        for old, new in spec.get("replace", []):
            assert old in text, f"{name}: {old!r} not in the base file"
            text = text.replace(old, new, 1)
        text += spec.get("append", "")
        path.write_text(text, encoding="utf-8")
        return path
    if "bytes_hex" in spec:
        path.write_bytes(bytes.fromhex(spec["bytes_hex"]))
        return path
    if "utf16" in spec:
        path.write_bytes(spec["utf16"].encode("utf-16"))
        return path
    if "jsonl" in spec:
        deep = '{"id": "deep", "x": ' + "[" * 100_000 + "]" * 100_000 + "}"
        lines = [r if isinstance(r, str) else deep if r.get("make_deep") else json.dumps(r) for r in spec["jsonl"]]
        lines = lines * spec.get("repeat", 1)
        data = ("\n".join(lines) + "\n").encode()
        if spec.get("gzip"):
            data = gzip.compress(data)
            cut = spec.get("truncate_gzip_at")
            if cut is not None:
                data = data[: int(len(data) * cut)]
        path.write_bytes(data)
        return path
    if "parquet" in spec:
        records = [
            {k: bytes.fromhex(v["bytes_hex"]) if isinstance(v, dict) and "bytes_hex" in v else v for k, v in r.items()}
            for r in spec["parquet"]
        ]
        (_corrupt_parquet if spec.get("corrupt") else _parquet)(path, records)
        return path
    if "make" in spec:
        args = {k: v for k, v in spec.items() if k != "make"}
        path.write_text(MAKERS[spec["make"]](**args), encoding="utf-8")
        return path
    raise ValueError(f"{name}: unknown file spec {spec!r}")


# ------------------------------------------------------------------------------ post-checks


def _csv_cells_inert(tmp: Path, out: str) -> None:
    """No CSV cell (in standard output or a written .csv) starts like a formula; one row per record."""
    texts = [out] + [p.read_text() for p in tmp.rglob("*.csv")]
    for text in texts:
        first = text.splitlines()[0] if text.strip() else ""
        if "," not in first or " " in first:  # not CSV (a table on standard output)
            continue
        rows = list(csv.reader(io.StringIO(text)))
        width = len(rows[0])
        assert all(len(r) == width for r in rows), "a line break in a cell started a new row"
        for row in rows:
            for cell in row:
                for line in cell.split("\n"):
                    assert not line.startswith(("=", "+", "@")), f"formula cell {cell!r}"


def _devnull_is_device(tmp: Path, out: str) -> None:
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def _no_escape_codes(tmp: Path, out: str) -> None:
    assert "\x1b" not in out and "\x07" not in out


CHECKS: dict[str, Callable[[Path, str], None]] = {
    "csv_cells_inert": _csv_cells_inert,
    "devnull_is_device": _devnull_is_device,
    "no_escape_codes": _no_escape_codes,
}


# ------------------------------------------------------------------------------ the corpus


def test_corpus_size_and_ids():
    """At least 150 cases, unique ids, and error cases covering every command."""
    ids = [c["id"] for c in CASES]
    assert len(ids) >= 150, len(ids)
    assert len(set(ids)) == len(ids), [i for i in ids if ids.count(i) > 1]
    commands = {c["args"][0] for c in CASES if c.get("exit", 2) != 0}
    missing = set(COMMAND.commands) - commands
    assert not missing, f"commands without a bad-input case: {sorted(missing)}"


@pytest.mark.parametrize("case", CASES, ids=[f"{c['_file']}:{c['id']}" for c in CASES])
def test_bad_input(case, tmp_path, monkeypatch):
    if any(str(name).endswith(".parquet") for name in case.get("files") or {}):
        pytest.importorskip("pyarrow", reason="Parquet cases need pyarrow (pip install 'capplan[parquet]')")
    monkeypatch.chdir(tmp_path)
    for key, value in (case.get("env") or {}).items():
        monkeypatch.setenv(key, str(value))
    paths = {name: _write(tmp_path, name, spec) for name, spec in (case.get("files") or {}).items()}

    def fill(arg: Any) -> str:
        arg = str(arg).replace("{tmp}", str(tmp_path))
        for name, path in paths.items():
            arg = arg.replace("{" + name + "}", str(path))
        return arg

    args = [fill(a) for a in case["args"]]
    start = time.perf_counter()
    monkeypatch.setattr(typer.testing, "_get_command", lambda _app: COMMAND)
    result = typer.testing.CliRunner().invoke(app, args, catch_exceptions=True, prog_name="capplan")
    elapsed = time.perf_counter() - start
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"{type(result.exception).__name__}: {result.exception}"
    )
    assert "Traceback" not in result.output
    assert elapsed < CASE_SECONDS, f"took {elapsed:.1f} s"
    expected = case.get("exit", 2)
    assert result.exit_code == expected, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    if expected == 2:
        errors = [line for line in lines if line.startswith("Error:")]
        others = [line for line in lines if not line.startswith(("Error:", "Warning:", *USAGE_LINES))]
        assert len(errors) == 1 and not others, result.stderr
        assert fill(case["error"]) in errors[0], errors[0]
    elif expected == 1:
        assert all(line.startswith(("check failed:", "... and ", "Warning:")) for line in lines), result.stderr
    for key in ("stdout", "stderr"):
        wanted = case.get(key)
        for text in [wanted] if isinstance(wanted, str) else wanted or []:
            assert fill(text) in getattr(result, key), getattr(result, key)
    for text in case.get("not_stdout", []):
        assert text not in result.stdout
    if case.get("check"):
        CHECKS[case["check"]](tmp_path, result.stdout)
