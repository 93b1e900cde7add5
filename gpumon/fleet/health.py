"""A GPU's health from its exporter's series: XID errors, uncorrectable ECC, row remaps, throttling, a slow PCIe link.

Words follow the dashboard's health line (gpumon/tui/gpu_health.py): 'XID 79', 'remap FAILED', 'remap pending
reset', 'PCIe Gen1x16/5x16'. Each problem is an ALERT (the GPU needs a look now) or a WARNING.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpumon import units

WARNING = 1
ALERT = 2

HEALTH_SERIES = (
    "gpumon_gpu_last_xid",
    "gpumon_gpu_xid_errors_total",
    "gpumon_gpu_remapped_rows_pending",
    "gpumon_gpu_remapped_rows_failed",
    "gpumon_gpu_retired_pages_pending",
    "gpumon_gpu_pcie_link_generation",
    "gpumon_gpu_pcie_link_width",
    "gpumon_gpu_pcie_link_generation_max",
    "gpumon_gpu_pcie_link_width_max",
)
HEALTH_QUERY = '{__name__=~"' + "|".join(HEALTH_SERIES) + '"}'
"""Every per-GPU health gauge in one query (a few series per GPU)."""
ECC_QUERY = 'gpumon_gpu_ecc_errors_total{kind="uncorrected",scope="volatile"}'
THROTTLE_QUERY = "gpumon_gpu_throttle_reason == 1"
"""Only the active reasons: a handful of series, not one per reason and GPU."""
RECENT_XID_QUERY = "increase(gpumon_gpu_xid_errors_total[10m]) > 0"
"""The same window as docs/deploy/alerts.yml's GpumonGpuXidError: a GPU whose alert fires shows an ALERT."""
THERMAL_REASONS = frozenset({"sw_thermal", "hw_thermal"})
SLOWDOWN_REASONS = frozenset({"hw_slowdown", "hw_power_brake"})
BUSY_PERCENT = 50.0
"""An idle GPU steps its PCIe generation down (normal); below the maximum while this busy, it is not."""


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a GPU: its words and how bad it is (WARNING or ALERT)."""

    text: str
    severity: int


def gpu_problems(
    values: Mapping[str, float],
    *,
    ecc_uncorrected: float | None = None,
    throttles: frozenset[str] = frozenset(),
    recent_xid: bool = False,
    utilization: float | None = None,
) -> tuple[Problem, ...]:
    """The GPU's problems, worst first, from its HEALTH_SERIES values (by name, without the 'gpumon_gpu_' prefix)."""
    found: list[Problem] = []
    last_xid = values.get("last_xid") or 0
    if last_xid > 0:
        count = int(values.get("xid_errors_total") or 1)
        earlier = f" (+{count - 1})" if count > 1 else ""
        if recent_xid:
            found.append(Problem(f"XID {int(last_xid)}{earlier}", ALERT))
        else:
            found.append(Problem(f"XID {int(last_xid)} earlier{earlier}", WARNING))
    if ecc_uncorrected:
        found.append(Problem(f"ECC {units.count(ecc_uncorrected)} uncorrected", ALERT))
    if values.get("remapped_rows_failed"):
        found.append(Problem("remap FAILED", ALERT))
    elif values.get("remapped_rows_pending"):
        found.append(Problem("remap pending reset", WARNING))
    if values.get("retired_pages_pending"):
        found.append(Problem("retired pending reset", WARNING))
    if throttles & THERMAL_REASONS:
        found.append(Problem("thermal throttle", WARNING))
    if throttles & SLOWDOWN_REASONS:
        found.append(Problem("HW slowdown", WARNING))
    link = _pcie_link(values, utilization)
    if link is not None:
        found.append(link)
    return tuple(sorted(found, key=lambda problem: -problem.severity))


def _pcie_link(values: Mapping[str, float], utilization: float | None) -> Problem | None:
    """'PCIe Gen4x8/5x16': lanes missing (a link trained narrow stays so), or a lower generation while busy."""
    gen, width = values.get("pcie_link_generation"), values.get("pcie_link_width")
    gen_max, width_max = values.get("pcie_link_generation_max"), values.get("pcie_link_width_max")
    narrow = width is not None and width_max is not None and width < width_max
    slow = gen is not None and gen_max is not None and gen < gen_max and (utilization or 0.0) >= BUSY_PERCENT
    if not (narrow or slow):
        return None
    counts = (units.count(figure) for figure in (gen, width, gen_max, width_max))
    return Problem("PCIe Gen{}x{}/{}x{}".format(*counts), WARNING)
