"""Suite-wide: pytest itself is never left a hooked job; a fixed time zone for screenshots; the `slow` mark that
keeps the fast lane (`python -m pytest -q -m "not slow"`) under two minutes on a 2-core machine."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator

import pytest

# The files that take the most time (real jobs, dashboards, trial runs in subprocesses, a real Prometheus), by
# `pytest --durations` on the 2-core machine, 2026-11-27: 32 files. Their tests are `slow`; the full suite (CI) runs
# them all.
SLOW_FILES = frozenset(
    {
        "tests/advisor/test_adaptive_windows.py",
        "tests/advisor/test_cli_advisor.py",
        "tests/advisor/test_runners.py",
        "tests/attach/test_attach_cli.py",
        "tests/attach/test_attach_client.py",
        "tests/attach/test_attach_dashboard.py",
        "tests/attach/test_attach_discovery.py",
        "tests/attach/test_ddp_torchrun.py",
        "tests/attach/test_profile_cli.py",
        "tests/demo/test_trainer.py",
        "tests/exporter/test_dcgm_names.py",
        "tests/exporter/test_exporter_server.py",
        "tests/exporter/test_fleet_prometheus.py",
        "tests/exporter/test_job_metrics.py",
        "tests/exporter/test_multinode_torchrun.py",
        "tests/exporter/test_prometheus_integration.py",
        "tests/fleet/test_auth.py",
        "tests/fleet/test_fleet_failures_prometheus.py",
        "tests/hardening/test_cli_errors.py",
        "tests/hardening/test_diagnosis_window.py",
        "tests/hardening/test_escapes_everywhere.py",
        "tests/hardening/test_hook_attacks.py",
        "tests/hook/test_budget.py",
        "tests/hook/test_jobs.py",
        "tests/hook/test_lifecycle.py",
        "tests/hook/test_nvtx.py",
        "tests/jobs/test_launch.py",
        "tests/sampling/test_sampler.py",
        "tests/test_cli.py",
        "tests/tui/test_gpu_graphs.py",
        "tests/tui/test_process_control.py",
        "tests/tui/test_tui_app.py",
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
