"""The worked replay example, derived by hand in each docstring."""

from __future__ import annotations

import pytest

from capplan.ledger import compute_ledger
from capplan.workload import load_workload


def counters(name: str) -> dict:
    return compute_ledger(load_workload(name)).per_conversation


def test_seed_replay_no_reuse():
    """12 prompt tokens; turn 1 samples 4 actions; 5 tool tokens; turn 2 samples 4 actions.

    Each turn is a fresh request, no reuse:
      turn 1 prefill = 12 (prompt)
      turn 2 prefill = 12 + 4 + 5 = 21 (prompt 12, action 4, tool 5)
      prefill_forwarded = 12 + 21 = 33 = prompt 24 + action 4 + tool 5
      sampled = 4 + 4 = 8; recorded = 12 + 4 + 5 + 4 = 25
      decode_forwarded = (4 - 1) + (4 - 1) = 6: the last sampled token of each turn is never
      forwarded (the first comes from the prefill's logits).
    """
    c = counters("seed-replay")
    assert c["prefill_forwarded"] == {"prompt": 24, "action": 4, "tool": 5, "total": 33}
    assert c["recorded"] == {"prompt": 12, "action": 8, "tool": 5, "total": 25}
    assert c["sampled"] == {"prompt": 0, "action": 8, "tool": 0, "total": 8}
    assert c["decode_forwarded"]["total"] == 6
    assert c["cache_hit"]["total"] == 0
    assert c["trained"] == {"prompt": 0, "action": 8, "tool": 0, "total": 8}


def test_seed_replay_auto_reuse():
    """``auto``: turn 2 reuses exactly what turn 1 computed.

    Turn 1 computed 12 prompt positions (prefill) + 3 action positions (decode; the 4th sampled
    token was never forwarded) = 15 positions. Turn 2's input is 21 positions, so
      cache_hit = 15 (prompt 12, action 3); turn 2 prefill = 21 - 15 = 6 (action 1, tool 5)
      prefill_forwarded = 12 + 6 = 18 (prompt 12, action 1, tool 5)
      prefill + hits = 18 + 15 = 33 = sum of inputs; sampled stays 8, recorded 25.
    """
    led = compute_ledger(load_workload("seed-replay-auto"))
    c = led.per_conversation
    assert c["cache_hit"] == {"prompt": 12, "action": 3, "tool": 0, "total": 15}
    assert c["prefill_forwarded"] == {"prompt": 12, "action": 1, "tool": 5, "total": 18}
    assert c["sampled"]["total"] == 8 and c["recorded"]["total"] == 25
    assert led.ok


def test_seed_replay_claim16_is_not_backed():
    """Claiming 16 reused positions on turn 2 (the replay example's second case).

    The ledger reports the claim as given, without clamping: cache_hit = 16 (prompt 12 +
    action 4), prefill = 12 + (21 - 16) = 17 (prompt 12, tool 5). But only 15 positions were
    computed by turn 1 (the 4th action was never forwarded), so the backing check fails, naming
    turn 2, 16 and 15. Knowing the 16th token's ID does not make it a cache hit.
    """
    led = compute_ledger(load_workload("seed-replay-claim16"))
    c = led.per_conversation
    assert c["cache_hit"] == {"prompt": 12, "action": 4, "tool": 0, "total": 16}
    assert c["prefill_forwarded"] == {"prompt": 12, "action": 0, "tool": 5, "total": 17}
    failed = [ch for ch in led.checks if not ch.ok]
    assert [ch.name for ch in failed] == ["cache_hits_backed_by_computed_prefix"]
    assert "turn 2 claims 16" in failed[0].detail and "only 15" in failed[0].detail


def test_seed_claim15_is_backed(write_yaml):
    """The replay example's third check: with 15 computed positions reused, 21 - 15 = 6 remain."""
    path = write_yaml(
        """
        version: 1
        name: claim15
        method: multi-turn-rl
        conversation:
          prompt_tokens: 12
          turns: [{action_tokens: 4, tool_tokens: 5}, {action_tokens: 4}]
        cache: {reuse: explicit, reused_prefix_tokens: [0, 15]}
        """
    )
    led = compute_ledger(load_workload(str(path)))
    assert led.ok
    assert led.per_conversation["prefill_forwarded"]["total"] == 12 + 6
    assert led.per_conversation["sampled"]["total"] == 8


@pytest.mark.parametrize("name", ["seed-replay", "seed-replay-auto", "seed-replay-claim16"])
def test_seed_fixtures_are_exact_integers(name):
    led = compute_ledger(load_workload(name))
    assert led.exact and led.conversations_sampled == 1
    assert all(isinstance(v, int) for d in led.per_step.values() for v in d.values())
