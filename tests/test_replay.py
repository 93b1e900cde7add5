"""Tests of the replay source: order, history, speed steps, pause."""

from __future__ import annotations

import threading

from gpumon.sampling.replay import Replayer
from gpumon.sampling.snapshot import CpuSample, Snapshot


def snapshots(count: int, spacing: float = 0.01) -> list[Snapshot]:
    return [Snapshot(timestamp=100 + spacing * index, cpu=CpuSample(total=float(index))) for index in range(count)]


def test_replay_delivers_every_snapshot_in_order_and_feeds_history():
    replayer = Replayer(snapshots(5), speed=32)
    delivered: list[Snapshot] = []
    finished = threading.Event()

    def receive(snapshot: Snapshot) -> None:
        delivered.append(snapshot)
        if len(delivered) == 5:
            finished.set()

    replayer.start(receive)
    assert finished.wait(5)
    replayer.stop()
    assert [s.cpu.total for s in delivered] == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert replayer.history.last("cpu.total", 10) == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert replayer.finished and "ended" in replayer.description


def test_speed_steps_and_interval_follow_the_recorded_spacing():
    replayer = Replayer(snapshots(3, spacing=1.0), speed=1.0)
    assert replayer.interval == 1.0
    replayer.faster()
    assert replayer.speed == 2.0 and replayer.interval == 0.5
    replayer.slower()
    replayer.slower()
    assert replayer.speed == 0.5


def test_paused_replay_delivers_nothing_until_resumed():
    replayer = Replayer(snapshots(3), speed=32)
    replayer.pause()
    delivered = threading.Event()
    replayer.start(lambda snapshot: delivered.set())
    assert not delivered.wait(0.3)
    replayer.resume()
    assert delivered.wait(5)
    replayer.stop()
