"""How many conversations of a workload a replica can hold, and how many of them can decode.

A conversation alternates between decoding (it needs a decode slot and its KV grows) and waiting
on a tool (no GPU work; its KV stays resident with ``kv_during_tool_wait: retain`` and is freed
with ``evict``). A waiting conversation is not GPU demand, so waiting and runnable
conversations are reported separately.

By Little's law, with ``N`` conversations resident in steady state the KV in use is
``N x E[KV-token-seconds per conversation] / E[lifetime]``. Setting that equal to the KV
capacity gives the largest ``N``::

    N = capacity_tokens x E[lifetime] / E[K]
    K = sum_j (I_j + a_j / 2) a_j t_tok  +  [retain] sum_j (I_j + a_j) w_j

(for sliding-window layers the context in ``K`` is capped at the window: a share ``s`` of the
attention layers holds ``min(c, W)`` instead of ``c``)
    lifetime = sum_j a_j t_tok + sum_j w_j

with turn ``j``'s input ``I_j``, sampled actions ``a_j``, tool wait ``w_j`` and time per output
token ``t_tok``. Runnable = ``N x E[decode time] / E[lifetime]``, capped by the scheduler's
``max_num_seqs``. ``t_tok`` is the decode step time at that runnable batch, found by fixed-point
iteration (it depends on the batch, which depends on it).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    import numpy as np

    from capplan.hardware import HardwareProfile
    from capplan.kv import KVResult
    from capplan.ledger import Conversations
    from capplan.modelspec import ModelSpec
    from capplan.workload import Workload


@dataclass(frozen=True)
class WorkloadConcurrency:
    """Conversations of one workload per replica (a JSON object under ``workload_concurrency``)."""

    workload: str
    kv_during_tool_wait: str
    mean_kv_tokens_held: float
    """Time-averaged KV a conversation holds over its lifetime [tokens]."""
    resident_conversations: float
    """Conversations whose KV fits at once, by Little's law [conversations]."""
    runnable_sequences: float
    """Of those, decoding at any moment (need a decode slot) [sequences]."""
    waiting_conversations: float
    """Of those, waiting on a tool (no GPU work) [conversations]."""
    resident_at_p95_peak: int
    """Conservative: conversations that fit if each holds its p95 final context [conversations]."""
    decode_step_s: float
    """Decode step time at the runnable batch [s] (= time per output token)."""
    mean_lifetime_s: float
    """Mean decode time plus tool wait of a conversation [s] (prefill not included)."""
    binding: str
    """``memory`` (KV capacity), ``max_num_seqs`` or ``scheduler token budget`` (scheduler caps)."""
    memory_resident_conversations: float = 0.0
    """Conversations whose KV fits at once, memory alone (no scheduler cap) [conversations]."""
    retained_kv_fraction: float = 0.0
    """Share of the KV held by conversations waiting on a tool (``retain``) [fraction 0-1]."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def window_area(lo: "np.ndarray", hi: "np.ndarray", window: float) -> "np.ndarray":
    """``integral_lo^hi min(c, W) dc``: KV a sliding-window layer holds while context grows."""
    import numpy as np

    if math.isinf(window):
        return (hi * hi - lo * lo) / 2
    lo_capped, hi_capped = np.minimum(lo, window), np.minimum(hi, window)
    return (hi_capped * hi_capped - lo_capped * lo_capped) / 2 + (np.maximum(hi, window) - np.maximum(lo, window)) * window


def roofline_decode_step(spec: "ModelSpec", hw: "HardwareProfile", kv: "KVResult") -> Callable[[float, float], float]:
    """Decode step time ``f(batch, mean_context)`` [s] from the roofline model of :mod:`capplan.roofline`."""
    from capplan.roofline import RooflineInputs, decode_step

    roofline_inputs = RooflineInputs(tp=kv.tp, weight_dtype=kv.weight_dtype, kv_dtype=kv.kv_dtype)

    def step(batch: float, context: float) -> float:
        sequences = max(1, int(round(batch)))
        return float(decode_step(spec, hw, roofline_inputs, sequences, max(1, int(round(context)))).step_time_s)

    return step


def concurrency_sample(workload: "Workload", conversations: int = 20_000) -> "Conversations":
    """The Monte Carlo sample :func:`workload_concurrency` draws (one conversation, exactly, for a
    fixed workload): drawn once, it can be shared by every replica configuration of a sweep."""
    from capplan.ledger import ledger_sample_size, sample_conversations

    return sample_conversations(workload, n=ledger_sample_size(workload, conversations))


def workload_concurrency(
    spec: "ModelSpec",
    hw: "HardwareProfile",
    kv: "KVResult",
    workload: "Workload",
    conversations: int = 20_000,
    max_num_seqs: int = 256,
    step_time: Callable[[float, float], float] | None = None,
    max_batched_tokens: int | None = None,
    sample: "Conversations | None" = None,
) -> WorkloadConcurrency:
    """Resident, runnable and waiting conversations of ``workload`` on one replica.

    Parameters
    ----------
    kv : KVResult
        The replica's KV capacity (from :func:`capplan.kv.compute_kv`).
    conversations : int
        Monte Carlo sample of conversations (fixed workloads use one, exactly).
    max_num_seqs : int
        Scheduler cap on sequences decoding at once (vLLM's default 256).
    max_batched_tokens : int, optional
        Scheduler token budget per step; each decoding sequence needs one token of it.
    step_time : callable, optional
        ``f(batch, mean_context) -> seconds``; default the roofline decode step.
    sample : Conversations, optional
        The sample to use, from :func:`concurrency_sample` (default: drawn here).
    """
    import numpy as np

    if sample is None:
        sample = concurrency_sample(workload, conversations)
    retain = workload.cache.kv_during_tool_wait == "retain"
    actions = sample.actions.astype(float)
    inputs = sample.inputs.astype(float)
    waits = sample.waits_s
    layers = spec.layer_kind_counts()
    attention_layers = layers["full"] + layers["sliding"]
    share_sliding = layers["sliding"] / attention_layers if attention_layers else 0.0
    window = spec.window_tokens
    decode_tokens = actions.sum(1).mean()
    # KV held, in capacity tokens (a token counts on every attention layer): full layers hold the
    # whole context, sliding layers at most the window
    decode_area = (
        (1 - share_sliding) * ((inputs + actions / 2) * actions) + share_sliding * window_area(inputs, inputs + actions, window)
    ).sum(1).mean()  # capacity-token x token-steps while decoding
    held_after = (1 - share_sliding) * (inputs + actions) + share_sliding * np.minimum(inputs + actions, window)
    wait_area = (held_after * waits).sum(1).mean() if retain else 0.0
    mean_wait = waits.sum(1).mean()
    mean_context = decode_area / decode_tokens if decode_tokens else 0.0
    step = step_time or roofline_decode_step(spec, hw, kv)

    capacity = kv.kv_capacity_tokens
    cap = float(max_num_seqs)
    cap_name = "max_num_seqs"
    if max_batched_tokens is not None and max_batched_tokens < max_num_seqs:
        cap, cap_name = float(max_batched_tokens), "scheduler token budget"
    token_s = step(1, mean_context)
    binding = "memory"
    resident = runnable = 0.0
    for _ in range(50):
        decode_time = decode_tokens * token_s
        lifetime = decode_time + mean_wait
        held = (decode_area * token_s + wait_area) / lifetime if lifetime > 0 else 0.0
        resident = capacity / held if held > 0 else math.inf
        runnable = resident * decode_time / lifetime if lifetime > 0 else 0.0
        binding = "memory"
        if runnable > cap:
            # the scheduler caps decoding sequences; resident conversations shrink in proportion
            resident *= cap / runnable
            runnable = cap
            binding = cap_name
        new_token_s = step(runnable, mean_context)
        if abs(new_token_s - token_s) <= 1e-9 + 1e-6 * token_s:
            token_s = new_token_s
            break
        token_s = new_token_s
    decode_time = decode_tokens * token_s
    lifetime = decode_time + mean_wait
    held = (decode_area * token_s + wait_area) / lifetime if lifetime > 0 else 0.0
    p95_peak = float(np.percentile(sample.record_length, 95))
    p95_peak = (1 - share_sliding) * p95_peak + share_sliding * min(p95_peak, window)
    sequence_blocks = max(1, math.ceil(p95_peak / kv.block_size))
    memory_resident = capacity / held if held > 0 else float(capacity)
    retained_share = wait_area / (decode_area * token_s + wait_area) if (decode_area * token_s + wait_area) > 0 else 0.0
    return WorkloadConcurrency(
        workload=workload.name,
        kv_during_tool_wait=workload.cache.kv_during_tool_wait,
        mean_kv_tokens_held=held,
        resident_conversations=resident,
        runnable_sequences=runnable,
        waiting_conversations=resident * mean_wait / lifetime if lifetime > 0 else 0.0,
        resident_at_p95_peak=kv.kv_capacity_blocks // sequence_blocks,
        decode_step_s=token_s,
        mean_lifetime_s=lifetime,
        binding=binding,
        memory_resident_conversations=memory_resident,
        retained_kv_fraction=retained_share,
    )
