"""`gpumon exporter --dcgm-names` scraped live on a real GPU: each of dcgm-exporter's default counters that NVML
answers on this GPU is served with its value, dcgm-exporter's type and labels (`pci_bus_id` as NVML reads it); a
counter NVML does not answer here has no series (never a made-up 0), and the test prints which."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pynvml
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "exporter"))  # the exporter tests' helpers import so

from exporter_helpers import running_exporter, scrape
from test_dcgm_names import NOT_FROM_NVML, as_written, default_counters

SCRAPE_DEADLINE_S = 30.0
ALL_LINKS = 0xFFFFFFFF
"""Field-value scope: the sum over every NVLink."""


def _answers(call: Callable[[], Any]) -> bool:
    try:
        call()
    except pynvml.NVMLError:
        return False
    return True


def _field_answers(handle: Any, field_id: int | tuple[int, int], positive: bool = False) -> bool:
    """NVML gives this field value here (as gpumon reads it: a temperature of 0 counts as none)."""
    (value,) = pynvml.nvmlDeviceGetFieldValues(handle, [field_id])
    if value.nvmlReturn != pynvml.NVML_SUCCESS:
        return False
    return not positive or value.value.siVal > 0 or value.value.uiVal > 0


@pytest.fixture(scope="module")
def nvml() -> Iterator[Any]:
    pynvml.nvmlInit()
    yield pynvml.nvmlDeviceGetHandleByIndex(0)
    pynvml.nvmlShutdown()


def nvml_answers(handle: Any) -> dict[str, bool]:
    """Whether NVML gives, on this GPU, the reading behind the DCGM fields it may lack."""
    return {
        "DCGM_FI_DEV_MEMORY_TEMP": _field_answers(handle, pynvml.NVML_FI_DEV_MEMORY_TEMP, positive=True),
        "DCGM_FI_DEV_ENC_UTIL": _answers(lambda: pynvml.nvmlDeviceGetEncoderUtilization(handle)),
        "DCGM_FI_DEV_DEC_UTIL": _answers(lambda: pynvml.nvmlDeviceGetDecoderUtilization(handle)),
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": _field_answers(handle, pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER),
        "DCGM_FI_DEV_ROW_REMAP_FAILURE": _answers(lambda: pynvml.nvmlDeviceGetRemappedRows(handle)),
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": _answers(lambda: pynvml.nvmlDeviceGetRemappedRows(handle)),
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": _answers(lambda: pynvml.nvmlDeviceGetRemappedRows(handle)),
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": _field_answers(
            handle, (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, ALL_LINKS)
        ),  # NOT_SUPPORTED on a GPU lent alone, its links off
        "DCGM_FI_DEV_XID_ERRORS": True,
    }


def test_a_live_scrape_serves_every_default_counter_nvml_answers_here(nvml: Any) -> None:
    expected = {name: kind for name, kind in default_counters().items() if name not in NOT_FROM_NVML}
    answers = nvml_answers(nvml)
    bus_id = pynvml.nvmlDeviceGetPciInfo(nvml).busId
    bus_id = bus_id.decode() if isinstance(bus_id, bytes) else bus_id
    with running_exporter("--dcgm-names", "--interval", "1") as exporter:
        deadline = time.monotonic() + SCRAPE_DEADLINE_S
        while True:  # GPM's rates and the health fields need a tick or two
            found, types = as_written(scrape(exporter.url + "/metrics"))
            missing = [name for name in expected if name not in found and answers.get(name, True)]
            if not missing or time.monotonic() > deadline:
                break
            time.sleep(1.0)
    absent_here = sorted(name for name in expected if not answers.get(name, True))
    print(f"served {len(expected) - len(absent_here)} default counters; NVML does not answer here: {absent_here}")
    assert not missing, f"default counters NVML answers here but the scrape lacks: {missing}"
    for name in absent_here:
        assert name not in found or name == "DCGM_FI_DEV_XID_ERRORS", f"{name}: a series NVML cannot back here"
    for name, kind in expected.items():
        if name in found:
            assert types.get(name) == kind, f"{name}: type {types.get(name)}, dcgm-exporter's {kind}"
            gpu0 = [labels for labels, _value in found[name] if labels.get("gpu") == "0"]
            assert gpu0, f"{name}: no series for GPU 0"
            assert gpu0[0]["pci_bus_id"].lower() == bus_id.lower(), (name, gpu0[0], bus_id)
            for label in ("UUID", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"):
                assert gpu0[0].get(label), f"{name}: label {label} empty"
