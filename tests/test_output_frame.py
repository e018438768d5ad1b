"""Streaming a large table (the sweep export): CSV byte-identical to ``to_csv``, Parquet and JSON by extension."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

import capplan.output as output
from capplan.errors import OutputExistsError
from capplan.output import frame_csv_chunks, to_csv, write_frame


@pytest.fixture
def tricky() -> pd.DataFrame:
    """Text that needs neutralising or quoting, missing values, floats outside the encoders' repr range."""
    n = 23
    rng = np.random.default_rng(1)
    texts = ["h100-sxm", "=SUM(A1)", "+cmd", "-x", "@a", "\tTab", "a,b", 'say "hi"', "two\nlines", "", None]
    return pd.DataFrame(
        {
            "text": [texts[i % len(texts)] for i in range(n)],
            "category": pd.Categorical([texts[(3 * i) % len(texts)] for i in range(n)]),
            "count": np.arange(n) - 5,
            "ratio": rng.random(n) * 10.0 ** rng.integers(-9, 19, n),
            "missing": np.where(np.arange(n) % 3 == 0, np.nan, 0.25),
            "edge": [0.0, -0.0, 1e-4, 9.99e-5, 1e15, 1e16, 5e-324, 1.7976931348623157e308, -2.5, 7.0] * 2 + [1.0, 2.0, 3.0],
            "flag": np.arange(n) % 2 == 0,
        }
    )


def _reference(frame: pd.DataFrame) -> bytes:
    return to_csv(list(frame.columns), frame.itertuples(index=False)).encode()


@pytest.mark.parametrize("chunk_rows", [1, 5, 1000])
def test_csv_chunks_equal_to_csv(tricky, chunk_rows):
    assert b"".join(frame_csv_chunks(tricky, chunk_rows)) == _reference(tricky)


def test_csv_without_pyarrow_equals_to_csv(tricky, monkeypatch):
    """Without pyarrow the rows are joined in Python: the same bytes."""
    monkeypatch.setattr(output, "_arrow_csv", lambda: None)
    assert b"".join(frame_csv_chunks(tricky, 7)) == _reference(tricky)


@pytest.mark.parametrize("arrow", [True, False])
def test_csv_without_orjson_equals_to_csv(tricky, monkeypatch, arrow):
    """The numbers are printed by orjson when it is installed, else by msgspec: the same digits."""
    monkeypatch.setattr(output, "_orjson", lambda: None)
    if not arrow:
        monkeypatch.setattr(output, "_arrow_csv", lambda: None)
    assert b"".join(frame_csv_chunks(tricky, 7)) == _reference(tricky)


def test_write_frame_by_extension(tricky, tmp_path):
    csv_path = write_frame(tricky, tmp_path / "grid.csv", chunk_rows=4)
    assert csv_path.read_bytes() == _reference(tricky)
    json_path = write_frame(tricky, tmp_path / "grid.json")
    assert json.loads(json_path.read_text())[0]["text"] == "h100-sxm"
    pq = pytest.importorskip("pyarrow.parquet")
    parquet_path = write_frame(tricky, tmp_path / "grid.parquet", chunk_rows=4)
    back = pq.read_table(parquet_path)
    assert back.num_rows == len(tricky) and pq.ParquetFile(parquet_path).num_row_groups == 6
    assert back.column("text").to_pylist()[:10] == tricky["text"].tolist()[:10]  # typed values, not neutralised
    assert back.column("text").to_pylist()[10] is None
    with pytest.raises(OutputExistsError):
        write_frame(tricky, csv_path)


def test_sweep_cli_writes_parquet(runner, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    out = tmp_path / "grid.parquet"
    args = ["sweep", "seed-replay", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--inference-gpus", "1,2", "--trainer-gpus", "8", "-o", str(out)]
    result = runner.invoke(app_(), args)
    assert result.exit_code == 0, result.output
    csv_out = tmp_path / "grid.csv"
    runner.invoke(app_(), args[:-1] + [str(csv_out)])
    table = pq.read_table(out).to_pandas()
    assert list(table.columns) == pd.read_csv(csv_out).columns.tolist()
    assert len(table) == 2


def app_():
    from capplan.cli.app import app

    return app


def test_chunk_rows_default_is_bounded():
    assert 0 < output.FRAME_CHUNK_ROWS <= 131_072
