"""Each GPU's NVLink rates under one NCCL all-reduce between two ranks, as the dashboard shows them, against the bytes
the ranks count moving (issue 38 item 6).

Usage (on a machine with two NVLink-connected GPUs, from the project root):

    python benchmarks/nvlink_allreduce_check.py --interval 1 --out gpu-results
    python benchmarks/nvlink_allreduce_check.py --interval 0.25 --counters --out gpu-results

`torchrun --standalone --nproc_per_node 2` starts two ranks, one per GPU, that all-reduce a 256 MiB bf16 tensor over
and over for --seconds. NCCL is held to its ring algorithm (NCCL_ALGO=Ring, NCCL_PROTO=Simple; --nccl-default leaves
them to NCCL; NVLink multicast is off either way), so each rank sends and receives 2*(n-1)/n of the tensor per
all-reduce (with 2 ranks, the whole tensor each way). Every ~50 ms each rank writes the all-reduces it has finished and
the time: the truth. Meanwhile this process runs gpumon's live Sampler at --interval (each tick
GpuCollector.collect_fast merged with the slow tier: the snapshot the dashboard draws) and keeps both GPUs' NVLink
rx/tx. Once the ranks end it samples --idle seconds more, with no traffic: the rates must read ~0 from the first tick
whose interval begins one interval after the end. GPM's NVLink figures trail the traffic by a fraction of a second
(on an H200, 2026-11-29: 14-149 ms at the end, by GPU and run; the counters trail by nothing), so each GPU's trail is
measured (the bytes shown after the end beyond the truth, in seconds of the load's rate) and must stay under one
interval: the readings are current to the sampling interval.

Per tick (the log) and in summary (the JSON): each GPU's rx/tx, the rate its rank's count implies over the tick's
interval, the ratio GPU of rank 0 / GPU of rank 1 and each to the truth, and readings repeated from the tick before
(stale repeats); and the sampler's fast thread's CPU a tick. --counters has the NVLink counters give the rates
instead of GPM (as on a GPU whose GPM has no NVLink rates, an A100): the fallback's path and its cost, on this
hardware.

Writes into --out: nvlink_allreduce-TAG.json, nvlink_allreduce-TAG.log (tick by tick and the summary, also printed)
and nvlink_allreduce-TAG-ranks.log (torchrun's and the ranks' output); TAG is the interval and the source, e.g.
1s-gpm, 0.25s-counters. Exit status: 0 when every check passes; 1 when one fails (named on the last line); 2 when it
could not measure (fewer than 2 GPUs, no NVLink readings, ranks that failed or hung), in one line. --backend gloo runs
the ranks on the CPU: a check of the launching and bookkeeping on a machine without GPUs (it ends with status 2).
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from gpumon.sampling.nvml import GpuCollector
from gpumon.sampling.sampler import Sampler
from gpumon.sampling.snapshot import Snapshot

TOLERANCE = 0.15
"""Each GPU's rate within 15% of the other's and of its rank's truth."""
SHARE_WITHIN = 0.9
"""The share of load ticks that must be within TOLERANCE (the bytes summed over all of them must be, too)."""
IDLE_SHARE = 0.01
"""After the all-reduces end, a rate at most this share of the load's median truth reads as ~0."""
START_TIMEOUT = 180.0
"""Seconds torchrun, NCCL's set-up and the warm-up may take before the ranks start counting."""
END_SLACK = 60.0
"""Seconds past --seconds the ranks may take to finish."""
GRACE = 10.0
"""Seconds torchrun is given to stop its ranks after SIGTERM, before SIGKILL."""
GB = 1e9
NCCL_RING = {"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple"}
"""So that each rank's bytes are the ring's 2*(n-1)/n of the tensor, each way."""
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
"""Always, --nccl-default too: NVLink multicast (NVLink SHARP) off (on a shared host it can put the GPUs out of
service)."""

RANK_SCRIPT = r"""
import datetime, json, os, sys, time
import torch
import torch.distributed as dist

seconds, mib, dtype_name, backend, progress = float(sys.argv[1]), int(sys.argv[2]), *sys.argv[3:6]
rank, local, world = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"])
device = torch.device("cuda", local) if backend == "nccl" else torch.device("cpu")
timeout = datetime.timedelta(seconds=120)
if device.type == "cuda":
    torch.cuda.set_device(device)
    try:
        dist.init_process_group(backend, timeout=timeout, device_id=device)
    except TypeError:  # torch before 2.3: no device_id
        dist.init_process_group(backend, timeout=timeout)
else:
    dist.init_process_group(backend, timeout=timeout)
dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype_name]
element = torch.empty((), dtype=dtype).element_size()
tensor = torch.zeros(mib * 2**20 // element, dtype=dtype, device=device)  # zeros: sums stay finite
flag = torch.zeros(1, dtype=torch.int32, device=device)
out = open(os.path.join(progress, f"rank{rank}.jsonl"), "w", buffering=1)


def note(**fields):
    out.write(json.dumps(fields) + "\n")


def finish():
    if device.type == "cuda":
        torch.cuda.synchronize(device)


uuid, name = "", "cpu"
if device.type == "cuda":
    properties = torch.cuda.get_device_properties(device)
    uuid, name = str(getattr(properties, "uuid", "")), properties.name
nccl = ".".join(map(str, torch.cuda.nccl.version())) if device.type == "cuda" else ""
size = tensor.numel() * element
note(rank=rank, local_rank=local, world=world, pid=os.getpid(), uuid=uuid, name=name, tensor_bytes=size,
     torch=torch.__version__, nccl=nccl)
for _ in range(3):
    dist.all_reduce(tensor)
finish()
started = time.perf_counter()
for _ in range(5):
    dist.all_reduce(tensor)
finish()
each = (time.perf_counter() - started) / 5
block = torch.tensor([max(1, round(0.05 / max(each, 1e-6)))], dtype=torch.int64, device=device)
dist.broadcast(block, 0)  # rank 0's block size for both: they must run the same number of all-reduces
block = int(block.item())
dist.barrier()
finish()
done = 0
note(t=time.monotonic(), n=0, block=block, seconds_each=each)
end = time.monotonic() + seconds
while True:
    for _ in range(block):
        dist.all_reduce(tensor)
    flag.fill_(1 if time.monotonic() >= end else 0)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)  # both stop after the same block
    stop = bool(flag.item())  # waits for the block's all-reduces: the count below is exact
    done += block
    note(t=time.monotonic(), n=done)
    if stop:
        break
note(t=time.monotonic(), n=done, end=True)
dist.destroy_process_group()
"""


class CannotMeasure(Exception):
    """The run could not measure what it is for (one line: why)."""


@dataclass
class Rank:
    """One rank as its progress file tells it: which GPU, and (time, all-reduces finished) every ~50 ms."""

    rank: int
    pid: int
    uuid: str
    name: str
    local_rank: int
    bytes_each_way: float
    """Bytes this rank sends, and receives, per all-reduce: 2*(n-1)/n of the tensor (ring)."""
    records: list[tuple[float, int]] = field(default_factory=list)
    ended: bool = False
    gpu: int | None = None
    """The NVML index of its GPU."""
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def start(self) -> float:
        return self.records[0][0]

    @property
    def end(self) -> float:
        return self.records[-1][0]

    def count_at(self, when: float) -> float:
        """All-reduces finished by `when`, interpolated between records; 0 before the first, all after the last."""
        times = [record[0] for record in self.records]
        index = bisect.bisect_right(times, when)
        if index == 0:
            return float(self.records[0][1])
        if index == len(self.records):
            return float(self.records[-1][1])
        (t0, n0), (t1, n1) = self.records[index - 1], self.records[index]
        return n0 + (n1 - n0) * (when - t0) / (t1 - t0) if t1 > t0 else float(n1)

    def rate(self, start: float, end: float) -> float:
        """Bytes/s this rank sent (and received) between two monotonic times."""
        return (self.count_at(end) - self.count_at(start)) * self.bytes_each_way / (end - start)


@dataclass(frozen=True)
class Tick:
    """One snapshot: its monotonic time and each GPU's NVLink (rx, tx) in bytes/s."""

    t: float
    readings: dict[int, tuple[float | None, float | None]]
    cpu: float = 0.0
    """The sampler's fast thread's CPU seconds so far (time.thread_time in its callback)."""


def ring_bytes(tensor_bytes: float, world: int) -> float:
    """Bytes each rank sends, and receives, per ring all-reduce of `tensor_bytes`."""
    return 2.0 * (world - 1) / world * tensor_bytes


def read_ranks(progress: Path) -> list[Rank]:
    """The ranks' progress files as they stand (a partial last line is left for the next read)."""
    ranks = []
    for path in sorted(progress.glob("rank*.jsonl")):
        rows = []
        for line in path.read_text(encoding="utf-8", errors="replace").split("\n")[:-1]:  # [-1]: a partial line
            try:
                rows.append(json.loads(line))
            except ValueError:
                continue
        if not rows:
            continue
        head = rows[0]
        rank = Rank(
            rank=int(head["rank"]),
            pid=int(head["pid"]),
            uuid=str(head.get("uuid", "")),
            name=str(head.get("name", "")),
            local_rank=int(head.get("local_rank", head["rank"])),
            bytes_each_way=ring_bytes(float(head["tensor_bytes"]), int(head["world"])),
            facts={key: head.get(key) for key in ("tensor_bytes", "world", "torch", "nccl")},
        )
        for row in rows[1:]:
            rank.records.append((float(row["t"]), int(row["n"])))
            rank.ended = rank.ended or bool(row.get("end"))
            if "block" in row:
                rank.facts.update(block=row["block"], seconds_each=row.get("seconds_each"))
        ranks.append(rank)
    return sorted(ranks, key=lambda rank: rank.rank)


def _plain_uuid(uuid: str) -> str:
    text = uuid.strip().lower()
    return text[4:] if text.startswith("gpu-") else text


def place_ranks(ranks: Sequence[Rank], uuids: dict[int, str]) -> None:
    """Each rank's GPU: by UUID, else by its local rank (CUDA_DEVICE_ORDER=PCI_BUS_ID orders CUDA as NVML)."""
    by_uuid = {_plain_uuid(uuid): index for index, uuid in uuids.items()}
    for rank in ranks:
        rank.gpu = by_uuid.get(_plain_uuid(rank.uuid)) if rank.uuid else None
        if rank.gpu is None and rank.local_rank in uuids:
            rank.gpu = rank.local_rank


def _mean(values: Sequence[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return sum(known) / len(known) if len(known) == len(values) and known else None


def _ratio(top: float | None, bottom: float | None) -> float | None:
    return top / bottom if top is not None and bottom is not None and bottom > 0 else None


def _within(ratio: float | None, tolerance: float) -> bool:
    return ratio is not None and abs(ratio - 1.0) <= tolerance


def analyse(ticks: Sequence[Tick], ranks: Sequence[Rank], tolerance: float = TOLERANCE) -> dict[str, Any]:
    """Tick by tick and in summary: each rank's GPU against the other's and against its rank's truth, readings
    repeated from the tick before, and the idle ticks after the end. A check that cannot be judged (no load tick, a
    rank without its GPU) is False."""
    placed = [rank for rank in ranks if rank.gpu is not None and rank.records]
    if len(placed) < 2 or len({rank.gpu for rank in placed}) < 2:
        return {"rows": [], "summary": {}, "checks": {"two_ranks_on_two_gpus": False}}
    placed = placed[:2]
    start_lo, start_hi = min(r.start for r in placed), max(r.start for r in placed)
    end_lo, end_hi = min(r.end for r in placed), max(r.end for r in placed)
    rows: list[dict[str, Any]] = []
    for before, tick in itertools.pairwise(ticks):
        a, b = before.t, tick.t
        if b <= start_lo:
            phase = "before"
        elif a >= end_hi:
            phase = "after"
        elif a >= start_hi and b <= end_lo:
            phase = "load"
        else:
            phase = "edge"
        row: dict[str, Any] = {"t": b - start_lo, "seconds": b - a, "phase": phase, "gpus": {}}
        for rank in placed:
            assert rank.gpu is not None
            rx, tx = tick.readings.get(rank.gpu, (None, None))
            last = before.readings.get(rank.gpu, (None, None))
            truth = rank.rate(a, b)
            row["gpus"][rank.gpu] = {
                "rank": rank.rank,
                "rx": rx,
                "tx": tx,
                "truth": truth,
                "to_truth": _ratio(_mean([rx, tx]), truth),
                "same_as_before": [
                    d
                    for d, now, then in zip(("rx", "tx"), (rx, tx), last, strict=True)
                    if now is not None and now == then
                ],
            }
        one, other = (row["gpus"][rank.gpu] for rank in placed)
        row["rank0_to_rank1"] = _ratio(_mean([one["rx"], one["tx"]]), _mean([other["rx"], other["tx"]]))
        rows.append(row)
    truths = [cell["truth"] for row in rows if row["phase"] == "load" for cell in row["gpus"].values()]
    threshold = IDLE_SHARE * (statistics.median(truths) if truths else 0.0)
    for row in rows:
        for cell in row["gpus"].values():
            # A repeat of a figure above idle: two readings of real traffic never come out equal to the last bit.
            cell["stale"] = [d for d in cell.pop("same_as_before") if (cell[d] or 0.0) > threshold]
    return {"rows": rows, **_summary(rows, placed, tolerance, threshold, start_lo, end_hi)}


def _summary(
    rows: list[dict[str, Any]], ranks: Sequence[Rank], tolerance: float, threshold: float, start: float, end: float
) -> dict[str, Any]:
    load = [row for row in rows if row["phase"] == "load"]
    after = [row for row in rows if row["phase"] == "after"]
    interval = statistics.median(row["seconds"] for row in rows) if rows else 0.0
    settled_rows = [row for row in after if row["t"] + start - row["seconds"] >= end + interval - 1e-9]
    gpus: dict[str, Any] = {}
    links = []
    for rank in ranks:
        cells = [(row["seconds"], row["gpus"][rank.gpu]) for row in load]
        truth_bytes = sum(seconds * cell["truth"] for seconds, cell in cells)
        entry: dict[str, Any] = {"rank": rank.rank, "truth_median_gb_s": _median([c["truth"] for _, c in cells])}
        for direction in ("rx", "tx"):
            known = [(seconds, cell[direction]) for seconds, cell in cells if cell[direction] is not None]
            entry[f"{direction}_median_gb_s"] = _median([value for _, value in known])
            shown = sum(seconds * value for seconds, value in known)
            complete = truth_bytes > 0 and len(known) == len(cells)
            entry[f"{direction}_to_truth"] = shown / truth_bytes if complete else None
        entry["ticks_within"] = _share([_within(cell["to_truth"], tolerance) for _, cell in cells])
        entry["missing"] = sum(1 for _, cell in cells if cell["rx"] is None or cell["tx"] is None)
        entry["trail_s"] = _trail(rows, rank, start, end)
        gpus[str(rank.gpu)] = entry
        links.append(sum(seconds * (_mean([cell["rx"], cell["tx"]]) or 0.0) for seconds, cell in cells))
    per_tick = [row["rank0_to_rank1"] for row in load]
    stale = sum(len(cell["stale"]) for row in rows for cell in row["gpus"].values())
    peaks = {
        id(row): max(
            (value for cell in row["gpus"].values() for value in (cell["rx"], cell["tx"]) if value is not None),
            default=0.0,
        )
        for row in after
    }
    idle_peaks = [peaks[id(row)] for row in settled_rows]
    settled = next((row["t"] + start - end for row in after if peaks[id(row)] <= threshold), None)
    summary: dict[str, Any] = {
        "load_ticks": len(load),
        "gpus": gpus,
        "rank0_to_rank1": {
            "bytes": links[0] / links[1] if links[1] > 0 else None,
            "median": _median([ratio * GB for ratio in per_tick if ratio is not None]),
            "ticks_within": _share([_within(ratio, tolerance) for ratio in per_tick]),
        },
        "stale_repeats": stale,
        "longest_same_reading_ticks": _longest_run(rows),
        "idle": {
            "ticks": len(after),
            "interval_s": interval,
            "threshold_gb_s": threshold / GB,
            "max_gb_s": max(peaks.values(), default=0.0) / GB,
            "max_from_one_interval_after_gb_s": max(idle_peaks, default=0.0) / GB,
            "first_zero_tick_ends_after_end_s": settled,
        },
    }
    ratio = summary["rank0_to_rank1"]
    checks = {
        "two_ranks_on_two_gpus": True,
        "enough_load_ticks": len(load) >= 3,
        "readings_every_load_tick": all(entry["missing"] == 0 for entry in gpus.values()),
        "ranks_agree": _within(ratio["bytes"], tolerance) and (ratio["ticks_within"] or 0.0) >= SHARE_WITHIN,
        "truth_agrees": all(
            _within(entry["rx_to_truth"], tolerance)
            and _within(entry["tx_to_truth"], tolerance)
            and (entry["ticks_within"] or 0.0) >= SHARE_WITHIN
            for entry in gpus.values()
        ),
        "no_stale_repeats": stale == 0,
        "trails_under_one_interval": all(
            entry["trail_s"] is not None and entry["trail_s"] < interval for entry in gpus.values()
        ),
        "idle_reads_zero": bool(settled_rows) and all(peak <= threshold for peak in idle_peaks),
    }
    return {"summary": summary, "checks": checks}


def _median(values: Sequence[float]) -> float | None:
    """The median in GB/s (of bytes/s values)."""
    return statistics.median(values) / GB if values else None


def _share(flags: Sequence[bool]) -> float | None:
    return sum(flags) / len(flags) if flags else None


def _trail(rows: Sequence[dict[str, Any]], rank: Rank, start: float, end: float) -> float | None:
    """Seconds of the load's median rate that the GPU showed beyond its rank's truth in the ticks from the last load
    tick on (the ending edge and after): how far the readings trail the traffic. None without a load tick."""
    assert rank.gpu is not None
    load = [row["gpus"][rank.gpu]["truth"] for row in rows if row["phase"] == "load"]
    if not load:
        return None
    rate = statistics.median(load)
    tail = [row for row in rows if row["phase"] in ("edge", "after") and row["t"] + start > end - row["seconds"]]
    extra = 0.0
    for row in tail:
        cell = row["gpus"][rank.gpu]
        shown = _mean([cell["rx"], cell["tx"]])
        extra += row["seconds"] * ((shown or 0.0) - cell["truth"])
    return max(0.0, extra / rate) if rate > 0 else None


def _longest_run(rows: Sequence[dict[str, Any]]) -> int:
    """The most ticks in a row that one GPU showed one figure (above idle) for rx or for tx: 1 when none repeats."""
    longest, runs = 1 if rows else 0, dict[tuple[Any, str], int]()
    for row in rows:
        for gpu, cell in row["gpus"].items():
            for direction in ("rx", "tx"):
                runs[gpu, direction] = runs.get((gpu, direction), 1) + 1 if direction in cell["stale"] else 1
                longest = max(longest, runs[gpu, direction])
    return longest


def _gb(value: float | None, width: int = 6) -> str:
    return f"{value / GB:{width}.1f}" if value is not None else " " * (width - 3) + "N/A"


def _x(value: float | None) -> str:
    return f"{value:5.2f}" if value is not None else "  N/A"


def report(result: dict[str, Any], ranks: Sequence[Rank], write: TextIO, header: str) -> None:
    """The readable log: the header, a line a tick, the summary and the checks."""
    print(header, file=write)
    placed = [rank for rank in ranks if rank.gpu is not None]
    columns = "".join(f"  GPU{rank.gpu} rx     tx  truth  /tr" for rank in placed)
    print(f"     t  phase {columns}   0/1  stale   (GB/s, t from the load's start)", file=write)
    for row in result["rows"]:
        cells = ""
        stale = []
        for rank in placed:
            cell = row["gpus"][rank.gpu]
            cells += f"  {_gb(cell['rx'], 7)} {_gb(cell['tx'])} {_gb(cell['truth'])} {_x(cell['to_truth'])}"
            stale += [f"GPU{rank.gpu} {'+'.join(cell['stale'])}"] if cell["stale"] else []
        line = f"{row['t']:6.2f}  {row['phase']:<6}{cells} {_x(row['rank0_to_rank1'])}  {' '.join(stale)}"
        print(line.rstrip(), file=write)
    print(json.dumps(result.get("summary", {}), indent=1), file=write)
    failed = [name for name, passed in result["checks"].items() if not passed]
    checks = ", ".join(f"{name} {'ok' if passed else 'FAILED'}" for name, passed in result["checks"].items())
    print(f"checks: {checks}", file=write)
    print("all checks passed" if not failed else "FAILED: " + ", ".join(failed), file=write)


def alive(pid: int, script: Path) -> bool:
    """The rank process `pid` still runs (not a zombie, and still our script: no reused pid)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
        command = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z" and str(script) in command


def stop_launcher(launcher: subprocess.Popen[bytes], ranks: Sequence[Rank], script: Path) -> None:
    """torchrun and its ranks ended: SIGTERM to torchrun's group (it stops its ranks), SIGKILL after GRACE, then any
    rank still alive by its pid (torchrun starts each rank in a session of its own)."""
    if launcher.poll() is None:
        for signal_number, wait in ((signal.SIGTERM, GRACE), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(launcher.pid, signal_number)
            except ProcessLookupError:
                break
            try:
                launcher.wait(wait)
                break
            except subprocess.TimeoutExpired:
                continue
    for rank in ranks:
        if alive(rank.pid, script):
            os.kill(rank.pid, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while any(alive(rank.pid, script) for rank in ranks) and time.monotonic() < deadline:
        time.sleep(0.1)


def wait_for_ranks(launcher: subprocess.Popen[bytes], progress: Path, seconds: float, start_timeout: float) -> None:
    """Until both ranks wrote their end; CannotMeasure when torchrun ends first or they do not start or end in time."""
    started_waiting = time.monotonic()
    while True:
        ranks = read_ranks(progress)
        counting = [rank for rank in ranks if rank.records]
        if len(ranks) >= 2 and all(rank.ended for rank in ranks):
            return
        status = launcher.poll()
        if status is not None:
            raise CannotMeasure(f"torchrun exited with status {status} before both ranks finished (see the ranks log)")
        now = time.monotonic()
        if len(counting) < 2 and now - started_waiting > start_timeout:
            raise CannotMeasure(f"the ranks did not start all-reducing within {start_timeout:g} s (see the ranks log)")
        if len(counting) >= 2 and now - max(rank.start for rank in counting) > seconds + END_SLACK:
            raise CannotMeasure(f"the ranks did not finish within {seconds + END_SLACK:g} s of starting")
        time.sleep(0.2)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interval", type=float, default=1.0, help="the sampler's interval, seconds (default 1)")
    parser.add_argument("--seconds", type=float, default=12.0, help="how long the ranks all-reduce (default 12)")
    parser.add_argument("--idle", type=float, default=4.0, help="seconds sampled after the ranks end (default 4)")
    parser.add_argument("--mib", type=int, default=256, help="the tensor's size in MiB (default 256)")
    parser.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16")
    parser.add_argument("--counters", action="store_true", help="NVLink from the counters, not GPM")
    parser.add_argument("--nccl-default", action="store_true", help="leave NCCL's algorithm and protocol to NCCL")
    parser.add_argument("--backend", choices=("nccl", "gloo"), default="nccl")
    parser.add_argument("--start-timeout", type=float, default=START_TIMEOUT)
    parser.add_argument("--out", type=Path, required=True, help="directory for the JSON and the logs")
    args = parser.parse_args(argv)
    tag = f"{args.interval:g}s-{'counters' if args.counters else 'gpm'}"
    try:
        return measure(args, tag)
    except CannotMeasure as problem:
        print(f"nvlink_allreduce_check: {problem}", flush=True)
        return 2


def measure(args: argparse.Namespace, tag: str) -> int:
    collector = GpuCollector(nvlink_from_gpm=not args.counters)
    sampler = Sampler(interval=args.interval, gpu=collector)
    gpus = collector.collect_fast()
    if args.backend == "nccl" and len(gpus) < 2:
        collector.close()
        raise CannotMeasure(f"needs 2 GPUs, found {len(gpus)}" + (f" ({collector.error})" if collector.error else ""))
    args.out.mkdir(parents=True, exist_ok=True)
    ticks: list[Tick] = []
    offset = time.monotonic() - time.time()

    def keep(snapshot: Snapshot) -> None:
        readings = {gpu.index: (gpu.nvlink_rx, gpu.nvlink_tx) for gpu in snapshot.gpus}
        ticks.append(Tick(snapshot.timestamp + offset, readings, time.thread_time()))

    environment = dict(os.environ, CUDA_DEVICE_ORDER="PCI_BUS_ID", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    environment.update(NO_MULTICAST)
    if not args.nccl_default:
        environment.update(NCCL_RING)
    problem: CannotMeasure | None = None
    with tempfile.TemporaryDirectory(prefix="nvlink_allreduce-") as work:
        progress, script = Path(work), Path(work) / "allreduce_rank.py"
        script.write_text(RANK_SCRIPT, encoding="utf-8")
        command = [
            *(sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(script)),
            *(f"{args.seconds:g}", str(args.mib), args.dtype, args.backend, str(progress)),
        ]
        ranks_log = args.out / f"nvlink_allreduce-{tag}-ranks.log"
        sampler.start(keep)
        try:
            with ranks_log.open("wb") as log:
                launcher = subprocess.Popen(
                    command, stdout=log, stderr=subprocess.STDOUT, env=environment, start_new_session=True
                )
                try:
                    wait_for_ranks(launcher, progress, args.seconds, args.start_timeout)
                    ended = max(rank.end for rank in read_ranks(progress))
                    time.sleep(max(0.0, ended + args.idle - time.monotonic()))  # the idle ticks
                except CannotMeasure as failed:
                    problem = failed
                finally:
                    stop_launcher(launcher, read_ranks(progress), script)
        finally:
            sampler.stop()
        ranks = read_ranks(progress)
    place_ranks(ranks, {gpu.index: gpu.uuid for gpu in gpus})
    result = analyse(ticks, ranks)
    facts = ranks[0].facts if ranks else {}
    cpu = [(later.cpu - earlier.cpu) * 1000.0 for earlier, later in itertools.pairwise(ticks)]
    fast_cpu = statistics.median(cpu) if cpu else float("nan")  # the counters' read shows here: --counters against GPM
    counting = [rank.start for rank in ranks if rank.records]
    zero = min(counting) if counting else (ticks[0].t if ticks else 0.0)  # JSON times: from the load's start
    names = sorted({gpu.name for gpu in gpus}) or ["no GPU"]
    source = "the NVLink counters" if args.counters else "GPM (the counters where GPM lacks NVLink)"
    header = (
        f"nvlink_allreduce_check {tag}: {len(gpus)} x {', '.join(names)}, driver {collector.driver_version}, "
        f"torch {facts.get('torch')}, NCCL {facts.get('nccl') or '-'} "
        f"({'its defaults' if args.nccl_default else 'ring'})"
        f"; sampled every {args.interval:g} s, NVLink from {source}; {args.mib} MiB {args.dtype} all-reduce for "
        f"{args.seconds:g} s, then {args.idle:g} s idle; ranks on GPUs {[rank.gpu for rank in ranks]}"
    )
    document = {
        "tag": tag,
        "arguments": {key: str(value) if isinstance(value, Path) else value for key, value in vars(args).items()},
        "nccl_environment": {**NO_MULTICAST, **({} if args.nccl_default else NCCL_RING)},
        "gpus": [{"index": gpu.index, "name": gpu.name, "uuid": gpu.uuid} for gpu in gpus],
        "gpm_supported": collector.gpm_supported,
        "driver": collector.driver_version,
        "problem": str(problem) if problem else None,
        "ranks": [
            {
                "rank": rank.rank,
                "gpu": rank.gpu,
                "uuid": rank.uuid,
                "name": rank.name,
                "bytes_each_way_per_all_reduce": rank.bytes_each_way,
                "all_reduces": rank.records[-1][1] if rank.records else 0,
                "seconds": rank.end - rank.start if rank.records else 0.0,
                "gb_s_each_way": rank.rate(rank.start, rank.end) / GB if len(rank.records) > 1 else None,
                "records": [[round(t - zero, 4), n] for t, n in rank.records],
                **rank.facts,
            }
            for rank in ranks
        ],
        "fast_thread_cpu_ms_per_tick": fast_cpu,
        "ticks": [{"t": round(tick.t - zero, 4), "nvlink": tick.readings} for tick in ticks],
        **result,
    }
    (args.out / f"nvlink_allreduce-{tag}.json").write_text(json.dumps(document, indent=1), encoding="utf-8")
    with (args.out / f"nvlink_allreduce-{tag}.log").open("w", encoding="utf-8") as log:
        for stream in (log, sys.stdout):
            report(result, ranks, stream, header)
            print(f"the sampler's fast thread: {fast_cpu:.2f} ms of CPU a tick (median)", file=stream)
    if problem is not None:
        raise problem
    if not any(value is not None for tick in ticks for reading in tick.readings.values() for value in reading):
        raise CannotMeasure("no NVLink readings: no NVLink on these GPUs, or no GPU")
    return 0 if all(result["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
