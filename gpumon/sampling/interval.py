"""The sampling interval's range, defined once: the dashboard's, the exporter's and the config file's, and record's."""

from __future__ import annotations

MIN_INTERVAL_S = 0.1
"""The fastest anything samples (the + key stops there)."""
MAX_INTERVAL_S = 10.0
"""The slowest a dashboard or exporter samples, and the config file's `interval` at most (the - key stops there)."""
MAX_RECORD_INTERVAL_S = 60.0
"""The slowest `gpumon record` samples: long unattended recordings, where a dashboard would look frozen."""


def interval_in_range(seconds: float, maximum: float = MAX_INTERVAL_S) -> bool:
    """Whether `seconds` is an interval gpumon samples at: MIN_INTERVAL_S to `maximum`."""
    return MIN_INTERVAL_S <= seconds <= maximum


def clamp_interval(seconds: float, maximum: float = MAX_INTERVAL_S) -> float:
    """`seconds` brought into MIN_INTERVAL_S to `maximum`."""
    return min(maximum, max(MIN_INTERVAL_S, float(seconds)))
