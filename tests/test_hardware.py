"""Tests for capplan.hardware and the bundled hardware profiles."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest
import yaml

from capplan import resources
from capplan.errors import InputError, NotFoundError
from capplan.hardware import (
    DTYPES,
    Assumptions,
    HardwareProfile,
    list_hardware,
    load_hardware,
)

PROFILE_DIR = Path(__file__).resolve().parent.parent / "hardware_profiles"
PROFILE_FILES = sorted(PROFILE_DIR.glob("*.yaml"))
EXPECTED_NAMES = {
    "h100-sxm", "h100-pcie", "h200", "a100-80gb", "a100-40gb", "l40s",
    "l4", "a10g", "b200", "mi300x", "mi325x", "rtx-4090", "h800", "h20", "rtx-3090", "rtx-4080", "gb200",
}
NUMERIC_TOP_LEVEL = (
    "mem_marketed_gb",
    "mem_total_gib",
    "hbm_bandwidth_gbps",
    "gpus_per_node",
    "intra_node_bandwidth_gbps",
    "inter_node_bandwidth_gbps",
)


@pytest.fixture(params=PROFILE_FILES, ids=lambda p: p.stem)
def profile_file(request: pytest.FixtureRequest) -> Path:
    return request.param


def test_the_agreed_profiles_are_bundled() -> None:
    """Exactly the agreed set ships, and list_hardware() loads each of them."""
    assert {p.stem for p in PROFILE_FILES} == EXPECTED_NAMES
    assert [h.name for h in list_hardware()] == sorted(EXPECTED_NAMES)


def test_profile_parses_and_name_is_stem(profile_file: Path) -> None:
    by_path = load_hardware(str(profile_file))
    by_name = load_hardware(profile_file.stem)
    assert by_path.name == profile_file.stem
    assert by_name == by_path


def test_every_numeric_field_is_sourced(profile_file: Path) -> None:
    """Walk the raw YAML independently of the validator: each number has a citation."""
    raw = yaml.safe_load(profile_file.read_text(encoding="utf-8"))
    sources = raw["sources"]
    needed = [k for k in NUMERIC_TOP_LEVEL]
    needed += [f"peak_tflops.{d}" for d in raw["peak_tflops"]]
    for key in needed:
        assert len(sources.get(key, "").strip()) > 20, f"{profile_file.name}: no real source for {key}"
    assert "assumptions" not in raw, "a hardware profile holds only the chip; efficiencies are an engine profile's"


def test_derived_and_assumed_values_are_labelled(profile_file: Path) -> None:
    """A source that is not a vendor figure or an observation must say so in capitals."""
    raw = yaml.safe_load(profile_file.read_text(encoding="utf-8"))
    for key, text in raw["sources"].items():
        lowered = text.lower()
        if "derived, not observed" in lowered:
            assert "DERIVED" in text, key
        if lowered.startswith("assumption"):
            assert text.startswith("ASSUMPTION"), key


def test_sane_ranges(profile_file: Path) -> None:
    hw = load_hardware(profile_file.stem)
    peaks = hw.peak_tflops
    assert 100 <= hw.hbm_bandwidth_gbps <= 10_000
    assert set(peaks) <= set(DTYPES)
    if "bf16" in peaks and "fp16" in peaks:
        assert peaks["bf16"] == peaks["fp16"], "every bundled GPU runs bf16 and fp16 at one rate"
    sixteen = peaks.get("bf16", peaks.get("fp16"))
    assert sixteen is not None and 50 <= sixteen <= 5_000
    for narrow in ("fp8", "int8"):
        if narrow in peaks:
            assert peaks[narrow] >= sixteen, f"{narrow} slower than 16-bit: sparse/dense mix-up?"
    if "int4" in peaks:
        assert peaks["int4"] >= peaks["int8"]
    if "fp4" in peaks:
        assert peaks["fp4"] >= peaks["fp8"]
    # Marketed "GB" read as GiB bounds the visible total above (AMD's 192 GB is 192 GiB);
    # read as decimal GB it bounds it below within 15% (NVIDIA's 80 GB shows about 79.1 GiB).
    assert hw.mem_total_gib <= hw.mem_marketed_gb
    assert hw.mem_total_gib >= 0.85 * hw.mem_marketed_gb * 1e9 / 2**30
    assert hw.gpus_per_node in (1, 2, 4, 8)
    assert hw.inter_node_bandwidth_gbps <= hw.intra_node_bandwidth_gbps <= 1_000


def test_h100_sxm_pinned_values() -> None:
    """H100 SXM5 against the vendor documents.

    NVIDIA H100 Tensor Core GPU Architecture whitepaper (GTC22), H100 SXM5 column:
    BF16 989.4 dense / 1978.9 sparse, FP8 1978.9 dense; H100 datasheet "3.35TB/s".
    So peak_flops("bf16") = 989.4e12 FLOP/s and the bandwidth is 3.35e12 B/s.
    mem_total_gib 79.11 from vllm-project/vllm#27508: 79 * 2**30 = 84,825,604,096 plus
    0.11 * 2**30 = 118,111,600.6, so 84,943,715,696.6 -> 84,943,715,697 B.
    """
    h = load_hardware("h100-sxm")
    assert h.vendor == "nvidia" and h.form_factor == "SXM5"
    assert h.peak_tflops["bf16"] == pytest.approx(989.4, abs=0.5)
    assert h.peak_flops("bf16") == pytest.approx(989.4e12, rel=1e-9)
    assert h.peak_flops("fp8") == pytest.approx(1978.9e12, rel=1e-9)
    assert h.hbm_bandwidth_gbps == 3350
    assert h.hbm_bandwidth_bytes_per_s == pytest.approx(3.35e12)
    assert h.mem_total_bytes == 84_943_715_697
    assert h.intra_node_bandwidth_bytes_per_s == pytest.approx(450e9)
    assert h.inter_node_bandwidth_bytes_per_s == pytest.approx(50e9)
    assert "int4" not in h.peak_tflops


@pytest.mark.parametrize(
    ("name", "dtype", "unit", "tflops"),
    [
        ("h100-sxm", "int4", "bf16", 989.4),   # Hopper has no int4 tensor unit
        ("h100-sxm", "fp4", "fp8", 1978.9),    # fp4 weights run on the fp8 unit
        ("a100-80gb", "fp8", "bf16", 312),     # Ampere has no fp8 unit
        ("a100-80gb", "int4", "int4", 1248),   # but it does have int4
        ("a10g", "int8", "bf16", 70),          # no int8 figure sourced for the A10G
        ("b200", "fp4", "fp4", 9000),
        ("mi300x", "fp4", "fp8", 2614.9),
        ("rtx-4090", "fp16", "fp16", 165.2),
    ],
)
def test_peak_flops_fallback(name: str, dtype: str, unit: str, tflops: float) -> None:
    hw = load_hardware(name)
    assert hw.compute_dtype(dtype) == unit
    assert hw.peak_flops(dtype) == pytest.approx(tflops * 1e12)


def test_unknown_dtype_is_an_input_error() -> None:
    with pytest.raises(InputError, match=r"unknown dtype 'fp2'.*bf16"):
        load_hardware("h100-sxm").peak_flops("fp2")


def test_sparse_figures_are_not_used_for_l4() -> None:
    """The L4 datasheet prints only sparse figures (BF16 242*, FP8 485*); dense is half."""
    l4 = load_hardware("l4")
    assert l4.peak_tflops["bf16"] == pytest.approx(242 / 2)
    assert l4.peak_tflops["fp8"] == pytest.approx(485 / 2)


@pytest.mark.parametrize("model", [HardwareProfile, Assumptions])
def test_every_field_is_documented_with_a_unit_or_meaning(model: type) -> None:
    from capplan.options import field_docs

    docs = field_docs(model.__module__, model.__name__)
    for field in model.model_fields:
        assert len(docs.get(field, "")) > 15, f"{model.__name__}.{field}"
    hw_docs = field_docs(HardwareProfile.__module__, "HardwareProfile")
    for field in ("mem_total_gib", "hbm_bandwidth_gbps", "peak_tflops", "intra_node_bandwidth_gbps"):
        assert "[" in hw_docs[field], field


# ----------------------------------------------------------------------------- error paths


def _edited_copy(tmp_path: Path, edit) -> Path:
    """Copy h100-sxm.yaml to tmp_path/edited.yaml after applying ``edit`` to its lines."""
    lines = (PROFILE_DIR / "h100-sxm.yaml").read_text(encoding="utf-8").splitlines()
    target = tmp_path / "edited.yaml"
    target.write_text("\n".join(edit(lines)) + "\n", encoding="utf-8")
    return target


def _drop_source(key: str):
    def edit(lines: list[str]) -> list[str]:
        out, skipping = [], False
        for line in lines:
            if line.startswith(f"  {key}:"):
                skipping = True
                continue
            if skipping and line.startswith("    "):
                continue
            skipping = False
            out.append(line)
        return out

    return edit


@pytest.mark.parametrize(
    "key", ["peak_tflops.fp8", "mem_total_gib", "inter_node_bandwidth_gbps"]
)
def test_missing_source_names_file_and_field(tmp_path: Path, key: str) -> None:
    path = _edited_copy(tmp_path, _drop_source(key))
    expected = key
    with pytest.raises(InputError) as err:
        load_hardware(str(path))
    message = str(err.value)
    assert message.startswith(str(path))
    assert "sources" in message and expected in message and "missing source" in message


def test_unknown_key_names_file_field_and_suggestion(tmp_path: Path) -> None:
    path = _edited_copy(tmp_path, lambda ls: [*ls, "hbm_bandwith_gbps: 3350"])
    with pytest.raises(InputError, match=r"edited\.yaml: hbm_bandwith_gbps \(line \d+\): unknown key; "
                       r"did you mean 'hbm_bandwidth_gbps'"):
        load_hardware(str(path))


def test_unknown_source_key_is_rejected(tmp_path: Path) -> None:
    path = _edited_copy(tmp_path, lambda ls: [*ls, "  peak_tflops.fp9: a typo"])
    with pytest.raises(InputError, match=r"edited\.yaml: sources \(line \d+\): unknown source key 'peak_tflops.fp9'"):
        load_hardware(str(path))


def test_sparse_dtype_key_is_rejected(tmp_path: Path) -> None:
    path = _edited_copy(tmp_path, lambda ls: [l.replace("  fp8: 1978.9", "  fp9: 1978.9") for l in ls])
    with pytest.raises(InputError, match=r"edited\.yaml: peak_tflops\.fp9"):
        load_hardware(str(path))


def test_zero_peak_is_rejected(tmp_path: Path) -> None:
    path = _edited_copy(tmp_path, lambda ls: [l.replace("  fp8: 1978.9", "  fp8: 0") for l in ls])
    with pytest.raises(InputError, match=r"peak_tflops .*must be > 0"):
        load_hardware(str(path))


def test_a_legacy_assumptions_block_loads_with_a_warning(tmp_path: Path) -> None:
    """Files written for earlier versions still load; the block is ignored, and the warning says
    where efficiencies come from now (the engine profile)."""
    block = [
        "assumptions:", "  compute_efficiency: 0.7", "  bandwidth_efficiency: 0.8", "  interconnect_efficiency: 0.7",
        "  allreduce_latency_us: 10", "  step_overhead_s: 0.002", "  note: ASSUMPTIONS, not vendor figures",
    ]
    path = _edited_copy(tmp_path, lambda ls: [*ls[: ls.index("sources:")], *block, *ls[ls.index("sources:"):],
                                              "  assumptions: 'ASSUMPTION - the former shared defaults'"])
    with pytest.warns(UserWarning, match="assumptions block is ignored.*engine profile"):
        hw = load_hardware(str(path))
    assert hw.hbm_bandwidth_gbps == 3350


def test_an_efficiency_above_one_in_a_legacy_block_is_still_rejected(tmp_path: Path) -> None:
    block = [
        "assumptions:", "  compute_efficiency: 1.5", "  bandwidth_efficiency: 0.8", "  interconnect_efficiency: 0.7",
        "  allreduce_latency_us: 10", "  step_overhead_s: 0.002", "  note: ASSUMPTIONS",
    ]
    path = _edited_copy(tmp_path, lambda ls: [*ls[: ls.index("sources:")], *block, *ls[ls.index("sources:"):],
                                              "  assumptions: ASSUMPTION"])
    with pytest.raises(InputError, match=r"assumptions\.compute_efficiency \(line \d+\)"):
        load_hardware(str(path))


def test_unknown_name_lists_bundled_names() -> None:
    with pytest.raises(NotFoundError) as err:
        load_hardware("h100-sxm5")
    message = str(err.value)
    assert "did you mean 'h100-sxm'" in message
    for name in EXPECTED_NAMES:
        assert name in message


def test_bundled_file_whose_name_differs_from_stem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copy(PROFILE_DIR / "h100-sxm.yaml", tmp_path / "x100.yaml")
    monkeypatch.setattr(resources, "bundled_dir", lambda kind: tmp_path)
    with pytest.raises(InputError, match=r"x100\.yaml: name: must equal the file stem 'x100', got 'h100-sxm'"):
        load_hardware("x100")


def test_user_file_may_use_any_stem(tmp_path: Path) -> None:
    """The stem rule binds bundled files only: a user's copy under another name loads."""
    target = tmp_path / "my-cluster.yaml"
    shutil.copy(PROFILE_DIR / "h100-sxm.yaml", target)
    assert load_hardware(str(target)).name == "h100-sxm"


def test_profile_is_frozen() -> None:
    hw = load_hardware("l4")
    with pytest.raises(Exception):
        hw.hbm_bandwidth_gbps = 1.0  # type: ignore[misc]
    assert math.isclose(hw.hbm_bandwidth_gbps, 300)


def test_a_renamed_copy_of_a_bundled_chip_is_warned_that_it_loses_the_fitted_terms(tmp_path):
    """Engine profiles key per-hardware fitted terms by profile name: a copy of h100-sxm.yaml renamed
    my-h100 was priced with the family's all-reduce terms (35.5 us, not H100's 3.95 us) without a word."""
    from capplan.hardware import load_hardware

    text = (resources.bundled_dir("hardware_profiles") / "h100-sxm.yaml").read_text(encoding="utf-8")
    (tmp_path / "my-h100.yaml").write_text(text.replace("name: h100-sxm", "name: my-h100", 1), encoding="utf-8")
    with pytest.warns(UserWarning, match=r"my-h100 is the NVIDIA H100 SXM5 80GB of the bundled h100-sxm, .* name it h100-sxm"):
        load_hardware(tmp_path / "my-h100.yaml")
    (tmp_path / "h100-sxm.yaml").write_text(text, encoding="utf-8")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_hardware(tmp_path / "h100-sxm.yaml").name == "h100-sxm"  # same name: the overrides apply, no warning
