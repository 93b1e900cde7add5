"""A recorded Prometheus for the fleet tests: a real HTTP server on 127.0.0.1 answering each PromQL query with
a stored answer (an empty vector or matrix for any other query), and a real closed port for a lost Prometheus."""

from __future__ import annotations

import json
import socket
import threading
import urllib.parse
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from gpumon.fleet import FleetSnapshot, GpuRow
from gpumon.fleet.health import ALERT, WARNING, Problem
from gpumon.fleet.hosts import HostRow, HostState

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "prometheus"
EMPTY_VECTOR = b'{"status":"success","data":{"resultType":"vector","result":[]}}'
EMPTY_MATRIX = b'{"status":"success","data":{"resultType":"matrix","result":[]}}'

RANGE = "range:"
Answer = tuple[int, bytes]


def recorded(name: str) -> bytes:
    return (RECORDED / name).read_bytes()


def vector(*samples: tuple[dict[str, str], float]) -> bytes:
    """An instant query's answer in Prometheus's own JSON shape."""
    result = [{"metric": labels, "value": [1795436099.694, repr(value)]} for labels, value in samples]
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()


@contextmanager
def recorded_prometheus(
    answers: Mapping[str, Answer | bytes], headers_seen: list[dict[str, str]] | None = None
) -> Iterator[str]:
    """Serves `answers` (PromQL -> body, or (HTTP status, body)) on /api/v1/query; on /api/v1/query_range, the
    answer stored under RANGE + PromQL. Each request's headers are appended to `headers_seen` when given."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if headers_seen is not None:
                headers_seen.append(dict(self.headers.items()))
            parts = urllib.parse.urlsplit(self.path)
            promql = urllib.parse.parse_qs(parts.query).get("query", [""])[0]
            ranged = parts.path.endswith("query_range")
            answer: Any = answers.get(RANGE + promql if ranged else promql, EMPTY_MATRIX if ranged else EMPTY_VECTOR)
            status, body = answer if isinstance(answer, tuple) else (200, answer)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def closed_port_url() -> str:
    """The URL of a loopback port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def many_hosts(count: int = 50, gpus: int = 8) -> FleetSnapshot:
    """`count` hosts of `gpus` GPUs with long names and full graphs; host 3 DOWN, host 7 NVML FAILED, host 5's GPU 2
    with an XID and a narrow PCIe link, host 9's GPU 0 off the bus, host 11's GPU 4 throttled."""
    gib = 1 << 30
    rows, hosts = [], []
    for number in range(count):
        name = f"gpu-node-{number:03d}.cluster.example"
        labels = (("instance", f"10.1.{number // 8}.{number % 8}:9400"), ("job", "gpumon"), ("rack", f"r{number % 4}"))
        if number == 3:
            hosts.append(HostRow(name, HostState.DOWN, "scrape failing", SINCE, labels))
            continue
        if number == 7:
            failed = "NVML failed (Driver Not Loaded)\x1b[2J; retrying every 10 s"
            hosts.append(HostRow(name, HostState.NVML_FAILED, failed, SINCE + 60, labels))
            continue
        hosts.append(HostRow(name, labels=labels))
        for index in range(gpus):
            problems: tuple[Problem, ...] = ()
            if (number, index) == (5, 2):
                problems = (Problem("XID 79 (+2)", ALERT), Problem("PCIe Gen4x8/5x16", WARNING))
            elif (number, index) == (9, 0):
                problems = (Problem("off the bus (GPU is lost)", ALERT),)
            elif (number, index) == (11, 4):
                problems = (Problem("thermal throttle", WARNING),)
            utilization = float((number * 7 + index * 13) % 101)
            history = tuple(float((step * (index + 1) + number) % 101) for step in range(61))
            rows.append(
                GpuRow(
                    name,
                    str(index),
                    None if problems[:1] and problems[0].text.startswith("off") else utilization,
                    utilization / 2,
                    (number % 80) * gib,
                    80 * gib,
                    history,
                    tuple(value / 2 for value in history),
                    tuple(float(number % 80) * 1.25 for _ in history),
                    problems,
                    "NVIDIA H100 80GB HBM3",
                )
            )
    return FleetSnapshot(
        taken=SINCE + 300, gpus=tuple(rows), hosts=tuple(host.name for host in hosts), host_rows=tuple(hosts)
    )


SINCE = 1795435800.0
