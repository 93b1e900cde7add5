"""`gpumon attach --json`: each state message of a hooked job carries the step model of the 10 s up to it."""

from __future__ import annotations

import json
import math

import pytest

from gpumon.cli.attach import state_with_step_model
from gpumon.jobs.jobstate import replay_messages
from gpumon.jobs.step_model import BY_SAMPLER, CPU, GPU_BUSY, LAUNCH, OWNERS
from gpumon.protocol import activity
from tests.jobs.host_messages import recorded_messages, with_host

PER_SECOND = {activity.CPU: (12, 0, 0), activity.FORWARD: (2, 6, 0)}
LINES = [("/job/train.py", 42, "blur", activity.CPU, (11, 0, 0))]


def states(messages: list[dict[str, object]]) -> list[int]:
    return [index for index, message in enumerate(messages) if message.get("type") == "state"]


def test_a_state_message_gains_the_step_model_of_the_last_ten_seconds() -> None:
    messages = with_host(recorded_messages(), PER_SECOND, LINES)
    last = states(messages)[-1]
    view = replay_messages(messages[: last + 1]).view()
    out = state_with_step_model(messages[last], view.host_profiles)
    model = json.loads(json.dumps(out))["step_model"]
    assert out["type"] == "state" and out["t"] == messages[last]["t"] and "host" in out
    # 12 state messages a second apart: the last 10 s are 10 seconds of 20 samples, not all 12.
    assert model["samples"] == 200 and model["busy_from"] == BY_SAMPLER
    shares = model["shares"]
    assert list(shares) == list(OWNERS) and math.isclose(sum(shares.values()), 1.0, abs_tol=1e-3)
    assert (shares[GPU_BUSY], shares[CPU], shares[LAUNCH]) == pytest.approx((0.3, 0.6, 0.1), abs=1e-3)
    assert model["lines"][0]["where"] == "train.py:42 (blur)"
    assert model["lines"][0]["idle_share"] == pytest.approx(0.7 * 11 / 14, abs=1e-3)


def test_the_model_ends_at_its_message_whatever_the_view_holds() -> None:
    messages = with_host(recorded_messages(), PER_SECOND, LINES)
    indices = states(messages)
    earlier = indices[3]
    # The message listener runs before the view takes the message: the view may lack it, or (read later) hold more.
    lacking = replay_messages(messages[:earlier]).view().host_profiles
    holding_more = replay_messages(messages).view().host_profiles
    assert len(holding_more) == len(indices)
    wanted = state_with_step_model(messages[earlier], replay_messages(messages[: earlier + 1]).view().host_profiles)
    assert state_with_step_model(messages[earlier], lacking) == wanted
    assert state_with_step_model(messages[earlier], holding_more) == wanted
    # The fourth state message: the hook's counts since it started, 4 seconds of them.
    assert wanted["step_model"]["samples"] == 80


def test_a_hook_without_the_stack_sampler_gives_a_null_step_model() -> None:
    messages = recorded_messages()
    last = states(messages)[-1]
    view = replay_messages(messages).view()
    assert view.host_profiles == ()
    assert state_with_step_model(messages[last], view.host_profiles)["step_model"] is None
    # Too few samples (under a second's worth) are no model either.
    few = with_host(messages, {activity.CPU: (1, 0, 0)})
    assert state_with_step_model(few[last], replay_messages(few).view().host_profiles)["step_model"] is None
