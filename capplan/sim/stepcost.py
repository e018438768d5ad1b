"""Engine-step prices as a few coefficients, and runs of decode steps in closed form, so the simulator can price millions of steps quickly.

:func:`capplan.roofline.engine_step` prices one step from seven work terms (new positions,
logit positions, attention pairs and KV reads, full and sliding-window, and sequences). Its
formulas are piecewise affine in those terms::

    compute = c_new T + c_logit N + c_pair A + c_pair_w A_w
    memory  = m_0 + m_new T + m_logit N + m_head [N > 0] + m_read R + m_read_w R_w + m_seq S
              + m_routed (1 - q^T)                        (MoE: expected distinct experts touched)
    comm    = k_0 + k_new T + (k_head + k_logit N) [N > 0]     (tensor-parallel collectives)
              + k_a2a T [T > T_a2a]                       (expert parallelism: normal all-to-all)
    step    = max(compute, memory) + comm + overhead

with ``q = 1 - k / E`` for a mixture of experts (``k`` routed experts per token out of ``E``)
and no routed term otherwise; with ``dp`` data-parallel attention ranks the MoE layers see
``dp x`` the rank's positions, so ``q = (1 - k / E)^dp``. Under expert parallelism each MoE
layer adds a dispatch and a combine whose latency joins ``k_0`` and whose volume joins ``k_new``;
with ``alltoall_mode="auto"`` the roofline switches from DeepEP's low-latency kernels to the
normal ones above ``T_a2a = 256 tp`` positions (:data:`capplan.roofline.LOW_LATENCY_MAX_TOKENS`
per GPU), a different price per position: ``k_a2a`` is that difference, paid above the switch
(0 and an infinite switch otherwise, so a step without expert parallelism is priced as before,
bit for bit). Two-batch overlap hides part of the all-to-all behind ``max(compute, memory)``,
which is not of this form: the simulator refuses it. :func:`step_coefficients` recovers every coefficient by probing
``engine_step`` itself (differences of exact affine functions), so the simulator and the
roofline model cannot drift apart; ``tests/test_simulate.py`` checks the two agree on random
step mixes.

A run of decode steps with an unchanged batch is priced in closed form: each step every context
grows by one position, so compute and memory time grow linearly (a :data:`DecodeLine`, built
from the folded ``decode_*`` coefficients), and :func:`run_time` / :func:`steps_within` sum and
invert the run without stepping through it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from capplan.hardware import HardwareProfile
    from capplan.modelspec import ModelSpec
    from capplan.roofline import RooflineInputs

#: Large, finite stand-in for "no sliding window" (keeps ``0 x window`` at 0).
NO_WINDOW = float(2**60)


@dataclass(frozen=True)
class StepCoefficients:
    """Coefficients of one engine step's time on one model, hardware and parallel layout.

    All times are seconds; the work terms are positions (``T`` new, ``N`` logits), attention
    pairs (``A``), cached positions read (``R``) and sequences (``S``), each per step.
    """

    c_new: float
    """Compute time per forwarded position [s/position] (weight GEMMs, linear-attention state)."""
    c_logit: float
    """Compute time per logit position [s/position] (LM head)."""
    c_pair: float
    """Compute time per attention pair on full-attention layers [s/pair]."""
    c_pair_w: float
    """Compute time per attention pair on sliding-window layers [s/pair]."""
    m_0: float
    """Memory time of the weights every step reads [s] (no LM head, no routed experts)."""
    m_new: float
    """Memory time per forwarded position [s/position] (KV write, activations)."""
    m_logit: float
    """Memory time per logit position [s/position] (logit activations)."""
    m_head: float
    """Memory time of the LM-head weights, read when any logit is computed [s]."""
    m_read: float
    """Memory time per cached position read on full-attention layers [s/position]."""
    m_read_w: float
    """Memory time per cached position read on sliding-window layers [s/position]."""
    m_seq: float
    """Memory time per sequence [s/sequence] (linear-attention state)."""
    m_routed: float
    """Memory time of all routed-expert weights [s]; scaled by ``1 - q^T``."""
    q: float
    """``1 - k / E``, probability a token skips a given routed expert (1 for dense models)."""
    k_0: float
    """Communication time independent of the work [s] (all-reduce latencies; 0 at tp 1)."""
    k_new: float
    """Communication time per forwarded position [s/position]."""
    k_head: float
    """Communication time of the logit gather's latency, paid when any logit is computed [s]."""
    k_logit: float
    """Communication time per logit position [s/position]."""
    overhead: float
    """Fixed host time per step [s]."""
    window: float
    """Sliding-window width [positions] (:data:`NO_WINDOW` when the model has none)."""
    c_0: float = 0.0
    """Compute time independent of the work [s] (the engine's GEMM ramp: ``gemm_half_tokens``
    tokens' worth of GEMM work)."""
    h_seq: float = 0.0
    """Host time per sequence in a step [s/sequence] (the engine's ``per_sequence_s``)."""
    a2a_switch: float = NO_WINDOW
    """Forwarded positions above which the expert-parallel all-to-all runs DeepEP's normal
    kernels instead of the low-latency ones [positions] (:data:`NO_WINDOW`: never)."""
    k_a2a: float = 0.0
    """Communication time per forwarded position added above ``a2a_switch`` [s/position]
    (normal minus low-latency all-to-all; 0 without expert parallelism)."""
    graph_max_seqs: float = NO_WINDOW
    """Largest step (in sequences) the engine runs in a CUDA graph (the engine profile's
    ``cuda_graph_max_batch``; :data:`NO_WINDOW`: every step)."""
    graphless_s: float = 0.0
    """Host time a step with more sequences than ``graph_max_seqs`` adds [s] (``eager_s_per_layer``
    x layers)."""

    # A decode step of ``B`` sequences: every sequence forwards one position and one logit, so
    # the terms that scale with B fold into one coefficient each (the attention and KV-read
    # terms depend on the contexts and stay separate).

    @property
    def decode_compute_base(self) -> float:
        """Compute time of a decode step independent of the batch [s]: ``c_0``."""
        return self.c_0

    @property
    def decode_compute_per_sequence(self) -> float:
        """Compute time per decoding sequence besides attention [s/sequence]: ``c_new + c_logit``."""
        return self.c_new + self.c_logit

    @property
    def decode_memory_base(self) -> float:
        """Memory time of a decode step independent of the batch [s]: ``m_0 + m_head``."""
        return self.m_0 + self.m_head

    @property
    def decode_memory_per_sequence(self) -> float:
        """Memory time per decoding sequence besides KV reads [s/sequence]: ``m_new + m_logit + m_seq``."""
        return self.m_new + self.m_logit + self.m_seq

    @property
    def decode_fixed_base(self) -> float:
        """Communication plus overhead of a decode step independent of the batch [s]: ``overhead + k_0 + k_head``."""
        return self.overhead + self.k_0 + self.k_head

    @property
    def decode_fixed_per_sequence(self) -> float:
        """Communication and host time per decoding sequence [s/sequence]: ``k_new + k_logit + h_seq``."""
        return self.k_new + self.k_logit + self.h_seq

    def compute(self, new: float, logits: float, pairs: float, pairs_w: float) -> float:
        """Compute time of a step [s]."""
        return self.c_0 + self.c_new * new + self.c_logit * logits + self.c_pair * pairs + self.c_pair_w * pairs_w

    def memory(self, new: float, logits: float, read: float, read_w: float, seqs: float) -> float:
        """Memory time of a step [s]."""
        m = (
            self.m_0
            + self.m_new * new
            + self.m_logit * logits
            + self.m_read * read
            + self.m_read_w * read_w
            + self.m_seq * seqs
        )
        if logits > 0:
            m += self.m_head
        if self.m_routed:
            m += self.m_routed * (1.0 - self.q**new)
        return m

    def fixed(self, new: float, logits: float, seqs: float = 0.0) -> float:
        """Communication plus host time [s]: the part of a step added to ``max(compute, memory)``."""
        f = self.overhead + self.k_0 + self.k_new * new + self.h_seq * seqs
        if logits > 0:
            f += self.k_head + self.k_logit * logits
        if new > self.a2a_switch:
            f += self.k_a2a * new
        if seqs > self.graph_max_seqs:
            f += self.graphless_s
        return f

    def step_time(
        self, new: float, logits: float, pairs: float, pairs_w: float, read: float, read_w: float, seqs: float
    ) -> float:
        """Time of one step [s]: ``max(compute, memory) + comm + overhead``."""
        c = self.compute(new, logits, pairs, pairs_w)
        m = self.memory(new, logits, read, read_w, seqs)
        return (c if c > m else m) + self.fixed(new, logits, seqs)


def step_coefficients(spec: "ModelSpec", hw: "HardwareProfile", inp: "RooflineInputs") -> StepCoefficients:
    """Recover the affine coefficients of :func:`capplan.roofline.engine_step` by probing it.

    Parameters
    ----------
    spec, hw, inp
        Model, hardware profile, and dtypes / tensor parallelism / efficiencies.

    Returns
    -------
    StepCoefficients

    Notes
    -----
    Each coefficient is a difference of ``engine_step`` results at two work mixes that differ in
    one term only (probes of ``10^6`` units keep the rounding relative error near ``1e-12``).
    The routed-expert term is solved from three probes at ``T = 1, 2, 3``:
    ``m(T) = A + b T + R (1 - q^T)`` gives
    ``R = ((m_2 - m_1) - (m_3 - m_2)) / (q (1 - q)^2)``. Under expert parallelism with
    ``alltoall_mode="auto"`` the per-position all-to-all price above the kernel switch is the
    slope of two probes above it. A step on either side of the switch is checked against
    ``engine_step``.

    Raises
    ------
    InputError
        ``inp.two_batch_overlap``: its overlap is not affine in the work terms.
    """
    from capplan.errors import InputError
    from capplan.kv import resolve_dp
    from capplan.roofline import LOW_LATENCY_MAX_TOKENS, engine_step

    if inp.two_batch_overlap:
        raise InputError("--two-batch-overlap: the simulator prices steps as max(compute, memory) + communication, which the "
                         "overlap of one micro-batch's all-to-all with the other's work is not; capplan plan and capplan "
                         "roofline price it")

    def probe(new: float = 1.0, logits: float = 0.0, pairs: float = 0.0, pairs_w: float = 0.0,
              read: float = 0.0, read_w: float = 0.0, seqs: float = 0.0) -> tuple[float, float, float, float]:
        s = engine_step(
            spec, hw, inp, new_tokens=new, logits_tokens=logits, attention_pairs=pairs, kv_read_tokens=read,
            sequences=seqs, window_attention_pairs=pairs_w, window_kv_read_tokens=read_w,
        )
        return float(s.compute_time_s), float(s.memory_time_s), float(s.comm_time_s), float(s.overhead_s)

    big = 1e6
    c1, m1, k1, ov = probe()
    c2, m2, k2, _ = probe(new=2.0)
    c_new = c2 - c1
    c_0 = c1 - c_new
    # host time: per sequence below the CUDA-graph limit, and the step above it runs without a graph
    terms = inp.profile().time_on(hw.name)
    graph_max = min(terms.graph_limit, NO_WINDOW)
    seq_probe = graph_max if graph_max < big else big
    h_seq = (probe(seqs=seq_probe)[3] - ov) / seq_probe
    graphless = probe(seqs=graph_max + 1.0)[3] - ov - h_seq * (graph_max + 1.0) if graph_max < NO_WINDOW else 0.0
    # compute: homogeneous linear in its terms
    c_logit = (probe(logits=big)[0] - c1) / big
    c_pair = (probe(pairs=big)[0] - c1) / big
    c_pair_w = (probe(pairs_w=big)[0] - c1) / big
    # memory
    m_read = (probe(read=big)[1] - m1) / big
    m_read_w = (probe(read_w=big)[1] - m1) / big
    m_seq = (probe(seqs=big)[1] - m1) / big
    _, ml1, kl1, _ = probe(logits=1.0)
    _, mlb, klb, _ = probe(logits=1.0 + big)
    m_logit = (mlb - ml1) / big
    m_head = ml1 - m1 - m_logit
    k_logit = (klb - kl1) / big
    k_head = kl1 - k1 - k_logit
    dp = resolve_dp(inp.tp, inp.ep, inp.dp)
    if spec.moe is not None:
        q = 1.0 - spec.moe.experts_per_token / spec.moe.num_experts
        if dp != 1:
            q = q**dp  # the MoE layers see every rank's positions
        m3 = probe(new=3.0)[1]
        d1, d2 = m2 - m1, m3 - m2
        m_routed = (d1 - d2) / (q * (1.0 - q) ** 2) if 0.0 < q < 1.0 else 0.0
        m_new = d1 - m_routed * q * (1.0 - q)
        m_0 = m1 - m_new - m_routed * (1.0 - q)
    else:
        q, m_routed = 1.0, 0.0
        m_new = m2 - m1
        m_0 = m1 - m_new
    k_new = k2 - k1
    k_0 = k1 - k_new
    a2a_switch, k_a2a = NO_WINDOW, 0.0
    if inp.ep > 1 and inp.alltoall_mode == "auto":
        a2a_switch = float(LOW_LATENCY_MAX_TOKENS * inp.tp)
        above = a2a_switch + 1.0
        k_a2a = (probe(new=above + big)[2] - probe(new=above)[2]) / big - k_new
        if abs(k_a2a) <= 1e-9 * abs(k_new):  # within a node both kernel families cost the same
            k_a2a = 0.0
    window = float(spec.sliding_window.window_tokens) if spec.sliding_window else NO_WINDOW
    coeffs = StepCoefficients(
        c_new=c_new, c_logit=c_logit, c_pair=c_pair, c_pair_w=c_pair_w,
        m_0=m_0, m_new=m_new, m_logit=m_logit, m_head=m_head, m_read=m_read, m_read_w=m_read_w,
        m_seq=m_seq, m_routed=m_routed, q=q,
        k_0=k_0, k_new=k_new, k_head=k_head, k_logit=k_logit, overhead=ov, window=window, c_0=c_0, h_seq=h_seq,
        **({"a2a_switch": a2a_switch, "k_a2a": k_a2a} if k_a2a else {}),
        **({"graph_max_seqs": graph_max, "graphless_s": graphless} if graph_max < NO_WINDOW else {}),
    )
    # guard against a change in engine_step that would break the affine form (and, with a
    # CUDA-graph limit, a step on either side of it)
    seq_checks = (38.0, graph_max + 3.0) if graph_max < NO_WINDOW else (38.0,)
    for new, seqs in [(n, s) for n in ((700.0, 37.0) if inp.ep > 1 else (700.0,)) for s in seq_checks]:
        check = engine_step(
            spec, hw, inp, new_tokens=new, logits_tokens=37.0, attention_pairs=4.1e6, kv_read_tokens=9.3e5,
            sequences=seqs, window_attention_pairs=1.2e6, window_kv_read_tokens=2.2e5,
        )
        got = coeffs.step_time(new, 37.0, 4.1e6, 1.2e6, 9.3e5, 2.2e5, seqs)
        if not math.isclose(got, float(check.step_time_s), rel_tol=1e-6):
            raise AssertionError(f"step coefficients disagree with engine_step: {got} vs {float(check.step_time_s)}")
    return coeffs


# --------------------------------------------------------------------------------------------- decode runs

DecodeLine = tuple[float, float, float, float, float]
"""A run of decode steps with an unchanged batch, as ``(compute_0, compute_growth, memory_0,
memory_growth, fixed)`` [s]: step ``i`` (0-based) takes
``max(compute_0 + compute_growth i, memory_0 + memory_growth i) + fixed`` (each step every
context grows by one position, so attention compute and KV reads grow linearly)."""


def _line_sum(start: float, growth: float, first: int, stop: int) -> float:
    """``sum_{i=first}^{stop-1} (start + growth i)``."""
    n = stop - first
    return n * start + growth * n * (first + stop - 1) * 0.5 if n > 0 else 0.0


def run_time(line: DecodeLine, steps: int) -> float:
    """Time of the first ``steps`` decode steps of ``line`` [s].

    The compute and memory lines cross at most once, so the sum splits into two closed-form
    arithmetic series.
    """
    compute_0, compute_growth, memory_0, memory_growth, fixed = line
    if steps <= 0:
        return 0.0
    gap_0, gap_growth = compute_0 - memory_0, compute_growth - memory_growth
    if gap_growth == 0.0:
        start, growth = (compute_0, compute_growth) if gap_0 >= 0 else (memory_0, memory_growth)
        return _line_sum(start, growth, 0, steps) + fixed * steps
    crossing = -gap_0 / gap_growth  # compute - memory changes sign at step ``crossing``
    switch = max(0, min(steps, math.ceil(crossing)))
    if gap_growth > 0:  # memory first, compute from ``switch`` on
        return _line_sum(memory_0, memory_growth, 0, switch) + _line_sum(compute_0, compute_growth, switch, steps) + fixed * steps
    return _line_sum(compute_0, compute_growth, 0, switch) + _line_sum(memory_0, memory_growth, switch, steps) + fixed * steps


def _split(line: DecodeLine, steps: int) -> tuple[int, float, float, float, float]:
    """``(switch, start_1, growth_1, start_2, growth_2)``: steps ``i < switch`` follow the first
    line, the rest the second (``fixed`` excluded)."""
    compute_0, compute_growth, memory_0, memory_growth, _ = line
    gap_0, gap_growth = compute_0 - memory_0, compute_growth - memory_growth
    if gap_growth == 0.0:
        start, growth = (compute_0, compute_growth) if gap_0 >= 0 else (memory_0, memory_growth)
        return steps, start, growth, start, growth
    switch = max(0, min(steps, math.ceil(-gap_0 / gap_growth)))
    if gap_growth > 0:
        return switch, memory_0, memory_growth, compute_0, compute_growth
    return switch, compute_0, compute_growth, memory_0, memory_growth


def _solve(start: float, growth: float, elapsed: float) -> float:
    """Real ``m`` with ``m start + growth m (m - 1) / 2 = elapsed`` (``start > 0``, ``growth >= 0``)."""
    b = start - 0.5 * growth
    if growth <= 0.0:
        return elapsed / start
    root = math.sqrt(b * b + 2.0 * growth * elapsed)
    return 2.0 * elapsed / (b + root) if b > 0 else (-b + root) / growth


def steps_within(line: DecodeLine, max_steps: int, elapsed: float) -> int:
    """Smallest ``k`` (0..max_steps) with ``run_time(line, k) >= elapsed``: the step boundary at or after ``elapsed``.

    Solved in closed form on each linear piece (a quadratic in ``k``), then checked exactly.
    """
    if elapsed <= 0.0:
        return 0
    compute_0, compute_growth, memory_0, memory_growth, fixed = line
    last = max_steps - 1
    if (compute_0 >= memory_0) == (compute_0 + compute_growth * last >= memory_0 + memory_growth * last):
        # one line dominates the whole run: T(k) = k (start + fixed) + growth k (k - 1) / 2
        start, growth = (compute_0, compute_growth) if compute_0 >= memory_0 else (memory_0, memory_growth)
        start += fixed
        if max_steps * start + growth * max_steps * (max_steps - 1) * 0.5 <= elapsed:
            return max_steps
        k = max(0, min(max_steps, math.ceil(_solve(start, growth, elapsed) - 1e-9)))
        while k < max_steps and k * start + growth * k * (k - 1) * 0.5 < elapsed:
            k += 1
        while k > 0 and (k - 1) * start + growth * (k - 1) * (k - 2) * 0.5 >= elapsed:
            k -= 1
        return k
    if run_time(line, max_steps) <= elapsed:
        return max_steps
    switch, start_1, growth_1, start_2, growth_2 = _split(line, max_steps)
    time_at_switch = _line_sum(start_1, growth_1, 0, switch) + fixed * switch
    if elapsed <= time_at_switch:
        k = math.ceil(_solve(start_1 + fixed, growth_1, elapsed) - 1e-9)
    else:
        k = switch + math.ceil(_solve(start_2 + growth_2 * switch + fixed, growth_2, elapsed - time_at_switch) - 1e-9)
    k = max(0, min(max_steps, k))
    while k < max_steps and run_time(line, k) < elapsed:
        k += 1
    while k > 0 and run_time(line, k - 1) >= elapsed:
        k -= 1
    return k
