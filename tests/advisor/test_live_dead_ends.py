"""A knob that cannot apply live is never a dead end: the row says why, the ladder goes on with the other knobs, and
on a job `gpumon run` started the report offers a trial run of the same command for it, naming the GPU it would
share."""

from __future__ import annotations

from advisor_support import FakeRunner, measurement

from gpumon.advisor.catalogue import Experiment
from gpumon.advisor.guided import GuidedRun, JobCommand
from gpumon.advisor.report import report_text
from gpumon.advisor.results import NOT_APPLIED
from gpumon.advisor.signals import GpuSignals, Signals

WORKERS = Experiment({"num_workers": 2}, previous={"num_workers": 0})
PREFETCH = Experiment({"prefetch_factor": 4}, previous={"prefetch_factor": 2})
BENCHMARK = Experiment({"cudnn_benchmark": True}, previous={"cudnn_benchmark": False})
NOT_IN_EFFECT = (
    "not in effect within 90 s (DataLoader settings apply at the next epoch): rolled back; a trial run can measure it"
)
HELLO = {
    "argv": ["train.py", "--epochs", "3"],
    "executable": "/usr/bin/python3",
    "cwd": "/home/me/my job",
    "injected": True,
}
ON_H200 = Signals.of(source="hook", device="cuda", gpus=(GpuSignals(index=0, name="NVIDIA H200"),))


class LiveFake(FakeRunner):
    """A live runner whose DataLoader knobs stop being tried once one did not take effect (as LiveRunner does)."""

    kind = "live"

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.loader_waits: str | None = None

    def supports(self, experiment: Experiment) -> str | None:
        if self.loader_waits and set(experiment.knobs) & {"num_workers", "prefetch_factor"}:
            return self.loader_waits
        return super().supports(experiment)

    def run(self, experiment, kept, against=None):  # type: ignore[no-untyped-def]
        result = super().run(experiment, kept, against)
        if result.status == NOT_APPLIED:
            self.loader_waits = "not tried live: DataLoader settings apply at the job's next epoch"
        return result


def runner() -> LiveFake:
    return LiveFake(
        measurement(100, 101, 99),
        {
            frozenset({("num_workers", 2)}): (NOT_APPLIED, NOT_IN_EFFECT),
            frozenset({("cudnn_benchmark", True)}): measurement(120, 121, 119),
        },
        signals=ON_H200,
        unsupported=frozenset({"amp_bf16"}),
    )


def test_a_knob_not_in_effect_does_not_end_the_ladder() -> None:
    report = GuidedRun(runner(), only=[WORKERS, PREFETCH, BENCHMARK], job_command=JobCommand.from_hello(HELLO)).run()
    assert [v.label for v in report.variants] == ["num_workers 0 -> 2", "cudnn_benchmark off -> on"]
    assert report.variants[0].outcome() == ("not applied", NOT_IN_EFFECT)
    assert report.kept == {"cudnn_benchmark": True}, "the ladder went on past the knob that could not apply"
    waits = "not tried live: DataLoader settings apply at the job's next epoch"
    assert report.skipped == (f"prefetch_factor 2 -> 4: {waits}",)


def test_each_knob_that_cannot_apply_live_is_offered_as_a_trial_run_on_the_gpu_it_would_share() -> None:
    report = GuidedRun(runner(), only=[WORKERS, PREFETCH], job_command=JobCommand.from_hello(HELLO)).run()
    workers, prefetch = report.offers
    assert workers.command == (
        "gpumon", "experiment", "--try", "num_workers=2", "--", "/usr/bin/python3", "train.py", "--epochs", "3",
    )  # fmt: skip
    assert workers.why.startswith("not in effect within 90 s") and not workers.why.endswith("can measure it")
    assert workers.shares == "GPU 0 (NVIDIA H200)"
    assert prefetch.knobs == {"prefetch_factor": 4}
    text = report_text(report)
    assert (
        "trial run: num_workers 0 -> 2: not in effect within 90 s (DataLoader settings apply at the next epoch): "
        "rolled back; a trial run can measure it; it would share GPU 0 (NVIDIA H200) with the running job: "
        "cd '/home/me/my job' && gpumon experiment --try num_workers=2 -- /usr/bin/python3 train.py --epochs 3"
    ) in text
    assert report.verdict == "no change kept: num_workers 0 -> 2 could not be measured (not in effect)"
    assert report.stopped == "no knob left to try (1 without a verdict)"
    assert "nothing else won" not in text


def test_a_job_not_started_by_gpumon_run_gets_the_offer_without_a_command() -> None:
    hello = {**HELLO, "injected": False}
    report = GuidedRun(runner(), only=[WORKERS], job_command=JobCommand.from_hello(hello)).run()
    (offer,) = report.offers
    assert offer.command == () and "a trial run of the job's command can measure it" in offer.text()


def test_trial_only_knobs_on_a_live_run_are_offered_too() -> None:
    amp = Experiment({"amp_bf16": True}, previous={"amp_bf16": False})
    report = GuidedRun(runner(), only=[amp, BENCHMARK], job_command=JobCommand.from_hello(HELLO)).run()
    assert [offer.label for offer in report.offers] == ["amp_bf16 off -> on"]
    assert "--try amp_bf16=true" in report.offers[0].text()


def test_trial_runs_offer_nothing() -> None:
    outcomes = {frozenset({("num_workers", 2)}): (NOT_APPLIED, "needs a code change")}
    trial = FakeRunner(measurement(100, 101, 99), outcomes)
    assert GuidedRun(trial, only=[WORKERS]).run().offers == ()


def test_the_command_comes_from_the_hello() -> None:
    module = {**HELLO, "argv": ["/src/pkg/__main__.py", "--fast"]}
    assert JobCommand.from_hello(module) == JobCommand(
        ("/usr/bin/python3", "-m", "pkg", "--fast"), "/home/me/my job", True
    )
    assert JobCommand.from_hello({**HELLO, "argv": ["-c"]}) is None
    assert JobCommand.from_hello(None) is None
