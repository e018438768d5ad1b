"""Accelerator hardware profiles: memory, bandwidth, peak dense FLOP/s, interconnect.

A profile is one YAML file under ``hardware_profiles/`` (see its ``README.md``), validated by
:class:`HardwareProfile`. Every numeric field carries a citation in ``sources``.

A hardware profile holds only the chip. What a serving engine reaches of it (bandwidth and GEMM
efficiency, host time per step) is an engine profile's (:mod:`capplan.engine`).

Units follow the names: ``_gb``/``_gbps`` are decimal (10^9 bytes, 10^9 bytes/s), ``_gib`` is
binary (2^30 bytes), ``_tflops`` is 10^12 FLOP/s (or integer ops/s for ``int8``/``int4``).
All peak figures are **dense**: vendor datasheets that quote 2:4 structured-sparsity figures
(marked with an asterisk) are halved.

Examples
--------
>>> h100 = load_hardware("h100-sxm")
>>> h100.peak_flops("bf16")
989400000000000.0
>>> round(h100.hbm_bandwidth_bytes_per_s / 1e12, 2)
3.35
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from capplan import resources
from capplan.errors import InputError
from capplan.yamlio import load_model

Vendor = Literal["nvidia", "amd"]
Dtype = Literal["bf16", "fp16", "fp8", "int8", "int4", "fp4"]

#: Dtypes a ``peak_tflops`` mapping may name, narrowest last.
DTYPES: tuple[str, ...] = ("bf16", "fp16", "fp8", "int8", "int4", "fp4")

#: Which tensor unit a GEMM in each dtype runs on when the hardware has no unit of its own for
#: it, tried in order. Weight-only quantised formats (int4/int8/fp8 weights on hardware without
#: that unit, e.g. Marlin-style W4A16 kernels) dequantise to the 16-bit activation type and
#: multiply there, so they fall back to bf16/fp16; fp4 falls back to fp8 first because fp4
#: weights on an fp8-capable GPU are usually run as W4A8 or upcast to fp8.
FALLBACK: dict[str, tuple[str, ...]] = {
    "bf16": ("bf16", "fp16"),
    "fp16": ("fp16", "bf16"),
    "fp8": ("fp8", "bf16", "fp16"),
    "int8": ("int8", "bf16", "fp16"),
    "int4": ("int4", "bf16", "fp16"),
    "fp4": ("fp4", "fp8", "bf16", "fp16"),
}

_GIB = 2**30


class Assumptions(BaseModel):
    """Achievable-efficiency defaults. These are ASSUMPTIONS, not vendor figures.

    Planners multiply the vendor peaks by these factors; calibrate them against your own
    measurements (a large GEMM, a bandwidth-bound copy, an NCCL all-reduce, one decode step).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    compute_efficiency: float = Field(gt=0, le=1)
    """Assumed fraction [0-1] of dense peak tensor FLOP/s reached by large GEMMs."""

    bandwidth_efficiency: float = Field(gt=0, le=1)
    """Assumed fraction [0-1] of the datasheet HBM/GDDR bandwidth reached by streaming kernels."""

    interconnect_efficiency: float = Field(gt=0, le=1)
    """Assumed fraction [0-1] of the per-GPU link bandwidth reached by collectives (bus bandwidth)."""

    allreduce_latency_us: float = Field(ge=0)
    """Assumed fixed latency [microseconds] of one all-reduce, paid even for tiny messages."""

    step_overhead_s: float = Field(ge=0)
    """Assumed fixed host-side time [s] per engine step (scheduling, sampling, launch)."""

    note: str = Field(min_length=1)
    """Free text: where each default comes from, with citations; must say they are assumptions."""


class HardwareProfile(BaseModel):
    """One accelerator model as deployed in a typical server, with a source for every figure."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9.\-]*$")
    """Short lower-case identifier, e.g. ``h100-sxm``; equals the file stem for bundled files."""

    full_name: str = Field(min_length=1)
    """Marketing name with memory size, e.g. ``NVIDIA H100 SXM5 80GB``."""

    vendor: Vendor
    """Vendor: ``nvidia`` or ``amd``."""

    form_factor: str = Field(min_length=1)
    """Package / board form factor, e.g. ``SXM5``, ``PCIe``, ``OAM``."""

    mem_marketed_gb: float = Field(gt=0)
    """Device memory as marketed [the vendor's "GB" figure, e.g. 80 for "80GB"]; no unit conversion applied."""

    mem_total_gib: float = Field(gt=0)
    """Total device memory a framework sees [GiB = 2^30 B]: ``torch.cuda.mem_get_info()[1] / 2**30``."""

    hbm_bandwidth_gbps: float = Field(gt=0)
    """Peak device-memory (HBM or GDDR) bandwidth [decimal GB/s = 10^9 B/s]."""

    peak_tflops: dict[Dtype, float]
    """Dense (not 2:4-sparse) peak tensor throughput per dtype [10^12 FLOP/s, or ops/s for int]."""

    gpus_per_node: int = Field(ge=1)
    """GPUs in one typical server of this kind [count], e.g. 8 for an HGX board."""

    intra_node_bandwidth_gbps: float = Field(gt=0)
    """Per-GPU, one-direction bandwidth to the other GPUs of the node [decimal GB/s]."""

    inter_node_bandwidth_gbps: float = Field(gt=0)
    """Per-GPU, one-direction network bandwidth to other nodes [decimal GB/s]; 400 Gb/s NIC = 50."""

    price_usd_per_gpu_hour: float | None = Field(default=None, gt=0, le=10_000)
    """A public on-demand list price of one GPU-hour [USD/GPU-hour], for serving costs per token;
    its ``sources`` entry names the price list and the date it was read. ``None``: no price
    (give ``capplan plan --gpu-hour-price``)."""

    assumptions: Assumptions | None = None
    """Deprecated and ignored: achievable efficiencies now belong to engine profiles
    (``engine_profiles/``, ``--engine``), since they are properties of the serving engine, not of
    the chip. A file that still has the block loads, with a warning."""

    sources: dict[str, str]
    """Citation per field: ``field`` or dotted ``peak_tflops.fp8``; one ``assumptions`` entry may cover that block."""

    @field_validator("peak_tflops")
    @classmethod
    def _check_peaks(cls, value: dict[str, float]) -> dict[str, float]:
        bad = [f"{k}={v}" for k, v in value.items() if not v > 0]
        if bad:
            raise ValueError(f"every peak must be > 0 TFLOP/s, got {', '.join(bad)}")
        if "bf16" not in value and "fp16" not in value:
            raise ValueError("must give at least one 16-bit entry (bf16 or fp16); other dtypes fall back to it")
        return value

    @field_validator("sources")
    @classmethod
    def _check_sources(cls, value: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        required = _numeric_keys(info.data)
        allowed = set(required) | {f for f in cls.model_fields if f not in ("sources", "peak_tflops")}
        unknown = sorted(k for k in value if k not in allowed)
        if unknown:
            raise ValueError(
                f"unknown source key {', '.join(repr(k) for k in unknown)} "
                f"(allowed: {', '.join(sorted(allowed))})"
            )
        empty = sorted(k for k, v in value.items() if not v.strip())
        if empty:
            raise ValueError(f"empty citation for {', '.join(empty)}")
        covers_assumptions = "assumptions" in value
        missing = [
            k
            for k in required
            if k not in value and not (covers_assumptions and k.startswith("assumptions."))
        ]
        if missing:
            raise ValueError(
                f"missing source for {', '.join(missing)} (every numeric field needs a citation; "
                "use dotted keys such as 'peak_tflops.fp8'; one 'assumptions' entry may cover that block)"
            )
        return value

    def compute_dtype(self, dtype: str) -> str:
        """The tensor unit a GEMM in ``dtype`` runs on for this hardware.

        ``dtype`` itself when the hardware lists it in ``peak_tflops``, else the first entry of
        :data:`FALLBACK` that it lists (e.g. int4 weights on an H100, which has no int4 unit,
        are multiplied in bf16).

        Raises
        ------
        InputError
            When ``dtype`` is not one of :data:`DTYPES`.
        """
        if dtype not in FALLBACK:
            raise InputError(f"unknown dtype '{dtype}' (allowed: {', '.join(DTYPES)})")
        for candidate in FALLBACK[dtype]:
            if candidate in self.peak_tflops:
                return candidate
        raise AssertionError("validator guarantees a bf16 or fp16 entry")  # pragma: no cover

    def peak_flops(self, dtype: str) -> float:
        """Dense peak tensor throughput for GEMMs in ``dtype`` [FLOP/s].

        Parameters
        ----------
        dtype : str
            One of :data:`DTYPES`. A dtype the hardware has no unit for falls back as in
            :data:`FALLBACK`, e.g. int4 on an H100 returns the bf16 rate, fp8 on an A100
            returns the bf16 rate, fp4 on an H100 returns the fp8 rate.

        Returns
        -------
        float
            ``peak_tflops[compute_dtype(dtype)] * 1e12`` [FLOP/s]. Not derated: multiply by
            ``assumptions.compute_efficiency`` for an achievable figure.

        Notes
        -----
        For weight-only quantisation (W4A16, W8A16) ask for the *activation* dtype: the
        multiply happens there even on hardware that has an int4/int8 unit.
        """
        return self.peak_tflops[self.compute_dtype(dtype)] * 1e12  # type: ignore[index]

    @property
    def mem_total_bytes(self) -> int:
        """Total device memory a framework sees [bytes]: ``round(mem_total_gib * 2**30)``."""
        return round(self.mem_total_gib * _GIB)

    @property
    def hbm_bandwidth_bytes_per_s(self) -> float:
        """Peak device-memory bandwidth [bytes/s]: ``hbm_bandwidth_gbps * 1e9``."""
        return self.hbm_bandwidth_gbps * 1e9

    @property
    def intra_node_bandwidth_bytes_per_s(self) -> float:
        """Per-GPU one-direction intra-node bandwidth [bytes/s]: ``intra_node_bandwidth_gbps * 1e9``."""
        return self.intra_node_bandwidth_gbps * 1e9

    @property
    def inter_node_bandwidth_bytes_per_s(self) -> float:
        """Per-GPU one-direction inter-node bandwidth [bytes/s]: ``inter_node_bandwidth_gbps * 1e9``."""
        return self.inter_node_bandwidth_gbps * 1e9


def _numeric_keys(data: dict[str, object]) -> list[str]:
    """Source keys required for the numeric fields present in (partially validated) ``data``."""
    keys = [
        f
        for f in (
            "mem_marketed_gb",
            "mem_total_gib",
            "hbm_bandwidth_gbps",
            "gpus_per_node",
            "intra_node_bandwidth_gbps",
            "inter_node_bandwidth_gbps",
            "price_usd_per_gpu_hour",
        )
        if f in data and data[f] is not None
    ]
    peaks = data.get("peak_tflops")
    if isinstance(peaks, dict):
        keys += [f"peak_tflops.{d}" for d in DTYPES if d in peaks]
    if isinstance(data.get("assumptions"), Assumptions):
        keys += [
            f"assumptions.{f}"
            for f, info in Assumptions.model_fields.items()
            if info.annotation in (float, int)
        ]
    return keys


def load_hardware(name_or_path: str | Path) -> HardwareProfile:
    """Load a bundled hardware profile by name (``h100-sxm``) or a user's YAML file by path.

    Raises
    ------
    NotFoundError
        Neither an existing file nor a bundled name; the message lists the bundled names.
    InputError
        The file is not valid YAML, breaks the schema (message names file, field and line),
        or is a bundled file whose ``name`` differs from its file stem.
    """
    path = resources.resolve("hardware_profiles", name_or_path)
    profile = load_model(path, HardwareProfile)
    bundled = resources.bundled_dir("hardware_profiles")
    if path.resolve().parent == bundled.resolve() and profile.name != path.stem:
        raise InputError(f"{path}: name: must equal the file stem '{path.stem}', got '{profile.name}'")
    if profile.assumptions is not None:
        import warnings

        warnings.warn(
            f"{path}: the assumptions block is ignored: efficiencies and step overheads now come from the engine "
            "profile (--engine; capplan calibrate writes one from your measurements)",
            UserWarning,
            stacklevel=2,
        )
    return profile


def list_hardware() -> list[HardwareProfile]:
    """All bundled hardware profiles, sorted by name."""
    return [load_hardware(name) for name in resources.bundled_names("hardware_profiles")]
