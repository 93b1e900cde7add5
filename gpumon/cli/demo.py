"""`gpumon demo`: gpumon's deliberately slow demo trainer, hooked, with the dashboard and the advisor panel."""

from __future__ import annotations

import argparse
import importlib.util
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from gpumon.cli.base import CliError, Subparsers, non_negative_seconds, positive_seconds, subcommand
from gpumon.cli.reporting import (
    StderrProgress,
    check_markdown_path,
    print_report,
    signals_as_interrupt,
    write_markdown,
)
from gpumon.cli.textual_range import require_textual
from gpumon.printable import printable

log = logging.getLogger(__name__)

DEMO_MODULE = "gpumon_demo"
DEMO_RUN_S = 3600.0
"""How long a demo trial is told to train: the trial runner stops it once measured."""
GUIDED_MEASURED_S = 15.0
GUIDED_WARMUP_S = 5.0
GUIDED_WINDOW_S = 3.0
TORCH_MISSING = (
    "the demo trainer needs PyTorch, which this Python cannot import; install it (CPU build: "
    "pip install torch --index-url https://download.pytorch.org/whl/cpu) and run gpumon demo again"
)
TORCH_BROKEN = (
    "the demo trainer needs PyTorch, and importing it fails here ({reason}); reinstall it (CPU build: "
    "pip install torch --index-url https://download.pytorch.org/whl/cpu) and run gpumon demo again"
)
CPU_NOTICE = "no NVIDIA GPU here: the demo runs on the CPU (small model), so the numbers say little about a GPU"


def register(subparsers: Subparsers) -> None:
    parser = subcommand(
        subparsers,
        "demo",
        help="a deliberately slow trainer to learn gpumon on",
        handler=run_demo,
        description="Start gpumon's demo trainer (slow by design: CPU augmentation in the main process, pageable "
        "copies, fp32, batch 32) under the hook and open the dashboard on it with the advisor panel (a: panel, "
        "g: guided run). Without a GPU it runs on the CPU. --guided runs the whole ladder unattended and prints "
        "the table.",
    )
    parser.add_argument("--guided", action="store_true", help="no dashboard: run the guided experiments, print them")
    parser.add_argument(
        "--duration",
        type=positive_seconds,
        default=None,
        help="how long the demo trains (default 600 s); with --guided: the most seconds measured per variant "
        f"after its warm-up (default {GUIDED_MEASURED_S:g}), in windows of --window seconds, stopping after 2 once "
        "samples/s is known within +-3%% (95%% confidence)",
    )
    parser.add_argument(
        "--warmup",
        type=non_negative_seconds,
        default=GUIDED_WARMUP_S,
        help=f"with --guided: seconds after each run's first step left out (default {GUIDED_WARMUP_S:g})",
    )
    parser.add_argument(
        "--window",
        type=positive_seconds,
        default=GUIDED_WINDOW_S,
        help=f"with --guided: seconds per measurement window (default {GUIDED_WINDOW_S:g})",
    )
    parser.add_argument(
        "--trials-only",
        action="store_true",
        help="with --guided: every variant a fresh trial run, measured over every window (no live changes on the "
        "running trial, no early stop)",
    )
    parser.add_argument("--device", default="auto", help="auto (CUDA when there is a GPU), cuda or cpu")
    parser.add_argument("--json", action="store_true", help="with --guided: print the results as JSON")
    parser.add_argument(
        "--markdown",
        type=Path,
        default=None,
        metavar="FILE",
        help="with --guided: also write the table as Markdown to FILE",
    )
    parser.add_argument("--interval", type=positive_seconds, default=1.0, help="dashboard sampling interval")


def demo_command(device: str, duration: float, extra: Sequence[str] = ()) -> list[str]:
    """The argv that runs the packaged demo trainer with this interpreter."""
    return [
        sys.executable,
        "-m",
        DEMO_MODULE,
        "--duration",
        f"{duration:g}",
        "--device",
        device,
        "--progress-interval",
        "0",
        *extra,
    ]


def has_cuda_gpu() -> bool:
    """Whether NVML sees a GPU (cheap; torch is not imported here)."""
    from gpumon.sampling.sampler import sample_once

    try:
        return bool(sample_once(window=0.05).gpus)
    except Exception:  # no NVML, no GPU
        log.debug("no GPU for the demo", exc_info=True)
        return False


def torch_installed() -> bool:
    """Whether this Python can find torch (without importing it: the monitor stays light)."""
    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):  # a finder that refuses torch, a broken torch package
        return False


def demo_device(requested: str) -> tuple[str, bool]:
    """The device to run on and whether a GPU is there (CliError for a device that cannot be had)."""
    if requested not in ("auto", "cuda", "cpu") and not requested.startswith("cuda:"):
        raise CliError(f"--device {requested!r}: use auto, cuda, cuda:N or cpu")
    gpu = has_cuda_gpu() if requested != "cpu" else False
    if requested.startswith("cuda") and not gpu:
        raise CliError("--device cuda asked for, but no NVIDIA GPU is visible here")
    if not gpu:
        print(
            f"gpumon: {CPU_NOTICE if requested == 'auto' else '--device cpu: the demo runs on the CPU'}",
            file=sys.stderr,
        )
    return requested, gpu


def run_demo(args: argparse.Namespace) -> int:
    if not args.guided and (args.json or args.markdown or args.trials_only):
        raise CliError("--json and --markdown go with --guided (so does --trials-only)")
    check_markdown_path(args.markdown)
    if not torch_installed():
        raise CliError(TORCH_MISSING)
    from gpumon.jobs.launch import import_failure

    failure = import_failure("torch")  # found is not importable: a missing shared library raises OSError
    if failure is not None:
        raise CliError(TORCH_BROKEN.format(reason=printable(failure)))
    device, gpu = demo_device(args.device)
    if args.guided:
        return run_demo_guided(args, device)
    return run_demo_dashboard(args, device, None if gpu else CPU_NOTICE)


def guided_windows(measured_s: float, window_s: float) -> tuple[float, int]:
    """(window length, most windows) for `measured_s` seconds measured at most per variant: at least 2 windows."""
    window_s = min(window_s, measured_s / 2)
    return window_s, max(2, round(measured_s / window_s))


def run_demo_guided(args: argparse.Namespace, device: str) -> int:
    from gpumon.advisor.session import experiment_command
    from gpumon.jobs.launch import LaunchedJob

    measured = args.duration if args.duration is not None else GUIDED_MEASURED_S
    window_s, repeats = guided_windows(measured, args.window)
    command = demo_command(device, DEMO_RUN_S)
    with signals_as_interrupt():
        report = experiment_command(
            command,
            launcher=LaunchedJob,
            window_s=window_s,
            repeats=repeats,
            min_repeats=None if args.trials_only else 2,
            warmup_s=args.warmup,
            progress=StderrProgress(),
            max_variants=12,
            live_on_trial=not args.trials_only,
        )
    write_markdown(args.markdown, report, "gpumon demo --guided")
    print_report(report, args.json)
    return 0 if report.baseline.ok else 1


def run_demo_dashboard(args: argparse.Namespace, device: str, notice: str | None = None) -> int:
    """The demo under the hook, the dashboard attached with the advisor panel; the demo stops with the app."""
    require_textual()
    from gpumon.jobs.launch import LaunchedJob, LaunchError, new_log_path
    from gpumon.sampling.sampler import Sampler
    from gpumon.tui.advisor_app import AdvisorApp, DemoOwner

    duration = args.duration if args.duration is not None else 600.0
    log_path = new_log_path("gpumon-demo-")
    try:
        demo = LaunchedJob(demo_command(device, duration), log=log_path).start()
    except LaunchError as error:
        raise CliError(str(error)) from None
    print(f"gpumon: started the demo trainer (pid {demo.pid}); its output goes to {log_path}", file=sys.stderr)
    owner = DemoOwner(command=demo_command(device, DEMO_RUN_S), current=demo)
    sampler = Sampler(interval=args.interval)
    sampler.track_pids([demo.pid])
    app = AdvisorApp(sampler, job=demo.follow(), owner=owner, notice=notice)
    # A closed terminal or a kill of gpumon must not leave the demo running: quit, then stop it below. A second
    # signal, should the app not be able to quit (a terminal driver stuck leaving), ends it here and now.
    quitting = threading.Event()

    def quit_app(_signum: int, _frame: object) -> None:
        if quitting.is_set():
            raise KeyboardInterrupt
        quitting.set()
        app.exit()

    previous = {signum: signal.signal(signum, quit_app) for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    try:
        app.run()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        owner.stop_all()
    print(f"gpumon: the demo stopped; its output: {log_path}", file=sys.stderr)
    return app.return_code or 0
