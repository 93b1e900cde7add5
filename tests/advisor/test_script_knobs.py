"""gpumon's request file and the demo trainer's reply file (GPUMON_KNOBS_LIVE) against each other: what the script
can change, requests that pile up before it looks, a refusal, and replies gpumon cannot read."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpumon.advisor.script_knobs import ScriptKnobs, ScriptRefused, read_reply
from gpumon_demo.live_knobs import POLL_S, ScriptKnobRequests


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def channel(tmp_path: Path) -> tuple[ScriptKnobs, ScriptKnobRequests, Clock]:
    ours = ScriptKnobs(tmp_path / "live.json", tmp_path / "live-ack.json")
    env = ours.env()
    clock = Clock()
    theirs = ScriptKnobRequests.from_environ(env, ("batch_size", "log_every"))
    assert theirs is not None
    theirs.clock = clock
    return ours, theirs, clock


def test_no_channel_outside_a_trial_run() -> None:
    assert ScriptKnobRequests.from_environ({}, ("batch_size",)) is None


def test_requests_pile_up_until_the_script_applies_them_all(tmp_path: Path) -> None:
    ours, theirs, clock = channel(tmp_path)
    assert ours.live() == frozenset() and not ours.in_effect({"batch_size": 32}), "no answer yet: nothing to change"
    theirs.answer({"batch_size": 32, "log_every": 1})
    assert ours.live() == {"batch_size", "log_every"} and ours.values() == {"batch_size": 32, "log_every": 1}
    ours.request({"batch_size": 256})
    ours.request({"log_every": 50})  # before the script looked: the file holds both
    assert not ours.in_effect({"log_every": 50})
    assert theirs.poll() == (2, {"batch_size": 256, "log_every": 50})
    assert theirs.poll() is None, "at most every POLL_S"
    clock.now += POLL_S
    assert theirs.poll() is None, "the same request is not handed out twice"
    theirs.answer({"batch_size": 256, "log_every": 50})
    assert ours.in_effect({"batch_size": 256}) and not ours.in_effect({"batch_size": 512})


def test_a_refused_request_raises_with_the_scripts_reason(tmp_path: Path) -> None:
    ours, theirs, clock = channel(tmp_path)
    theirs.answer({"batch_size": 32, "log_every": 1})
    ours.request({"amp_bf16": True})
    _seq, knobs = theirs.poll() or (0, {})
    with pytest.raises(ValueError, match="cannot change amp_bf16 while running"):
        theirs.check(knobs)
    theirs.answer({"batch_size": 32, "log_every": 1}, "cannot change amp_bf16 while running")
    with pytest.raises(ScriptRefused, match="amp_bf16"):
        ours.in_effect({"amp_bf16": True})
    ours.request({"amp_bf16": None, "log_every": 5})
    clock.now += POLL_S
    assert theirs.poll() == (2, {"amp_bf16": None, "log_every": 5}), "a later request is read after a refusal"


@pytest.mark.parametrize("text", ["", "[1, 2]", '{"live": "batch_size", "seq": true, "knobs": 3}', "{" * 100])
def test_a_reply_gpumon_cannot_read_is_no_reply(tmp_path: Path, text: str) -> None:
    path = tmp_path / "live-ack.json"
    path.write_text(text)
    reply = read_reply(path)
    assert reply.live == frozenset() and reply.seq == 0 and reply.knobs == {}
