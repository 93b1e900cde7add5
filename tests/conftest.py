"""Suite-wide: pytest itself is never left a hooked job; a fixed time zone for screenshots; the `slow` mark that
keeps the fast lane (`python -m pytest -q -m "not slow"`) under two minutes on a 2-core machine."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator

import pytest

# The files that take the most time (real jobs, dashboards, trial runs in subprocesses, a real Prometheus): every
# file whose tests took 2 s or more in all by `python -m pytest -m "not slow" --durations=0` on the 2-core machine
# (2026-11-29: 73 files), and tests/test_installed_apart.py since (pip installs gpumon in a venv). Their tests are
# `slow`; the full suite (CI) runs them all.
SLOW_FILES = frozenset(
    {
        "tests/advisor/test_adaptive_windows.py",
        "tests/advisor/test_cli_advisor.py",
        "tests/advisor/test_diagnose_job_exit.py",
        "tests/advisor/test_live_stall.py",
        "tests/advisor/test_owner_knobs.py",
        "tests/advisor/test_runners.py",
        "tests/attach/test_attach_cli.py",
        "tests/attach/test_attach_client.py",
        "tests/attach/test_attach_dashboard.py",
        "tests/attach/test_attach_discovery.py",
        "tests/attach/test_attach_pyspy.py",
        "tests/attach/test_attach_retry.py",
        "tests/attach/test_ddp_torchrun.py",
        "tests/attach/test_profile_cli.py",
        "tests/attach/test_record_jobs.py",
        "tests/attach/test_unseen_pids.py",
        "tests/demo/test_trainer.py",
        "tests/exporter/test_dcgm_names.py",
        "tests/exporter/test_exporter_server.py",
        "tests/exporter/test_fleet_prometheus.py",
        "tests/exporter/test_job_metrics.py",
        "tests/exporter/test_multinode_torchrun.py",
        "tests/exporter/test_prometheus_integration.py",
        "tests/exporter/test_server_hostile_clients.py",
        "tests/fleet/test_auth.py",
        "tests/fleet/test_client.py",
        "tests/fleet/test_fleet_app.py",
        "tests/fleet/test_fleet_failures_prometheus.py",
        "tests/fleet/test_fleet_svg.py",
        "tests/fleet/test_host_states.py",
        "tests/fleet/test_hostile_answers.py",
        "tests/fleet/test_snapshot.py",
        "tests/hardening/test_cli_errors.py",
        "tests/hardening/test_diagnosis_window.py",
        "tests/hardening/test_escapes_everywhere.py",
        "tests/hardening/test_hook_attacks.py",
        "tests/hardening/test_protocol_fuzz.py",
        "tests/hardening/test_root_attach.py",
        "tests/hardening/test_undecodable_bytes.py",
        "tests/hook/test_budget.py",
        "tests/hook/test_flops.py",
        "tests/hook/test_host_costs.py",
        "tests/hook/test_jobs.py",
        "tests/hook/test_lifecycle.py",
        "tests/hook/test_live_loader_knobs.py",
        "tests/hook/test_nvtx.py",
        "tests/hook/test_server.py",
        "tests/hook/test_server_budget.py",
        "tests/hook/test_stack_sampler.py",
        "tests/jobs/test_launch.py",
        "tests/jobs/test_run_not_started.py",
        "tests/sampling/test_nvml_health.py",
        "tests/sampling/test_process_cap.py",
        "tests/sampling/test_recording_stream.py",
        "tests/sampling/test_sampler.py",
        "tests/test_cli.py",
        "tests/test_hook_path.py",
        "tests/test_installed_apart.py",
        "tests/test_monitor_overhead.py",
        "tests/test_replay_damage.py",
        "tests/tui/test_filters.py",
        "tests/tui/test_gpu_graphs.py",
        "tests/tui/test_job_app.py",
        "tests/tui/test_key_bar.py",
        "tests/tui/test_layout.py",
        "tests/tui/test_process_control.py",
        "tests/tui/test_profile_capture_tui.py",
        "tests/tui/test_terminal_output.py",
        "tests/tui/test_textual_fast_path.py",
        "tests/tui/test_textual_precise_update.py",
        "tests/tui/test_textual_quiet_input.py",
        "tests/tui/test_tui_app.py",
        "tests/tui/test_tui_incremental.py",
        "tests/tui/test_tui_snapshots.py",
    }
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = config.rootpath
    for item in items:
        if item.path.relative_to(root).as_posix() in SLOW_FILES:
            item.add_marker(pytest.mark.slow)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Importing any part of gpumon.hook (several test modules do) installs the hook in pytest; take it off again,
    so dashboards and discovery started by later tests never find the test runner as a training job."""
    lifecycle = sys.modules.get("gpumon.hook.lifecycle")
    if lifecycle is not None:
        lifecycle.uninstall()


@pytest.fixture(scope="session")
def utc_time_zone() -> Iterator[None]:
    """Screens show times in local time: pin it so screenshots match on every machine."""
    previous = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    yield
    if previous is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = previous
    time.tzset()


@pytest.fixture(scope="session", autouse=True)
def private_log_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """gpumon commands the tests run log under a temporary XDG_STATE_HOME, never the user's ~/.local/state."""
    previous = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = str(tmp_path_factory.mktemp("state"))
    yield
    if previous is None:
        del os.environ["XDG_STATE_HOME"]
    else:
        os.environ["XDG_STATE_HOME"] = previous
