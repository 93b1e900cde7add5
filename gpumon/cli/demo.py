"""`gpumon demo`: gpumon's deliberately slow demo trainer, hooked, with the dashboard and the advisor panel."""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from gpumon.cli.base import CliError, Subparsers, positive_seconds, subcommand
from gpumon.cli.reporting import StderrProgress, print_report, signals_as_interrupt, write_markdown

DEMO_MODULE = "gpumon_demo"
DEMO_RUN_S = 3600.0
"""How long a demo trial is told to train: the trial runner stops it once measured."""
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
        help="how long the demo trains (default 600 s); with --guided: seconds measured per variant "
        "after its warm-up (default 12, in 3 windows)",
    )
    parser.add_argument(
        "--warmup",
        type=positive_seconds,
        default=8.0,
        help="with --guided: seconds after each run's first step left out (default 8)",
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
    except Exception:  # noqa: BLE001 - no NVML, no GPU
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
    if not args.guided and (args.json or args.markdown):
        raise CliError("--json and --markdown go with --guided")
    device, gpu = demo_device(args.device)
    if args.guided:
        return run_demo_guided(args, device)
    return run_demo_dashboard(args, device, None if gpu else CPU_NOTICE)


def run_demo_guided(args: argparse.Namespace, device: str) -> int:
    from gpumon.advisor.session import experiment_command, windows_for

    measured = args.duration if args.duration is not None else 12.0
    window_s, repeats = windows_for(measured + args.warmup, args.warmup)
    command = demo_command(device, DEMO_RUN_S)
    with signals_as_interrupt():
        report = experiment_command(
            command,
            window_s=window_s,
            repeats=repeats,
            warmup_s=args.warmup,
            progress=StderrProgress(),
            max_variants=12,
        )
    write_markdown(args.markdown, report, "gpumon demo --guided")
    print_report(report, args.json)
    return 0 if report.baseline.ok else 1


def run_demo_dashboard(args: argparse.Namespace, device: str, notice: str | None = None) -> int:
    """The demo under the hook, the dashboard attached with the advisor panel; the demo stops with the app."""
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
    # A closed terminal or a kill of gpumon must not leave the demo running: quit, then stop it below.
    previous = {
        signum: signal.signal(signum, lambda *_: app.exit())
        for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
    }
    try:
        app.run()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        owner.stop_all()
    print(f"gpumon: the demo stopped; its output: {log_path}", file=sys.stderr)
    return app.return_code or 0
