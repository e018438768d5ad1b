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
    "nvfp4": ("fp4", "fp8", "bf16", "fp16"),
    "mxfp4": ("fp4", "fp8", "bf16", "fp16"),
}

WEIGHT_UNIT: dict[str, str] = {"nvfp4": "fp4", "mxfp4": "fp4"}
"""The tensor unit a weight format's GEMMs run on at full rate, where it differs from the format's
own name (NVFP4 and MXFP4 both run on the FP4 unit of Blackwell-class chips)."""


class DtypeFallbackWarning(UserWarning):
    """A weight dtype's GEMMs run on a slower tensor unit than the format's own (e.g. fp8 weights
    on an A100, which has no FP8 unit, are dequantised and multiplied in bf16)."""

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

    host_link_bandwidth_gbps: float | None = Field(default=None, gt=0)
    """Per-GPU, one-direction bandwidth between the GPU and host (CPU) memory [decimal GB/s]: PCIe
    Gen5 x16 = 64 (datasheets print 128 for both directions), NVLink-C2C on Grace superchips;
    ``null`` when not recorded. Prices CPU KV offload (:mod:`capplan.offload`)."""

    host_mem_gb_per_node: float | None = Field(default=None, gt=0)
    """Host (CPU) DRAM of one typical server of this kind [the vendor's "GB"/"TB" figure x 1000
    for TB, as printed]; ``null`` when not recorded. Bounds the CPU tier of an offloaded KV cache."""

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

    def has_unit(self, dtype: str) -> bool:
        """Whether the hardware has a tensor unit of its own for a weight or GEMM ``dtype`` (nvfp4
        and mxfp4 need ``peak_tflops.fp4``)."""
        return WEIGHT_UNIT.get(dtype, dtype) in self.peak_tflops

    def gemm_unit(self, weight_dtype: str, gemm_dtype: str | None = None, flag: str = "--weight-dtype") -> str:
        """The tensor unit the GEMMs of ``weight_dtype`` weights run on, saying so when it is slower.

        Parameters
        ----------
        weight_dtype : str
            Dtype of the weights (``bf16`` ... ``int4``, ``nvfp4``, ``mxfp4``).
        gemm_dtype : str, optional
            The unit the user asked for (a weight-only kernel, e.g. ``bf16`` for W4A16); ``None``:
            the format's own unit.
        flag : str
            The flag or field that named ``weight_dtype``, for the message.

        Returns
        -------
        str
            A key of ``peak_tflops``.

        Raises
        ------
        InputError
            An FP4 format (nvfp4, mxfp4) on hardware without an FP4 unit and no ``gemm_dtype``:
            engines run such checkpoints there only with weight-only kernels, which the user must
            ask for (``--gemm-dtype bf16``), never a silent substitute.

        Warns
        -----
        DtypeFallbackWarning
            fp8 or int8 weights on hardware without that unit (their GEMMs fall back to 16-bit).
        """
        if gemm_dtype is not None:
            return self.compute_dtype(gemm_dtype)
        if weight_dtype in WEIGHT_UNIT and not self.has_unit(weight_dtype):
            raise InputError(
                f"{flag} {weight_dtype}: {self.name} has no FP4 tensor unit (peak_tflops lists "
                f"{', '.join(self.peak_tflops)}); engines run FP4 checkpoints there only with weight-only "
                "kernels (e.g. vLLM's Marlin W4A16): give --gemm-dtype bf16 to price that, or pick a chip with "
                "FP4 (b200, gb200)"
            )
        unit = self.compute_dtype(weight_dtype)
        if weight_dtype in ("fp8", "int8") and unit != weight_dtype:
            import warnings

            warnings.warn(
                f"{flag} {weight_dtype}: {self.name} has no {weight_dtype} tensor unit; its GEMMs are priced "
                f"on {unit} (weight-only kernels, W8A16), not at the {weight_dtype} rate",
                DtypeFallbackWarning,
                stacklevel=2,
            )
        return unit

    def dtype_support(self) -> dict[str, str]:
        """Which weight dtype runs at which tensor unit's rate: ``"full rate"`` when the hardware has
        the format's own unit, else what it falls back to.

        Examples
        --------
        >>> load_hardware("h100-sxm").dtype_support()["nvfp4"]
        'no fp4 unit: weight-only kernels (--gemm-dtype bf16) at the bf16 rate'
        >>> load_hardware("b200").dtype_support()["nvfp4"]
        'full rate (fp4)'
        """
        out = {}
        for d in ("bf16", "fp16", "fp8", "int8", "int4", "nvfp4", "mxfp4"):
            unit = WEIGHT_UNIT.get(d, d)
            if unit in self.peak_tflops:
                out[d] = f"full rate ({unit})"
            elif d in WEIGHT_UNIT:
                out[d] = f"no {unit} unit: weight-only kernels (--gemm-dtype bf16) at the {self.compute_dtype('bf16')} rate"
            else:
                out[d] = f"no {unit} unit: falls back to {self.compute_dtype(d)}"
        return out

    @property
    def host_link_bandwidth_bytes_per_s(self) -> float | None:
        """Per-GPU one-direction GPU-host bandwidth [bytes/s]; ``None`` when not recorded."""
        return None if self.host_link_bandwidth_gbps is None else self.host_link_bandwidth_gbps * 1e9

    @property
    def host_mem_bytes_per_gpu(self) -> float | None:
        """Host DRAM per GPU, ``host_mem_gb_per_node x 1e9 / gpus_per_node`` [bytes]; ``None`` when
        not recorded."""
        return None if self.host_mem_gb_per_node is None else self.host_mem_gb_per_node * 1e9 / self.gpus_per_node

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
            "host_link_bandwidth_gbps",
            "host_mem_gb_per_node",
            "price_usd_per_gpu_hour",
        )
        if data.get(f) is not None
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


def _warn_unfitted_copy(path: Path, profile: HardwareProfile) -> None:
    """Warn when a user's profile under a new name is a bundled chip: engine profiles key their
    fitted per-hardware terms by profile name, so the copy is priced with the family terms."""
    import warnings

    for name in resources.bundled_names("hardware_profiles"):
        bundled = load_hardware(name)
        if bundled.full_name == profile.full_name:
            warnings.warn(
                f"{path}: {profile.name} is the {bundled.full_name} of the bundled {name}, whose fitted engine terms "
                f"(e.g. all-reduce latency, GEMM efficiency) are keyed by the name {name}: {profile.name} is priced "
                f"with the engine family's terms instead; name it {name} to keep them",
                UserWarning,
                stacklevel=3,
            )
            return


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
    if path.resolve().parent != bundled.resolve() and profile.name not in resources.bundled_names("hardware_profiles"):
        _warn_unfitted_copy(path, profile)
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
