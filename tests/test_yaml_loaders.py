"""Capplan's own YAML files are read with libyaml; a user's file with the checked Python loader.

Both must give the same data: the fast loader is only a speed-up of ``capplan kv``'s start-up
(the default engine profile, about 2,000 YAML nodes, took 88 ms to parse in Python and 7 ms
with libyaml on a 2-core machine).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from capplan import resources
from capplan.yamlio import BundledLoader, SafeLoader, YAMLRefused, safe_load

KINDS = ("workloads", "hardware_profiles", "models", "engine_profiles", "validation")
BUNDLED = [p for kind in KINDS for p in sorted(resources.bundled_dir(kind).glob("*.yaml"))]


@pytest.mark.parametrize("path", BUNDLED, ids=[f"{p.parent.name}/{p.name}" for p in BUNDLED])
def test_bundled_files_read_the_same_with_either_loader(path: Path) -> None:
    assert resources.is_bundled(path)
    text = path.read_text(encoding="utf-8")
    assert safe_load(text, bundled=True) == safe_load(text)


def test_a_users_file_is_not_bundled(tmp_path: Path) -> None:
    """Only files in capplan's own folders take the fast path; a copy elsewhere does not."""
    copy = tmp_path / "vllm-0.19.yaml"
    copy.write_text((resources.bundled_dir("engine_profiles") / "vllm-0.19.yaml").read_text())
    assert not resources.is_bundled(copy)


@pytest.mark.parametrize("bundled", [False, True])
def test_both_loaders_refuse_a_repeated_key_and_read_1e15_as_a_float(bundled: bool) -> None:
    with pytest.raises(YAMLRefused, match="key 'a' appears twice"):
        safe_load("a: 1\nb: 2\na: 3\n", bundled=bundled)
    assert safe_load("x: 1e15\n", bundled=bundled) == {"x": 1e15}


def test_the_fast_loader_is_libyaml_when_pyyaml_has_it() -> None:
    if not getattr(yaml, "__with_libyaml__", False):
        pytest.skip("this PyYAML was built without libyaml; both loaders are the Python one")
    assert issubclass(BundledLoader, yaml.CSafeLoader) and not issubclass(SafeLoader, yaml.CSafeLoader)
