"""``--explain`` shows the arithmetic the plan did: every ``= result`` line's substituted numbers give its result.

Each formula line is matched by one pattern below and its result recomputed from the numbers the
line prints, within the rounding of those numbers; a line no pattern matches fails the test, so a
new formula cannot go unchecked.
"""

from __future__ import annotations

import math
import re

import pytest

NUM = r"([-+]?[\d,]*\.?\d+(?:e[-+]?\d+)?)"


def _f(text: str) -> float:
    return float(text.replace(",", ""))


def _ulp(text: str) -> float:
    """Half the last printed digit of ``text`` (its rounding), relative to its value."""
    body = text.replace(",", "").lstrip("+-")
    mantissa = body.split("e")[0]
    decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
    scale = 10 ** int(body.split("e")[1]) if "e" in body else 1
    value = abs(float(body)) or 1.0
    return 0.5 * 10 ** (-decimals) * scale / value


def _close(result: str, value: float, *inputs: str, slack: float = 0.0) -> bool:
    """``value`` (recomputed from ``inputs``) equals the printed ``result`` within their rounding."""
    rel = sum(_ulp(t) for t in (result, *inputs)) + 1e-9
    return math.isclose(_f(result), value, rel_tol=rel + slack, abs_tol=1e-9)


def _line_checks() -> list[tuple[str, "callable"]]:
    def conversations(m):
        return _close(m[3], _f(m[1]) / (1 - _f(m[2])), m[1], m[2])

    def trainer_flops(m):
        return _close(m[4], _f(m[1]) * _f(m[2]) * _f(m[3]), m[2])

    def kv(m):
        gib, gpus, per_token, block, result = _f(m[1]), _f(m[2]), _f(m[3]), _f(m[4]), _f(m[5])
        raw = gib * 2**30 * gpus / per_token
        return raw - block - raw * _ulp(m[1]) <= result <= raw + raw * _ulp(m[1])

    def sync_batch(m):
        cap, share, busiest, room, result = (_f(m[i]) for i in range(1, 6))
        return _close(m[5], max(1.0, min(cap, share * min(busiest, room))), m[2], m[3], m[4])

    def async_batch(m):
        cap, result, per_replica, ms, b, lhs, period, rejected, fixed, rhs = (_f(m[i]) for i in range(1, 11))
        return result <= cap * (1 + 1e-9) and _close(m[6], per_replica * ms / 1e3 / b, m[3], m[4], m[5]) and _close(
            m[10], period * (1 - rejected) - fixed, m[7], m[9]
        ) and lhs <= rhs * (1 + _ulp(m[6]) + _ulp(m[10])) and math.isclose(result, b)

    def decode_step(m):
        return True  # priced by the roofline; its value is checked against the decode GPU-s line below

    def decode_gpu_s(m):
        return _close(m[5], _f(m[1]) / _f(m[2]) * _f(m[3]) / 1e3 * _f(m[4]), m[2], m[3])

    def prefill(m):
        return int(_f(m[2])) == math.ceil(_f(m[1]) / _f(m[3]))  # the chunks; the time is the roofline's

    def work(m):
        prefill_s, decode_s, score_s, lost, replicas, busiest, mean = (_f(m[i]) for i in range(1, 8))
        return _close(m[8], (prefill_s + decode_s + score_s + lost) / replicas * busiest / mean, *(m[i] for i in range(1, 8)))

    def rollout(m):
        w, together, busiest, tail = (_f(m[i]) for i in range(1, 5))
        slack = w * _ulp(m[2]) * together / busiest / _f(m[5])  # the rounding of the share running together, times W
        return _close(m[5], max(w, (1 - together / busiest) * w + tail), m[1], m[4], slack=slack)

    def waste(m):
        return abs(_f(m[3]) / 100 - (1 - _f(m[1]) / _f(m[2]))) <= 0.0005 + _ulp(m[1]) + _ulp(m[2])

    def static(m):
        prefill_s, waves, group_max, ms, slots, last = (_f(m[i]) for i in range(1, 7))
        return _close(m[7], prefill_s + (waves - 1) * group_max * ms / 1e3 + last, m[3], m[4], m[6])

    def score(m):
        return True  # priced by the roofline

    def trainer_time(m):
        return _close(m[5], _f(m[1]) / (_f(m[2]) * _f(m[3]) * 1e12 * _f(m[4])), m[1], m[3], m[4])

    def weight_sync(m):
        return _close(m[4], _f(m[1]) + _f(m[2]) / _f(m[3]), m[2], m[3])

    def inference_idle(m):
        return m[1] == m[2] and _close(m[4], 100 * (1 - _f(m[2]) / _f(m[3])), m[2], m[3], slack=0.002)

    def serial_step(m):
        parts = [_f(m[i]) for i in range(1, 5)]
        return _close(m[5], sum(parts), *(m[i] for i in range(1, 5)), slack=0.001)

    def async_step(m):
        train, sync, framework, production, rejected = (_f(m[i]) for i in range(1, 6))
        terms = [train + sync + framework, production / (1 - rejected)]
        bound = m[6]
        chain = re.search(rf"mean group latency {NUM} x stretch {NUM} / \(\(K \+ 1\) {NUM} x \(1 - rejected {NUM}\) - 0\.5\)", bound)
        if chain:
            terms.append(_f(chain[1]) * _f(chain[2]) / max(_f(chain[3]) * (1 - _f(chain[4])) - 0.5, 0.05))
        edge = re.search(rf"slowest group latency {NUM} x stretch {NUM} / \(K \+ 1/2\) {NUM}", bound)
        if edge:
            terms.append(_f(edge[1]) * _f(edge[2]) / _f(edge[3]))
        batches = re.search(rf"\(synchronised rollout {NUM} x stretch {NUM} \+ train \+ sync \+ framework\) / \(K \+ 1\) {NUM}", bound)
        if batches:
            terms.append((_f(batches[1]) * _f(batches[2]) + train + sync + framework) / _f(batches[3]))
        assert chain or batches, bound
        return _close(m[7], max(terms), m[1], m[4], slack=0.002)

    def node_ratio(m):
        return _close(m[5], (_f(m[1]) / _f(m[2])) / (_f(m[3]) / _f(m[4])))

    return [
        (rf"conversations generated per trained step = prompts x samples / \(1 - filtered\) = {NUM} / \(1 - {NUM}\) = {NUM}$", conversations),
        (rf"trainer FLOPs = {NUM} passes \(.*?\) x {NUM} FLOP per conversation x {NUM} = {NUM}$", trainer_flops),
        (rf"KV capacity per replica = {NUM} GiB per GPU x {NUM} GPUs / {NUM} B per token, in whole blocks of {NUM} = {NUM} tokens$", kv),
        (rf"decode batch(?: of a synchronised step)? = max\(1, min\(scheduler cap {NUM}, decode share {NUM} x min\(conversations on "
         rf"the busiest replica {NUM}, KV room at the batch's peak {NUM}\)\)\) = {NUM} -> binding: ", sync_batch),
        (rf"decode batch \(async, K \d+: .*?at most the {NUM} .*?\) = {NUM}: {NUM} decode positions per replica x {NUM} ms / {NUM} = "
         rf"{NUM} s <= period {NUM} x \(1 - rejected {NUM}\) - prefill, scoring and weight load {NUM} = {NUM} s$", async_batch),
        (rf"decode step at batch {NUM}, mean context {NUM} = {NUM} ms \(roofline\)$", decode_step),
        (rf"decode GPU-s = {NUM} decode positions / {NUM} per step x {NUM} ms x tp {NUM} = {NUM}$", decode_gpu_s),
        (rf"prefill GPU-s = {NUM} positions in {NUM} chunks of <= {NUM} x tp {NUM} = {NUM}$", prefill),
        (rf"rollout work at full batch W = \(prefill {NUM} \+ decode(?: at the synchronised batch [\d.]+)? {NUM} \+ scoring {NUM} \+ "
         rf"lost contexts {NUM} replica-s\) / {NUM} replicas x busiest {NUM} / mean {NUM} conversations per replica = {NUM} s$", work),
        (rf"rollout time(?: of a synchronised step)? = max\(W {NUM}, \(1 - running together {NUM} / busiest {NUM}\) x W \+ longest "
         rf"conversation at the shrinking batch {NUM}\) = {NUM} s$", rollout),
        (rf"static batching waste = 1 - mean L {NUM} / mean group max L {NUM} = {NUM}% ", waste),
        (rf"static-batching rollout time = prefill {NUM} \+ \(waves {NUM} - 1\) x group max {NUM} tokens x {NUM} ms \+ longest "
         rf"conversation with its {NUM} slots held {NUM} = {NUM} s$", static),
        (rf"score GPU-s = {NUM} teacher-scored positions x tp {NUM} = {NUM}$", score),
        (rf"trainer time = {NUM} FLOP / \({NUM} GPUs x {NUM} TFLOP/s x MFU {NUM} .*?\) = {NUM} s$", trainer_time),
        (r"trainer GPUs holding the state = ", lambda m: True),  # two counts, no arithmetic
        (rf"weight sync \(\w[\w-]*\) = {NUM} s \+ {NUM} GB into each engine GPU \([^)]*\) / {NUM} GB/s = {NUM} s$", weight_sync),
        (rf"(?:sync|colocated|async \(K 0\) step, serial,) step = rollout {NUM} \+ train {NUM} \+ sync {NUM} \+ framework {NUM} = {NUM} s;",
         serial_step),
        (rf"async step = max\(train {NUM} \+ sync {NUM} \+ framework {NUM}, production {NUM} / \(1 - rejected {NUM}\), staleness "
         rf"bound (.*)\) = {NUM} s, set by", async_step),
        (rf"generation = production at the steady batch {NUM} s; inference idle = 1 - {NUM} / {NUM} = {NUM}% ", inference_idle),
        (rf"node ratio = \({NUM} / {NUM}\) / \({NUM} / {NUM}\) = {NUM} inference", node_ratio),
    ]


CASES = [
    ["reasoning-rl-olmo3-7b", "--total-gpus", "72"],  # async at K 1, the staleness bound sets the step
    ["agentic-tool-rl"],  # sync, tool waits: a decode share below 1, prompt groups on the busiest replica
    ["agentic-tool-rl", "--mode", "async"],  # async with groups rejected
    ["reasoning-rl-olmo3-7b", "--mode", "async", "--async-ingest", "batches"],
    ["distillation"],  # teacher scoring
    ["reasoning-rl-olmo3-7b", "--total-gpus", "16", "--mode", "colocated"],  # memory binds; two waves per replica
]


def _explain_lines(runner, args: list[str]) -> list[str]:
    from capplan.cli.app import app

    r = runner.invoke(app, ["plan", *args, "-H", "h100-sxm", "--explain"], env={"COLUMNS": "400"})
    assert r.exit_code == 0, r.output
    block = r.stdout.split("formulas with the numbers substituted", 1)[1]
    return [line.strip() for line in block.splitlines() if line.startswith("  ")]


@pytest.mark.parametrize("args", CASES, ids=[" ".join(c) for c in CASES])
def test_explain_arithmetic_reproduces_each_result(runner, args):
    """Each ``= result`` line's numbers give its result; the decode step priced is the one the decode GPU-s use."""
    checks = [(re.compile(p), f) for p, f in _line_checks()]
    lines = _explain_lines(runner, args)
    assert len(lines) >= 12
    step_ms = {}
    for line in lines:
        if " = " not in line:
            continue
        matched = [(pattern, check) for pattern, check in checks if pattern.search(line)]
        assert matched, f"an explain line no check covers: {line}"
        m = matched[0][0].search(line)
        assert matched[0][1](m), f"its numbers do not give its result: {line}"
        if line.startswith("decode step at batch"):
            step_ms[m[1]] = m[3]
        if line.startswith("decode GPU-s"):
            assert step_ms.get(m[2]) == m[3], line


def test_a_wrong_explain_line_fails_the_check():
    """The checks catch the arithmetic of the reports they were written for (min 8.0 shown as 5.4, a sum
    leaving out the framework time)."""
    checks = [(re.compile(p), f) for p, f in _line_checks()]

    def passes(line: str) -> bool:
        return all(f(p.search(line)) for p, f in checks if p.search(line))

    good = ("sync step = rollout 141.3 + train 66.4 + sync 1.15 + framework 25.70 = 234.6 s; trainer idle")
    assert passes(good)
    assert not passes(good.replace("framework 25.70", "framework 0.00"))
    batch = ("decode batch = max(1, min(scheduler cap 1,024, decode share 1.000 x min(conversations on the busiest replica 8.0, "
             "KV room at the batch's peak 25.6))) = {} -> binding: arrival of work")
    assert passes(batch.format("8.00")) and not passes(batch.format("5.39"))
    gpu_s = "decode GPU-s = 7,528,336 decode positions / {} per step x 27.86 ms x tp 1 = 32,372.5"
    assert not passes(gpu_s.format("5.39")) and passes("decode GPU-s = 7,528,336 decode positions / 5.39 per step x 27.86 ms x tp 1 = 38,881.3")
