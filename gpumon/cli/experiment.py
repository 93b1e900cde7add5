"""`gpumon experiment`: a guided run of short experiments on CMD (trial runs) or on a hooked job (--pid, live)."""

from __future__ import annotations

import argparse
import json
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from gpumon.cli.base import (
    EXIT_INTERRUPTED,
    CliError,
    Subparsers,
    add_command_argument,
    non_negative_seconds,
    pid_number,
    positive_seconds,
    subcommand,
)
from gpumon.cli.diagnose import target_command
from gpumon.cli.reporting import (
    StderrProgress,
    check_markdown_path,
    print_report,
    signals_as_cancel,
    signals_as_interrupt,
    write_markdown,
)
from gpumon.printable import printable

if TYPE_CHECKING:  # the advisor is imported only when the command runs
    from gpumon.advisor.catalogue import Experiment
    from gpumon.advisor.results import GuidedReport


def register(subparsers: Subparsers) -> None:
    parser = subcommand(
        subparsers,
        "experiment",
        help="measure fixes: a guided run of short experiments",
        handler=run_experiment,
        description="Measure the command as it is, diagnose it, then try the knobs that may fix it, one per short "
        "trial run of CMD (knobs injected through GPUMON_KNOBS), keeping each that wins beyond the noise, until "
        "nothing wins. With --pid, live experiments on a running hooked job instead (math-neutral knobs only, "
        "rolled back unless they win); a knob that cannot apply live is offered as a trial run of the job's own "
        "command (a job gpumon run started), on the GPU it would share.",
    )
    parser.add_argument("--pid", type=pid_number, default=None, help="a running hooked job (live experiments)")
    parser.add_argument(
        "--window", type=positive_seconds, default=4.0, help="seconds per measurement window (default 4)"
    )
    parser.add_argument("--repeats", type=int, default=3, help="windows per variant, for the noise (default 3)")
    parser.add_argument(
        "--warmup",
        type=non_negative_seconds,
        default=5.0,
        help="seconds after a variant's first step (or change) left out (default 5)",
    )
    parser.add_argument("--max-variants", type=int, default=12, help="most variants to try (default 12)")
    parser.add_argument(
        "--try",
        dest="tries",
        action="append",
        default=[],
        metavar="KNOB=VALUE",
        help="run these experiments, in this order, instead of the diagnosis' list "
        "(repeatable; e.g. --try num_workers=8 --try amp_bf16=true)",
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument(
        "--markdown", type=Path, default=None, metavar="FILE", help="also write the results table as Markdown to FILE"
    )
    add_command_argument(parser)


def parse_tries(items: Sequence[str]) -> list[Experiment]:
    """--try KNOB=VALUE items as experiments (VALUE as JSON: 8, true, null; else a string)."""
    from gpumon import protocol
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
        if name in protocol.KNOBS:  # checked now, not after the baseline has run: one the hook would refuse
            try:
                protocol.validate_knobs({name: value}, live=False)
            except protocol.ProtocolError as error:
                raise CliError(f"--try {printable(item)}: {printable(str(error))}") from None
        experiments.append(Experiment(knobs={name: value}, reason="asked for"))
    return experiments


def run_experiment(args: argparse.Namespace) -> int:
    from gpumon.advisor.session import AdvisorError, experiment_command, experiment_pid
    from gpumon.jobs.launch import LaunchedJob
    from gpumon.jobs.session import hooked_job

    command = target_command(args, "experiment")
    if args.repeats < 1:
        raise CliError(f"--repeats must be at least 1, got {args.repeats}")
    if args.max_variants < 1:
        raise CliError(f"--max-variants must be at least 1, got {args.max_variants}")
    only = parse_tries(args.tries) if args.tries else None
    check_markdown_path(args.markdown)
    progress = StderrProgress()
    cancel = threading.Event()
    try:
        if args.pid is not None:
            with signals_as_cancel(cancel):
                report = experiment_pid(
                    args.pid,
                    attach=hooked_job,
                    window_s=args.window,
                    repeats=args.repeats,
                    warmup_s=args.warmup,
                    only=only,
                    progress=progress,
                    max_variants=args.max_variants,
                    cancel=cancel,
                )
        else:
            with signals_as_interrupt():
                report = experiment_command(
                    command,
                    launcher=LaunchedJob,
                    window_s=args.window,
                    repeats=args.repeats,
                    warmup_s=args.warmup,
                    only=only,
                    progress=progress,
                    max_variants=args.max_variants,
                )
    except AdvisorError as error:
        raise CliError(str(error)) from None
    write_markdown(args.markdown, report, "gpumon experiment")
    print_report(report, args.json)
    if args.json:  # the text report has them; beside JSON on stdout, the person at the terminal is told too
        for offer in report.offers:
            print(f"gpumon: {printable(offer.text())}", file=sys.stderr)
    if args.pid is not None:
        return live_exit_status(report, args.pid, cancelled=cancel.is_set())
    return 0 if report.baseline.ok else 1


def live_exit_status(report: GuidedReport, pid: int, *, cancelled: bool) -> int:
    """Live experiments: 0 only when every variant ran and the job has the knobs it should; each knob left changed
    is one line on stderr."""
    from gpumon.advisor.results import CANCELLED, FAILED

    for knob in report.unrestored:
        print(f"gpumon: pid {pid} did not take back {printable(knob.text())}", file=sys.stderr)
    if cancelled:
        return EXIT_INTERRUPTED
    if report.unrestored or not report.baseline.ok:
        return 1
    return 1 if any(variant.status in (FAILED, CANCELLED) for variant in report.variants) else 0
