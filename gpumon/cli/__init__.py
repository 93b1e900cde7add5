"""Command line: the dashboard by default; snapshot, record, replay; run, attach and jobs for training jobs."""

from __future__ import annotations

import argparse
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from gpumon import __version__
from gpumon.jobs.process_group import reap_group, signal_group, stop_group
from gpumon.sampling.source import MAX_INTERVAL, MIN_INTERVAL

EXIT_USAGE = 2


class CliError(Exception):
    """A user-facing failure: printed as one line, exit code 2."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", run_dashboard)
    try:
        return handler(args)
    except CliError as error:
        print(f"gpumon: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpumon",
        description="Live dashboard of GPUs, CPU, GPU processes and disks: why is my GPU underused?",
    )
    parser.add_argument("--version", action="version", version=f"gpumon {__version__}")
    add_interval_argument(parser)
    parser.set_defaults(handler=run_dashboard)
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")

    snapshot = commands.add_parser(
        "snapshot", help="print one complete sample and exit", description="Print one complete sample and exit."
    )
    snapshot.add_argument("--json", action="store_true", help="print JSON (schema: docs/schema.md)")
    snapshot.add_argument(
        "--window", type=positive_seconds, default=0.5, help="seconds between the two readings rates are taken over"
    )
    snapshot.set_defaults(handler=run_snapshot)

    record = commands.add_parser(
        "record",
        help="record samples to a JSON Lines file",
        description="Record samples to a JSON Lines file until --duration passes or Ctrl+C.",
    )
    record.add_argument("file", type=Path, help="output file (refused if it exists, unless --force)")
    record.add_argument("--duration", type=positive_seconds, default=None, help="seconds to record (default: until Ctrl+C)")
    add_interval_argument(record)
    record.add_argument("--note", default="", help="free text stored in the header (device, workload...)")
    record.add_argument("--force", action="store_true", help="overwrite FILE if it exists")
    record.set_defaults(handler=run_record)

    replay = commands.add_parser(
        "replay", help="open the dashboard on a recording", description="Open the dashboard on a recording."
    )
    replay.add_argument("file", type=Path, help="a file written by `gpumon record`")
    replay.add_argument("--speed", type=positive_float, default=1.0, help="playback speed (+/- change it live)")
    replay.set_defaults(handler=run_replay)

    run = commands.add_parser(
        "run",
        help="run a training command with the gpumon hook and watch it",
        description="Run CMD with the gpumon hook injected (no change to the script) and open the dashboard on it "
        "as soon as it starts training. The job's output goes to a log file while the dashboard is open; "
        "quitting the dashboard stops the job (SIGINT). With --no-tui, only inject and wait for CMD.",
    )
    run.add_argument("--no-tui", action="store_true", help="no dashboard: run CMD hooked, pass its exit code through")
    add_interval_argument(run)
    run.add_argument("--log", type=Path, default=None, help="where the job's output goes under the dashboard "
                     "(default: a new /tmp/gpumon-run-*.log)")
    run.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD ...", help="the command to run")
    run.set_defaults(handler=run_launch)

    attach = commands.add_parser(
        "attach",
        help="watch a running training job",
        description="Open the dashboard on a running PyTorch job. A job with the gpumon hook streams its steps; "
        "any other Python process is sampled with py-spy, which estimates where its main thread spends time.",
    )
    attach.add_argument("pid", type=pid_number, help="the job's process id")
    attach.add_argument("--json", action="store_true",
                        help="no dashboard: print the job's data as JSON Lines (hello, then steps and state; "
                        "without the hook, py-spy estimates)")
    attach.add_argument("--duration", type=positive_seconds, default=None,
                        help="with --json: stop after this many seconds (default: when the job ends, or Ctrl+C)")
    add_interval_argument(attach)
    attach.set_defaults(handler=run_attach)

    jobs = commands.add_parser(
        "jobs", help="list your hooked training jobs", description="List this user's jobs that run the gpumon hook "
        "(distributed ranks grouped); stale sockets of dead jobs are removed."
    )
    jobs.add_argument("--json", action="store_true", help="print JSON (one object per job group)")
    jobs.set_defaults(handler=run_jobs)
    from gpumon.cli.advisor import register  # imports CliError from here: kept local to avoid a cycle

    register(commands)
    return parser


def pid_number(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a process id") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a process id")
    return value


def add_interval_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--interval",
        type=interval_seconds,
        default=1.0,
        help=f"seconds between samples, {MIN_INTERVAL:g} to {MAX_INTERVAL:g} (default 1)",
    )


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number")
    return value


positive_seconds = positive_float


def interval_seconds(text: str) -> float:
    value = positive_float(text)
    if not MIN_INTERVAL <= value <= MAX_INTERVAL:
        raise argparse.ArgumentTypeError(f"{text!r} is outside {MIN_INTERVAL:g}..{MAX_INTERVAL:g} seconds")
    return value


def run_dashboard(args: argparse.Namespace) -> int:
    """The dashboard; when this user's hooked jobs run, it first offers them in a picker (escape: plain)."""
    from gpumon.jobs.discovery import scan
    from gpumon.sampling.sampler import Sampler
    from gpumon.tui.app import GpumonApp

    app = GpumonApp(Sampler(interval=args.interval), jobs=scan().groups)
    app.run()
    return app.return_code or 0


def run_snapshot(args: argparse.Namespace) -> int:
    from gpumon.sampling.sampler import sample_once

    snapshot = sample_once(window=args.window)
    if args.json:
        json.dump(snapshot.to_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        from gpumon.sampling.summary import describe_snapshot

        print(describe_snapshot(snapshot))
    return 0


def run_record(args: argparse.Namespace) -> int:
    from gpumon.sampling.recording import RecordingWriter
    from gpumon.sampling.sampler import Sampler

    path: Path = args.file
    if path.exists() and not args.force:
        raise CliError(f"{path} exists; pass --force to overwrite it")
    try:
        stream = path.open("w", encoding="utf-8")
    except OSError as error:
        raise CliError(f"cannot write {path}: {error.strerror or error}") from None
    done = threading.Event()
    count = 0

    def write(snapshot) -> None:
        nonlocal count
        writer.write(snapshot)
        count += 1

    signal.signal(signal.SIGTERM, lambda *_: done.set())
    with stream:
        writer = RecordingWriter(stream, note=args.note)
        sampler = Sampler(interval=args.interval)
        sampler.start(write)
        started = time.monotonic()
        try:
            done.wait(args.duration)
        except KeyboardInterrupt:
            pass
        finally:
            sampler.stop()
    print(f"gpumon: wrote {count} samples over {time.monotonic() - started:.1f} s to {path}", file=sys.stderr)
    return 0


def run_replay(args: argparse.Namespace) -> int:
    from gpumon.sampling.recording import RecordingError, read_recording
    from gpumon.sampling.replay import Replayer
    from gpumon.tui.app import GpumonApp

    try:
        snapshots = read_recording(args.file)
    except RecordingError as error:
        raise CliError(str(error)) from None
    app = GpumonApp(Replayer(snapshots, speed=args.speed, name=args.file.name))
    app.run()
    return app.return_code or 0


# ---------------------------------------------------------------------------------------------
# Training jobs: run, attach, jobs.

FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
STOP_GRACE_S = 10.0
"""After the dashboard quits, how long the job gets to stop after SIGINT before SIGTERM, then SIGKILL."""
EXITING_GRACE_S = 5.0
"""How long a job that already said goodbye gets to exit by itself before it is signalled."""


def exit_status(returncode: int) -> int:
    """A shell-style exit status: a job killed by signal N gives 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def launch(command: list[str], *, stdout: TextIO | None = None) -> subprocess.Popen[bytes]:
    """Start `command` with the hook injected, in its own session (so signals reach it only through us)."""
    from gpumon.protocol import injection_env

    if not command:
        raise CliError("gpumon run needs a command, e.g. gpumon run -- python train.py")
    # An ignored SIGINT is inherited across exec (a shell starts background jobs that way): the job would then
    # ignore the Ctrl+C gpumon forwards. A handler is not inherited, so hold one while the job starts.
    ignoring_interrupt = signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    if ignoring_interrupt:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return subprocess.Popen(
            command, env=injection_env(os.environ), start_new_session=True,
            stdin=subprocess.DEVNULL if stdout is not None else None, stdout=stdout,
            stderr=subprocess.STDOUT if stdout is not None else None,
        )
    except FileNotFoundError:
        raise CliError(f"command not found: {command[0]}") from None
    except PermissionError:
        raise CliError(f"permission denied: {command[0]}") from None
    except OSError as error:
        raise CliError(f"cannot run {command[0]}: {error.strerror or error}") from None
    finally:
        if ignoring_interrupt:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


def wait_forwarding_signals(child: subprocess.Popen[bytes]) -> int:
    """Wait for the job, forwarding Ctrl+C (and TERM, HUP, QUIT) to it; its exit status."""
    forwarded: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        forwarded.append(signum)
        signal_group(child, signum)

    previous = {signum: signal.signal(signum, forward) for signum in FORWARDED_SIGNALS}
    try:
        returncode = child.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if forwarded:
        reap_group(child.pid)
    return exit_status(returncode)


def stop_job(child: subprocess.Popen[bytes], grace: float = STOP_GRACE_S, exiting: bool = False) -> int:
    """Stop a job still running: SIGINT (its Ctrl+C), then SIGTERM, then SIGKILL; its exit status.

    exiting: the job said goodbye already (it is on its way out): give it a few seconds to finish first.
    """
    if exiting:
        try:
            child.wait(EXITING_GRACE_S)
        except subprocess.TimeoutExpired:
            pass
    returncode = stop_group(child, grace, reap_grace=1.0)
    return exit_status(returncode)


def run_launch(args: argparse.Namespace) -> int:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if args.no_tui:
        return wait_forwarding_signals(launch(command))

    from gpumon.jobs.session import AttachedJob
    from gpumon.sampling.sampler import Sampler
    from gpumon.tui.advisor_app import AdvisorApp

    log_path = args.log
    if log_path is None:
        handle, name = tempfile.mkstemp(prefix="gpumon-run-", suffix=".log")
        os.close(handle)
        log_path = Path(name)
    try:
        log = log_path.open("w", encoding="utf-8")
    except OSError as error:
        raise CliError(f"cannot write {log_path}: {error.strerror or error}") from None
    with log:
        child = launch(command, stdout=log)
        print(f"gpumon: started pid {child.pid}; its output goes to {log_path}", file=sys.stderr)
        job = AttachedJob.launched(child.pid, exit_status=child.poll)
        sampler = Sampler(interval=args.interval)
        sampler.track_pids([child.pid])
        app = AdvisorApp(sampler, job=job, show_advisor=False)
        # A closed terminal or a kill of gpumon must not leave the job running: quit, then stop it below.
        previous = {signum: signal.signal(signum, lambda *_: app.exit()) for signum in (signal.SIGTERM, signal.SIGHUP)}
        try:
            app.run()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            status = stop_job(child, exiting=job.ended)
    print(f"gpumon: the job exited with status {status}; its output: {log_path}", file=sys.stderr)
    return status


def open_job_or_fail(pid: int) -> Any:
    from gpumon.jobs.discovery import AttachError
    from gpumon.jobs.session import open_job

    try:
        return open_job(pid)
    except AttachError as error:
        raise CliError(str(error)) from None


def run_attach(args: argparse.Namespace) -> int:
    job = open_job_or_fail(args.pid)
    if args.json:
        return stream_json(job, args.duration)
    from gpumon.sampling.sampler import Sampler
    from gpumon.tui.advisor_app import AdvisorApp

    sampler = Sampler(interval=args.interval)
    sampler.track_pids(job.view().pids)
    app = AdvisorApp(sampler, job=job, show_advisor=False)
    app.run()
    return app.return_code or 0


def _print_json(message: Any) -> None:
    sys.stdout.write(json.dumps(message, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def stream_json(job: Any, duration: float | None) -> int:
    """Print the job's data as JSON Lines until `duration` passes or the job ends."""
    from gpumon.jobs.pyspy import PySpySampler

    lines: queue.Queue[Any] = queue.Queue()
    if isinstance(job, PySpySampler):
        _print_json({"type": "attach", "pid": job.pid, "hooked": False, "method": "py-spy", "estimate": True,
                     "command": job.command})
        job.start(lambda what: lines.put(job.view().to_dict()))
        is_over: Callable[[], bool] = lambda: job.ended  # noqa: E731
    else:
        client = job.primary
        assert client is not None and client.state.info is not None
        _print_json(dict(client.state.info.hello))
        client.add_message_listener(
            lambda message: None if message.get("type") in ("subscribed", "pong") else lines.put(message))
        job.start()
        is_over = lambda: client.ended  # noqa: E731
    deadline = None if duration is None else time.monotonic() + duration
    try:
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            try:
                message = lines.get(timeout=0.2 if left is None else min(0.2, left))
            except queue.Empty:
                if is_over() and lines.empty():
                    break
                continue
            _print_json(message)
        if is_over():
            view = job.view()
            _print_json({"type": "ended", "pid": view.pid, "reason": view.end_reason})
    except BrokenPipeError:
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - stdout's reader left; exit quietly
    finally:
        job.stop()
    return 0


def run_jobs(args: argparse.Namespace) -> int:
    from gpumon.jobs.discovery import scan
    from gpumon.printable import printable

    found = scan()
    groups = found.groups
    if args.json:
        for group in groups:
            _print_json({"group": list(group.key) if group.key else None, "label": group.label,
                         "jobs": [dict(job.hello) for job in group.jobs]})
        return 0
    if not groups:
        print("no hooked jobs (add `import gpumon.hook` to a training script, or run it with `gpumon run -- ...`)")
    for group in groups:
        print(printable(group.label))
        if group.distributed:
            for job in group.jobs:
                print(f"  rank {job.rank if job.rank is not None else '?'}  pid {job.pid}  {printable(job.cwd)}")
        else:
            print(f"  cwd {printable(group.primary.cwd)}")
    for pid, reason in found.unreachable:
        print(f"pid {pid}: not answering ({printable(str(reason))})", file=sys.stderr)
    return 0
