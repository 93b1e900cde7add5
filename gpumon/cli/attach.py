"""`gpumon attach PID`: the dashboard (or JSON Lines) on a running job, hooked or sampled with py-spy."""

from __future__ import annotations

import argparse
import math
import queue
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from gpumon.cli.base import (
    CliError,
    Subparsers,
    add_interval_argument,
    pid_number,
    positive_seconds,
    print_json_line,
    subcommand,
)
from gpumon.cli.textual_range import require_textual

if TYPE_CHECKING:  # the jobs layer is imported where a command runs, not on every start (the dashboard's too)
    from gpumon.jobs.host_profile import HostProfile
    from gpumon.jobs.source import JobSource

NATIVE_COST_HELP = (
    "costs the job time: py-spy then pauses it at each of its 50 samples a second to unwind the C/C++ frames, "
    "where without --native it reads the job's memory without stopping it"
)


def add_native_argument(parser: argparse.ArgumentParser) -> None:
    """--native, for the commands that may sample a job without the hook with py-spy (attach, diagnose --pid)."""
    parser.add_argument(
        "--native",
        action="store_true",
        help="without the hook: run py-spy with --native, so a sync inside .item()/.cpu() shows as "
        "cudaStreamSynchronize and the like (" + NATIVE_COST_HELP + ")",
    )


def register(subparsers: Subparsers) -> None:
    parser = subcommand(
        subparsers,
        "attach",
        help="watch a running training job",
        handler=run_attach,
        description="Open the dashboard on a running PyTorch job. A job with the gpumon hook streams its steps; "
        "any other Python process is sampled with py-spy, which estimates where its main thread spends time.",
    )
    parser.add_argument("pid", type=pid_number, help="the job's process id")
    parser.add_argument(
        "--json",
        action="store_true",
        help="no dashboard: print the job's data as JSON Lines (hello, then steps and state, "
        "every 16th step record with its time budget, each state with the step model of the last 10 s; "
        "without the hook, py-spy estimates)",
    )
    parser.add_argument(
        "--duration",
        type=positive_seconds,
        default=None,
        help="with --json: stop after this many seconds (default: when the job ends, or Ctrl+C)",
    )
    add_native_argument(parser)
    add_interval_argument(parser)


def open_job_or_fail(pid: int, native: bool = False) -> JobSource:
    from gpumon.jobs.discovery import AttachError
    from gpumon.jobs.session import open_job

    try:
        return open_job(pid, native=native)
    except AttachError as error:
        raise CliError(str(error)) from None


def run_attach(args: argparse.Namespace) -> int:
    job = open_job_or_fail(args.pid, native=args.native)
    if args.json:
        return stream_json(job, args.duration)
    require_textual()
    from gpumon.sampling.sampler import Sampler
    from gpumon.tui.advisor_app import AdvisorApp

    sampler = Sampler(interval=args.interval)
    sampler.track_pids(job.view().pids)
    app = AdvisorApp(sampler, job=job, show_advisor=False)
    app.run()
    return app.return_code or 0


def state_with_step_model(message: Mapping[str, Any], profiles: Sequence[HostProfile]) -> dict[str, Any]:
    """A state message with "step_model": the step model of the sampler's counts over the 10 s up to it (GPU busy
    from the training stream: attach reads no GPU-Util), None without one. `profiles`: the view's, which may lack
    this message's own counts or hold later ones."""
    from gpumon.jobs.host_profile import HostProfile
    from gpumon.jobs.step_model import recent_step_model

    t = message.get("t")
    at = float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t) else None
    own = HostProfile.from_state(message.get("host"), at) if at is not None else None
    window = [profile for profile in profiles if at is None or (profile.t < at if own is not None else profile.t <= at)]
    if own is not None:
        window.append(own)
    model = recent_step_model(window)
    return {**message, "step_model": model.to_dict() if model is not None else None}


def stream_json(job: JobSource, duration: float | None) -> int:
    """Print the job's data as JSON Lines until `duration` passes or the job ends."""
    from gpumon.jobs.jobstate import HookedView
    from gpumon.jobs.pyspy.estimate import EstimateView
    from gpumon.protocol import STATE

    lines: queue.Queue[Any] = queue.Queue()
    is_over: Callable[[], bool]
    client = job.primary
    if client is None:  # no hook: py-spy's estimate, one line a round
        print_json_line(
            {
                "type": "attach",
                "pid": job.pid,
                "hooked": False,
                "method": "py-spy",
                "estimate": True,
                "command": job.view().command,
            }
        )

        def put_estimate(_what: str) -> None:
            view = job.view()
            if isinstance(view, EstimateView):
                lines.put(view.to_dict())

        job.start(put_estimate)
        is_over = lambda: job.ended  # noqa: E731 - a one-line predicate
    else:
        assert client.state.info is not None
        print_json_line(dict(client.state.info.hello))
        client.add_message_listener(
            lambda message: None if message.get("type") in ("subscribed", "pong") else lines.put(message)
        )
        job.start()
        is_over = lambda: client.ended  # noqa: E731 - a one-line predicate
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
            if isinstance(message, Mapping) and message.get("type") == STATE:
                view = job.view()
                if isinstance(view, HookedView):
                    message = state_with_step_model(message, view.host_profiles)
            print_json_line(message)
        if is_over():
            view = job.view()
            print_json_line({"type": "ended", "pid": view.pid, "reason": view.end_reason})
    finally:  # stdout's reader gone (BrokenPipeError) is run_handler's: a quiet exit 141
        job.stop()
    return 0
