"""jobs.session.trial_source: the job a trial run's launcher followed, as the source a pane follows, with its pid."""

from __future__ import annotations

import os
from typing import Any

from gpumon.jobs.session import AttachedJob, trial_source


def test_a_launched_jobs_follower_is_the_source_with_the_launched_pid(tmp_path: Any) -> None:
    job = AttachedJob.launched(os.getpid(), exit_status=lambda: None, socket_dirs=[str(tmp_path)])
    assert trial_source(job) == (job, os.getpid())


class ForeignTrialJob:
    """A trial job made outside gpumon.jobs (a test's fake): nothing the pane knows how to follow."""

    ended = False
    primary = None
    clients: tuple[Any, ...] = ()

    def start(self, listener: Any = None) -> None:
        pass

    def stop(self) -> None:
        pass

    def view(self) -> Any:
        return None


def test_a_trial_job_gpumon_did_not_make_is_not_followed() -> None:
    assert trial_source(ForeignTrialJob()) is None  # type: ignore[arg-type]
