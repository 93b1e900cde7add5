"""CPU time of one `HostCollector.collect()` and of the /proc parsers alone, for this tree and optionally another.

Each figure is thread CPU time (time.thread_time_ns) over `--calls` back-to-back calls, divided by the calls; a
round measures every figure once, in a fresh interpreter that imports gpumon from the tree named. With
`--against BASE` (a checkout of another commit, e.g. `git worktree add --detach /tmp/base-host main`) the rounds
of the two trees alternate, so both see the same load on a shared machine; min and median over the rounds are
printed per figure.

The figures: `collect` on this machine's /proc and /sys/block; `collect` and its two halves (`_cpu`: /proc/stat,
/proc/meminfo, the per-core deltas; `_disks`: /proc/diskstats and the kept disks' rates) with /proc/stat and
/proc/diskstats read from fixture files instead (and /sys/block not read); `memory_and_swap`; `read_cpu_ticks` and
`read_diskstats` on this machine's files and on the first fixture of each; `read_block_stat` of each disk
/sys/block lists, on this machine. The fixtures (--stat, --diskstats: one file, or two reads of one host a moment apart;
by default tests/fixtures/host/: 128 cores, 60 block devices with loops, partitions, NVMe, md and dm) become
`STEPS` files, the second read's counters moved on by the same step again and again, read in turn, so counters move
between calls as on a live host (one step back in `STEPS`, where the cycle starts over). The measuring process
wraps open() and os.open() to read them for the two /proc paths (the tree's host.py may use either); both trees
pay for the wrapper alike.

    python benchmarks/host_collect_cost.py --against /tmp/base-host --rounds 9 --calls 2000
    python benchmarks/host_collect_cost.py --stat stat-a stat-b --diskstats diskstats-a diskstats-b
"""

from __future__ import annotations

import argparse
import builtins
import itertools
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

REPOSITORY = Path(__file__).resolve().parents[1]
FIXTURES = REPOSITORY / "tests" / "fixtures" / "host"
STAT_FIXTURES = [FIXTURES / "stat-128cores", FIXTURES / "stat-128cores-later"]
DISKSTATS_FIXTURES = [FIXTURES / "diskstats-60devices", FIXTURES / "diskstats-60devices-later"]
STEPS = 64
NUMBER = re.compile(rb"(\d+)")


def per_call_us(function: Callable[[], object], calls: int) -> float:
    started = time.thread_time_ns()
    for _ in range(calls):
        function()
    return (time.thread_time_ns() - started) / calls / 1000


def moving_on(reads: list[Path], directory: Path) -> list[str]:
    """STEPS files from two reads of one /proc file: the first, the second, then every number of the second moved on
    by its step from the first again and again (the two must have the same lines); one read stays as it is."""
    if len(reads) == 1:
        return [str(reads[0])]
    first, second = (NUMBER.split(path.read_bytes()) for path in reads)
    if len(reads) != 2 or first[0::2] != second[0::2]:
        raise SystemExit(f"{reads}: not two reads of one file with the same lines")
    paths = []
    for step in range(STEPS):
        parts = list(first)
        parts[1::2] = [
            str(max(0, int(before) + step * (int(after) - int(before)))).encode()
            for before, after in zip(first[1::2], second[1::2], strict=True)
        ]
        path = directory / f"{reads[0].name}.{step}"
        path.write_bytes(b"".join(parts))
        paths.append(str(path))
    return paths


def redirect(proc_files: dict[str, Iterator[str]]) -> None:
    """Opens of these /proc paths, by open() or os.open(), open the next file of their iterator instead."""
    real_open, real_os_open = builtins.open, os.open

    def target(path: Any) -> Any:
        files = proc_files.get(path) if isinstance(path, str) else None
        return next(files) if files is not None else path

    def open_redirected(file: Any, *args: Any, **kwargs: Any) -> Any:
        return real_open(target(file), *args, **kwargs)

    def os_open_redirected(path: Any, *args: Any, **kwargs: Any) -> int:
        return real_os_open(target(path), *args, **kwargs)

    builtins.open = open_redirected
    os.open = os_open_redirected  # type: ignore[assignment]


def one_round(tree: Path, stat_files: list[str], diskstats_files: list[str], calls: int) -> dict[str, Any]:
    """Every figure once, in this process, for gpumon imported from `tree`."""
    sys.path.insert(0, str(tree))
    from gpumon.sampling import host

    figures: dict[str, float] = {}
    collector = host.HostCollector()
    collector.collect()  # primes the counters and the kept disks
    figures["collect (this machine)"] = per_call_us(collector.collect, calls)
    figures["memory_and_swap (this machine)"] = per_call_us(host.memory_and_swap, calls)
    figures["read_cpu_ticks (this machine)"] = per_call_us(host.read_cpu_ticks, calls)
    figures["read_diskstats (this machine)"] = per_call_us(host.read_diskstats, calls)
    listed = host.list_block_disks() if hasattr(host, "list_block_disks") else None
    if listed is not None:
        figures["read_block_stat of the listed disks (this machine)"] = per_call_us(
            lambda: [host.read_block_stat(name) for name in listed], calls
        )
    figures["read_cpu_ticks (fixture)"] = per_call_us(lambda: host.read_cpu_ticks(stat_files[0]), calls)
    figures["read_diskstats (fixture)"] = per_call_us(lambda: host.read_diskstats(diskstats_files[0]), calls)
    redirect({"/proc/stat": itertools.cycle(stat_files), "/proc/diskstats": itertools.cycle(diskstats_files)})
    try:  # the fixtures' /proc/diskstats, not this machine's /sys/block
        collector = host.HostCollector(sys_block=os.devnull + "/no-sys-block")  # type: ignore[call-arg]
    except TypeError:  # a tree from before /sys/block was read
        collector = host.HostCollector()
    collector.collect()
    figures["collect (fixtures)"] = per_call_us(collector.collect, calls)
    figures["  its _cpu (fixtures)"] = per_call_us(collector._cpu, calls)
    figures["  its _disks (fixtures)"] = per_call_us(collector._disks, calls)
    cpu, disks = collector.collect()
    shape = f"{len(cpu.per_core)} cores, {len(disks)} disks kept: {' '.join(disk.name for disk in disks)}"
    return {"module": host.__file__, "shape": shape, "figures": figures}


def run_round(tree: Path, stat_files: list[str], diskstats_files: list[str], calls: int) -> dict[str, Any]:
    command = [sys.executable, __file__, "--round-of", str(tree), "--calls", str(calls)]
    command += ["--stat", *stat_files, "--diskstats", *diskstats_files]
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    result: dict[str, Any] = json.loads(output)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", type=Path, metavar="BASE", help="another checkout to measure in alternate rounds")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=2000, help="back-to-back calls per figure and round")
    parser.add_argument("--stat", nargs="+", type=Path, default=STAT_FIXTURES, metavar="FILE")
    parser.add_argument("--diskstats", nargs="+", type=Path, default=DISKSTATS_FIXTURES, metavar="FILE")
    parser.add_argument("--round-of", type=Path, metavar="TREE", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.round_of is not None:
        print(json.dumps(one_round(args.round_of, [*map(str, args.stat)], [*map(str, args.diskstats)], args.calls)))
        return
    trees = {"this tree": REPOSITORY} | ({"against": args.against.resolve()} if args.against else {})
    figures: dict[str, dict[str, list[float]]] = {name: {} for name in trees}
    with tempfile.TemporaryDirectory(prefix="host-collect-cost-") as scratch:
        stat_files, diskstats_files = moving_on(args.stat, Path(scratch)), moving_on(args.diskstats, Path(scratch))
        for round_index in range(args.rounds):
            order = list(trees) if round_index % 2 == 0 else list(reversed(trees))
            for name in order:
                result = run_round(trees[name], stat_files, diskstats_files, args.calls)
                if round_index == 0:
                    print(f"{name}: {result['module']} ({result['shape']})")
                for figure, value in result["figures"].items():
                    figures[name].setdefault(figure, []).append(value)
            print(f"round {round_index + 1} of {args.rounds} done", file=sys.stderr)

    names = list(trees)
    print(f"\nus of thread CPU a call, min / median of {args.rounds} rounds of {args.calls} calls")
    print(f"{'':34}" + "".join(f"{name:>22}" for name in names) + ("      change (median)" if len(names) == 2 else ""))
    for figure in figures[names[0]]:
        cells = [
            (min(figures[name][figure]), statistics.median(figures[name][figure])) if figure in figures[name] else None
            for name in names
        ]
        row = f"{figure:34}" + "".join(
            f"{cell[0]:>12.1f} / {cell[1]:7.1f}" if cell is not None else f"{'-':>22}" for cell in cells
        )
        if len(names) == 2 and cells[0] is not None and cells[1] is not None:
            row += f"{(cells[0][1] / cells[1][1] - 1) * 100:>+20.0f}%"
        print(row)


if __name__ == "__main__":
    main()
