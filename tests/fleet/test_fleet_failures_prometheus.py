"""The fleet end to end: simulated exporters (the real collector on a real recording) scraped by a real Prometheus;
one exporter dies, one host's NVML fails, one GPU falls off the bus, one sampler sticks, one GPU reports XIDs: the
fleet lists every host with its failure, and every other GPU as healthy."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from fleet_prometheus import NO_BINARY, has_prometheus, scraping_prometheus
from synthetic_exporters import sim_exporters

from gpumon.fleet import FleetSnapshot, PromClient, read_fleet
from gpumon.fleet.health import ALERT
from gpumon.fleet.hosts import HostState
from gpumon.fleet.view import fleet_rows, parse_filter, select

pytestmark = pytest.mark.skipif(not has_prometheus(), reason=NO_BINARY)
DEADLINE = 60.0
NAMES = ["node-ok", "node-dies", "node-nvml", "node-lost", "node-stuck", "node-xid"]


def test_every_host_and_every_failure(tmp_path: Path) -> None:
    with sim_exporters(NAMES, gpus=8) as exporters:
        by_name = dict(zip(NAMES, exporters, strict=True))
        by_name["node-nvml"].nvml_error = "NVML failed (Driver Not Loaded); retrying every 10 s"
        with scraping_prometheus(tmp_path, [exporter.target for exporter in exporters]) as url:
            client = PromClient(url, timeout=5.0)
            first = read_fleet(client)
            assert set(first.hosts) == set(NAMES), first
            # every target was scraped up with all its GPUs: the failures below come after that history
            by_name["node-lost"].lost_gpu = 7
            by_name["node-stuck"].stuck = time.time() - 120
            by_name["node-xid"].xid = 79
            by_name["node-dies"].stop()
            snapshot = first
            deadline = time.monotonic() + DEADLINE
            while not settled(snapshot) and time.monotonic() < deadline:
                time.sleep(0.5)
                snapshot = read_fleet(client)
            assert settled(snapshot), describe(snapshot)

    dies = snapshot.host("node-dies")
    assert dies.detail == "scrape failing" and dies.since is not None and time.time() - dies.since < DEADLINE + 30
    assert snapshot.host("node-nvml").detail == "NVML failed (Driver Not Loaded); retrying every 10 s"
    assert snapshot.host("node-stuck").detail is not None and "sampler stuck" in snapshot.host("node-stuck").detail
    gpus = {(row.host, row.gpu): row for row in snapshot.gpus}
    assert gpus[("node-lost", "7")].problems[0].text == "off the bus (GPU is lost)"
    assert gpus[("node-xid", "0")].problems[0].text.startswith("XID 79")
    assert gpus[("node-xid", "0")].severity == ALERT
    healthy = [key for key, row in gpus.items() if not row.problems]
    assert len(healthy) == 8 + 7 + 7  # node-ok's 8, node-lost's other 7, node-xid's other 7
    problems = select(fleet_rows(snapshot), parse_filter("state!=ok"), "state")
    assert [(row.host.name, row.state) for row in problems] == [
        ("node-dies", "DOWN"),
        ("node-stuck", "DOWN"),
        ("node-nvml", "NVML FAILED"),
        ("node-lost", "OFF BUS"),
        ("node-xid", "ALERT"),
    ]


def settled(snapshot: FleetSnapshot) -> bool:
    states = {row.name: row.state for row in snapshot.host_rows}
    gpus = {(row.host, row.gpu): row for row in snapshot.gpus}
    xid = gpus.get(("node-xid", "0"))
    lost = gpus.get(("node-lost", "7"))
    return (
        states.get("node-dies") is HostState.DOWN
        and states.get("node-stuck") is HostState.DOWN
        and states.get("node-nvml") is HostState.NVML_FAILED
        and states.get("node-ok") is HostState.UP
        and lost is not None
        and lost.off_bus
        and xid is not None
        and xid.severity == ALERT
    )


def describe(snapshot: FleetSnapshot) -> str:
    hosts = [(row.name, row.state.value, row.detail) for row in snapshot.host_rows]
    troubled = [(row.host, row.gpu, [p.text for p in row.problems]) for row in snapshot.gpus if row.problems]
    return f"error={snapshot.error} hosts={hosts} problems={troubled}"
