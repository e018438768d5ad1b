"""The compiled simulator build (``CAPPLAN_COMPILE=1 pip install .``) needs its modules to pass mypy.

mypyc compiles only modules that type-check, and enforces the declared types at run time, so a
type error in the hot loop breaks the optional build (or a compiled run) while the plain
Python build keeps working. This runs the same mypy check the build runs, on the same modules.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _compiled_modules() -> list[str]:
    tree = ast.parse((REPO / "setup.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "COMPILED_MODULES":
            return list(ast.literal_eval(node.value))
    raise AssertionError("setup.py has no COMPILED_MODULES")


def test_compiled_modules_type_check(monkeypatch: pytest.MonkeyPatch) -> None:
    api = pytest.importorskip("mypy.api", reason="mypy is not installed (pip install 'capplan[compile]')")
    modules = _compiled_modules()
    assert "capplan/sim/scheduler.py" in modules
    monkeypatch.chdir(REPO)
    out, err, status = api.run(
        ["--no-incremental", "--follow-imports=silent", "--ignore-missing-imports", "--no-error-summary", *modules]
    )
    assert status == 0, out + err
