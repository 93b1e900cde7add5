"""The fleet's rows filtered and sorted: by host, label, state, utilization and memory; a bad term is one line."""

from __future__ import annotations

import pytest

from gpumon.fleet import FleetSnapshot, GpuRow
from gpumon.fleet.health import ALERT, WARNING, Problem, gpu_problems
from gpumon.fleet.hosts import HostRow, HostState
from gpumon.fleet.view import FilterError, check_sort, fleet_rows, parse_filter, select

GIB = 1 << 30
HOSTS = (
    HostRow("node-2", labels=(("rack", "r1"),)),
    HostRow("node-10", labels=(("rack", "r2"),)),
    HostRow("node-3", HostState.DOWN, "scrape failing", labels=(("rack", "r2"),)),
    HostRow("node-4", HostState.NVML_FAILED, "NVML failed (Unknown Error)", labels=(("rack", "r1"),)),
)
SNAPSHOT = FleetSnapshot(
    taken=0.0,
    gpus=(
        GpuRow("node-2", "0", 90.0, memory_used=70 * GIB, memory_total=80 * GIB, model="NVIDIA H100 80GB HBM3"),
        GpuRow("node-2", "1", 5.0, memory_used=1 * GIB, memory_total=80 * GIB, problems=(Problem("XID 79", ALERT),)),
        GpuRow("node-10", "0", 40.0, memory_used=40 * GIB, memory_total=80 * GIB, model="NVIDIA H200"),
        GpuRow("node-10", "1", None, problems=(Problem("thermal throttle", WARNING),)),
    ),
    hosts=tuple(host.name for host in HOSTS),
    host_rows=HOSTS,
)
ROWS = fleet_rows(SNAPSHOT)


def shown(text: str | list[str], sort: str = "host") -> list[str]:
    return [f"{row.host.name}/{row.gpu.gpu if row.gpu else '-'}" for row in select(ROWS, parse_filter(text), sort)]


def test_hosts_without_gpu_rows_are_one_row_each_and_hosts_sort_naturally() -> None:
    assert shown("") == ["node-2/0", "node-2/1", "node-3/-", "node-4/-", "node-10/0", "node-10/1"]
    assert [row.state for row in select(ROWS, sort="host")] == ["OK", "ALERT", "DOWN", "NVML FAILED", "OK", "WARN"]


@pytest.mark.parametrize(
    ("terms", "expected"),
    [
        ("host=~node-1.*", ["node-10/0", "node-10/1"]),
        ("host=NODE-3", ["node-3/-"]),
        ("host!~node-(2|10)", ["node-3/-", "node-4/-"]),
        ("state=down", ["node-3/-"]),
        ("state!=ok", ["node-2/1", "node-3/-", "node-4/-", "node-10/1"]),
        ("state=~down|nvml.*", ["node-3/-", "node-4/-"]),
        ("state=nvml_failed", ["node-4/-"]),
        ("state!=NVML-Failed state!=ok", ["node-2/1", "node-3/-", "node-10/1"]),
        ("util<20", ["node-2/1"]),
        ("util>=40 mem>80%", ["node-2/0"]),
        ("rack=r2", ["node-3/-", "node-10/0", "node-10/1"]),
        (["rack=r1", "state=ok"], ["node-2/0"]),
        ("model=~.*h100.*", ["node-2/0"]),
        ("de-1", ["node-10/0", "node-10/1"]),
    ],
)
def test_filter_terms(terms: str | list[str], expected: list[str]) -> None:
    assert shown(terms) == expected


def test_sorts() -> None:
    assert shown("", "state") == ["node-3/-", "node-4/-", "node-2/1", "node-10/1", "node-2/0", "node-10/0"]
    assert shown("", "util")[:3] == ["node-2/1", "node-10/0", "node-2/0"]  # the idle first; no figure last
    assert shown("", "-util")[:3] == ["node-2/0", "node-10/0", "node-2/1"]
    assert shown("", "mem")[:3] == ["node-2/1", "node-10/0", "node-2/0"]
    assert shown("", "-host")[0] == "node-10/1"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("util<lots", "bad filter term 'util<lots': 'lots' is not a number"),
        ("host<3", "bad filter term 'host<3': < compares util or mem, not host"),
        ("host=~(", "bad filter term 'host=~(': missing ), unterminated subpattern at position 0"),
        ("=x", "bad filter term '=x': expected NAME=VALUE, NAME=~REGEX, util<NUMBER"),
        ("util=~9", "bad filter term 'util=~9': util takes <, >, <=, >=, = or != and a number"),
        (
            "state=bogus",
            "bad filter term 'state=bogus': no state 'bogus' "
            "(one of down, nvml_failed, off_bus, alert, warn, no_gpus, ok)",
        ),
    ],
)
def test_bad_terms_are_one_line(text: str, message: str) -> None:
    with pytest.raises(FilterError) as raised:
        parse_filter(text)
    assert str(raised.value) == message


def test_bad_sort_is_one_line() -> None:
    assert check_sort("-util") == "-util"
    with pytest.raises(FilterError, match="bad sort 'speed': expected one of host, state, util, mem"):
        check_sort("speed")


def test_pcie_generation_below_its_maximum_counts_only_while_busy() -> None:
    link = {
        "pcie_link_generation": 1,
        "pcie_link_width": 16,
        "pcie_link_generation_max": 5,
        "pcie_link_width_max": 16,
    }
    assert gpu_problems(link, utilization=0.0) == ()  # an idle GPU steps its link down: normal
    assert gpu_problems(link, utilization=90.0) == (Problem("PCIe Gen1x16/5x16", WARNING),)
