"""The workload map: which components a method needs, who owns what, what flows where.

For each arrow the map names the record it transfers and the ledger counter that measures it, so
a tool-waiting conversation can never be mistaken for a runnable decode request, and a method's
unneeded services (SFT on an existing dataset needs no rollout engine) show as absent, with the
reason.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from capplan.workload import Workload


@dataclass(frozen=True)
class Component:
    """A service in the update loop."""

    id: str
    label: str
    present: bool
    reason: str
    """Why it is needed, or why it is absent."""


@dataclass(frozen=True)
class Arrow:
    """A transfer between two components."""

    source: str
    target: str
    record: str
    """What the arrow carries."""
    counter: str
    """Ledger counter (``counter[class]``) that measures it, or a non-ledger measure."""


@dataclass(frozen=True)
class WorkloadMap:
    """Components, the owner of each responsibility, and the arrows between components."""

    workload: str
    method: str
    components: list[Component]
    owners: dict[str, str]
    arrows: list[Arrow]

    def as_dict(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "method": self.method,
            "components": [asdict(c) for c in self.components],
            "owners": self.owners,
            "arrows": [asdict(a) for a in self.arrows],
        }


def build_map(w: Workload) -> WorkloadMap:
    """Build the map of ``w`` from its method, conversation shape and training settings."""
    rollout, trainer = w.has_rollout, w.has_trainer
    tools = any(t.has_tool for t in w.conversation.turn_list())
    rl = w.method in ("outcome-rl", "multi-turn-rl")
    serving = w.method == "serving"
    source_label = "Request clients" if serving else ("Dataset (existing traces)" if not rollout else "Prompt / task queue")

    comps = [
        Component("source", source_label, True, "where prompts (or finished examples) come from"),
        Component(
            "rollout",
            "Rollout engine (policy inference)",
            rollout,
            "samples actions token by token (prefill, then decode)"
            if rollout
            else "SFT on an existing dataset samples nothing: no rollout engine in the update loop",
        ),
        Component(
            "tools",
            "Environment / tool workers",
            rollout and tools,
            "execute tool calls on CPU; a waiting conversation is not runnable GPU work"
            if rollout and tools
            else ("no tool calls in this conversation" if rollout else "no environment is run during SFT updates"),
        ),
        Component(
            "reward",
            "Reward / verifier",
            rl,
            "scores finished rollouts (outcome reward)"
            if rl
            else {
                "sft": "the dataset's targets are the signal",
                "distillation": "the teacher's per-position log-probs are the signal",
                "serving": "no training signal is computed while serving",
            }.get(w.method, "not used"),
        ),
        Component(
            "teacher",
            "Teacher scorer",
            w.teacher_scores,
            "forwards the known record once, causally, samples nothing"
            if w.teacher_scores
            else "training.teacher_scoring is off",
        ),
        Component(
            "reference",
            "Reference model",
            w.training.reference_forward,
            "forwards the record once for a KL term" if w.training.reference_forward else "training.reference_forward is off",
        ),
        Component(
            "queue",
            "Ready queue",
            trainer,
            "buffers finished, scored records for the trainer" if trainer else "no trainer consumes records",
        ),
        Component(
            "trainer", "Trainer", trainer, "forward, backward, optimizer step" if trainer else "serving updates no parameters"
        ),
        Component(
            "sync",
            "Weight sync",
            trainer and rollout,
            "pushes new parameters to the rollout engine (policy version n+1)"
            if trainer and rollout
            else ("no rollout engine to update" if trainer else "no parameter update"),
        ),
    ]
    present = {c.id for c in comps if c.present}

    def owner(cid: str, fallback: str) -> str:
        return next(c.label for c in comps if c.id == cid) if cid in present else fallback

    owners = {
        "generation": owner("rollout", "nobody: records come from the dataset"),
        "tool_execution": owner("tools", "nobody: no tool calls"),
        "scoring": ", ".join(
            c.label for c in comps if c.id in ("reward", "teacher", "reference") and c.present
        )
        or "nobody",
        "ready_queue": owner("queue", "nobody"),
        "parameter_update": owner("trainer", "nobody"),
    }

    arrows: list[Arrow] = []
    if rollout:
        arrows.append(Arrow("source", "rollout", "prompt token IDs + generation config", "prefill_forwarded[prompt]"))
        if tools:
            arrows.append(Arrow("rollout", "tools", "tool call (sampled action tokens)", "sampled[action]"))
            arrows.append(
                Arrow("tools", "rollout", "tool observation tokens (after a wait that is not GPU work)", "recorded[tool]")
            )
        finished = "finished record: token IDs, origin mask, behaviour log-probs, policy version, stop reason"
        scorer_targets = [c for c in ("reward", "teacher", "reference") if c in present]
        for target in scorer_targets:
            counter = "recorded[total]" if target == "reward" else "scored[total]"
            arrows.append(Arrow("rollout", target, finished, counter))
            if trainer:
                arrows.append(
                    Arrow(
                        target,
                        "queue",
                        "reward per record" if target == "reward" else "per-position log-probs of known tokens",
                        counter,
                    )
                )
        if trainer and not scorer_targets:
            arrows.append(Arrow("rollout", "queue", finished, "recorded[total]"))
        if serving:
            arrows.append(Arrow("rollout", "source", "response tokens", "sampled[action]"))
    else:
        arrows.append(Arrow("source", "queue", "tokenized examples + loss mask", "recorded[total]"))
        for target in ("teacher", "reference"):
            if target in present:
                arrows.append(Arrow("source", target, "tokenized example (known tokens)", "scored[total]"))
                arrows.append(Arrow(target, "queue", "per-position log-probs of known tokens", "scored[total]"))
    if trainer:
        arrows.append(Arrow("queue", "trainer", "training batch (positions with loss)", "trained[total]"))
    if "sync" in present:
        arrows.append(Arrow("trainer", "sync", "updated parameters", "weight bytes (not a token counter)"))
        arrows.append(Arrow("sync", "rollout", "policy version n+1", "weight bytes (not a token counter)"))
    return WorkloadMap(w.name, w.method, comps, owners, arrows)


def _quote(text: str) -> str:
    return text.replace('"', "'")


def to_mermaid(m: WorkloadMap) -> str:
    """Mermaid flowchart (renders in GitHub, GitLab and mermaid.live); absent components dashed."""
    lines = ["flowchart LR"]
    for c in m.components:
        text = c.label if c.present else f"{c.label}<br/><i>absent: {c.reason}</i>"
        lines.append(f'    {c.id}["{_quote(text)}"]')
    for a in m.arrows:
        lines.append(f'    {a.source} -->|"{_quote(a.record)}<br/>{_quote(a.counter)}"| {a.target}')
    lines.append("    classDef absent stroke-dasharray: 5 5,color:#888,fill:#f5f5f5")
    absent = [c.id for c in m.components if not c.present]
    if absent:
        lines.append(f"    class {','.join(absent)} absent")
    return "\n".join(lines) + "\n"


def to_dot(m: WorkloadMap) -> str:
    """Graphviz DOT (``dot -Tsvg``); absent components dashed and grey."""
    lines = [f'digraph "{_quote(m.workload)}" {{', "  rankdir=LR;", '  node [shape=box, fontname="Helvetica"];']
    for c in m.components:
        if c.present:
            lines.append(f'  {c.id} [label="{_quote(c.label)}"];')
        else:
            lines.append(
                f'  {c.id} [label="{_quote(c.label)}\\nabsent: {_quote(c.reason)}", style=dashed, fontcolor=gray50, color=gray60];'
            )
    for a in m.arrows:
        lines.append(f'  {a.source} -> {a.target} [label="{_quote(a.record)}\\n{_quote(a.counter)}", fontsize=10];')
    lines.append("}")
    return "\n".join(lines) + "\n"
