"""Ledger behaviour beyond the seed: truncation, methods, scoring, eviction, Monte Carlo, identities."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from capplan.ledger import COUNTERS, compute_ledger
from capplan.workload import Workload, load_workload


def make(conv: dict, **top) -> Workload:
    data = {"version": 1, "name": "t", "method": "multi-turn-rl", "conversation": conv}
    data.update(top)
    return Workload.model_validate(data)


def test_per_step_multiplies_by_prompts_and_samples():
    """seed-replay x 16 prompts x 8 samples: recorded 25 x 128 = 3,200; prefill 33 x 128 = 4,224."""
    w = make(
        {"prompt_tokens": 12, "turns": [{"action_tokens": 4, "tool_tokens": 5}, {"action_tokens": 4}]},
        volume={"prompts_per_step": 16, "samples_per_prompt": 8},
    )
    led = compute_ledger(w)
    assert led.per_step["recorded"]["total"] == 3200
    assert led.per_step["prefill_forwarded"]["total"] == 4224


def test_max_context_truncates_the_response():
    """prompt 100, one turn of 50 actions, max_context 120: the action is cut to 20 positions.

    recorded = 100 + 20 = 120; sampled = 20; with drop_truncated, trained = 0.
    """
    w = make(
        {"prompt_tokens": 100, "turns": [{"action_tokens": 50}], "max_context": 120},
        training={"drop_truncated": True},
    )
    led = compute_ledger(w)
    assert led.per_conversation["recorded"]["total"] == 120
    assert led.per_conversation["sampled"]["total"] == 20
    assert led.per_conversation["trained"]["total"] == 0
    assert led.conversation_stats["truncated_fraction"] == 1
    assert led.ok


def test_truncation_stops_later_turns():
    """prompt 10; turn 1: 10 actions + 10 tool; turn 2: 10 actions; max_context 25.

    After turn 1's action the context is 20; the observation is clipped to 5 (context 25), so
    turn 2 cannot start: 1 invocation, recorded 25, sampled 10.
    """
    w = make(
        {
            "prompt_tokens": 10,
            "turns": [{"action_tokens": 10, "tool_tokens": 10}, {"action_tokens": 10}],
            "max_context": 25,
        }
    )
    led = compute_ledger(w)
    assert led.per_conversation["recorded"] == {"prompt": 10, "action": 10, "tool": 5, "total": 25}
    assert led.conversation_stats["invocations"] == 1
    assert led.conversation_stats["truncated_fraction"] == 1


def test_max_response_tokens_cuts_generation():
    """A 100-token action with max_response_tokens 64 records 64 actions and is truncated."""
    w = make({"prompt_tokens": 10, "turns": [{"action_tokens": 100}], "max_response_tokens": 64})
    led = compute_ledger(w)
    assert led.per_conversation["sampled"]["total"] == 64
    assert led.conversation_stats["truncated_fraction"] == 1


def test_sft_has_no_rollout_work():
    """SFT: the record exists (600 + 900) but nothing is sampled, prefilled or decoded by a rollout engine."""
    w = make({"prompt_tokens": 600, "turns": [{"action_tokens": 900}]}, method="sft")
    led = compute_ledger(w)
    c = led.per_conversation
    assert c["recorded"]["total"] == 1500 and c["trained"]["total"] == 900
    assert c["sampled"]["total"] == c["prefill_forwarded"]["total"] == c["decode_forwarded"]["total"] == 0
    assert led.ok


def test_distillation_teacher_scores_whole_record_once():
    """Distillation: the teacher forwards prompt 500 + actions 2000 once: scored = 2,500; nothing more sampled."""
    w = make({"prompt_tokens": 500, "turns": [{"action_tokens": 2000}]}, method="distillation")
    led = compute_ledger(w)
    assert led.per_conversation["scored"] == {"prompt": 500, "action": 2000, "tool": 0, "total": 2500}
    assert led.per_conversation["sampled"]["total"] == 2000
    assert led.ok


def test_teacher_and_reference_score_twice():
    w = make(
        {"prompt_tokens": 10, "turns": [{"action_tokens": 5}]},
        method="distillation",
        training={"reference_forward": True},
    )
    assert compute_ledger(w).per_conversation["scored"]["total"] == 2 * 15


def test_serving_trains_nothing():
    w = make({"prompt_tokens": 10, "turns": [{"action_tokens": 5}]}, method="serving")
    assert compute_ledger(w).per_conversation["trained"]["total"] == 0


def test_loss_on_tool_and_action():
    """loss_on [action, tool]: trained = 8 actions + 5 tool = 13 of the seed record."""
    w = make(
        {"prompt_tokens": 12, "turns": [{"action_tokens": 4, "tool_tokens": 5}, {"action_tokens": 4}]},
        training={"loss_on": ["action", "tool"]},
    )
    assert compute_ledger(w).per_conversation["trained"] == {"prompt": 0, "action": 8, "tool": 5, "total": 13}


def test_evict_during_tool_wait_loses_auto_reuse():
    """With KV evicted during the tool wait, ``auto`` finds nothing: the seed re-prefills 33."""
    w = make(
        {"prompt_tokens": 12, "turns": [{"action_tokens": 4, "tool_tokens": 5, "tool_wait_s": 3}, {"action_tokens": 4}]},
        cache={"reuse": "auto", "kv_during_tool_wait": "evict"},
    )
    led = compute_ledger(w)
    assert led.per_conversation["prefill_forwarded"]["total"] == 33
    assert led.per_conversation["cache_hit"]["total"] == 0


def test_waiting_is_not_work():
    """Doubling the tool wait doubles wait time and changes no forwarded counter (the replay example's question)."""
    base = {"prompt_tokens": 12, "turns": [{"action_tokens": 4, "tool_tokens": 5, "tool_wait_s": 2}, {"action_tokens": 4}]}
    slow = {"prompt_tokens": 12, "turns": [{"action_tokens": 4, "tool_tokens": 5, "tool_wait_s": 4}, {"action_tokens": 4}]}
    a, b = compute_ledger(make(base)), compute_ledger(make(slow))
    assert b.conversation_stats["tool_wait_s"] == 2 * a.conversation_stats["tool_wait_s"] == 4
    assert a.per_conversation == b.per_conversation


def test_broken_fixture_fails_its_check():
    led = compute_ledger(load_workload(str(Path(__file__).parent / "fixtures" / "broken-claim-turn1.yaml")))
    failed = {c.name for c in led.checks if not c.ok}
    assert failed == {"cache_hits_backed_by_computed_prefix"}


def test_monte_carlo_is_seeded_and_reproducible():
    w = load_workload("agentic-tool-rl")
    a = compute_ledger(w, conversations=5000, seed=3)
    b = compute_ledger(w, conversations=5000, seed=3)
    c = compute_ledger(w, conversations=5000, seed=4)
    assert a.per_conversation == b.per_conversation
    assert a.per_conversation != c.per_conversation
    assert not a.exact and a.conversations_sampled == 5000


def test_monte_carlo_mean_matches_distribution():
    """Uniform(100, 300) actions, one turn: mean sampled ~200 (SE ~ 58/sqrt(20000) = 0.4)."""
    w = make({"prompt_tokens": 50, "turns": [{"action_tokens": {"dist": "uniform", "low": 100, "high": 300}}]})
    led = compute_ledger(w, conversations=20_000, seed=1)
    assert led.per_conversation["sampled"]["total"] == pytest.approx(200, abs=2)
    assert led.per_conversation_p95["sampled"]["total"] == pytest.approx(290, abs=3)


def test_olmo_like_response_mean_near_published():
    """reasoning-rl-olmo3-7b: response mean after the 32,768 cut should be near OLMo 3's 14,628 (within 2%)."""
    led = compute_ledger(load_workload("reasoning-rl-olmo3-7b"), conversations=50_000)
    assert led.per_conversation["sampled"]["total"] == pytest.approx(14628, rel=0.02)
    assert 0 < led.conversation_stats["truncated_fraction"] < 0.1
    assert led.conversation_stats["record_length_max"] <= 2048 + 32768


def test_variable_turns_compact_form():
    """num_turns uniform 1..3, fixed 10 actions, 5 tool tokens between turns: identities hold and
    mean invocations ~ 2 (rounding uniform(1, 3) gives 1, 2, 3 with probability 1/4, 1/2, 1/4)."""
    w = make(
        {
            "prompt_tokens": 20,
            "num_turns": {"dist": "uniform", "low": 1, "high": 3},
            "action_tokens": 10,
            "tool_tokens": 5,
        },
        cache={"reuse": "auto"},
    )
    led = compute_ledger(w, conversations=20_000)
    assert led.ok
    assert led.conversation_stats["invocations"] == pytest.approx(2.0, abs=0.05)
    assert led.conversation_stats["tool_calls"] == pytest.approx(1.0, abs=0.05)


turn = st.fixed_dictionaries(
    {"action_tokens": st.integers(1, 50)},  # every turn samples (a workload with 0 is refused)
    optional={"tool_tokens": st.integers(0, 50), "tool_wait_s": st.floats(0, 100)},
)


@settings(max_examples=150, deadline=None)
@given(
    prompt=st.integers(1, 100),
    turns=st.lists(turn, min_size=1, max_size=6),
    reuse=st.sampled_from(["none", "auto"]),
    evict=st.booleans(),
    max_context=st.one_of(st.none(), st.integers(1, 300)),
    method=st.sampled_from(["multi-turn-rl", "distillation", "sft", "serving", "outcome-rl"]),
)
def test_identities_hold_for_any_fixed_workload(prompt, turns, reuse, evict, max_context, method):
    """Property: every identity holds for fixed workloads under none/auto reuse, and the numbers
    obey the definitions: prefill + hits = sum of inputs >= recorded - last action; hits never
    exceed prefill-able input; recorded never exceeds max_context (which must hold the prompt)."""
    assume(max_context is None or max_context > prompt)
    w = make(
        {"prompt_tokens": prompt, "turns": turns, "max_context": max_context},
        method=method,
        cache={"reuse": reuse, "kv_during_tool_wait": "evict" if evict else "retain"},
    )
    led = compute_ledger(w)
    assert led.ok, [c for c in led.checks if not c.ok]
    c = led.per_conversation
    for name in COUNTERS:
        assert c[name]["total"] == c[name]["prompt"] + c[name]["action"] + c[name]["tool"]
        assert min(c[name].values()) >= 0
    if max_context is not None:
        assert c["recorded"]["total"] <= max_context
    if reuse == "none":
        assert c["cache_hit"]["total"] == 0


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31), n=st.integers(1, 400))
def test_identities_hold_under_monte_carlo(seed, n):
    led = compute_ledger(load_workload("agentic-tool-rl"), conversations=n, seed=seed)
    assert led.ok
    assert np.isfinite(led.per_step["recorded"]["total"])


def test_filtered_groups_are_generated_but_not_trained(tmp_path):
    """10 prompts x 4 samples with half the groups filtered: a trained step generates 40 / (1 - 0.5)
    = 80 conversations. Each has a 100-token prompt and one 50-token action, so per step 80 x 50 =
    4,000 positions are sampled and 80 x 100 = 8,000 prefilled, but only 40 x 50 = 2,000 trained."""
    from capplan.ledger import compute_ledger
    from capplan.workload import load_workload

    path = tmp_path / "f.yaml"
    path.write_text(
        "version: 1\nname: f\nmethod: outcome-rl\n"
        "conversation:\n  prompt_tokens: 100\n  turns:\n    - action_tokens: 50\n"
        "volume:\n  prompts_per_step: 10\n  samples_per_prompt: 4\n"
        "training:\n  loss_on: [action]\n  filtered_group_fraction: 0.5\n"
    )
    led = compute_ledger(load_workload(str(path)))
    assert (led.conversations_per_step, led.conversations_generated_per_step) == (40, 80.0)
    assert led.per_step["sampled"]["total"] == 4000 and led.per_step["prefill_forwarded"]["total"] == 8000
    assert led.per_step["trained"]["total"] == 2000
