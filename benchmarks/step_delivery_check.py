"""Whether a hooked job's step records reach a subscriber: the steps the hook closed against the records that arrived.

Usage (repo root; on the GPU machine for a CUDA job):

    python benchmarks/step_delivery_check.py --seed 1053 --seconds 8          # a generated corpus job, hooked
    python benchmarks/step_delivery_check.py --seed 1053 --seconds 8 --device cpu --json out.json

On the H200 (2026-11-29, tree fb91e0d), six of 50 held-out corpus jobs that step 2-8 times a second gave
`gpumon diagnose` no step record inside its 4-s window (signals `steps` None, one budgeted step in the whole view),
with the slow-step budget and with GPUMON_HOOK_BUDGET_EVERY=16 alike; on the VM's CPU, steps of 0.2-0.27 s arrive.
This starts the seed's job (benchmarks/scenarios/generated/job.py under `gpumon run --no-tui`, held in its hooked
diagnosis phase), subscribes to its hook as `gpumon diagnose` does (steps every 0.2 s, state every 1 s), and prints
a line a second: the hook's own count of closed steps (`state.last_seq`), the records received so far and the newest
one's seq, how far it trails, the hook's error count and last error. The last line says whether the records arrived
(delivered: every step closed 2 s before the end; behind: some did not) and where they stop: the hook closing no
steps, closing them but sending none, or sending them late. Exit 0 when delivered, 1 when not, 2 when it could not
watch (the job did not start, no hook).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.scenario_corpus import REPO, job_command, phase_pid
from benchmarks.scenario_truth import kill_group, repo_env
from benchmarks.scenarios.generated.plan import make_plan
from gpumon import protocol
from gpumon.jobs.connection import HookConnection

START_TIMEOUT_S = 120.0
"""Seconds the job may take to reach its hooked phase (CUDA start-up, warm-up)."""
SETTLE_S = 2.0
"""Steps closed this long before the end must have arrived for `delivered`."""


def start_job(seed: int, device: str, seconds: float, control: str) -> tuple[subprocess.Popen[str], int]:
    """The seed's job under `gpumon run --no-tui`, and its pid once it prints its hooked phase."""
    plan = make_plan(seed, tiny=device == "cpu")
    if plan.ranks > 1:
        raise RuntimeError(f"seed {seed} needs {plan.ranks} GPUs (torchrun): pick a one-GPU seed")
    settings = argparse.Namespace(
        device=device, warmup=2.0, duration=seconds + 30.0, no_pyspy=True, window=1.0, rounds=2
    )
    process = subprocess.Popen(
        job_command(seed, plan, settings, control),
        cwd=REPO,
        env=repo_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    assert process.stdout is not None
    deadline = time.monotonic() + START_TIMEOUT_S
    for line in process.stdout:
        if line.startswith("PHASE diagnose-hook"):
            pid = phase_pid(line)
            if pid is not None:
                return process, pid
        if time.monotonic() > deadline:
            break
    kill_group(process)
    raise RuntimeError("the job did not reach its hooked phase")


def watch(pid: int, seconds: float, out: Any) -> dict[str, Any]:
    """Subscribe as `gpumon diagnose` does and count, second by second, what the hook closed and what arrived."""
    connection = HookConnection(pid, timeout=10.0)
    connection.send({"type": protocol.SUBSCRIBE, "id": "check", "steps_interval": 0.2, "state_interval": 1.0})
    began = time.monotonic()
    received: dict[int, float] = {}  # seq -> when it arrived (seconds since subscribing)
    seconds_rows: list[dict[str, Any]] = []
    hook_last: list[tuple[float, int]] = []
    print(" t(s)  hook_closed  received  newest  trailing  errors  last_error", file=out)
    while (now := time.monotonic() - began) < seconds:
        try:
            message = connection.recv(timeout=max(0.05, seconds - now))
        except EOFError:
            break
        if message is None:
            continue
        kind = message.get("type")
        if kind == protocol.STEPS:
            for record in message.get("records") or []:
                seq = record.get("seq") if isinstance(record, dict) else None
                if isinstance(seq, int):
                    received.setdefault(seq, now)
        elif kind == protocol.STATE:
            last_seq = int(message.get("last_seq") or 0)
            hook_last.append((now, last_seq))
            hook = message.get("hook") or {}
            newest = max(received, default=0)
            row = {
                "t": round(now, 2),
                "hook_closed": last_seq,
                "received": len(received),
                "newest": newest,
                "trailing": last_seq - newest,
                "errors": hook.get("errors"),
                "last_error": hook.get("last_error"),
            }
            seconds_rows.append(row)
            print(
                f"{row['t']:5.1f}  {last_seq:11d}  {len(received):8d}  {newest:6d}  {row['trailing']:8d}  "
                f"{row['errors']!s:>6}  {str(row['last_error'] or '')[:60]}",
                file=out,
            )
    connection.sock.close()
    return verdict(hook_last, received, seconds_rows)


def verdict(
    hook_last: list[tuple[float, int]], received: dict[int, float], rows: list[dict[str, Any]]
) -> dict[str, Any]:
    """delivered when every step the hook had closed SETTLE_S before its last state arrived; else where they stop."""
    if not hook_last:
        return {"delivered": False, "where": "no state from the hook: the server sent nothing", "rows": rows}
    end_t, end_seq = hook_last[-1]
    due = max((seq for t, seq in hook_last if t <= end_t - SETTLE_S), default=0)
    first_seq = hook_last[0][1]
    wanted = set(range(first_seq + 1, due + 1))
    missing = sorted(wanted - set(received))
    closed = end_seq - first_seq
    if closed <= 0:
        where = "the hook closed no step while watched (the job does not step, or its steps are not seen)"
    elif not received:
        where = f"the hook closed {closed} steps and sent none of them"
    elif missing:
        where = f"the hook closed {closed} steps; {len(missing)} of the {len(wanted)} due did not arrive"
    else:
        where = f"every one of the {len(wanted)} steps closed {SETTLE_S:g} s before the end arrived"
    return {
        "delivered": closed > 0 and not missing and bool(wanted),
        "where": where,
        "closed": closed,
        "received": len(received),
        "missing": missing[:50],
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, required=True, help="a generated corpus seed (benchmarks/scenarios)")
    parser.add_argument("--seconds", type=float, default=8.0, help="seconds to watch (default 8)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--json", type=Path, default=None, help="the result as JSON too")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gpumon-delivery-") as control:
        try:
            process, pid = start_job(args.seed, args.device, args.seconds, control)
        except (RuntimeError, OSError) as error:
            print(f"step_delivery_check: {error}", file=sys.stderr)
            return 2
        try:
            result = watch(pid, args.seconds, sys.stdout)
        except (OSError, protocol.ProtocolError) as error:
            print(f"step_delivery_check: cannot watch pid {pid}: {error}", file=sys.stderr)
            return 2
        finally:
            kill_group(process)
    result = {"seed": args.seed, "device": args.device, **result}
    print(("delivered: " if result["delivered"] else "behind: ") + result["where"])
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0 if result["delivered"] else 1


if __name__ == "__main__":
    sys.exit(main())
