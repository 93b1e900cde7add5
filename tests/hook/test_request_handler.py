"""The hook server's parts on their own: the request handler's answers and a client's bounded output queue."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest
import torch

from gpumon import protocol
from gpumon.hook.request_handler import MAX_QUEUED_CONTROL, RequestError, RequestHandler
from gpumon.hook.runtime import HookRuntime
from gpumon.hook.server_client import Client


@pytest.fixture
def client() -> Iterator[Client]:
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    yield Client(ours, time.monotonic(), cursor=0)
    ours.close()
    theirs.close()


def handler(runtime: HookRuntime, directory: str = "/nonexistent") -> RequestHandler:
    return RequestHandler(runtime, lambda: {"type": protocol.STATE, "t": 1.0}, lambda: directory)


def test_requests_are_answered_or_refused_with_a_code(client: Client) -> None:
    runtime = HookRuntime(torch)
    answers = handler(runtime)
    assert answers.answer(client, {"type": protocol.PING})["type"] == protocol.PONG
    assert answers.answer(client, {"type": protocol.GET_STATE}) == {"type": protocol.STATE, "t": 1.0}
    with pytest.raises(RequestError) as unknown:
        answers.answer(client, {"type": "hello"})
    assert unknown.value.code == protocol.E_UNKNOWN_TYPE
    with pytest.raises(RequestError) as too_many:
        answers.answer(client, {"type": protocol.DIAGNOSE, "steps": protocol.DIAGNOSE_MAX_STEPS + 1})
    assert too_many.value.code == protocol.E_BAD_MESSAGE and not runtime.control
    assert answers.answer(client, {"type": protocol.DIAGNOSE, "steps": 5, "id": 9}) == {
        "type": protocol.DIAGNOSING,
        "steps": 5,
    }
    assert list(runtime.control) == [("diagnose", 5, 9)]
    with pytest.raises(RequestError) as bad_knob:
        answers.answer(client, {"type": protocol.SET_KNOB, "knobs": {"num_workers": "four"}})
    assert bad_knob.value.code == protocol.E_BAD_KNOB


def test_the_training_threads_queue_is_bounded(client: Client) -> None:
    runtime = HookRuntime(torch)
    answers = handler(runtime)
    for _ in range(MAX_QUEUED_CONTROL):
        answers.answer(client, {"type": protocol.SET_KNOB, "knobs": {"cudnn_benchmark": True}})
    with pytest.raises(RequestError) as busy:
        answers.answer(client, {"type": protocol.SET_KNOB, "knobs": {"cudnn_benchmark": True}})
    assert busy.value.code == protocol.E_BUSY and len(runtime.control) == MAX_QUEUED_CONTROL


def test_subscribe_clamps_and_moves_the_cursor_back(client: Client) -> None:
    runtime = HookRuntime(torch)
    reply = handler(runtime).answer(
        client, {"type": protocol.SUBSCRIBE, "steps_interval": 0.0001, "state_interval": 999, "backlog": 10}
    )
    assert reply["options"]["steps_interval"] == 0.05 and reply["options"]["state_interval"] == 30.0
    assert client.cursor == 0  # no step yet: the backlog cannot reach before the first


def test_a_clients_queue_drops_its_oldest_messages_beyond_the_cap(client: Client) -> None:
    now = time.monotonic()
    for index in range(10):
        client.queue(b"%d" % index * 100, cap=350, now=now)
    assert client.out_bytes <= 350 + 100
    assert client.out[-1] == b"9" * 100  # the newest always stays
    assert client.dropped_messages == 10 - len(client.out)
