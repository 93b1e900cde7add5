"""The health fields in a snapshot's JSON form: old recordings still load, bad values are named by their path."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from gpumon.sampling.recording import read_recording
from gpumon.sampling.snapshot import XID_EVENTS_KEPT, GpuSample, MigSample, Snapshot, XidEvent

REPO = Path(__file__).resolve().parents[2]


def healthy_snapshot() -> Snapshot:
    gpu = GpuSample(
        index=0,
        uuid="GPU-a",
        name="NVIDIA H200",
        clock_sm_max=1980,
        fan_speed=None,
        energy_total=1234.5,
        nvlink_rx=1.5e9,
        nvlink_tx=2.5e9,
        ecc_corrected_volatile=1,
        ecc_uncorrected_volatile=0,
        ecc_corrected_aggregate=7,
        ecc_uncorrected_aggregate=0,
        remapped_rows_correctable=0,
        remapped_rows_uncorrectable=0,
        remapped_rows_pending=False,
        remapped_rows_failed=False,
        mig_mode=True,
        mig_instances=(MigSample(index=0, uuid="MIG-a", name="1g.18gb", memory_used=1, memory_total=2),),
        xid_events=(XidEvent(timestamp=1.8e9, xid=79),),
    )
    return Snapshot(timestamp=1.8e9, gpus=(gpu,))


def test_health_fields_round_trip_through_json() -> None:
    snapshot = healthy_snapshot()
    assert Snapshot.from_dict(json.loads(json.dumps(snapshot.to_dict()))) == snapshot


def test_a_recording_made_before_the_health_fields_still_loads() -> None:
    snapshots = read_recording(REPO / "assets" / "recordings" / "h100-demo-slow.jsonl")
    gpu = snapshots[0].gpus[0]
    assert gpu.utilization_gpu is not None
    assert gpu.nvlink_rx is None and gpu.mig_instances == () and gpu.xid_events is None and gpu.mig_mode is None


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("fan_speed",), 150, "gpus[0].fan_speed: expected a percentage (0-100), got 150"),
        (("energy_total",), -1.0, "gpus[0].energy_total: expected a non-negative number, got -1.0"),
        (("ecc_uncorrected_aggregate",), 1.5, "gpus[0].ecc_uncorrected_aggregate: expected a non-negative integer"),
        (("remapped_rows_pending",), 1, "gpus[0].remapped_rows_pending: expected true or false, got 1"),
        (("mig_instances",), {"index": 0}, "gpus[0].mig_instances: expected a list"),
        (("mig_instances", 0, "memory_used"), "lots", "gpus[0].mig_instances[0].memory_used: expected a non-negative"),
        (("mig_instances", 0, "index"), None, "gpus[0].mig_instances[0].index: expected a non-negative integer"),
        (("xid_events", 0, "xid"), -79, "gpus[0].xid_events[0].xid: expected a non-negative integer"),
        (("xid_events", 0, "timestamp"), float("nan"), "gpus[0].xid_events[0].timestamp: expected seconds"),
        (
            ("xid_events",),
            [{"timestamp": 1.0, "xid": 1}] * (XID_EVENTS_KEPT + 1),
            f"gpus[0].xid_events: expected at most {XID_EVENTS_KEPT} items, got {XID_EVENTS_KEPT + 1}",
        ),
    ],
)
def test_bad_health_values_are_named_by_their_path(path: tuple[Any, ...], value: object, message: str) -> None:
    data = copy.deepcopy(healthy_snapshot().to_dict())
    target = data["gpus"][0]
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        Snapshot.from_dict(json.loads(json.dumps(data, allow_nan=True)))
