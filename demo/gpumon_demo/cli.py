"""Command line of the demo trainer: flags, GPUMON_KNOBS, the JSON summary and exit codes."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from .knobs import KNOBS_ENV, KNOWN_KNOBS, Knob, KnobError, acknowledge_knobs, parse_knobs

PROG = "gpumon-demo"
EXIT_BAD_INPUT = 2


def _knob_argument_type(knob: Knob) -> Any:
    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        try:
            return knob.check(value)
        except KnobError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    return convert


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "A deliberately slow PyTorch trainer (synthetic images, CPU augmentation in the main "
            "process with no DataLoader workers, pageable copies, fp32, batch 32) for learning gpumon on. "
            f"Knobs come from {KNOBS_ENV} (a JSON object) and the flags below, flags winning."
        ),
    )
    parser.add_argument(
        "--duration",
        type=float,
        default=None,
        metavar="S",
        help="seconds to train, warm-up included (default 60 unless --steps is given)",
    )
    parser.add_argument("--steps", type=int, default=None, metavar="N", help="steps to train")
    parser.add_argument("--device", default="auto", help="auto (CUDA if available, else CPU), cuda, cuda:N, cpu")
    parser.add_argument(
        "--profile",
        choices=("auto", "full", "small"),
        default="auto",
        help="model and image sizes: full on CUDA, small (fast on a CPU) otherwise",
    )
    parser.add_argument(
        "--warmup-steps",
        type=int,
        default=10,
        metavar="N",
        help="steps left out of the steady-state samples/s (default 10)",
    )
    parser.add_argument(
        "--dataset-size",
        type=int,
        default=1_281_167,
        metavar="N",
        help="samples per epoch (default: ImageNet-1k's training set, so a short run meets no epoch end)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--progress-interval",
        type=float,
        default=5.0,
        metavar="S",
        help="seconds between progress lines on stderr; 0 for none (default 5)",
    )
    parser.add_argument("--json", action="store_true", help="print a JSON summary on stdout at the end")
    knobs = parser.add_argument_group("knobs (override GPUMON_KNOBS)")
    for knob in KNOWN_KNOBS.values():
        flag = "--" + knob.name.replace("_", "-")
        help_text = f"{knob.description} (default {json.dumps(knob.default)})"
        if knob.type is bool:
            knobs.add_argument(
                flag, dest=knob.name, action=argparse.BooleanOptionalAction, default=None, help=help_text
            )
        else:
            knobs.add_argument(
                flag, dest=knob.name, type=_knob_argument_type(knob), default=None, metavar="N", help=help_text
            )
    return parser


def _fail(message: str) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return EXIT_BAD_INPUT


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the demo; returns the exit code (0, 2 for bad input, 130/143 when stopped by SIGINT/SIGTERM)."""
    args = build_parser().parse_args(argv)
    try:
        knobs = parse_knobs(os.environ.get(KNOBS_ENV))
    except KnobError as error:
        return _fail(str(error))
    acknowledge_knobs(list(knobs), os.environ)
    knobs |= {name: getattr(args, name) for name in KNOWN_KNOBS if getattr(args, name) is not None}
    for name, minimum in (("steps", 1), ("warmup_steps", 0), ("dataset_size", 1), ("duration", 0)):
        value = getattr(args, name)
        if value is not None and value < minimum:
            return _fail(f"--{name.replace('_', '-')} must be >= {minimum}, got {value}")
    duration = args.duration if args.duration is not None or args.steps is not None else 60.0

    # torch is imported only now, so bad input fails fast.
    from .trainer import EXIT_CODE_FOR_SIGNAL, DemoError, TrainConfig, run

    config = TrainConfig(
        knobs=knobs, device=args.device, duration=duration, steps=args.steps, profile=args.profile,
        warmup_steps=args.warmup_steps, dataset_size=args.dataset_size, seed=args.seed,
        progress_interval=args.progress_interval,
    )  # fmt: skip
    try:
        summary = run(config)
    except DemoError as error:
        return _fail(str(error))
    if args.json:
        print(json.dumps(summary), flush=True)
    else:
        rate = summary["samples_per_s"]
        rate_text = f"{rate:.0f} samples/s (steady state)" if rate is not None else "too short for a steady state"
        print(f"{summary['steps']} steps, {summary['samples']} samples on {summary['device']}: {rate_text}")
    return EXIT_CODE_FOR_SIGNAL.get(summary["stopped_by"], 0)
