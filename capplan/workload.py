"""The workload file (version 1): what a user writes to describe inference or RL work.

A workload names a training *method*, a *volume* (prompts per step x samples per prompt), one
*conversation* shape (a prompt, then turns of sampled actions and observed tool tokens), how
computed prefixes are *reused* between turns, and what the trainer does with the record. Every
count or wait may be fixed or a distribution (:mod:`capplan.distributions`).

See ``capplan schema workload`` for the JSON Schema and ``workloads/*.yaml`` for examples.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from capplan.distributions import Distribution, Fixed
from capplan.errors import InputError
from capplan.resources import resolve
from capplan.units import MAX_CONTEXT_TOKENS, MAX_GPUS, MAX_SEQUENCES, KVDtype, WeightDtype, dtype_name
from capplan.yamlio import FieldError, load_model

Method = Literal["sft", "distillation", "outcome-rl", "multi-turn-rl", "serving"]
TokenClass = Literal["prompt", "action", "tool"]
TOKEN_CLASSES: tuple[TokenClass, ...] = ("prompt", "action", "tool")

#: Methods whose update loop samples from the policy with a rollout (inference) engine.
ROLLOUT_METHODS: frozenset[str] = frozenset({"distillation", "outcome-rl", "multi-turn-rl", "serving"})
#: Methods with a trainer that consumes the records.
TRAINER_METHODS: frozenset[str] = frozenset({"sft", "distillation", "outcome-rl", "multi-turn-rl"})

MAX_TURNS = 10_000
"""Most turns a conversation may have [turns] (the compact form expands to this many)."""
MAX_CONVERSATIONS = 10_000_000
"""Largest Monte Carlo sample a workload may ask for [conversations]."""
MAX_SAMPLE_CELLS = 20_000_000
"""Most conversation-turns one Monte Carlo sample may hold [conversations x turns]. Measured:
``capplan ledger agentic-tool-rl --conversations 1000000`` (12 turns, 12M cells) peaks at 1.06 GB,
about 90 bytes per cell, so this is a ~2 GB memory budget."""
MAX_SECONDS = 10_000_000.0
"""Largest target or time accepted [s] (116 days)."""


def check_sample_size(workload: "Workload", conversations: int | None = None, where: str = "--conversations") -> None:
    """Refuse a Monte Carlo sample of ``workload`` above :data:`MAX_SAMPLE_CELLS` before it is drawn.

    Parameters
    ----------
    conversations : int, optional
        Sample size [conversations]; default the workload's ``sampling.conversations``.
    where : str
        What set it, for the message (a flag, or ``file: sampling.conversations``).

    Raises
    ------
    InputError
        With the cells the sample would hold and how to narrow it.
    """
    n = workload.sampling.conversations if conversations is None else conversations
    if workload.conversation.is_fixed():
        return  # a fixed workload is computed exactly from one conversation
    turns = workload.conversation.max_turns
    if n > MAX_CONVERSATIONS or n * turns > MAX_SAMPLE_CELLS:
        most = max(MAX_SAMPLE_CELLS // turns, 1)
        given = f"{where} {n:,}" if conversations is not None else f"the default sample (sampling.conversations {n:,})"
        fix = "" if conversations is not None else f" (--conversations {most:,}, or set sampling.conversations)"
        raise InputError(
            f"{given}: {n:,} conversations x {turns:,} turns = {n * turns:,} conversation-turns, above the "
            f"{MAX_SAMPLE_CELLS:,} one sample may hold (about 2 GB); sample at most {most:,} conversations{fix}"
        )


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Volume(_Strict):
    """How much work one step (one trainer update, or one unit of serving) contains."""

    prompts_per_step: int = Field(default=1, ge=1, le=MAX_SEQUENCES)
    """Unique prompts per step [prompts]."""
    samples_per_prompt: int = Field(default=1, ge=1, le=MAX_SEQUENCES)
    """Samples (rollouts) drawn per prompt, the GRPO group size [conversations per prompt]."""

    @property
    def conversations_per_step(self) -> int:
        """``prompts_per_step x samples_per_prompt`` [conversations]."""
        return self.prompts_per_step * self.samples_per_prompt


def _model_ref(value: str | None, info: ValidationInfo | None = None, overridden_by: str | None = None) -> str | None:
    """A model preset name or file that resolves (offline: a bundled name or an existing file),
    else the not-found message naming the closest preset. Not checked when the command was given
    a flag that replaces it (``overridden_by`` set in the validation context by
    :func:`load_workload`): the file's value is then not used."""
    if overridden_by is not None and info is not None and (info.context or {}).get(overridden_by):
        return value
    base = (info.context or {}).get("base_dir") if info is not None else None
    if value is not None and base is not None and not Path(value).is_absolute() and (Path(base) / value).is_file():
        return str((Path(base) / value).resolve())  # a path relative to the workload file, wherever capplan runs
    if value is not None:
        from capplan.errors import NotFoundError

        try:
            resolve("models", value)
        except NotFoundError as exc:
            raise ValueError(str(exc)) from None
    return value


def check_whole(count: Distribution | None, where: tuple[str, ...], minimum: int = 0, why: str = "") -> None:
    """Refuse a fixed count that is not a whole number (2.5 turns, 10.7 tokens), or below
    ``minimum`` (``why``: the reason, for the message)."""
    if count is None or not count.is_fixed:
        return
    value = count.mean()
    if value != int(value):
        raise FieldError(where, f"{value:g} is not a whole number (a fixed count is an integer)")
    if value < minimum:
        raise FieldError(where, f"{value:g}: at least {minimum}{f' ({why})' if why else ''}")


def check_samples(action_tokens: Distribution, where: tuple[str, ...]) -> None:
    """Refuse ``action_tokens`` that can never sample a token (rounded, as the ledger draws them):
    every invocation samples at least one."""
    top = action_tokens.upper_bound()
    if top < 0.5:
        raise FieldError(where, f"every turn samples at least 1 token; this distribution allows at most {top:g}")


class Turn(_Strict):
    """One policy invocation: sample ``action_tokens``, then optionally call a tool."""

    action_tokens: Distribution
    """Tokens the policy samples in this turn [tokens]."""
    tool_tokens: Distribution | None = None
    """Tokens of the tool observation appended after the action [tokens]; omit for no tool call."""
    tool_wait_s: Distribution | None = None
    """Wall time spent waiting for the tool [s]; waiting is not GPU work."""

    @model_validator(mode="after")
    def _samples(self) -> "Turn":
        check_samples(self.action_tokens, ("action_tokens",))
        check_whole(self.action_tokens, ("action_tokens",))
        check_whole(self.tool_tokens, ("tool_tokens",))
        return self

    @property
    def has_tool(self) -> bool:
        return self.tool_tokens is not None or self.tool_wait_s is not None


class Conversation(_Strict):
    """One conversation: ``prompt_tokens``, then turns.

    Explicit form: ``turns: [{action_tokens, tool_tokens, tool_wait_s}, ...]``.
    Compact form: ``num_turns`` with per-turn ``action_tokens``, ``tool_tokens`` and
    ``tool_wait_s``; a tool call follows every turn but the last.
    """

    prompt_tokens: Distribution
    """Tokens of the initial prompt [tokens]."""
    turns: list[Turn] | None = Field(default=None, min_length=1, max_length=MAX_TURNS)
    """Explicit list of turns (give this or ``num_turns``)."""
    num_turns: Distribution | None = None
    """Compact form: number of turns (a count >= 1; a distribution needs a bounded upper end)."""
    action_tokens: Distribution | None = None
    """Compact form: tokens sampled per turn [tokens]."""
    tool_tokens: Distribution | None = None
    """Compact form: tool-observation tokens after each turn but the last [tokens]."""
    tool_wait_s: Distribution | None = None
    """Compact form: tool wait after each turn but the last [s]."""
    max_context: int | None = Field(default=None, ge=1, le=MAX_CONTEXT_TOKENS)
    """Context limit [tokens]: a response that would pass it is truncated there."""
    max_response_tokens: int | None = Field(default=None, ge=1, le=MAX_CONTEXT_TOKENS)
    """Generation limit per invocation [tokens] (an engine's ``max_tokens``): a longer action is
    cut there, marked truncated, and ends the conversation."""

    @model_validator(mode="after")
    def _form(self) -> "Conversation":
        compact = {k: getattr(self, k) for k in ("num_turns", "action_tokens", "tool_tokens", "tool_wait_s")}
        if self.turns is not None:
            given = [k for k, v in compact.items() if v is not None]
            if given:
                raise ValueError(f"give either 'turns' or the compact form, not both (found turns and {given[0]})")
        else:
            if self.num_turns is None or self.action_tokens is None:
                raise ValueError("give 'turns' (a list) or the compact form: 'num_turns' and 'action_tokens'")
            if self.num_turns.upper_bound() == float("inf"):
                raise ValueError("num_turns: a lognormal number of turns needs a 'max'")
            if self.num_turns.upper_bound() < 1:
                raise ValueError("num_turns: must allow at least 1 turn")
            if self.num_turns.upper_bound() > MAX_TURNS:
                raise ValueError(
                    f"num_turns: at most {MAX_TURNS:,} turns, got up to {self.num_turns.upper_bound():,.0f}"
                )
            check_samples(self.action_tokens, ("action_tokens",))
            check_whole(self.num_turns, ("num_turns",), minimum=1)
            check_whole(self.action_tokens, ("action_tokens",))
            check_whole(self.tool_tokens, ("tool_tokens",))
        check_whole(self.prompt_tokens, ("prompt_tokens",), minimum=1, why="an engine refuses an empty prompt")
        prompt = self.prompt_tokens.mean()
        if self.max_context is not None and self.max_context <= prompt:
            raise FieldError(
                ("max_context",),
                f"{self.max_context:,} tokens must hold the prompt and a sampled token: more than the prompt's "
                f"{'mean of ' if not self.prompt_tokens.is_fixed else ''}{prompt:,.0f} tokens",
            )
        return self

    @property
    def max_turns(self) -> int:
        """Largest number of turns a conversation can have."""
        if self.turns is not None:
            return len(self.turns)
        assert self.num_turns is not None
        return int(round(self.num_turns.upper_bound()))

    def turn_list(self) -> list[Turn]:
        """The turns in explicit form (compact form expanded to ``max_turns`` turns)."""
        if self.turns is not None:
            return list(self.turns)
        assert self.action_tokens is not None
        n = self.max_turns
        has_tool = self.tool_tokens is not None or self.tool_wait_s is not None
        zero = Fixed(value=0)
        return [
            Turn(
                action_tokens=self.action_tokens,
                tool_tokens=(self.tool_tokens or zero) if has_tool and j < n - 1 else None,
                tool_wait_s=(self.tool_wait_s or zero) if has_tool and j < n - 1 else None,
            )
            for j in range(n)
        ]

    def is_fixed(self) -> bool:
        """True when every count and wait is fixed, so the ledger is exact."""
        dists = [self.prompt_tokens, self.num_turns, self.action_tokens, self.tool_tokens, self.tool_wait_s]
        for t in self.turns or []:
            dists += [t.action_tokens, t.tool_tokens, t.tool_wait_s]
        return all(d is None or d.is_fixed for d in dists)


class Cache(_Strict):
    """Reuse of computed prefixes between invocations of the same conversation."""

    reuse: Literal["none", "auto", "explicit"] = "none"
    """``none``: every invocation prefills its whole input; ``auto``: each invocation reuses exactly
    the prefix that earlier invocations of the conversation computed; ``explicit``: reuse the
    counts in ``reused_prefix_tokens`` (checked against what was computed)."""
    reused_prefix_tokens: list[int] | None = None
    """Explicit reuse: reused prefix positions per turn, one entry per turn [tokens]."""
    kv_during_tool_wait: Literal["retain", "evict"] = "retain"
    """During a tool wait the conversation's KV is kept resident (``retain``) or released
    (``evict``: no decode slot and no KV held, but ``auto`` reuse after the wait finds nothing)."""
    share_group_prompt: bool | None = None
    """The samples of one GRPO group share their prompt: the group's first sample prefills it,
    the others find all but its last position cached (forwarded again for the first token's
    logits), so the prompt is prefilled once per group, not once per sample (default: on with
    ``reuse: auto``, which needs an engine's prefix cache; off otherwise)."""

    @property
    def shares_group_prompt(self) -> bool:
        """Whether the samples of a group share their prompt's prefill (the default resolved)."""
        return self.reuse == "auto" if self.share_group_prompt is None else self.share_group_prompt

    @model_validator(mode="after")
    def _explicit(self) -> "Cache":
        if self.share_group_prompt and self.reuse == "none":
            raise ValueError("share_group_prompt needs a prefix cache: set reuse to auto or explicit")
        if self.reuse == "explicit" and self.reused_prefix_tokens is None:
            raise ValueError("reuse: explicit needs 'reused_prefix_tokens' (one count per turn)")
        if self.reuse != "explicit" and self.reused_prefix_tokens is not None:
            raise ValueError("'reused_prefix_tokens' is only allowed with reuse: explicit")
        for i, v in enumerate(self.reused_prefix_tokens or []):
            if not 0 <= v <= MAX_CONTEXT_TOKENS:
                raise ValueError(f"reused_prefix_tokens[{i}] must be in [0, {MAX_CONTEXT_TOKENS:,}], got {v}")
        return self


class Training(_Strict):
    """What the trainer does with a finished record."""

    loss_on: list[TokenClass] = Field(default_factory=lambda: ["action"], min_length=1)
    """Token classes that carry loss (default: the policy's actions only)."""
    drop_truncated: bool = False
    """Drop conversations truncated at ``max_context`` from training (and scoring)."""
    teacher_scoring: bool | None = None
    """A teacher forwards the known record once, causally, and samples nothing (default: on for
    ``distillation``, off otherwise)."""
    reference_forward: bool = False
    """A frozen reference model forwards the record once (e.g. for a KL penalty)."""
    filtered_group_fraction: float = Field(default=0.0, ge=0, lt=1)
    """Fraction of prompt groups dropped for carrying no learning signal [fraction 0-1]: rollout
    work per trained step grows by ``1 / (1 - fraction)``."""
    recompute_logprobs: bool = True
    """The trainer recomputes the behaviour policy's log-probs with one extra forward pass (as
    verl's ``old_log_probs`` and open-instruct do); ignored without a rollout engine."""
    teacher_model: str | None = None
    """Teacher model preset or path for ``teacher_scoring`` (default: the policy ``model``)."""

    @field_validator("teacher_model")
    @classmethod
    def _teacher_resolves(cls, v: str | None, info: ValidationInfo) -> str | None:
        return _model_ref(v, info)
    step_time_target_s: float | None = Field(default=None, gt=0, le=MAX_SECONDS)
    """Trainer step-time target [s] used to size trainer GPUs when none are given."""

    @model_validator(mode="after")
    def _unique(self) -> "Training":
        if len(set(self.loss_on)) != len(self.loss_on):
            raise ValueError("loss_on lists a token class twice")
        return self


class Serving(_Strict):
    """Traffic, latency targets, shared prefix and price of a ``serving`` workload.

    A serving workload's conversation is one request: its prompt, then one sampled answer
    (``docs/serving.md``).
    """

    arrival_rate_per_s: float = Field(gt=0, le=1e7)
    """Mean request arrival rate of the whole fleet [requests/s]."""
    arrival_process: Literal["poisson", "gamma"] = "poisson"
    """How requests arrive: ``poisson`` (exponential gaps between requests) or ``gamma`` (gaps
    drawn from a gamma distribution of shape ``burstiness``, as ``vllm bench serve --burstiness``
    does)."""
    burstiness: float = Field(default=1.0, gt=0, le=1000)
    """Gamma shape of the gaps between requests (``arrival_process: gamma`` only): 1 is Poisson,
    below 1 burstier (squared coefficient of variation ``1 / burstiness``), above 1 more regular."""
    ttft_target_s: float | None = Field(default=None, gt=0, le=3600)
    """Time-to-first-token target at ``percentile``, queueing included [s]."""
    tpot_target_s: float | None = Field(default=None, gt=0, le=60)
    """Time-per-output-token target at ``percentile`` [s]: a request's ``(latency - TTFT) /
    (output tokens - 1)``, as ``vllm bench serve`` reports TPOT."""
    percentile: float = Field(default=95.0, gt=0, lt=100)
    """Percentile of requests the targets apply to [0-100]: 99 means p99 (a fraction such as 0.99
    is refused)."""
    max_utilisation: float = Field(default=0.9, gt=0, lt=1)
    """Highest utilisation a replica is planned at, whatever the targets allow [fraction 0-1]:
    its request rate over the largest rate it can sustain (KV memory, ``max_num_seqs`` or
    prefill compute)."""
    shared_prefix_tokens: int = Field(default=0, ge=0, le=10_000_000)
    """Positions at the start of every prompt that all requests share (a system prompt, few-shot
    examples, a retrieved document set) [tokens]; part of ``prompt_tokens``."""
    prefix_hit_rate: float = Field(default=1.0, ge=0, le=1)
    """Fraction of requests that find ``shared_prefix_tokens`` in their replica's prefix cache
    [fraction 0-1]: a hit skips the prefix's prefill (all but the last prompt position is
    reusable) and its KV is stored once per replica."""
    price_usd_per_gpu_hour: float | None = Field(default=None, gt=0, le=10_000)
    """Price of one GPU-hour for the cost per million tokens [USD/GPU-hour]; default the hardware
    profile's ``price_usd_per_gpu_hour`` (``capplan plan --gpu-hour-price`` overrides both)."""
    disaggregated: bool = False
    """Plan separate prefill and decode pools (disaggregated prefill/decode, the KV of every prompt
    sent from a prefill GPU to its decode instance) beside the aggregated fleet
    (``capplan plan --disaggregated``; :mod:`capplan.disagg`)."""

    @model_validator(mode="after")
    def _percent_scale(self) -> "Serving":
        if self.percentile < 1:
            raise FieldError(
                ("percentile",),
                f"{self.percentile:g} looks like a fraction; percentiles are on a 0-100 scale "
                f"(write {self.percentile * 100:g} for p{self.percentile * 100:g})",
            )
        return self

    @model_validator(mode="after")
    def _arrivals(self) -> "Serving":
        if self.arrival_process == "poisson" and self.burstiness != 1.0:
            raise FieldError(("burstiness",), "only allowed with arrival_process: gamma (Poisson arrivals have burstiness 1)")
        return self


class AcceptancePoint(_Strict):
    """The drafter's acceptance rate measured (or expected) at one trainer step."""

    step: int = Field(ge=0)
    """Trainer step [steps]."""
    acceptance_rate: float = Field(ge=0, le=1)
    """Per-token acceptance rate at that step [0-1]."""


class Speculative(_Strict):
    """Speculative decoding of the rollout (or serving) engine.

    In RL the policy drifts away from the drafter as it trains, so the acceptance rate can be
    given per trainer step (``acceptance_by_step``), read between points by linear interpolation
    and held flat beyond the ends.
    """

    method: Literal["eagle", "eagle3", "mtp", "ngram", "draft"]
    """Drafter: ``eagle``, ``eagle3``, ``mtp`` (the checkpoint's multi-token-prediction module),
    ``ngram`` (prompt lookup) or ``draft`` (a separate draft model)."""
    num_speculative_tokens: int = Field(ge=1, le=64)
    """Tokens drafted per verify step [tokens]."""
    acceptance_rate: float | None = Field(default=None, ge=0, le=1)
    """Per-token acceptance rate [0-1], constant over the run (give this or ``acceptance_by_step``)."""
    acceptance_by_step: list[AcceptancePoint] | None = Field(default=None, min_length=1)
    """Per-token acceptance rate at trainer steps, in increasing step order (RL: it falls as the
    policy drifts from the drafter)."""
    draft_model: str | None = None
    """Draft model preset or path (``method: draft`` only)."""

    @field_validator("draft_model")
    @classmethod
    def _draft_resolves(cls, v: str | None, info: ValidationInfo) -> str | None:
        return _model_ref(v, info, "draft_model_given")

    @model_validator(mode="after")
    def _check(self) -> "Speculative":
        if (self.acceptance_rate is None) == (self.acceptance_by_step is None):
            raise ValueError("give exactly one of 'acceptance_rate' or 'acceptance_by_step'")
        steps = [p.step for p in self.acceptance_by_step or []]
        if any(b <= a for a, b in zip(steps, steps[1:])):
            raise ValueError(f"acceptance_by_step: steps must increase (got {steps})")
        if self.method == "draft" and not self.draft_model:
            raise ValueError("method: draft needs 'draft_model' (a model preset or path)")
        if self.method != "draft" and self.draft_model:
            raise ValueError(f"'draft_model' is only used with method: draft (got {self.method})")
        return self

    def acceptance_at(self, step: float) -> float:
        """The acceptance rate at trainer step ``step`` [0-1] (interpolated, flat beyond the ends).

        >>> Speculative(method="eagle3", num_speculative_tokens=3, acceptance_by_step=[
        ...     {"step": 0, "acceptance_rate": 0.8}, {"step": 100, "acceptance_rate": 0.6}]).acceptance_at(50)
        0.7
        """
        if self.acceptance_rate is not None:
            return self.acceptance_rate
        pts = self.acceptance_by_step or []
        if step <= pts[0].step:
            return pts[0].acceptance_rate
        for a, b in zip(pts, pts[1:]):
            if step <= b.step:
                f = (step - a.step) / (b.step - a.step)
                return round(a.acceptance_rate + f * (b.acceptance_rate - a.acceptance_rate), 12)
        return pts[-1].acceptance_rate


def _dtype(value: object, allowed: object, what: str) -> object:
    """``value`` in capplan's spelling (vLLM's accepted), or a message listing ``allowed``."""
    if not isinstance(value, str):
        return value
    name = dtype_name(value)
    names = get_args(allowed)
    if name not in names:
        raise ValueError(f"{value!r} is not a {what}; allowed {', '.join(names)} (or vLLM's auto, bfloat16, float16, half, fp8_e4m3, fp8_e5m2)")
    return name


class EngineSettings(_Strict):
    """The engine the workload runs on, under vLLM's engine-argument names (``vllm serve --help``).

    Every key is optional; a command-line flag of the same name wins over the file, and an
    absent key takes the command's default.
    """

    profile: str | None = Field(default=None, min_length=1)
    """Engine profile: a bundled name (``vllm-0.19``, ``sglang``, ``trtllm``, ...) or a YAML file
    from ``capplan calibrate`` (the ``--engine`` flag)."""
    tensor_parallel_size: int | None = Field(default=None, ge=1, le=MAX_GPUS)
    """GPUs per engine replica, tensor-parallel [GPUs] (``--tensor-parallel-size``)."""
    pipeline_parallel_size: int | None = Field(default=None, ge=1, le=MAX_GPUS)
    """Pipeline stages per replica (``--pipeline-parallel-size``)."""
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    """Fraction of each GPU's memory the engine may use [fraction 0-1] (``--gpu-memory-utilization``)."""
    kv_cache_dtype: str | None = None
    """KV-cache dtype: bf16, fp16, fp8, int8 or int4 (``--kv-cache-dtype``)."""
    dtype: str | None = None
    """Weight dtype: bf16, fp16, fp8, int8, int4, nvfp4 or mxfp4 (``--dtype``)."""
    max_model_len: int | None = Field(default=None, ge=1, le=MAX_CONTEXT_TOKENS)
    """Longest context a sequence may reach [tokens] (``--max-model-len``)."""
    max_num_seqs: int | None = Field(default=None, ge=1, le=MAX_SEQUENCES)
    """Most sequences in one engine step [sequences] (``--max-num-seqs``)."""
    max_num_batched_tokens: int | None = Field(default=None, ge=1, le=MAX_CONTEXT_TOKENS)
    """Most tokens in one engine step [tokens] (``--max-num-batched-tokens``)."""
    block_size: int | None = Field(default=None, ge=1, le=MAX_CONTEXT_TOKENS)
    """KV block size [tokens] (``--block-size``)."""
    enable_prefix_caching: bool | None = None
    """Automatic prefix caching: true sets ``cache.reuse`` to auto, false to none
    (``--enable-prefix-caching``)."""
    data_parallel_size: int | None = Field(default=None, ge=1, le=MAX_GPUS)
    """Data-parallel ranks of an instance, each of ``tensor_parallel_size`` GPUs with its own
    sequences and KV cache (``--data-parallel-size``; with a MoE model, data-parallel attention
    beside expert parallelism): an instance is ``tensor_parallel_size x data_parallel_size`` GPUs."""
    enable_expert_parallel: bool | None = None
    """Expert parallelism over every GPU of the instance, ``ep = tensor_parallel_size x
    data_parallel_size`` whole experts per GPU group (``--enable-expert-parallel``; MoE models only)."""
    num_redundant_experts: int | None = Field(default=None, ge=0, le=MAX_GPUS)
    """Extra expert replicas the expert load balancer places (``--num-redundant-experts``, EPLB's
    ``num_redundant_experts``) [count]; needs ``enable_expert_parallel``."""
    enable_dbo: bool | None = None
    """Dual-batch overlap: each step runs as two micro-batches, one's expert-parallel all-to-all
    hidden behind the other's compute (``--enable-dbo``; SGLang ``--enable-two-batch-overlap``)."""
    enforce_eager: bool | None = None
    """Eager-mode PyTorch without CUDA graphs (``--enforce-eager``): every step pays the host
    time of launching each layer's kernels (the engine profile's ``eager_s_per_layer``), and no
    CUDA-graph memory is reserved."""
    kv_offloading_size: float | None = Field(default=None, gt=0, le=1_000_000)
    """Host memory of the instance given to a CPU KV tier [GiB] (``--kv-offloading-size``, vLLM's
    OffloadingConnector): summed over the instance's GPUs, so each GPU's share is this divided by
    ``tensor_parallel_size x data_parallel_size``."""

    @model_validator(mode="after")
    def _experts(self) -> "EngineSettings":
        if self.num_redundant_experts and not self.enable_expert_parallel:
            raise FieldError(("num_redundant_experts",), "redundant experts are placed by expert parallelism; set enable_expert_parallel: true")
        return self

    @field_validator("kv_cache_dtype", mode="before")
    @classmethod
    def _kv_dtype(cls, v: object) -> object:
        return _dtype(v, KVDtype, "KV-cache dtype")

    @field_validator("dtype", mode="before")
    @classmethod
    def _weight_dtype(cls, v: object) -> object:
        return _dtype(v, WeightDtype, "weight dtype")


class Sampling(_Strict):
    """Monte Carlo settings for workloads with distributions."""

    conversations: int = Field(default=100_000, ge=1, le=MAX_CONVERSATIONS)
    """Conversations sampled to estimate means and percentiles."""
    seed: int = Field(default=0, ge=0)
    """Seed of the random generator: the same seed gives the same ledger."""


class Workload(_Strict):
    """A workload file, version 1."""

    version: Literal[1] = 1
    """Schema version of the file."""
    name: str = Field(min_length=1)
    """Short name shown in tables."""
    description: str = ""
    """What the workload represents and where its numbers come from."""
    model: str | None = None
    """Model preset name or path to a model profile (optional)."""

    @field_validator("model")
    @classmethod
    def _model_resolves(cls, v: str | None, info: ValidationInfo) -> str | None:
        return _model_ref(v, info, "model_given")
    method: Method
    """Training method: ``sft``, ``distillation``, ``outcome-rl``, ``multi-turn-rl`` or ``serving``."""
    volume: Volume = Field(default_factory=Volume)
    """How many prompts and samples one step holds."""
    conversation: Conversation
    """The shape of one conversation: prompt, turns of actions and tool observations."""
    cache: Cache = Field(default_factory=Cache)
    """How computed prefixes are reused between turns and what happens to KV during tool waits."""
    training: Training = Field(default_factory=Training)
    """What the trainer does with each record (loss, filtering, extra passes)."""
    serving: Serving | None = None
    """Arrival rate and latency targets (method ``serving`` only)."""
    speculative: Speculative | None = None
    """Speculative decoding of the rollout or serving engine (methods with a rollout engine only)."""
    engine: EngineSettings | None = None
    """Engine settings under vLLM's names (tensor_parallel_size, max_num_seqs, ...): the defaults
    of the matching flags (methods with a rollout engine only)."""
    sampling: Sampling = Field(default_factory=Sampling)
    """Monte Carlo sample size and seed for figures drawn from distributions."""

    @model_validator(mode="after")
    def _cross(self) -> "Workload":
        conv = self.conversation
        given = "sampling" in self.model_fields_set and "conversations" in self.sampling.model_fields_set
        # the default sample size is checked where it is drawn (check_sample_size), so --conversations can lower it
        if given and not conv.is_fixed() and self.sampling.conversations * conv.max_turns > MAX_SAMPLE_CELLS:
            n, turns = self.sampling.conversations, conv.max_turns
            raise FieldError(
                ("sampling", "conversations"),
                f"{n:,} conversations x {turns:,} turns = {n * turns:,} conversation-turns, above the "
                f"{MAX_SAMPLE_CELLS:,} one sample may hold (about 2 GB); use at most {max(MAX_SAMPLE_CELLS // turns, 1):,}",
            )
        if self.serving is not None and self.method != "serving":
            raise FieldError(("serving",), f"only allowed with method: serving (this workload is {self.method})")
        if "training" in self.model_fields_set and self.method not in TRAINER_METHODS:
            raise FieldError(("training",), f"only allowed with a trainer (sft, distillation, outcome-rl, multi-turn-rl); "
                             f"method {self.method} trains nothing, scores nothing and updates no parameters")
        if self.speculative is not None and self.method not in ROLLOUT_METHODS:
            raise FieldError(("speculative",), f"needs a rollout or serving engine; method {self.method} samples nothing")
        if self.speculative is not None and self.speculative.acceptance_by_step is not None and self.method not in TRAINER_METHODS:
            raise FieldError(("speculative", "acceptance_by_step"),
                             f"reads the acceptance at trainer steps, and method {self.method} has no trainer; give acceptance_rate")
        if self.engine is not None and self.method not in ROLLOUT_METHODS:
            raise FieldError(("engine",), f"needs a rollout or serving engine; method {self.method} samples nothing")
        if self.cache.reused_prefix_tokens is not None:
            reuse = self.cache.reused_prefix_tokens
            where = ("cache", "reused_prefix_tokens")
            if conv.turns is None and not (conv.num_turns and conv.num_turns.is_fixed):
                raise FieldError(where, "explicit reuse needs a fixed number of turns")
            if len(reuse) != conv.max_turns:
                raise FieldError(
                    where,
                    f"has {len(reuse)} entries but the conversation has {conv.max_turns} turns (one entry per turn)",
                )
            inputs = nominal_inputs(conv)
            for j, (r, inp) in enumerate(zip(reuse, inputs)):
                if inp is not None and r > inp:
                    raise FieldError(
                        (*where, j), f"{r} reused positions is longer than turn {j + 1}'s whole input ({inp} positions)"
                    )
        return self

    @property
    def has_rollout(self) -> bool:
        """Whether the method samples from a policy with a rollout engine."""
        return self.method in ROLLOUT_METHODS

    @property
    def has_trainer(self) -> bool:
        """Whether a trainer consumes the records."""
        return self.method in TRAINER_METHODS

    @property
    def teacher_scores(self) -> bool:
        """Whether a teacher scores the record (explicit setting, else on for distillation)."""
        ts = self.training.teacher_scoring
        return self.method == "distillation" if ts is None else ts

    @property
    def scorers(self) -> int:
        """Number of models that forward the finished record to score it (teacher, reference)."""
        return int(self.teacher_scores) + int(self.training.reference_forward)


def nominal_inputs(conv: Conversation) -> list[int | None]:
    """Input length of each turn's invocation when all earlier counts are fixed, else ``None``.

    Turn ``j``'s input is the prompt plus every earlier action and tool observation.
    """
    out: list[int | None] = []
    total: float | None = conv.prompt_tokens.mean() if conv.prompt_tokens.is_fixed else None
    for turn in conv.turn_list():
        out.append(None if total is None else int(round(total)))
        for d in (turn.action_tokens, turn.tool_tokens):
            if total is None or d is None:
                continue
            total = total + d.mean() if d.is_fixed else None
    return out


def load_workload(name_or_path: str | Path, model_given: bool = False, draft_model_given: bool = False) -> Workload:
    """Load a bundled workload by name or a user's workload file, validated.

    ``model_given`` / ``draft_model_given``: the command was given ``--model`` /
    ``--draft-model``, which replace the file's ``model`` / ``speculative.draft_model``; those
    are then not required to resolve.

    Raises
    ------
    InputError
        One line naming the file, the field path, the YAML line and what is allowed.
    NotFoundError
        When the name is neither a file nor a bundled workload.
    """
    path = resolve("workloads", name_or_path)
    return load_model(path, Workload, {"model_given": model_given, "draft_model_given": draft_model_given,
                                       "base_dir": str(Path(path).parent)})
