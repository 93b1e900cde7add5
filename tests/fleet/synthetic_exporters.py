"""Simulated gpumon exporters for the fleet's tests and benchmark: each serves on its own loopback port what the real
SnapshotCollector makes of a real recording (assets/recordings/h200-pcie-link.jsonl: an H200's sample, health and
PCIe link fields included), its GPU copied to `gpus` GPUs, its timestamp now, the recording's samples in turn.

A host can be told to fail: `nvml_error` (no GPUs, the sampler's error), `lost_gpu` (that GPU gone, the sampler's
'GPU N lost' error), `xid` (a new XID event on GPU 0), `stuck` (its sample's timestamp stops), or stop() (its port
refuses: the scrape fails).

As a program (benchmarks/fleet_refresh.py): `python tests/fleet/synthetic_exporters.py --hosts 50 --gpus 8 --ports-file
F` writes one port a line to F, then serves until killed.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from prometheus_client import CollectorRegistry, generate_latest  # noqa: E402

from gpumon.exporter.collector import SnapshotCollector  # noqa: E402
from gpumon.sampling.recording import read_recording  # noqa: E402
from gpumon.sampling.snapshot import Snapshot, XidEvent  # noqa: E402

RECORDING = ROOT / "assets" / "recordings" / "h200-pcie-link.jsonl"
_RECORDED: list[Snapshot] = []


def recorded() -> list[Snapshot]:
    if not _RECORDED:
        _RECORDED.extend(read_recording(RECORDING))
    return _RECORDED


class SimExporter:
    """One simulated exporter: host `name` with `gpus` GPUs, served on 127.0.0.1:`port`."""

    def __init__(self, name: str, gpus: int = 8) -> None:
        self.name = name
        self.gpus = gpus
        self.nvml_error: str | None = None
        self.lost_gpu: int | None = None
        self.xid: int | None = None
        self.stuck: float | None = None
        self._samples = itertools.cycle(recorded())
        self._registry = CollectorRegistry()
        self._collector = SnapshotCollector(host_label=name, source="live")
        self._registry.register(self._collector)
        self._lock = threading.Lock()
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = exporter.scrape()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def snapshot(self) -> Snapshot:
        base = next(self._samples)
        now = time.time()
        (gpu,) = base.gpus[:1]
        gpus = []
        for index in range(self.gpus):
            if index == self.lost_gpu:
                continue
            events = (XidEvent(now, self.xid),) if index == 0 and self.xid is not None else None
            gpus.append(dataclasses.replace(gpu, index=index, uuid=f"GPU-{self.name}-{index}", xid_events=events))
        error = self.nvml_error
        if self.lost_gpu is not None:
            error = f"GPU {self.lost_gpu} lost (GPU is lost); retrying every 10 s"
        return dataclasses.replace(
            base,
            timestamp=self.stuck if self.stuck is not None else now,
            gpus=() if self.nvml_error else tuple(gpus),
            gpu_error=error,
            processes=(),
            hostname=self.name,
        )

    def scrape(self) -> bytes:
        with self._lock:
            self._collector.on_snapshot(self.snapshot())
            return generate_latest(self._registry)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


@contextmanager
def sim_exporters(names: Sequence[str], gpus: int = 8) -> Iterator[list[SimExporter]]:
    with ExitStack() as stack:
        exporters = []
        for name in names:
            exporter = SimExporter(name, gpus)
            stack.callback(exporter.stop)
            exporters.append(exporter)
        yield exporters


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hosts", type=int, default=50)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--ports-file", type=Path, required=True)
    args = parser.parse_args()
    names = [f"sim-node-{index:02d}" for index in range(args.hosts)]
    with sim_exporters(names, args.gpus) as exporters:
        args.ports_file.write_text("".join(f"{exporter.port}\n" for exporter in exporters))
        threading.Event().wait()


if __name__ == "__main__":
    main()
