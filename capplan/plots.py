"""Every matplotlib figure capplan draws: the simulator's timeline and staleness sweep, and the roofline.

matplotlib is optional (the ``plot`` extra) and imported only when a figure is drawn. Figures
are written atomically (:func:`capplan.output.atomic_path`) and never over an existing file
without ``force``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from capplan.errors import InputError
from capplan.output import atomic_path, ensure_new

if TYPE_CHECKING:
    from capplan.hardware import HardwareProfile
    from capplan.modelspec import ModelSpec
    from capplan.roofline import RooflineInputs
    from capplan.sim.result import SimResult


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise InputError("plotting needs matplotlib: pip install 'capplan[plot]'") from None
    return plt


def _save_figure(fig: Any, path: str | Path, force: bool) -> Path:
    """Save ``fig`` atomically (format from the suffix, PNG without one) and close it.

    Raises
    ------
    OutputExistsError
        ``path`` exists and ``force`` is false.
    """
    plt = _pyplot()
    path = Path(path)
    try:
        with atomic_path(path, force) as tmp:
            fig.savefig(tmp, format=path.suffix.lstrip(".").lower() or "png", dpi=110)
    finally:
        plt.close(fig)
    return path


def plot_timeline(result: "SimResult", path: str | Path, force: bool = False) -> Path:
    """Plot running batch, KV occupancy, queues and the trainer's state over time (PNG/SVG/PDF).

    Raises
    ------
    InputError
        matplotlib is missing (install the ``plot`` extra), or the file exists without ``force``.
    """
    plt = _pyplot()
    path = ensure_new(path, force)
    tl = result.timeline
    t = tl["t_s"]
    fig, ax = plt.subplots(4, 1, figsize=(9, 8), sharex=True)
    cfg = result.config
    mode = cfg["mode"] + (f", K={cfg['max_staleness']}" if cfg["mode"] == "async" else "")
    fig.suptitle(
        f"{result.workload} on {cfg['inference_replicas']} x {result.hardware} (tp {cfg['tp']}), {mode}"
        f"{', static batching' if cfg['static_batching'] else ''}",
        fontsize=10,
    )
    ax[0].step(t, tl["running_batch"], where="post", lw=0.8)
    ax[0].set_ylabel("running batch\n(per replica)")
    ax[1].step(t, [100 * x for x in tl["kv_occupancy"]], where="post", lw=0.8, color="tab:orange")
    ax[1].set_ylabel("KV occupancy [%]")
    ax[1].set_ylim(0, 105)
    for q, c in (("task", "tab:gray"), ("inference_waiting", "tab:red"), ("environment_waiting", "tab:purple"),
                 ("tool_executing", "tab:green"), ("result", "tab:blue")):
        ax[2].step(t, tl[q], where="post", lw=0.8, label=q.replace("_", " "), color=c)
    ax[2].set_ylabel("queue length")
    ax[2].legend(fontsize=7, ncol=5, loc="lower right", bbox_to_anchor=(1.0, 1.0), frameon=False)
    st = tl["trainer_state"]
    ax[3].fill_between(t, [1 if s == 1 else 0 for s in st], step="post", color="tab:green", alpha=0.6, label="training")
    ax[3].fill_between(t, [1 if s == 2 else 0 for s in st], step="post", color="tab:olive", alpha=0.6, label="pushing weights")
    ax[3].set_yticks([])
    ax[3].set_ylabel("trainer")
    ax[3].legend(fontsize=7, loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=2, frameon=False)
    ax[3].set_xlabel("simulated time [s]")
    fig.tight_layout()
    return _save_figure(fig, path, force)


def plot_sweep(results: "list[SimResult]", path: str | Path, force: bool = False) -> Path:
    """Bar chart of completed and accepted trajectories/s per run of :func:`sweep_staleness`."""
    plt = _pyplot()
    names = ["sync" if r.config["mode"] == "sync" else f"async K={r.config['max_staleness']}" for r in results]
    comp = [r.summary["completed_trajectories_per_s"] for r in results]
    acc = [r.summary["accepted_trajectories_per_s"] for r in results]
    idle = [100 * r.summary["trainer_idle_fraction"] for r in results]
    x = list(range(len(results)))
    fig, ax = plt.subplots(figsize=(8, 4.2))
    ax.bar([i - 0.2 for i in x], comp, width=0.4, label="completed", color="tab:gray")
    ax.bar([i + 0.2 for i in x], acc, width=0.4, label="accepted", color="tab:blue")
    for i, r in enumerate(results):
        stale = r.summary["rejected_stale_fraction"]
        if stale > 0:
            ax.annotate(f"stale {stale:.0%}", (i + 0.2, acc[i]), textcoords="offset points", xytext=(0, 3),
                        ha="center", fontsize=8)
    ax.set_xticks(x, names)
    ax.set_ylabel("trajectories / simulated s")
    ax2 = ax.twinx()
    ax2.plot(x, idle, "o-", color="tab:red", label="trainer idle")
    ax2.set_ylabel("trainer idle [%]", color="tab:red")
    ax2.set_ylim(0, 100)
    r0 = results[0]
    ax.set_title(
        f"{r0.workload} on {r0.config['inference_replicas']} x {r0.hardware}: completed vs accepted, same tasks",
        fontsize=10,
    )
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=3, frameon=False)
    fig.tight_layout()
    return _save_figure(fig, path, force)


def plot_roofline(
    spec: "ModelSpec",
    hw: "HardwareProfile",
    inp: "RooflineInputs",
    rows: list[dict[str, Any]],
    decode_curves: "list[tuple[int, Any, Any]]",
    path: str | Path,
    force: bool = False,
) -> Path:
    """Left: the roofline (log-log) with each row's operating point; right: decode tokens/s vs batch.

    Parameters
    ----------
    rows : list of dict
        Rows of :func:`capplan.roofline.roofline_rows`.
    decode_curves : list of (int, array, array)
        ``(context, batch, tokens_per_s)`` per curve: context [positions], decode batch
        [sequences] and output tokens per second of the whole TP group [tokens/s].
    path : str or Path
        Figure file; the format follows the suffix. Written atomically, never over a file
        without ``force``.
    """
    import numpy as np

    plt = _pyplot()
    path = ensure_new(path, force)
    r = inp.resolved(hw)
    dtype = r.gemm_dtype or "bf16"
    peak, bw = hw.peak_flops(dtype), hw.hbm_bandwidth_bytes_per_s
    ce, be = r.compute_efficiency or 1.0, r.bandwidth_efficiency or 1.0
    ai = np.array([row["arithmetic_intensity"] for row in rows])
    attained = np.array([row["flops"] / row["step_time_s"] for row in rows])
    lo = min(ai.min(), 1.0) / 3
    hi = max(ai.max(), peak / bw) * 3
    x = np.logspace(np.log10(lo), np.log10(hi), 200)

    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(13, 5.2))
    ax.loglog(x, np.minimum(peak, bw * x) / 1e12, color="black", label=f"datasheet: {bw / 1e12:.2f} TB/s, {peak / 1e12:,.0f} TFLOP/s {dtype}")
    ax.loglog(x, np.minimum(peak * ce, bw * be * x) / 1e12, color="black", ls="--", label=f"derated: x{be:g} bandwidth, x{ce:g} compute (assumed)")
    if dtype != "bf16":
        p16 = hw.peak_flops("bf16")
        ax.axhline(p16 / 1e12, color="grey", ls=":", label=f"bf16 ceiling {p16 / 1e12:,.0f} TFLOP/s (attention, LM head)")
    ax.axvline(peak / bw, color="grey", lw=0.6, label=f"ridge {peak / bw:,.0f} FLOP/B (derated {peak * ce / (bw * be):,.0f})")
    for i, (row, xi, yi) in enumerate(zip(rows, ai, attained)):
        color = "tab:red" if row["bound"] == "compute" else "tab:blue"
        ax.plot(xi, yi / 1e12, "o", color=color, ms=5)
        label = f"B={row['batch']}" + (f" c={row['context']}" if row["kind"] != "score" else "") + (f" p={row['prompt']}" if row["prompt"] else "")
        ax.annotate(label, (xi, yi / 1e12), textcoords="offset points", xytext=(5, -11 if i % 2 else 3), fontsize=7)
    ax.set_xlabel("arithmetic intensity [FLOP/byte, per GPU]")
    ax.set_ylabel("attained [TFLOP/s per GPU]")
    ax.set_title(f"{spec.name} on {hw.name}, TP{inp.tp}, W {inp.weight_dtype} / KV {inp.kv_dtype}: {rows[0]['kind']}", fontsize=10)
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(True, which="both", lw=0.3)

    for context, batch, tokens_per_s in decode_curves:
        ax2.plot(batch, tokens_per_s, label=f"context {context:,}")
    ax2.set_xscale("log", base=2)
    ax2.set_xlabel("decode batch [sequences]")
    ax2.set_ylabel("decode output tokens/s (whole TP group)")
    ax2.set_title("decode throughput vs batch (roofline)", fontsize=10)
    ax2.grid(True, which="both", lw=0.3)
    ax2.legend(fontsize=7)
    fig.tight_layout()
    return _save_figure(fig, path, force)
