"""Reading the validation corpus: one typed row per published measurement, and the split.

Every CSV under ``validation/`` holds rows of one kind (serving benchmarks, KV capacity from
engine logs, RL step times, ...) with at least ``id``, ``source``, ``citation``, ``metric``,
``unit`` and ``measured``. ``validation/split.yaml`` says which rows were held out from every
fit: whole sources (to test that a fit carries to another publisher) and a fixed fraction of the
others, chosen by a hash of the row id so the split never changes when rows are added.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from capplan.errors import InputError

KIND_OF_FILE = {
    "serving.csv": "serving",
    "serving_vllm.csv": "serving",
    "features.csv": "serving",
    "kv_capacity.csv": "kv",
    "rl_steps.csv": "rl",
    "trainer.csv": "trainer",
    "weight_sync.csv": "weight_sync",
}
"""Corpus files and the kind of measurement each holds."""

KINDS: tuple[str, ...] = tuple(dict.fromkeys(KIND_OF_FILE.values()))
"""The kinds of measurement the corpus holds (``capplan accuracy --kind``)."""

VALUE_COLUMNS = {"kv_capacity.csv": [("kv_cache_tokens", "tokens"), ("available_kv_gib", "GiB")]}
"""Files that hold several measured values per row (one column each): each becomes one corpus
row per value, with id ``<row id>:<column>``."""

TIME_METRICS = frozenset({
    "ttft_ms", "itl_ms", "tpot_ms", "e2e_latency_s", "step_time_s", "generation_time_s", "logprob_time_s",
    "training_time_s", "refit_time_s",
})
"""Metrics that are durations: + signed error means capplan predicts less time than measured."""

NOT_STATED = "not_stated"


@dataclass(frozen=True)
class CorpusRow:
    """One published measurement."""

    id: str
    """Unique id of the row."""
    kind: str
    """``serving``, ``kv``, ``rl``, ``trainer`` or ``weight_sync``."""
    source: str
    """Short key of the source document."""
    citation: str
    """Where the number was published (URL pinned to a commit or a versioned page)."""
    metric: str
    """What was measured (``ttft_ms``, ``output_tokens_per_s``, ``kv_cache_tokens``, ...)."""
    unit: str
    """Unit of ``measured``."""
    measured: float
    """The published value."""
    held_out: bool
    """True when no fit saw this row (``validation/split.yaml``)."""
    excluded: str = ""
    """Why the row is not scored (``validation/split.yaml`` ``excluded_rows``), else empty."""
    fields: dict[str, Any] = field(default_factory=dict)
    """Every other column, ``not_stated`` and empty cells as ``None``."""

    def get(self, name: str, default: Any = None) -> Any:
        v = self.fields.get(name)
        return default if v is None else v

    def number(self, name: str, default: float | None = None) -> float | None:
        """A numeric column, or ``default`` when empty or not stated."""
        v = self.fields.get(name)
        if v is None:
            return default
        try:
            x = float(v)
        except (TypeError, ValueError):
            return default
        return x if math.isfinite(x) or x == math.inf else default

    @property
    def is_time(self) -> bool:
        return self.metric in TIME_METRICS


def validation_dir() -> Path:
    """The shipped corpus folder (``validation/`` in a checkout, package data when installed)."""
    from capplan.resources import bundled_dir

    return bundled_dir("validation")  # type: ignore[arg-type]


def _held_out(row_id: str, source: str, split: dict[str, Any]) -> bool:
    if source in split.get("held_out_sources", []):
        return True
    if row_id in split.get("fit_rows", []):
        return False
    if row_id in split.get("held_out_rows", []):
        return True
    frac = float(split.get("held_out_fraction", 0.3))
    h = int(hashlib.sha256(row_id.encode()).hexdigest()[:8], 16) / 2**32
    return h < frac


def load_split(folder: Path | None = None) -> dict[str, Any]:
    """``validation/split.yaml`` as a mapping."""
    import yaml

    path = (folder or validation_dir()) / "split.yaml"
    if not path.is_file():
        return {}
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a mapping (held_out_sources, held_out_fraction, ...)")
    return data


SETTING_COLUMNS: dict[str, str] = {
    "max_num_seqs": "a whole number >= 1",
    "max_num_batched_tokens": "a whole number >= 1",
    "burstiness": "a number > 0, or inf (a constant rate)",
    "cached_prefix_tokens": "a number >= 0",
    "sampler": "pytorch or flashinfer",
    "num_prompts": "a whole number >= 1",
    "statistic": "mean or median",
    "lengths": "fixed, varying or sglang-random",
    "random_input_len": "a whole number >= 1",
    "random_output_len": "a whole number >= 1",
    "random_range_ratio": "a number from 0 to 1",
    "seed": "a whole number >= 0",
}
"""Optional setting columns and what each allows (:func:`_check_settings`): a value outside it
would otherwise be read as not stated."""


def _check_settings(path: Path, line: int, fields: dict[str, Any]) -> None:
    """Refuse a setting column's value that :data:`SETTING_COLUMNS` does not allow."""
    for col, allowed in SETTING_COLUMNS.items():
        raw = fields.get(col)
        if raw is None:
            continue
        if col == "sampler":
            ok = raw in ("pytorch", "flashinfer")
        elif col == "statistic":
            ok = raw in ("mean", "median")
        elif col == "lengths":
            ok = raw in ("fixed", "varying", "sglang-random")
        else:
            try:
                x = float(raw)
            except ValueError:
                x = math.nan
            if col in ("max_num_seqs", "max_num_batched_tokens", "num_prompts", "random_input_len", "random_output_len"):
                ok = math.isfinite(x) and x >= 1 and x == int(x)
            elif col == "seed":
                ok = math.isfinite(x) and x >= 0 and x == int(x)
            elif col == "random_range_ratio":
                ok = 0 <= x <= 1
            elif col == "burstiness":
                ok = x > 0
            else:
                ok = math.isfinite(x) and x >= 0
        if not ok:
            raise InputError(f"{path}:{line}: {col} {raw!r}: expected {allowed}")


def load_corpus(folder: str | Path | None = None, kinds: set[str] | None = None) -> list[CorpusRow]:
    """Every row of every corpus CSV in ``folder`` (default: the shipped corpus).

    Raises
    ------
    InputError
        A kind not among :data:`KINDS`; a file without the required columns, a duplicated id, a
        non-numeric ``measured`` or a setting column's value that :data:`SETTING_COLUMNS` does not allow.
    """
    import csv

    unknown = sorted(set(kinds or ()) - set(KINDS))
    if unknown:
        raise InputError(f"--kind {unknown[0]}: unknown kind (allowed: {', '.join(KINDS)})")

    base = Path(folder) if folder is not None else validation_dir()
    split = load_split(base)
    rows: list[CorpusRow] = []
    seen: dict[str, str] = {}
    for name, kind in KIND_OF_FILE.items():
        path = base / name
        if not path.is_file() or (kinds is not None and kind not in kinds):
            continue
        with path.open(encoding="utf-8", newline="") as fh:
            reader = csv.DictReader(fh)
            wide = VALUE_COLUMNS.get(name)
            need = {"id", "source", "citation"} if wide else {"id", "source", "citation", "metric", "unit", "measured"}
            missing = need - set(reader.fieldnames or [])
            if missing:
                raise InputError(f"{path}: missing columns {', '.join(sorted(missing))}")
            for line, rec in enumerate(reader, start=2):
                values = [(c, u, rec.get(c)) for c, u in wide] if wide else [(rec["metric"], rec["unit"], rec["measured"])]
                for metric, unit, raw in values:
                    if wide and raw in (None, "", NOT_STATED):
                        continue
                    rid = f"{rec['id']}:{metric}" if wide else rec["id"]
                    if rid in seen:
                        raise InputError(f"{path}:{line}: id {rid!r} also in {seen[rid]}")
                    seen[rid] = name
                    try:
                        measured = float(raw)  # type: ignore[arg-type]
                    except (TypeError, ValueError):
                        raise InputError(f"{path}:{line}: {metric} {raw!r} is not a number") from None
                    fields = {k: (None if v in ("", NOT_STATED, None) else v) for k, v in rec.items()
                              if k not in ("id", "source", "citation", "metric", "unit", "measured")}
                    _check_settings(path, line, fields)
                    rows.append(CorpusRow(
                        id=rid, kind=kind, source=rec["source"], citation=rec["citation"], metric=metric, unit=unit,
                        measured=measured, held_out=_held_out(rid, rec["source"], split),
                        excluded=str((split.get("excluded_rows") or {}).get(rid, "")), fields=fields,
                    ))
    return rows
