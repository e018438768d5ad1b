"""Option models: one validation path, one description source for help, schema and docs."""

from __future__ import annotations

import json

import pytest

from capplan.errors import InputError
from capplan.kv import KVInputs
from capplan.options import field_docs, field_help
from capplan.roofline import RooflineInputs


@pytest.mark.parametrize("kind", ["workload", "hardware", "model", "engine", "kv", "roofline", "plan", "simulate"])
def test_schema_describes_every_property(runner, kind):
    """``capplan schema KIND``: every property of every definition has a description, taken
    from the field's docstring."""
    from capplan.cli.app import app

    r = runner.invoke(app, ["schema", kind])
    assert r.exit_code == 0, r.output
    schema = json.loads(r.stdout)
    nodes = [schema, *schema.get("$defs", {}).values()]
    props = [(n.get("title"), k, p) for n in nodes for k, p in n.get("properties", {}).items()]
    assert len(props) >= 9
    assert [f"{t}.{k}" for t, k, p in props if not p.get("description")] == []


def test_workload_schema_has_the_documented_field_text(runner):
    from capplan.cli.app import app

    schema = json.loads(runner.invoke(app, ["schema", "workload"]).stdout)
    volume = schema["$defs"]["Volume"]["properties"]["samples_per_prompt"]
    assert volume["description"] == field_docs("capplan.workload", "Volume")["samples_per_prompt"]
    assert "GRPO group size" in volume["description"]


def test_field_docs_reads_attribute_docstrings_without_importing():
    """Docstrings come from the source file (the CLI builds help without importing numpy)."""
    docs = field_docs("capplan.kv", "KVInputs")
    assert set(docs) == set(KVInputs.model_fields)
    assert docs["block_size"] == "Paged-attention block size [tokens]; default the engine profile's (vLLM 16)."
    assert field_help("capplan.kv", "KVInputs", "context", 8192) == "Tokens per sequence for concurrency figures [tokens]. [default: 8192]"


@pytest.mark.parametrize(
    "cls, kwargs, message",
    [
        (KVInputs, {"tp": 0}, "--tp 0: must be in [1, 1,000,000]"),
        (KVInputs, {"gpu_mem_util": 1.5}, "--gpu-mem-util 1.5: must be in (0, 1]"),
        (KVInputs, {"weights_gib": -1000}, "--weights-gib -1000: must be in [0, 10,240]"),
        (KVInputs, {"usable_mem_gib": float("nan")}, "--usable-mem-gib nan: must be a finite number in (0, 10,240]"),
        (KVInputs, {"usable_mem_gib": float("inf")}, "--usable-mem-gib inf: must be a finite number in (0, 10,240]"),
        (KVInputs, {"context": "lots"}, "--context 'lots': must be an integer in [1, 10,000,000]"),
        (KVInputs, {"kv_dtype": "fp6"}, "--kv-dtype fp6: unknown dtype (allowed: bf16, fp16, fp8, int8, int4)"),
        (RooflineInputs, {"compute_efficiency": 0}, "--compute-efficiency 0: must be in (0, 1]"),
        (RooflineInputs, {"step_overhead_s": float("inf")}, "--step-overhead-s inf: must be a finite number in [0, 3,600]"),
    ],
)
def test_bad_option_values_are_one_line_errors_naming_the_flag(cls, kwargs, message):
    with pytest.raises(InputError) as info:
        cls(**kwargs)
    assert str(info.value) == message


def test_replace_validates():
    inp = KVInputs(tp=2)
    assert inp.replace(tp=4).tp == 4
    with pytest.raises(InputError, match="--tp -1"):
        inp.replace(tp=-1)
