"""Speculative decoding and the CPU KV tier in the simulator: per-output-token prices of a verify step and its drafts, and a replica's host-memory tier.

**Speculative decoding.** The simulator keeps its clock in output tokens: a "step" of a decoding
sequence still adds one position to its context, and only the step's price changes. A decode
step of ``B`` sequences is priced at what :class:`capplan.speculative.SpeculativePricer` charges
``capplan plan`` for one output token::

    (verify step of B x n positions + the k drafter forwards) / E

with ``n`` positions verified per sequence (``k + 1`` for a chain), ``E`` the mean tokens a verify
step yields (Leviathan et al. 2023, eq. 1) and each draft priced as a step of its own, host
time included. A sequence that samples ``L`` tokens then takes ``L / E`` verify steps in
expectation, so a run of
decode steps costs, in expectation, exactly what the engine's verify steps cost. The verify
step is one :data:`~capplan.sim.stepcost.DecodeLine` (every context grows by one position per
output token) and draft ``j`` (``j = 1..k``) of output token ``i`` is the drafter's decode step at
context ``c + i + j``, so a run of ``s`` tokens is, in closed form and exactly whichever side of
the roofline the verify step and each draft are on::

    T(s) = (V(s) + sum_j [D(s + j) - D(j)]) / E

with ``V`` and ``D`` :func:`capplan.sim.stepcost.run_time` of the verify line and of the drafter's
line. A step that also carries prompt chunks is priced as the verify step with the chunks,
plus the drafts, less ``(1 - 1 / E)`` of the pure verify step and drafts: the chunks' marginal
cost plus one output token of decoding, so that over a sequence's life the decode tokens still
cost ``1 / E`` of a verify step each (exact in expectation). On sliding-window layers a verify
step's pairs are priced with each sequence wholly below or above the window (exact but for the
``n`` positions before its edge).

**CPU KV tier.** A replica with ``kv_offload_gib`` GiB of host memory per GPU keeps the KV of
the retained prefixes it evicts and of the sequences it preempts there (least recently stored
dropped first when full; a preempted context but its last position, which is always computed);
the conversation's next turn, or the sequence's readmission, loads it back over the host link
(:func:`capplan.offload.kv_load_s`: the hardware profile's ``host_link_bandwidth_gbps`` times
the engine profile's ``host_link_efficiency``, plus its ``host_copy_latency_s`` a block) instead
of prefilling it again, when loading a position is faster than prefilling it (``capplan plan``'s
rule, with the prefill priced per position of one full chunk). The load is charged in series,
with the step that starts the turn's prefill (as the plan charges it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from capplan.sim.stepcost import run_time

if TYPE_CHECKING:
    from capplan.sim.stepcost import DecodeLine, StepCoefficients


@dataclass(frozen=True)
class SpecCosts:
    """A replica's speculative decoding: the target's and the drafter's step coefficients and the
    setting (the drafter's coefficients probed from :func:`capplan.roofline.engine_step` on
    :func:`capplan.speculative.draft_spec`, as :func:`capplan.speculative.spec_pricers` builds it)."""

    drafter: "StepCoefficients | None"
    """Step coefficients of the drafter (``None`` for n-gram lookup: no GPU work)."""
    positions: int
    """Positions verified per sequence and step ``n`` [positions]."""
    drafts: int
    """Drafter forwards per verify step ``k`` [steps]."""
    tokens_per_step: float
    """Mean tokens a verify step yields ``E`` at the setting's acceptance [tokens]."""
    acceptance_by_step: tuple[tuple[float, float], ...] | None = None
    """``(trainer step, per-token acceptance)`` points: ``E`` follows the policy version of a
    replica's weights (interpolated, flat beyond the ends); ``None``: constant."""

    def tokens_at(self, version: int) -> float:
        """``E`` for weights of policy version ``version`` [tokens]."""
        if self.acceptance_by_step is None:
            return self.tokens_per_step
        from capplan.speculative import expected_tokens_per_step
        from capplan.workload import Speculative

        block = Speculative(method="ngram", num_speculative_tokens=self.drafts,
                            acceptance_by_step=[{"step": s, "acceptance_rate": a} for s, a in self.acceptance_by_step])
        return float(expected_tokens_per_step(self.drafts, block.acceptance_at(version)))

    def draft_line(self, batch: int, cached: float) -> "DecodeLine | None":
        """The drafter's decode step of ``batch`` sequences with ``cached`` positions summed, as a
        line in the context offset, host time included (``None`` without a drafter)."""
        d = self.drafter
        if d is None or batch <= 0:
            return None
        compute_0 = d.decode_compute_base + d.decode_compute_per_sequence * batch + d.c_pair * (cached + batch)
        memory_0 = d.decode_memory_base + d.decode_memory_per_sequence * batch + d.m_read * cached
        if d.m_routed:
            memory_0 += d.m_routed * (1.0 - d.q**batch)
        fixed = d.overhead + d.k_0 + d.k_head + (d.k_new + d.k_logit + d.h_seq) * batch
        return (compute_0, d.c_pair * batch, memory_0, d.m_read * batch, fixed)

    def draft_s(self, line: "DecodeLine | None", start: int, steps: int) -> float:
        """The drafts of output tokens ``start .. start + steps - 1`` of a run [s]: draft ``j`` of
        token ``i`` is ``line`` at offset ``i + j`` (``j = 1..k``)."""
        if line is None or steps <= 0:
            return 0.0
        total = 0.0
        for j in range(1, self.drafts + 1):
            total += run_time(line, start + steps + j) - run_time(line, start + j)
        return total


def verify_line(co: "StepCoefficients", n: int, decoding: int, below: int, cached: float, cached_below: float,
                window: float, window_limit: float) -> "DecodeLine":
    """A verify step of ``decoding`` sequences, ``n`` positions each, with ``cached`` positions
    summed (``below`` of the sequences, holding ``cached_below``, below the sliding window), as a
    line in the number of output tokens since (module notes)."""
    above = decoding - below
    pairs_n = n * (n + 1) * 0.5
    positions = decoding * n
    pairs_window = n * cached_below + below * pairs_n + n * window * above
    read_window = cached_below + window_limit * above
    compute_0 = (co.c_0 + (co.c_new + co.c_logit) * positions + co.c_pair * (n * cached + decoding * pairs_n)
                 + co.c_pair_w * pairs_window)
    memory_0 = (co.m_0 + co.m_head + (co.m_new + co.m_logit) * positions + co.m_seq * decoding + co.m_read * cached
                + co.m_read_w * read_window)
    if co.m_routed:
        memory_0 += co.m_routed * (1.0 - co.q**positions)
    fixed = co.overhead + co.k_0 + co.k_head + (co.k_new + co.k_logit) * positions + co.h_seq * decoding
    if positions > co.a2a_switch:
        fixed += co.k_a2a * positions
    compute_growth = co.c_pair * n * decoding + co.c_pair_w * n * below
    memory_growth = co.m_read * decoding + co.m_read_w * below
    return (compute_0, compute_growth, memory_0, memory_growth, fixed)


@dataclass(frozen=True)
class SpecRun:
    """A run of speculative decode steps with an unchanged batch: its verify and draft lines and ``E``."""

    costs: SpecCosts
    verify: "DecodeLine"
    draft: "DecodeLine | None"
    tokens_per_step: float

    def time(self, steps: int) -> float:
        """Time of the first ``steps`` output tokens [s] (``T(s)``, module notes)."""
        if steps <= 0:
            return 0.0
        return (run_time(self.verify, steps) + self.costs.draft_s(self.draft, 0, steps)) / self.tokens_per_step

    def steps_within(self, max_steps: int, elapsed: float) -> int:
        """Smallest ``s`` (0..max_steps) with ``time(s) >= elapsed`` (bisection on the increasing ``T``)."""
        if elapsed <= 0.0:
            return 0
        if self.time(max_steps) < elapsed:
            return max_steps
        lo, hi = 0, max_steps  # time(lo) < elapsed <= time(hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.time(mid) < elapsed:
                lo = mid
            else:
                hi = mid
        return hi


def spec_run(costs: SpecCosts, co: "StepCoefficients", tokens_per_step: float, decoding: int, below: int, cached: float,
             cached_below: float) -> SpecRun:
    """The :class:`SpecRun` of a decoding batch (target coefficients ``co``)."""
    return SpecRun(costs, verify_line(co, costs.positions, decoding, below, cached, cached_below, co.window, co.window - 1.0),
                   costs.draft_line(decoding, cached), tokens_per_step)


@dataclass(frozen=True)
class OffloadCosts:
    """A replica's CPU KV tier as the simulator uses it."""

    capacity_tokens: int
    """Positions the tier holds (:attr:`capplan.offload.OffloadTier.capacity_tokens`) [positions]."""
    load_s_per_token: float
    """Time to load one position back to the GPUs [s/position] (a copy over the host link, not an
    engine step: not scaled by the RL framework's rollout slowdown, as in the plan)."""
    prefill_s_per_token: float
    """Prefill time per position the tier's loads are compared with [s/position]."""
    bytes_per_token: float
    """KV bytes per position on one GPU, what a load copies to each GPU [bytes/position]."""
    host_kv_gib_per_gpu: float
    """Host memory per GPU given to the tier [GiB]."""

    @property
    def loads_win(self) -> bool:
        """Loading a position is faster than prefilling it (else the tier is not used)."""
        return self.load_s_per_token < self.prefill_s_per_token


def prefill_s_per_token(co: "StepCoefficients", chunk: int) -> float:
    """Prefill time per position of one full chunk of ``chunk`` positions with nothing cached [s/position]
    (:meth:`capplan.sim.stepcost.StepCoefficients.step_time`)."""
    n = float(max(chunk, 1))
    pairs = n * (n + 1) * 0.5
    w = min(co.window, n)
    pairs_w = w * (w + 1) * 0.5 + (n - w) * co.window
    return co.step_time(n, 1.0, pairs, pairs_w, 0.0, 0.0, 1.0) / n
