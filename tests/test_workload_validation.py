"""Every error path of the workload file: one line naming the file, the field path, the YAML line
and what is allowed; never a traceback."""

from __future__ import annotations

import pytest

from capplan.errors import InputError, NotFoundError
from capplan.workload import load_workload

GOOD = """
version: 1
name: ok
method: multi-turn-rl
conversation:
  prompt_tokens: 12
  turns:
    - action_tokens: 4
      tool_tokens: 5
    - action_tokens: {ACTION}
"""


def error_of(write_yaml, text: str) -> str:
    path = write_yaml(text)
    with pytest.raises(InputError) as info:
        load_workload(str(path))
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith(str(path) + ": ")
    return msg[len(str(path)) + 2 :]


def test_good_file_loads(write_yaml):
    w = load_workload(str(write_yaml(GOOD.replace("{ACTION}", "4"))))
    assert w.conversation.turns[1].action_tokens.mean() == 4


def test_unknown_key_suggests_closest(write_yaml):
    msg = error_of(write_yaml, GOOD.replace("{ACTION}", "4").replace("prompt_tokens", "prompt_tokns"))
    assert msg.startswith("conversation.prompt_tokns (line 5): unknown key; did you mean 'prompt_tokens'?")


def test_unknown_nested_key_in_turn(write_yaml):
    msg = error_of(write_yaml, GOOD.replace("{ACTION}", "4").replace("tool_tokens", "tool_token"))
    assert msg.startswith("conversation.turns[0].tool_token (line 8): unknown key; did you mean 'tool_tokens'?")


def test_negative_count(write_yaml):
    msg = error_of(write_yaml, GOOD.replace("{ACTION}", "-3"))
    assert msg == "conversation.turns[1].action_tokens (line 9): must be >= 0, got -3"


def test_wrong_type(write_yaml):
    msg = error_of(write_yaml, GOOD.replace("{ACTION}", "many"))
    assert msg.startswith("conversation.turns[1].action_tokens (line 9):")
    assert "number or a distribution" in msg or "dict" in msg or "valid" in msg


def test_p95_below_mean(write_yaml):
    msg = error_of(write_yaml, GOOD.replace("{ACTION}", "{dist: lognormal, mean: 100, p95: 50}"))
    assert msg == "conversation.turns[1].action_tokens (line 9): lognormal p95 (50) must be >= mean (100)"


def test_lognormal_needs_one_shape(write_yaml):
    msg = error_of(write_yaml, GOOD.replace("{ACTION}", "{dist: lognormal, mean: 100}"))
    assert "exactly one of p95 or sigma" in msg


def test_unknown_distribution(write_yaml):
    msg = error_of(write_yaml, GOOD.replace("{ACTION}", "{dist: poisson, mean: 3}"))
    assert msg.startswith("conversation.turns[1].action_tokens (line 9):")
    assert "fixed" in msg and "lognormal" in msg


def test_bad_method_lists_allowed(write_yaml):
    msg = error_of(write_yaml, GOOD.replace("{ACTION}", "4").replace("multi-turn-rl", "ppo"))
    assert msg.startswith("method (line 3):")
    assert "'sft', 'distillation', 'outcome-rl', 'multi-turn-rl' or 'serving'" in msg


def test_explicit_reuse_longer_than_input(write_yaml):
    """Turn 2's whole input is 12 + 4 + 5 = 21 positions; claiming 22 is impossible."""
    text = GOOD.replace("{ACTION}", "4") + "cache:\n  reuse: explicit\n  reused_prefix_tokens: [0, 22]\n"
    msg = error_of(write_yaml, text)
    assert msg == (
        "cache.reused_prefix_tokens[1] (line 12): 22 reused positions is longer than turn 2's whole input "
        "(21 positions)"
    )


def test_explicit_reuse_wrong_length(write_yaml):
    text = GOOD.replace("{ACTION}", "4") + "cache:\n  reuse: explicit\n  reused_prefix_tokens: [0]\n"
    assert "has 1 entries but the conversation has 2 turns" in error_of(write_yaml, text)


def test_missing_required_field(write_yaml):
    msg = error_of(write_yaml, "version: 1\nname: x\nconversation:\n  prompt_tokens: 1\n  turns: [{action_tokens: 1}]\n")
    assert msg == "method: required field is missing"


def test_not_yaml(write_yaml):
    msg = error_of(write_yaml, "name: [unclosed\n")
    assert "not valid YAML" in msg


def test_not_a_mapping(write_yaml):
    assert "expected a mapping" in error_of(write_yaml, "- 1\n- 2\n")


def test_unsafe_yaml_tag_is_refused(write_yaml):
    """Only the safe loader is used: a python-object tag is a YAML error, never executed."""
    msg = error_of(write_yaml, "name: !!python/object/apply:os.system ['true']\n")
    assert "not valid YAML" in msg


def test_both_forms_refused(write_yaml):
    text = GOOD.replace("{ACTION}", "4") + "  num_turns: 3\n"
    assert "either 'turns' or the compact form" in error_of(write_yaml, text)


def test_unknown_bundled_name_lists_names():
    with pytest.raises(NotFoundError) as info:
        load_workload("seed-replai")
    msg = str(info.value)
    assert "did you mean 'seed-replay'?" in msg and "seed-replay-auto" in msg


def test_an_unknown_model_is_an_error_unless_a_flag_replaces_it(write_yaml, runner):
    """``model: my-private-model`` names nothing that resolves: loading the file is a one-line
    error naming the key, unless the command was given ``--model`` (the file's value is then not
    used), so ``plan --model llama-3.1-8b`` still plans it."""
    from capplan.cli.app import app

    path = write_yaml("model: my-private-model\n" + GOOD.replace("{ACTION}", "4"))
    assert error_of(write_yaml, "model: my-private-model\n" + GOOD.replace("{ACTION}", "4")).startswith(
        "model (line 1): my-private-model: no such file")
    assert load_workload(str(path), model_given=True).model == "my-private-model"
    ok = runner.invoke(app, ["plan", str(path), "-H", "h100-sxm", "--model", "llama-3.1-8b", "--total-gpus", "16"])
    assert ok.exit_code == 0, ok.output
    bad = runner.invoke(app, ["plan", str(path), "-H", "h100-sxm", "--total-gpus", "16"])
    assert bad.exit_code == 2 and "model (line 1): my-private-model" in bad.output


def test_a_relative_model_path_is_read_from_the_workload_files_folder(tmp_path, monkeypatch):
    """``model: models/m.yaml`` beside the workload resolves wherever capplan runs (a CI job in
    another folder validated the same file differently before)."""
    import shutil

    from capplan.resources import bundled_dir
    from capplan.workload import load_workload

    (tmp_path / "w" / "models").mkdir(parents=True)
    shutil.copy(bundled_dir("models") / "qwen3-8b.yaml", tmp_path / "w" / "models" / "m.yaml")
    text = (bundled_dir("workloads") / "chat-serving.yaml").read_text().replace("model: llama-3.1-8b", "model: models/m.yaml")
    (tmp_path / "w" / "chat.yaml").write_text(text)
    monkeypatch.chdir(tmp_path)  # not the workload's folder
    w = load_workload(str(tmp_path / "w" / "chat.yaml"))
    assert w.model == str((tmp_path / "w" / "models" / "m.yaml").resolve())
