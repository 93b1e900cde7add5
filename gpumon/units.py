"""Numbers for people, one convention everywhere: sizes, rates, percentages, counts and durations as text.

The convention:
- memory and sizes in binary units, powers of 1024: B, KiB, MiB, GiB, TiB, PiB ('80.0 GiB');
- rates in decimal units, powers of 1000, as disks and links are rated: B/s, kB/s, MB/s, GB/s, TB/s ('1.2 GB/s');
- three significant digits at most: one decimal below 100 ('1.5 KiB', '97.3 MB/s'), none from 100 ('503 GiB'),
  none for plain bytes ('512 B'); a value that rounds up to the next unit is shown in it (1023.96 KiB -> '1.0 MiB');
- the sign is kept (a negative is shown, never hidden as 0);
- absent values (None, NaN, infinity) read `missing`: 'N/A' unless the caller's table says '-' or '?'.

compact=True gives the dashboard's narrow cells: one-letter units without a space ('1.5K', '80.0G', '67.5M/s').
The dashboard's compact disk and process I/O rates count in binary units (rate(binary=True)), as they always have;
they are the only exception to the convention. Link rates (NVLink, PCIe) are decimal on the dashboard too, as the
exporter (bytes/s), `--dcgm-names` (MB/s) and the README give them, with their unit written whole so that no one
takes them for binary (link_rate: '131GB/s').

Stdlib only and imports nothing of gpumon, so that every layer may use it.
"""

from __future__ import annotations

import math

MISSING = "N/A"
BINARY_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
DECIMAL_UNITS = ("B", "kB", "MB", "GB", "TB", "PB")
_COUNT_UNITS = ("", "k", "M", "G", "T")


def finite(value: float | None) -> bool:
    """A number that can be shown: not None, NaN or infinite."""
    return value is not None and not math.isnan(value) and not math.isinf(value)


def _scaled(value: float, base: int, steps: int, whole_first: bool) -> tuple[str, int]:
    """abs(value) in the unit that keeps it under `base` once rounded, as text, and that unit's index.

    whole_first: the first unit (bytes, a plain count) takes no decimal.
    """
    number = abs(float(value))
    index = 0
    while number >= base and index < steps - 1:
        number /= base
        index += 1
    while True:
        decimals = 0 if (whole_first and index == 0) or round(number, 1) >= 100 else 1
        text = f"{number:.{decimals}f}"
        if float(text) < base or index == steps - 1:
            return text, index
        number /= base
        index += 1


def size(value: float | None, *, compact: bool = False, missing: str = MISSING) -> str:
    """Bytes in binary units: 1536 -> '1.5 KiB' (compact: '1.5K'); 512 -> '512 B' ('512B')."""
    if not finite(value):
        return missing
    assert value is not None
    number, index = _scaled(value, 1024, len(BINARY_UNITS), whole_first=True)
    unit = BINARY_UNITS[index]
    text = f"{number}{unit[0]}" if compact else f"{number} {unit}"
    return f"-{text}" if value < 0 and float(number) else text


def rate(value: float | None, *, compact: bool = False, binary: bool = False, missing: str = MISSING) -> str:
    """Bytes per second in decimal units: 1.2e9 -> '1.2 GB/s' (compact: '1.2G/s').

    binary: in powers of 1024 ('1.1 GiB/s'; compact '1.1G/s'), the dashboard's cells.
    """
    if not finite(value):
        return missing
    assert value is not None
    units = BINARY_UNITS if binary else DECIMAL_UNITS
    number, index = _scaled(value, 1024 if binary else 1000, len(units), whole_first=True)
    unit = units[index]
    text = f"{number}{unit[0].upper()}/s" if compact else f"{number} {unit}/s"
    return f"-{text}" if value < 0 and float(number) else text


def link_rate(value: float | None, *, missing: str = MISSING) -> str:
    """A link's bytes per second (NVLink, PCIe) for a narrow cell: `rate`'s decimal units, written whole without a
    space: 1.31e11 -> '131GB/s', 6.75e7 -> '67.5MB/s', 512 -> '512B/s'; at most 8 characters up to 999 TB/s."""
    return rate(value, missing=missing).replace(" ", "") if finite(value) else missing


def percent(value: float | None, *, fine: bool = False, missing: str = MISSING) -> str:
    """A 0-100 figure as a whole percent, '97%'; fine: one decimal between 0 and 10 ('5.2%')."""
    if not finite(value):
        return missing
    assert value is not None
    return f"{value:.1f}%" if fine and 0 < abs(value) < 10 else f"{value:.0f}%"


def share(value: float | None, *, fine: bool = False, missing: str = MISSING) -> str:
    """A 0-1 share as a percent: 0.523 -> '52%'."""
    return percent(None if value is None else value * 100, fine=fine, missing=missing)


def count(value: float | None, *, fine: bool = False, missing: str = MISSING) -> str:
    """A count with k/M/G suffixes: 950 -> '950', 3240 -> '3.2k'; fine: one decimal below 10 ('2.5')."""
    if not finite(value):
        return missing
    assert value is not None
    if fine and abs(value) < 10:
        return f"{value:.1f}"
    number, index = _scaled(value, 1000, len(_COUNT_UNITS), whole_first=True)
    text = f"{number}{_COUNT_UNITS[index]}"
    return f"-{text}" if value < 0 and float(number) else text


def amount(value: float | None, *, missing: str = MISSING) -> str:
    """A measured quantity such as samples/s, in full with thousands separators: 1234.5 -> '1,234'; 12.34 -> '12.3'."""
    if not finite(value):
        return missing
    assert value is not None
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.1f}"


def milliseconds(value: float | None, *, missing: str = MISSING) -> str:
    """A duration given in ms: 13.04 -> '13.0 ms'; 130.4 -> '130 ms'."""
    if not finite(value):
        return missing
    assert value is not None
    return f"{value:.1f} ms" if abs(value) < 100 else f"{value:.0f} ms"


def seconds(value: float | None, *, missing: str = MISSING) -> str:
    """A duration given in s: 0.25 -> '250 ms'; 12.3 -> '12.3 s'; 125 -> '2 min 5 s'; 7260 -> '2 h 1 min'."""
    if not finite(value):
        return missing
    assert value is not None
    sign, value = ("-", -value) if value < 0 else ("", value)
    if value < 0.9995:
        return sign + milliseconds(value * 1000)
    if value < 9.95:
        return f"{sign}{value:.1f} s"
    whole = round(value)
    if whole < 60:
        return f"{sign}{whole} s"
    if whole < 3600:
        return f"{sign}{whole // 60} min {whole % 60} s"
    return f"{sign}{whole // 3600} h {whole % 3600 // 60} min"
