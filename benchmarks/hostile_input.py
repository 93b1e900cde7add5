"""The exporter and the fleet under hostile input: what a scrape, a replay and a fleet refresh cost then.

Usage (from the project root, or from another checkout's root to measure that one; no GPU needed):

    python benchmarks/hostile_input.py
    python benchmarks/hostile_input.py --window 20 --json hostile_input.json

- tls: a real `MetricsServer` with TLS (a self-signed certificate made with openssl) while 50 silent TLS clients
  (never starting their handshake) and 50 slow ones (a real ClientHello, a byte every 0.2 s) hold connections from
  the scraper's own address, each reopened as soon as the server drops it (tests/exporter/hostile_clients.py).
  For --window seconds, one HTTPS scrape after another (5 s timeout each): how many answered, their median and max.
- processes: peak RSS (ru_maxrss) of a child process reading a recording of --snapshots snapshots of 15,000 GPU
  processes each, as a replay does.
- fleet: one read_fleet() of a recorded Prometheus (a real HTTP server) answering for 10,000 GPUs: seconds, GPU rows.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path.cwd()
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "exporter"), str(ROOT / "tests" / "fleet")]

from fleet_helpers import RANGE, recorded_prometheus, vector
from hostile_clients import HostileClients
from prometheus_client import Gauge
from prometheus_client.registry import CollectorRegistry

from gpumon.exporter.server import MetricsServer, TlsFiles
from gpumon.fleet import PromClient, read_fleet
from gpumon.fleet.snapshot import GPU_QUERIES, HISTORY_POINTS, HISTORY_QUERIES
from gpumon.sampling.recording import RecordingWriter
from gpumon.sampling.snapshot import ProcessSample, Snapshot

NOW = 1795436099.694


def self_signed(directory: Path) -> TlsFiles:
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return TlsFiles(str(cert), str(key))


def tls_scrapes(directory: Path, window: float) -> dict[str, Any]:
    registry = CollectorRegistry(auto_describe=False)
    Gauge("gpumon_probe", "a series to scrape", registry=registry).set(1)
    files = self_signed(directory)
    server = MetricsServer(registry, "127.0.0.1:0", tls=files)
    server.start()
    context = ssl.create_default_context(cafile=files.certfile)
    took: list[float] = []
    failed: dict[str, int] = {}
    try:
        with HostileClients(server.port, silent=50, slow=50) as pests:
            deadline = time.monotonic() + window
            while time.monotonic() < deadline:
                started = time.monotonic()
                try:
                    with urllib.request.urlopen(server.url, context=context, timeout=5) as response:
                        response.read()
                    took.append(time.monotonic() - started)
                except OSError as error:
                    failed[type(error).__name__] = failed.get(type(error).__name__, 0) + 1
            reopened = pests.reopened
    finally:
        server.close()
    return {
        "answered": len(took),
        "failed": sum(failed.values()),
        "failures": failed,
        "median_s": statistics.median(took) if took else None,
        "max_s": max(took) if took else None,
        "hostile_reopened": reopened,
    }


READ_IN_CHILD = """
import resource, sys
sys.path.insert(0, sys.argv[2])
from gpumon.sampling.recording import read_recording
snapshots = read_recording(sys.argv[1])
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, sum(len(s.processes) for s in snapshots))
"""


def replay_rss(directory: Path, snapshots: int) -> dict[str, Any]:
    path = directory / "flood.jsonl"
    flood = tuple(ProcessSample(pid=pid, gpu_indices=(0,), gpu_memory=pid << 20) for pid in range(1, 15_001))
    with open(path, "w", encoding="utf-8") as stream:
        writer = RecordingWriter(stream)
        for tick in range(snapshots):
            writer.write(Snapshot(timestamp=NOW + tick, processes=flood))
    out = subprocess.run(
        [sys.executable, "-c", READ_IN_CHILD, str(path), str(ROOT)], check=True, capture_output=True, text=True
    ).stdout.split()
    return {"snapshots": snapshots, "peak_rss_mb": int(out[0]) / 1024, "processes_kept": int(out[1])}


def fleet_refresh(count: int) -> dict[str, Any]:
    points = [[NOW - 300 + 5 * n, "0.5"] for n in range(HISTORY_POINTS + 1)]
    matrix = {
        "status": "success",
        "data": {
            "resultType": "matrix",
            "result": [{"metric": {"host": f"n{n // 8}", "gpu": str(n % 8)}, "values": points} for n in range(count)],
        },
    }
    answers: dict[str, bytes] = {
        promql: vector(*(({"host": f"n{n // 8}", "gpu": str(n % 8)}, 0.5) for n in range(count)))
        for promql in GPU_QUERIES.values()
    }
    answers.update({RANGE + promql: json.dumps(matrix).encode() for promql in HISTORY_QUERIES.values()})
    with recorded_prometheus(answers) as base:
        started = time.monotonic()
        snapshot = read_fleet(PromClient(base, timeout=60), now=NOW)
        took = time.monotonic() - started
    return {"gpus": count, "seconds": took, "gpu_rows": len(snapshot.gpus), "error": snapshot.error}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--window", type=float, default=15.0, help="seconds of scrapes under the TLS clients")
    parser.add_argument("--snapshots", type=int, default=10, help="snapshots of 15,000 processes to read")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args()
    if shutil.which("openssl") is None:
        print("hostile_input: no openssl binary", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as scratch:
        figures = {
            "root": str(ROOT),
            "tls": tls_scrapes(Path(scratch), args.window),
            "processes": replay_rss(Path(scratch), args.snapshots),
            "fleet": fleet_refresh(10_000),
            "own_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        }
    print(json.dumps(figures, indent=1))
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
