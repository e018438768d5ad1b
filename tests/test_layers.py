"""The import direction between layers: each layer uses only the layers above it.

    infrastructure  errors, units, options, yamlio, resources, output, records, plots, scale
    inputs          distributions, workload, hardware, modelspec, hf_import, engine
    calculations    ledger, kv, roofline, benchmark, trainer, concurrency, workload_map, speculative,
                    disagg, offload
    orchestration   plan, sim, reconcile, accuracy, calibrate (and the alias modules)
    command line    cli

Imports inside functions count (they are how the heavy modules stay lazy); imports under
``if TYPE_CHECKING:`` do not (annotations only).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "capplan"

LAYERS: list[tuple[str, set[str]]] = [
    ("infrastructure", {"errors", "units", "options", "yamlio", "resources", "output", "records", "plots", "scale", "__init__"}),
    ("inputs", {"distributions", "workload", "hardware", "modelspec", "hf_import", "engine"}),
    ("calculations", {"ledger", "kv", "roofline", "trainer", "concurrency", "workload_map", "benchmark",
                      "speculative", "disagg", "offload"}),
    ("orchestration", {"plan", "sim", "reconcile", "accuracy", "calibrate", "simulate", "sweep"}),
    ("command line", {"cli", "__main__"}),
]
RANK = {name: i for i, (_, names) in enumerate(LAYERS) for name in names}


def _top(module: str) -> str:
    """``capplan.plan.sizing`` -> ``plan``; ``capplan`` -> ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for n in ast.walk(node))
    out = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("capplan"):
            if node.module == "capplan":
                out += [(node.lineno, f"capplan.{a.name}") for a in node.names]
            else:
                out.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.startswith("capplan")]
    return out


MODULES = sorted(PACKAGE.rglob("*.py"))


def test_every_module_has_a_layer():
    unknown = sorted({_top("capplan." + ".".join(p.relative_to(PACKAGE).with_suffix("").parts)) for p in MODULES} - set(RANK))
    assert unknown == []


@pytest.mark.parametrize("path", MODULES, ids=[str(p.relative_to(PACKAGE)) for p in MODULES])
def test_imports_point_up_the_layers(path: Path):
    me = _top("capplan." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts))
    wrong = [
        f"line {line}: {me} ({LAYERS[RANK[me]][0]}) imports {mod} ({LAYERS[RANK[_top(mod)]][0]})"
        for line, mod in _imports(path)
        if RANK.get(_top(mod), 0) > RANK[me]
    ]
    assert wrong == []


def test_every_module_opens_with_a_sentence_saying_what_it_owns():
    missing = [str(p.relative_to(PACKAGE)) for p in MODULES if p.stat().st_size and not ast.get_docstring(ast.parse(p.read_text()))]
    assert missing == []


def test_command_modules_do_not_import_the_app():
    """Commands are registered explicitly by capplan.cli.app; a command module importing the app
    back would recreate the import cycle (registration by import side effect)."""
    offenders = [
        p.name for p in (PACKAGE / "cli").glob("*_cmd.py")
        if any(mod == "capplan.cli.app" for _, mod in _imports(p))
    ]
    assert offenders == []
