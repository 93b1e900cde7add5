"""The advisor's commands: `gpumon diagnose`, `gpumon experiment` and `gpumon demo` (registered by gpumon.cli)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from gpumon.cli import CliError, pid_number, positive_seconds

DEMO_MODULE = "gpumon_demo"
DEMO_RUN_S = 3600.0
"""How long a demo trial is told to train: the trial runner stops it once measured."""


def register(subparsers: Any) -> None:
    """Add `diagnose`, `experiment` and `demo` to gpumon's subcommands."""
    diagnose = subparsers.add_parser(
        "diagnose", help="name what holds a training job back",
        description="Watch a training job for a while and name its bottleneck (input_bound, host_sync, "
        "launch_bound, transfer_bound, low_precision, memory_imbalance, io_bound or healthy) with the evidence. "
        "Either run CMD with the hook (and stop it after --duration), or watch a running job (--pid).")
    diagnose.add_argument("--pid", type=pid_number, default=None, help="a running job (its hook, else py-spy)")
    diagnose.add_argument("--duration", type=positive_seconds, default=20.0,
                          help="seconds to watch (with CMD: after its first step, warm-up included; default 20)")
    diagnose.add_argument("--warmup", type=positive_seconds, default=5.0,
                          help="with CMD: seconds after the first step left out (default 5)")
    diagnose.add_argument("--json", action="store_true", help="print the finding and its signals as JSON")
    diagnose.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD ...", help="the command to run")
    diagnose.set_defaults(handler=run_diagnose)

    experiment = subparsers.add_parser(
        "experiment", help="measure fixes: a guided run of short experiments",
        description="Measure the command as it is, diagnose it, then try the knobs that may fix it, one per short "
        "trial run of CMD (knobs injected through GPUMON_KNOBS), keeping each that wins beyond the noise, until "
        "nothing wins. With --pid, live experiments on a running hooked job instead (math-neutral knobs only, "
        "rolled back unless they win).")
    experiment.add_argument("--pid", type=pid_number, default=None, help="a running hooked job (live experiments)")
    add_measure_arguments(experiment)
    experiment.add_argument("--try", dest="tries", action="append", default=[], metavar="KNOB=VALUE",
                            help="run these experiments, in this order, instead of the diagnosis' list "
                                 "(repeatable; e.g. --try num_workers=8 --try amp_bf16=true)")
    experiment.add_argument("--json", action="store_true", help="print the results as JSON")
    experiment.add_argument("--markdown", type=Path, default=None, metavar="FILE",
                            help="also write the results table as Markdown to FILE")
    experiment.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD ...", help="the command to run")
    experiment.set_defaults(handler=run_experiment)

    demo = subparsers.add_parser(
        "demo", help="a deliberately slow trainer to learn gpumon on",
        description="Start gpumon's demo trainer (slow by design: CPU augmentation in the main process, pageable "
        "copies, fp32, batch 32) under the hook and open the dashboard on it with the advisor panel (a: panel, "
        "g: guided run). Without a GPU it runs on the CPU. --guided runs the whole ladder unattended and prints "
        "the table.")
    demo.add_argument("--guided", action="store_true", help="no dashboard: run the guided experiments, print them")
    demo.add_argument("--duration", type=positive_seconds, default=None,
                      help="how long the demo trains (default 600 s); with --guided: seconds measured per variant "
                           "after its warm-up (default 12, in 3 windows)")
    demo.add_argument("--warmup", type=positive_seconds, default=8.0,
                      help="with --guided: seconds after each run's first step left out (default 8)")
    demo.add_argument("--device", default="auto", help="auto (CUDA when there is a GPU), cuda or cpu")
    demo.add_argument("--json", action="store_true", help="with --guided: print the results as JSON")
    demo.add_argument("--markdown", type=Path, default=None, metavar="FILE",
                      help="with --guided: also write the table as Markdown to FILE")
    demo.add_argument("--interval", type=positive_seconds, default=1.0, help="dashboard sampling interval")
    demo.set_defaults(handler=run_demo)


def add_measure_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--window", type=positive_seconds, default=4.0,
                        help="seconds per measurement window (default 4)")
    parser.add_argument("--repeats", type=int, default=3, help="windows per variant, for the noise (default 3)")
    parser.add_argument("--warmup", type=positive_seconds, default=5.0,
                        help="seconds after a variant's first step (or change) left out (default 5)")
    parser.add_argument("--max-variants", type=int, default=12, help="most variants to try (default 12)")


def _command(args: argparse.Namespace) -> list[str]:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    return command


def _target(args: argparse.Namespace, name: str) -> list[str]:
    command = _command(args)
    if args.pid is None and not command:
        raise CliError(f"gpumon {name} needs a command (gpumon {name} -- python train.py) or --pid PID")
    if args.pid is not None and command:
        raise CliError(f"gpumon {name}: give either --pid or a command, not both")
    return command


class StderrProgress:
    """Progress lines on stderr, each message once."""

    def __init__(self, quiet: bool = False) -> None:
        self.quiet = quiet
        self.last = ""

    def __call__(self, message: str, _fraction: float) -> None:
        if self.quiet or message == self.last:
            return
        self.last = message
        print(f"gpumon: {message}", file=sys.stderr, flush=True)


def _print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2)
    sys.stdout.write("\n")
    sys.stdout.flush()


def run_diagnose(args: argparse.Namespace) -> int:
    from gpumon.advisor.report import finding_text
    from gpumon.advisor.session import AdvisorError, diagnose_command, diagnose_pid

    command = _target(args, "diagnose")
    progress = StderrProgress()
    try:
        with signals_as_interrupt():
            if args.pid is not None:
                result = diagnose_pid(args.pid, duration=args.duration, progress=progress)
            else:
                result = diagnose_command(command, duration=args.duration,
                                          warmup_s=min(args.warmup, args.duration / 2), progress=progress)
    except AdvisorError as error:
        raise CliError(str(error)) from None
    if args.json:
        _print_json(result.to_dict())
    else:
        print(finding_text(result.finding))
    return 0


def parse_tries(items: Sequence[str]) -> list[Any]:
    """--try KNOB=VALUE items as experiments (VALUE as JSON: 8, true, null; else a string)."""
    from gpumon.advisor.catalogue import KNOBS, Experiment

    experiments = []
    for item in items:
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise CliError(f"--try {item!r}: expected KNOB=VALUE, e.g. num_workers=8")
        if name not in KNOBS:
            raise CliError(f"--try: unknown knob {name!r} (known: {', '.join(sorted(KNOBS))})")
        try:
            value = json.loads(text)
        except ValueError:
            value = text
        experiments.append(Experiment(knobs={name: value}, reason="asked for"))
    return experiments


def _write_markdown(path: Path | None, report: Any, title: str) -> None:
    if path is None:
        return
    from gpumon.advisor.report import report_markdown

    try:
        path.write_text(report_markdown(report, title=title), encoding="utf-8")
    except OSError as error:
        raise CliError(f"cannot write {path}: {error.strerror or error}") from None
    print(f"gpumon: wrote {path}", file=sys.stderr)


def _check_measure_arguments(args: argparse.Namespace) -> None:
    if args.repeats < 1:
        raise CliError(f"--repeats must be at least 1, got {args.repeats}")
    if args.max_variants < 1:
        raise CliError(f"--max-variants must be at least 1, got {args.max_variants}")


def _print_report(report: Any, as_json: bool) -> None:
    from gpumon.advisor.report import report_text

    if as_json:
        _print_json(report.to_dict())
    else:
        print(report_text(report))


@contextlib.contextmanager
def signals_as_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP end a headless run as Ctrl+C does (KeyboardInterrupt), so its trial is stopped."""

    def interrupt(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    previous = {signum: signal.signal(signum, interrupt) for signum in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def run_experiment(args: argparse.Namespace) -> int:
    from gpumon.advisor.session import AdvisorError, experiment_command, experiment_pid

    command = _target(args, "experiment")
    _check_measure_arguments(args)
    only = parse_tries(args.tries) if args.tries else None
    progress = StderrProgress()
    try:
        with signals_as_interrupt():
            if args.pid is not None:
                report = experiment_pid(args.pid, window_s=args.window, repeats=args.repeats, warmup_s=args.warmup,
                                        only=only, progress=progress, max_variants=args.max_variants)
            else:
                report = experiment_command(command, window_s=args.window, repeats=args.repeats,
                                            warmup_s=args.warmup, only=only, progress=progress,
                                            max_variants=args.max_variants)
    except AdvisorError as error:
        raise CliError(str(error)) from None
    _write_markdown(args.markdown, report, "gpumon experiment")
    _print_report(report, args.json)
    return 0 if report.baseline.ok else 1


# ---------------------------------------------------------------------------------------------
# gpumon demo


def demo_command(device: str, duration: float, extra: Sequence[str] = ()) -> list[str]:
    """The argv that runs the packaged demo trainer with this interpreter."""
    return [sys.executable, "-m", DEMO_MODULE, "--duration", f"{duration:g}", "--device", device,
            "--progress-interval", "0", *extra]


def has_cuda_gpu() -> bool:
    """Whether NVML sees a GPU (cheap; torch is not imported here)."""
    from gpumon.sampling.sampler import sample_once

    try:
        return bool(sample_once(window=0.05).gpus)
    except Exception:  # noqa: BLE001 - no NVML, no GPU
        return False


CPU_NOTICE = "no NVIDIA GPU here: the demo runs on the CPU (small model), so the numbers say little about a GPU"


def _demo_device(requested: str) -> tuple[str, bool]:
    if requested not in ("auto", "cuda", "cpu") and not requested.startswith("cuda:"):
        raise CliError(f"--device {requested!r}: use auto, cuda, cuda:N or cpu")
    gpu = has_cuda_gpu() if requested != "cpu" else False
    if requested.startswith("cuda") and not gpu:
        raise CliError("--device cuda asked for, but no NVIDIA GPU is visible here")
    if not gpu:
        print(f"gpumon: {CPU_NOTICE if requested == 'auto' else '--device cpu: the demo runs on the CPU'}",
              file=sys.stderr)
    return requested, gpu


def run_demo(args: argparse.Namespace) -> int:
    if not args.guided and (args.json or args.markdown):
        raise CliError("--json and --markdown go with --guided")
    device, gpu = _demo_device(args.device)
    if args.guided:
        return run_demo_guided(args, device)
    return run_demo_dashboard(args, device, None if gpu else CPU_NOTICE)


def run_demo_guided(args: argparse.Namespace, device: str) -> int:
    from gpumon.advisor.session import experiment_command, windows_for

    measured = args.duration if args.duration is not None else 12.0
    window_s, repeats = windows_for(measured + args.warmup, args.warmup)
    command = demo_command(device, DEMO_RUN_S)
    with signals_as_interrupt():
        report = experiment_command(command, window_s=window_s, repeats=repeats, warmup_s=args.warmup,
                                    progress=StderrProgress(), max_variants=12)
    _write_markdown(args.markdown, report, "gpumon demo --guided")
    _print_report(report, args.json)
    return 0 if report.baseline.ok else 1


def run_demo_dashboard(args: argparse.Namespace, device: str, notice: str | None = None) -> int:
    """The demo under the hook, the dashboard attached with the advisor panel; the demo stops with the app."""
    import tempfile

    from gpumon.advisor.trial import stop_group
    from gpumon.jobs.session import AttachedJob
    from gpumon.protocol import injection_env
    from gpumon.sampling.sampler import Sampler
    from gpumon.tui.advisor_app import AdvisorApp, DemoOwner

    duration = args.duration if args.duration is not None else 600.0
    handle, name = tempfile.mkstemp(prefix="gpumon-demo-", suffix=".log")
    os.close(handle)
    log_path = Path(name)
    command = demo_command(device, duration)
    with log_path.open("w", encoding="utf-8") as log:
        child = subprocess.Popen(command, env=injection_env(os.environ), start_new_session=True,
                                 stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        print(f"gpumon: started the demo trainer (pid {child.pid}); its output goes to {log_path}", file=sys.stderr)
        job = AttachedJob.launched(child.pid, exit_status=child.poll)
        sampler = Sampler(interval=args.interval)
        sampler.track_pids([child.pid])
        owner = DemoOwner(command=demo_command(device, DEMO_RUN_S), process=child)
        app = AdvisorApp(sampler, job=job, owner=owner, notice=notice)
        # A closed terminal or a kill of gpumon must not leave the demo running: quit, then stop it below.
        previous = {signum: signal.signal(signum, lambda *_: app.exit())
                    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
        try:
            app.run()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            owner.stop_all(stop_group)
    print(f"gpumon: the demo stopped; its output: {log_path}", file=sys.stderr)
    return app.return_code or 0



def main(argv: Sequence[str] | None = None) -> int:
    """`python -m gpumon.cli.advisor diagnose|experiment|demo ...`: these commands without the rest of gpumon's CLI."""
    parser = argparse.ArgumentParser(prog="gpumon", description="gpumon's advisor commands")
    register(parser.add_subparsers(title="commands", metavar="COMMAND", required=True))
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except CliError as error:
        print(f"gpumon: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
