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
