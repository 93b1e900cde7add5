"""Start-up cost: CPU seconds from exec to the dashboard's first frame with data, beside nvitop's, rounds alternated.

gpumon: `python -m gpumon replay RECORDING` in a pseudo-terminal with GPUMON_FIRST_FRAME_REPORT set, so it writes
its own CPU time (user + system, from getrusage) once the first snapshot is painted and exits; the total to exit
(os.wait4's rusage) is kept too. nvitop (optional, --nvitop PATH): the same pseudo-terminal, CPU to exit from
wait4; on a machine with NVML that is its start, first frame and `q`, on one without it is its import and start-up
up to the NVML failure (said in the output, never taken for a first frame). One untimed start of each comes first,
and PYTHONDONTWRITEBYTECODE is dropped for both: as installed by pip, their modules start from cached bytecode.

    python benchmarks/startup_cpu.py --rounds 10 --nvitop /tmp/nvitop-venv/bin/nvitop
    python benchmarks/startup_cpu.py --live --rounds 10 --nvitop nvitop     # on a GPU machine
    python benchmarks/startup_cpu.py --live --rounds 3 --py-spy /tmp/start.raw   # and where the CPU goes
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import select
import statistics
import struct
import sys
import tempfile
import termios
import time
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPOSITORY))

from gpumon.tui.first_frame import FIRST_FRAME_ENV

RECORDING = REPOSITORY / "assets" / "recordings" / "h100-training.jsonl"
DEADLINE_S = 60.0


def run_in_pty(argv: list[str], env: dict[str, str], columns: int, rows: int, quit_after_s: float | None) -> tuple:
    """Run argv in a pseudo-terminal of this size, reading its output until it exits; (exit status, CPU seconds of
    the child from wait4, its output's last bytes). quit_after_s: send `q` once it has drawn for that long."""
    pid, fd = pty.fork()
    if pid == 0:
        os.execvpe(argv[0], argv, env)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    output = bytearray()
    started = time.monotonic()
    quit_sent = False
    while time.monotonic() - started < DEADLINE_S:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            output += chunk
            del output[:-4096]
        if quit_after_s is not None and not quit_sent and output and time.monotonic() - started > quit_after_s:
            os.write(fd, b"q")
            quit_sent = True
    else:
        os.kill(pid, 9)
    _, status, usage = os.wait4(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), usage.ru_utime + usage.ru_stime, bytes(output)


def tool_environment() -> dict[str, str]:
    """The environment both tools start in: as installed, their modules' bytecode is cached (pip compiles it; the
    untimed first round writes it for a working tree), so PYTHONDONTWRITEBYTECODE is dropped."""
    env = dict(os.environ, TERM="xterm-256color")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def gpumon_round(
    python: str, recording: Path | None, columns: int, rows: int, wrapper: tuple[str, ...] = ()
) -> tuple[float, float]:
    """(CPU seconds to the first frame, CPU seconds to exit) of one gpumon start: the replay of `recording`, or the
    live dashboard (NVML, the job scan) where it is None; `wrapper` runs before the interpreter (a profiler)."""
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "first-frame"
        path = os.pathsep.join(filter(None, [str(REPOSITORY), os.environ.get("PYTHONPATH")]))  # keep a wheel dir
        env = dict(tool_environment(), PYTHONPATH=path, **{FIRST_FRAME_ENV: str(report)})
        env["XDG_CONFIG_HOME"] = scratch  # no user config file
        argv = [*wrapper, python, "-m", "gpumon", *(["replay", str(recording)] if recording is not None else [])]
        code, total, output = run_in_pty(argv, env, columns, rows, None)
        if code != 0 or not report.exists():
            raise SystemExit(f"gpumon exited {code} without a first-frame report: {output[-400:]!r}")
        return float(report.read_text()), total


def nvitop_round(nvitop: str, columns: int, rows: int) -> tuple[float, int, bytes]:
    env = tool_environment()
    code, total, output = run_in_pty([nvitop], env, columns, rows, quit_after_s=1.0)
    return total, code, output


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--recording", type=Path, default=RECORDING)
    parser.add_argument("--live", action="store_true", help="the live dashboard (`gpumon`) instead of a replay")
    parser.add_argument("--python", default=sys.executable, help="the interpreter that runs gpumon")
    parser.add_argument("--nvitop", help="an nvitop executable to measure in alternate rounds")
    parser.add_argument("--size", default="80x24", help="COLUMNSxROWS of the pseudo-terminal")
    parser.add_argument(
        "--py-spy",
        type=Path,
        metavar="RAW",
        help="then one more start under py-spy (1000 Hz, every thread, idle frames left out) into this raw file, and "
        "its functions most often on the stack up to the first frame (where the start-up's CPU goes)",
    )
    args = parser.parse_args()
    columns, rows = (int(part) for part in args.size.split("x"))

    first_frames: list[float] = []
    gpumon_totals: list[float] = []
    nvitop_totals: list[float] = []
    nvitop_note = ""
    gpumon_round(args.python, None if args.live else args.recording, columns, rows)  # untimed: bytecode cached
    if args.nvitop:
        nvitop_round(args.nvitop, columns, rows)
    for round_number in range(args.rounds):
        first_frame, total = gpumon_round(args.python, None if args.live else args.recording, columns, rows)
        first_frames.append(first_frame)
        gpumon_totals.append(total)
        line = f"round {round_number + 1}: gpumon first frame {first_frame:.3f} s CPU, to exit {total:.3f} s"
        if args.nvitop:
            nvitop_total, code, output = nvitop_round(args.nvitop, columns, rows)
            nvitop_totals.append(nvitop_total)
            nvml_missing = b"NVML" in output and code != 0
            nvitop_note = (
                "start-up to its NVML failure (no GPU here)" if nvml_missing else f"to exit after q (rc {code})"
            )
            line += f"; nvitop {nvitop_total:.3f} s CPU, {nvitop_note}"
        print(line, flush=True)

    def summary(values: list[float]) -> str:
        return f"median {statistics.median(values):.3f} s, min {min(values):.3f}, max {max(values):.3f}"

    what = "gpumon (live)" if args.live else f"gpumon replay {args.recording.name}"
    print(f"{what} at {args.size}, {args.rounds} rounds, {time.strftime('%Y-%m-%d')}")
    print(f"  CPU to the first frame: {summary(first_frames)}")
    print(f"  CPU to exit:            {summary(gpumon_totals)}")
    if nvitop_totals:
        print(f"nvitop ({nvitop_note}): {summary(nvitop_totals)}")
    if args.py_spy is not None:
        spy = ("py-spy", "record", "--rate", "1000", "--format", "raw", "--threads", "--output", str(args.py_spy), "--")
        first_frame, _ = gpumon_round(args.python, None if args.live else args.recording, columns, rows, spy)
        print(f"under py-spy: first frame at {first_frame:.3f} s of CPU (py-spy's reads slow it)", flush=True)
        sys.path.insert(0, str(REPOSITORY / "benchmarks"))
        from dashboard_threads import print_top_frames

        print_top_frames(args.py_spy, count=40)


if __name__ == "__main__":
    main()
