"""Every host Prometheus knows is in the fleet, with its failure: DOWN (scrape failing, no longer scraped,
a stuck sampler), NVML FAILED with the error, a lost GPU off the bus; and each GPU's health from its series."""

from __future__ import annotations

import pytest
from fleet_helpers import recorded_prometheus, vector

from gpumon.fleet import FleetSnapshot, PromClient, read_fleet
from gpumon.fleet.health import ALERT, ECC_QUERY, HEALTH_QUERY, RECENT_XID_QUERY, THROTTLE_QUERY, WARNING
from gpumon.fleet.hosts import HOST_QUERIES, HostState
from gpumon.fleet.snapshot import GPU_QUERIES, MODEL_QUERY

NOW = 1795436099.694
GIB = 1 << 30


def target(instance: str, host: str | None = None, job: str = "gpumon", **extra: str) -> dict[str, str]:
    labels = {"instance": instance, "job": job, **extra}
    return labels if host is None else {**labels, "host": host}


def gpu(host: str, index: str = "0") -> dict[str, str]:
    return {"host": host, "gpu": index, "uuid": f"GPU-{host}-{index}", "instance": f"{host}:9400", "job": "gpumon"}


def fleet(**answers: bytes) -> FleetSnapshot:
    with recorded_prometheus(answers) as url:
        return read_fleet(PromClient(url, timeout=5.0), now=NOW)


def three_hosts(**more: bytes) -> dict[str, bytes]:
    """node-a up with 2 GPUs; node-b's scrape failing (up 0), last sampled 300 s ago; node-c up."""
    return {
        HOST_QUERIES["up"]: vector(
            (target("node-a:9400"), 1),
            (target("node-b:9400"), 0),
            (target("node-c:9400"), 1),
            (target("localhost:9090", job="prometheus"), 1),
        ),
        HOST_QUERIES["known"]: vector(
            (target("node-a:9400", "node-a", rack="r1"), 1),
            (target("node-b:9400", "node-b", rack="r2"), 1),
            (target("node-c:9400", "node-c", rack="r2"), 1),
        ),
        HOST_QUERIES["alive"]: vector(({"host": "node-a"}, 1), ({"host": "node-c"}, 1)),
        HOST_QUERIES["last_sample"]: vector(({"host": "node-a"}, NOW - 2), ({"host": "node-b"}, NOW - 300)),
        GPU_QUERIES["memory_used"]: vector((gpu("node-a"), GIB), (gpu("node-a", "1"), GIB), (gpu("node-c"), GIB)),
        GPU_QUERIES["utilization"]: vector((gpu("node-a"), 0.5), (gpu("node-a", "1"), 0.5), (gpu("node-c"), 0.1)),
        **more,
    }


def test_a_host_whose_scrape_fails_is_down_with_since_when_and_others_stay() -> None:
    snapshot = fleet(**three_hosts())
    assert snapshot.error is None
    assert snapshot.hosts == ("node-a", "node-b", "node-c")  # Prometheus's own target is not a host
    down = snapshot.host("node-b")
    assert down.state is HostState.DOWN and down.detail == "scrape failing"
    assert down.since == pytest.approx(NOW - 300)
    assert dict(down.labels)["rack"] == "r2"
    assert snapshot.host("node-a").state is HostState.UP
    assert [(row.host, row.gpu) for row in snapshot.gpus] == [("node-a", "0"), ("node-a", "1"), ("node-c", "0")]


def test_a_target_gone_from_prometheus_is_down_not_forgotten() -> None:
    answers = three_hosts()
    answers[HOST_QUERIES["up"]] = vector((target("node-a:9400"), 1), (target("node-c:9400"), 1))
    down = fleet(**answers).host("node-b")
    assert (down.state, down.detail) == (HostState.DOWN, "not scraped any more")


def test_a_target_never_seen_serving_gpumon_is_named_by_its_address() -> None:
    answers = three_hosts()
    answers[HOST_QUERIES["up"]] = vector((target("node-a:9400"), 1), (target("10.0.0.9:9400"), 0))
    snapshot = fleet(**answers)
    assert "10.0.0.9:9400" in snapshot.hosts
    assert snapshot.host("10.0.0.9:9400").state is HostState.DOWN


def test_a_stuck_sampler_is_down_but_a_replayed_recordings_old_timestamps_are_not() -> None:
    answers = three_hosts(
        **{
            HOST_QUERIES["sample_age"]: vector(({"host": "node-a"}, 600.0), ({"host": "node-c"}, 9000.0)),
            HOST_QUERIES["alive"]: vector(
                ({"host": "node-a", "source": "live"}, 1), ({"host": "node-c", "source": "replay"}, 1)
            ),
        }
    )
    snapshot = fleet(**answers)
    stuck = snapshot.host("node-a")
    assert stuck.state is HostState.DOWN and stuck.detail == "sampler stuck: its sample was 600 s old when scraped"
    assert snapshot.host("node-c").state is HostState.UP
    assert [row.host for row in snapshot.gpus] == ["node-c"]  # a DOWN host is one line, not stale GPU rows


def test_nvml_failure_is_listed_with_its_error_and_no_gpu_rows() -> None:
    error = "NVML failed (Driver Not Loaded)\x1b[2J; retrying every 10 s"
    snapshot = fleet(**three_hosts(**{HOST_QUERIES["sampling"]: vector(({"host": "node-c", "error": error}, 0))}))
    failed = snapshot.host("node-c")
    assert failed.state is HostState.NVML_FAILED and failed.detail == error  # made printable where it is drawn
    assert "node-c" not in {row.host for row in snapshot.gpus}


def test_a_lost_gpu_is_off_the_bus_while_its_host_stays_up() -> None:
    answers = three_hosts(
        **{
            HOST_QUERIES["sampling"]: vector(
                ({"host": "node-a", "error": "GPU 1 lost (GPU is lost); retrying every 10 s"}, 0)
            ),
            GPU_QUERIES["memory_total"]: vector((gpu("node-a"), 80 * GIB), (gpu("node-a", "1"), 80 * GIB)),
            GPU_QUERIES["memory_used"]: vector((gpu("node-a"), GIB), (gpu("node-c"), GIB)),
            GPU_QUERIES["utilization"]: vector((gpu("node-a"), 0.5), (gpu("node-c"), 0.1)),
        }
    )
    snapshot = fleet(**answers)
    assert snapshot.host("node-a").state is HostState.UP
    rows = {(row.host, row.gpu): row for row in snapshot.gpus}
    lost = rows[("node-a", "1")]
    assert lost.off_bus and lost.problems[0].text == "off the bus (GPU is lost)" and lost.severity == ALERT
    assert lost.utilization is None
    assert not rows[("node-a", "0")].problems


def test_a_gpu_whose_series_stopped_is_off_the_bus_without_a_sampling_error() -> None:
    answers = three_hosts(
        **{GPU_QUERIES["memory_total"]: vector((gpu("node-c"), 80 * GIB), (gpu("node-c", "5"), 80 * GIB))}
    )
    rows = {(row.host, row.gpu): row for row in fleet(**answers).gpus}
    assert [problem.text for problem in rows[("node-c", "5")].problems] == ["off the bus"]


def health_series(name: str, value: float, host: str = "node-a", index: str = "0") -> tuple[dict[str, str], float]:
    return ({"__name__": name, **gpu(host, index)}, value)


def test_each_gpus_health_from_its_series() -> None:
    answers = three_hosts(
        **{
            HEALTH_QUERY: vector(
                health_series("gpumon_gpu_last_xid", 79),
                health_series("gpumon_gpu_xid_errors_total", 3),
                health_series("gpumon_gpu_remapped_rows_failed", 1),
                health_series("gpumon_gpu_pcie_link_generation", 5, index="1"),
                health_series("gpumon_gpu_pcie_link_width", 8, index="1"),
                health_series("gpumon_gpu_pcie_link_generation_max", 5, index="1"),
                health_series("gpumon_gpu_pcie_link_width_max", 16, index="1"),
                health_series("gpumon_gpu_last_xid", 13, host="node-c"),
                health_series("gpumon_gpu_xid_errors_total", 1, host="node-c"),
            ),
            ECC_QUERY: vector((gpu("node-a"), 2)),
            THROTTLE_QUERY: vector(({**gpu("node-a", "1"), "reason": "hw_thermal"}, 1)),
            RECENT_XID_QUERY: vector((gpu("node-a"), 1.0)),
            MODEL_QUERY: vector(({**gpu("node-a"), "model": "NVIDIA H100 80GB HBM3"}, 1)),
        }
    )
    rows = {(row.host, row.gpu): row for row in fleet(**answers).gpus}
    first = rows[("node-a", "0")]
    assert [(p.text, p.severity) for p in first.problems] == [
        ("XID 79 (+2)", ALERT),
        ("ECC 2 uncorrected", ALERT),
        ("remap FAILED", ALERT),
    ]
    assert first.model == "NVIDIA H100 80GB HBM3"
    assert [(p.text, p.severity) for p in rows[("node-a", "1")].problems] == [
        ("thermal throttle", WARNING),
        ("PCIe Gen5x8/5x16", WARNING),
    ]
    assert [(p.text, p.severity) for p in rows[("node-c", "0")].problems] == [("XID 13 earlier", WARNING)]


def test_stale_after_sets_how_old_a_sample_may_be() -> None:
    answers = three_hosts(**{HOST_QUERIES["sample_age"]: vector(({"host": "node-a"}, 90.0))})
    with recorded_prometheus(answers) as url:
        client = PromClient(url, timeout=5.0)
        assert read_fleet(client, now=NOW).host("node-a").state is HostState.DOWN  # the default: 60 s
        assert read_fleet(client, now=NOW, stale_after=120.0).host("node-a").state is HostState.UP
