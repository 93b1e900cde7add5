"""gpumon.units: one convention (binary sizes, decimal rates) and its edges: 0, negatives, absent values, unit
boundaries where rounding reaches the next unit."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpumon import units

KIB, MIB, GIB = 1024, 1024**2, 1024**3


@pytest.mark.parametrize(
    ("value", "spaced", "compact"),
    [
        (0, "0 B", "0B"),
        (512, "512 B", "512B"),
        (1023, "1023 B", "1023B"),
        (1023.6, "1.0 KiB", "1.0K"),  # rounds to 1024 B: shown in the next unit
        (1536, "1.5 KiB", "1.5K"),
        (99.9 * KIB, "99.9 KiB", "99.9K"),
        (99.96 * KIB, "100 KiB", "100K"),  # never '100.0'
        (1023.4 * KIB, "1023 KiB", "1023K"),
        (1023.9 * KIB, "1.0 MiB", "1.0M"),
        (80 * GIB, "80.0 GiB", "80.0G"),
        (503 * GIB, "503 GiB", "503G"),
        (2 * 1024**5, "2.0 PiB", "2.0P"),
        (5000 * 1024**5, "5000 PiB", "5000P"),  # the largest unit grows past 1024
        (-1536, "-1.5 KiB", "-1.5K"),
        (-0.2, "0 B", "0B"),  # no '-0'
    ],
)
def test_sizes_are_binary(value: float, spaced: str, compact: str) -> None:
    assert units.size(value) == spaced
    assert units.size(value, compact=True) == compact


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0, "0 B/s"),
        (999, "999 B/s"),
        (999.6, "1.0 kB/s"),
        (1500, "1.5 kB/s"),
        (999.96e3, "1.0 MB/s"),
        (1.1e9, "1.1 GB/s"),
        (150e6, "150 MB/s"),
        (-2e6, "-2.0 MB/s"),
    ],
)
def test_rates_are_decimal(value: float, text: str) -> None:
    assert units.rate(value) == text


def test_the_dashboards_compact_disk_rates_stay_binary() -> None:
    assert units.rate(1.5 * MIB, compact=True, binary=True) == "1.5M/s"
    assert units.rate(1.5 * MIB, binary=True) == "1.5 MiB/s"
    assert units.rate(1.5e6, compact=True) == "1.5M/s"
    assert units.rate(1023.9 * KIB, compact=True, binary=True) == "1.0M/s"


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (131e9, "131GB/s"),
        (140.7e9, "141GB/s"),
        (67.5e6, "67.5MB/s"),
        (99.96e6, "100MB/s"),
        (999.6e6, "1.0GB/s"),
        (512, "512B/s"),
        (1500, "1.5kB/s"),
        (0.0, "0B/s"),
        (None, "N/A"),
        (math.nan, "N/A"),
    ],
)
def test_link_rates_are_decimal_with_the_unit_written_whole(value: float | None, text: str) -> None:
    assert units.link_rate(value) == text
    assert len(text) <= 8


def test_a_link_rate_is_the_decimal_rate_the_exporter_and_readme_state_not_the_binary_one() -> None:
    gib_per_s = 131 * 1024**3  # what the dashboard's '131G/s' meant before issue 38
    assert units.link_rate(gib_per_s) == "141GB/s" == units.rate(gib_per_s).replace(" ", "")
    assert units.link_rate(gib_per_s) != units.rate(gib_per_s, compact=True, binary=True)


@pytest.mark.parametrize("absent", [None, math.nan, math.inf, -math.inf])
def test_absent_values_read_missing_in_every_formatter(absent: float | None) -> None:
    for format_value in (
        units.size,
        units.rate,
        units.link_rate,
        units.percent,
        units.share,
        units.count,
        units.amount,
        units.milliseconds,
        units.seconds,
    ):
        assert format_value(absent) == units.MISSING
        assert format_value(absent, missing="-") == "-"


def test_percentages_shares_counts_and_amounts() -> None:
    assert units.percent(97.4) == "97%"
    assert units.percent(0) == "0%"
    assert units.percent(5.24) == "5%" and units.percent(5.24, fine=True) == "5.2%"
    assert units.percent(0, fine=True) == "0%"
    assert units.percent(-3.0) == "-3%"
    assert units.share(0.523) == "52%"
    assert units.share(0.0523, fine=True) == "5.2%"
    assert units.count(950) == "950" and units.count(3240) == "3.2k" and units.count(999.7) == "1.0k"
    assert units.count(2.5, fine=True) == "2.5" and units.count(0) == "0" and units.count(-3240) == "-3.2k"
    assert units.amount(1234.5) == "1,234" and units.amount(12.34) == "12.3" and units.amount(0) == "0.0"


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0, "0.0 ms"),
        (0.25, "250 ms"),
        (0.9996, "1.0 s"),
        (5, "5.0 s"),
        (9.96, "10 s"),
        (59.7, "1 min 0 s"),
        (125, "2 min 5 s"),
        (3599.6, "1 h 0 min"),
        (7260, "2 h 1 min"),
        (-3, "-3.0 s"),
    ],
)
def test_durations(value: float, text: str) -> None:
    assert units.seconds(value) == text


def test_milliseconds() -> None:
    assert units.milliseconds(13.04) == "13.0 ms"
    assert units.milliseconds(130.4) == "130 ms"


@given(st.floats(min_value=-1e22, max_value=1e22, allow_nan=False))
def test_a_size_is_at_most_four_digits_before_its_unit_and_round_trips_within_5_percent(value: float) -> None:
    text = units.size(value)
    number, unit = text.split(" ")
    assert len(number.lstrip("-").replace(".", "")) <= 4 or unit == "PiB"
    scale = 1024 ** units.BINARY_UNITS.index(unit)
    assert float(number) * scale == pytest.approx(value, rel=0.05, abs=0.51 * scale if unit != "B" else 0.5)
