"""The validation corpus (``validation/``): every scored row cited, every measurement scored once,
held-out rows outside every fit."""

from __future__ import annotations

from collections import defaultdict

import pytest


@pytest.fixture(scope="module")
def rows():
    from capplan.accuracy.corpus import load_corpus

    return load_corpus()


def _measurement(r):
    """What identifies one published measurement, whichever file entered it."""
    keys = ("model", "hardware", "input_tokens", "output_tokens", "concurrency", "tp", "kv_dtype", "weight_dtype")
    return (r.kind, r.metric, round(r.measured, 4), *(r.get(k) for k in keys))


def test_every_row_is_cited(rows):
    assert rows and all(r.citation and r.source for r in rows)


def test_no_measurement_is_scored_twice(rows):
    """``features.csv`` repeats some rows of the serving corpora; ``validation/split.yaml`` leaves
    one copy out of the score (a duplicate would count twice, and a held-out copy of a fit row
    would leak the fit into the held-out error)."""
    seen = defaultdict(list)
    for r in rows:
        if not r.excluded:
            seen[_measurement(r)].append(r)
    twice = [[r.id for r in group] for group in seen.values() if len({r.source for r in group}) > 1]
    assert not twice, twice


def test_held_out_rows_are_in_no_fit(rows):
    """No engine profile term was fitted on a held-out row."""
    from capplan.engine import list_engines, load_engine

    held = {r.id for r in rows if r.held_out}
    for name in list_engines():
        for term, ids in load_engine(name).fitted_on.items():
            assert not held & set(ids), (name, term, sorted(held & set(ids))[:5])
