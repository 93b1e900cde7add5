"""Shared by the exporter tests: a real `gpumon exporter` in a child process, scraping it, parsing the answer."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.waiting import wait_until as wait_until  # the exporter tests import it from here

REPO = Path(__file__).resolve().parents[2]
RECORDINGS = REPO / "assets" / "recordings"
START_TIMEOUT = 30.0


@dataclass
class Exporter:
    proc: subprocess.Popen[str]
    url: str


@contextmanager
def running_exporter(*args: str, env: dict[str, str] | None = None) -> Iterator[Exporter]:
    """`python -m gpumon exporter --listen 127.0.0.1:0 ARGS`, its URL read from its first line; stopped after."""
    command = [sys.executable, "-m", "gpumon", "exporter", "--listen", "127.0.0.1:0", *args]
    proc = subprocess.Popen(
        command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})}
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # the exporter prints its line at once, or exits
        if not line.startswith("gpumon exporter: serving "):
            proc.kill()
            _, stderr = proc.communicate(timeout=START_TIMEOUT)
            raise AssertionError(f"exporter did not start: {line!r} {stderr!r}")
        yield Exporter(proc=proc, url=line.split()[3])
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def scrape(url: str, timeout: float = 5.0, headers: dict[str, str] | None = None) -> str:
    request = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        body: bytes = response.read()
    return body.decode("utf-8")


def samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Sample name -> [(labels, value)], parsed by prometheus_client's own parser (so the text is valid)."""
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((dict(sample.labels), float(sample.value)))
    return found


def only(found: Sequence[tuple[dict[str, str], float]]) -> tuple[dict[str, str], float]:
    assert len(found) == 1, found
    return found[0]
