"""memory_and_swap: /proc/meminfo read once gives what psutil's virtual_memory and swap_memory give."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from gpumon.sampling import host
from gpumon.sampling.host import memory_and_swap

KIB = 1024


@pytest.mark.skipif(not Path("/proc/meminfo").is_file(), reason="needs Linux /proc/meminfo")
def test_matches_psutil_on_this_machine() -> None:
    total, available, swap_total, swap_used = memory_and_swap()
    memory, swap = psutil.virtual_memory(), psutil.swap_memory()
    assert (total, swap_total) == (memory.total, swap.total)
    assert abs(available - memory.available) <= 0.05 * total, "read a moment apart, so nearly equal"
    assert abs(swap_used - swap.used) <= 0.05 * max(swap_total, 1)


def write_meminfo(path: Path, **fields_kib: int) -> Path:
    path.write_text("".join(f"{name}: {value:>12} kB\n" for name, value in fields_kib.items()))
    return path


def test_reads_the_fields_from_meminfo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    meminfo = write_meminfo(
        tmp_path / "meminfo",
        MemTotal=1000,
        MemFree=100,
        MemAvailable=600,
        Buffers=5,
        SwapCached=0,
        SwapTotal=400,
        SwapFree=300,
    )
    monkeypatch.setattr(host, "_MEMINFO", str(meminfo))
    assert memory_and_swap() == (1000 * KIB, 600 * KIB, 400 * KIB, 100 * KIB)


def test_available_above_total_falls_back_to_free_as_psutil_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    meminfo = write_meminfo(
        tmp_path / "meminfo", MemTotal=1000, MemFree=100, MemAvailable=5000, SwapTotal=0, SwapFree=0
    )
    monkeypatch.setattr(host, "_MEMINFO", str(meminfo))
    assert memory_and_swap() == (1000 * KIB, 100 * KIB, 0, 0)


@pytest.mark.parametrize(
    "fields",
    [
        {"MemTotal": 1000, "MemFree": 100, "SwapTotal": 0, "SwapFree": 0},  # no MemAvailable (kernel < 3.14)
        {"MemTotal": 1000, "MemFree": 100, "MemAvailable": 0, "SwapTotal": 0, "SwapFree": 0},  # 0: a kernel bug
        {"MemTotal": 1000, "MemFree": 100, "MemAvailable": 600},  # no swap fields
        None,  # no /proc/meminfo at all
    ],
)
def test_missing_fields_come_from_psutil(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fields: dict[str, int] | None
) -> None:
    meminfo = tmp_path / "meminfo"
    if fields is not None:
        write_meminfo(meminfo, **fields)
    monkeypatch.setattr(host, "_MEMINFO", str(meminfo))
    monkeypatch.setattr(psutil, "virtual_memory", lambda: SimpleNamespace(total=7 * KIB, available=3 * KIB))
    monkeypatch.setattr(psutil, "swap_memory", lambda: SimpleNamespace(total=9 * KIB, free=4 * KIB))
    total, available, swap_total, swap_used = memory_and_swap()
    has_available = fields is not None and bool(fields.get("MemAvailable"))
    expected_memory = (1000 * KIB, 600 * KIB) if has_available else (7 * KIB, 3 * KIB)
    assert (total, available) == expected_memory
    assert (swap_total, swap_used) == ((9 * KIB, 5 * KIB) if fields is None or "SwapTotal" not in fields else (0, 0))
