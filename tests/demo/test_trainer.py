"""The demo trainer on the CPU: summary, knobs taking effect, where augmentation runs, clean shutdown."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
psutil = pytest.importorskip("psutil")

from gpumon_demo.augment import augment_batch  # noqa: E402
from gpumon_demo.cli import main  # noqa: E402
from gpumon_demo.data import NUM_CLASSES, SyntheticImages  # noqa: E402
from gpumon_demo.knobs import KNOBS_ENV, KNOBS_LIVE_ACK_ENV, KNOBS_LIVE_ENV  # noqa: E402
from gpumon_demo.trainer import DemoError, TrainConfig, _convert_memory_format, run  # noqa: E402
from tests.waiting import wait_until  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]
SMALL_RUN = {"device": "cpu", "profile": "small", "dataset_size": 512, "progress_interval": 0.0, "duration": None}


def run_small(steps: int, knobs: dict[str, Any], warmup_steps: int = 1) -> dict[str, Any]:
    return run(TrainConfig(knobs=knobs, steps=steps, warmup_steps=warmup_steps, **SMALL_RUN), log=lambda _line: None)


def start_demo(*args: str, knobs: str = "{}", **popen: Any) -> subprocess.Popen[str]:
    popen.setdefault("env", os.environ | {KNOBS_ENV: knobs})
    return subprocess.Popen(
        [sys.executable, "-m", "gpumon_demo", "--device", "cpu", "--progress-interval", "0", "--json", *args],
        cwd=REPO_ROOT / "demo", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen,
    )  # fmt: skip


def test_module_runs_steps_on_the_cpu_and_prints_a_json_summary() -> None:
    process = start_demo("--steps", "6", "--warmup-steps", "2", "--dataset-size", "256")
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr
    summary = json.loads(stdout)
    assert summary["steps"] == 6 and summary["samples"] == 6 * 32
    assert summary["stopped_by"] == "steps"
    assert summary["steady"]["steps"] == 4 and summary["steady"]["samples"] == 4 * 32
    assert summary["samples_per_s"] > 0 and summary["steady"]["main_cpu_s_per_sample"] > 0
    assert summary["device"] == "cpu" and summary["profile"]["name"] == "small"
    assert summary["knobs"]["num_workers"] == 0 and summary["knobs"]["batch_size"] == 32
    assert 0 < summary["final_loss"] < 20
    assert "running on the CPU with the small profile" in stderr


def test_default_run_loads_and_augments_in_the_main_process() -> None:
    summary = run_small(steps=3, knobs={})
    assert summary["dataloader"] == {
        "batch_size": 32, "num_workers": 0, "prefetch_factor": None, "pin_memory": False,
        "persistent_workers": False, "batches_pinned": False,
    }  # fmt: skip
    assert summary["fetch_pids"] == [os.getpid()] and summary["augment_pids"] == [os.getpid()]


@pytest.mark.filterwarnings("ignore:.pin_memory. argument is set as true:UserWarning")
def test_dataloader_knobs_take_effect() -> None:
    knobs = {
        "num_workers": 2,
        "pin_memory": True,
        "batch_size": 8,
        "prefetch_factor": 3,
        "persistent_workers": True,
        "augment_in_workers": False,
    }
    summary = run_small(steps=5, knobs=knobs)
    loader = summary["dataloader"]
    assert (loader["num_workers"], loader["batch_size"], loader["prefetch_factor"]) == (2, 8, 3)
    assert loader["pin_memory"] is True and loader["persistent_workers"] is True
    assert summary["samples"] == 5 * 8
    workers = summary["fetch_pids"]
    assert len(workers) == 2 and os.getpid() not in workers
    assert summary["augment_pids"] == [os.getpid()], "augment_in_workers false keeps it in the training loop"
    assert not [pid for pid in workers if psutil.pid_exists(pid)], "workers are shut down when run() returns"


def test_augmentation_runs_in_the_workers_by_default() -> None:
    summary = run_small(steps=4, knobs={"num_workers": 2})
    assert len(summary["augment_pids"]) == 2
    assert summary["augment_pids"] == summary["fetch_pids"]
    assert os.getpid() not in summary["augment_pids"]


def test_augmentation_is_the_same_work_wherever_it_runs() -> None:
    raw = SyntheticImages(64, image_size=64, seed=3)
    in_getitem = SyntheticImages(64, image_size=64, seed=3, augment_out_size=56)
    indices = torch.tensor([0, 7, 63])
    batch = augment_batch(torch.stack([raw[int(i)][0] for i in indices]), indices, 56, seed=3)
    assert batch.shape == (3, 3, 56, 56) and batch.dtype == torch.float32
    torch.testing.assert_close(batch, torch.stack([in_getitem[int(i)][0] for i in indices]))


def test_dataset_is_deterministic_by_index() -> None:
    dataset = SyntheticImages(100, image_size=32)
    image, label = dataset.image(42)
    again, label_again = SyntheticImages(100, image_size=32).image(42)
    assert torch.equal(image, again) and label == label_again
    assert image.dtype == torch.uint8 and image.shape == (3, 32, 32) and 0 <= label < NUM_CLASSES
    assert not torch.equal(image, dataset.image(43)[0])


def test_worker_only_knobs_without_workers_are_noted_not_fatal() -> None:
    summary = run_small(steps=1, knobs={"prefetch_factor": 4, "persistent_workers": True})
    assert summary["steps"] == 1
    assert summary["notes"] == [
        "prefetch_factor ignored: it needs num_workers > 0",
        "persistent_workers ignored: it needs num_workers > 0",
    ]


def test_log_every_and_a_short_run_have_no_steady_state() -> None:
    summary = run_small(steps=2, knobs={"log_every": 5}, warmup_steps=5)
    assert summary["steps"] == 2 and summary["samples_per_s"] is None and summary["final_loss"] is not None


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error given where CUDA is absent")
def test_asking_for_cuda_without_cuda_is_a_clear_error() -> None:
    with pytest.raises(DemoError, match=r"torch\.cuda\.is_available"):
        run(TrainConfig(device="cuda", steps=1))


def test_flags_override_gpumon_knobs(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(KNOBS_ENV, '{"batch_size": 16, "pin_memory": true, "log_every": 3}')
    argv = ["--device", "cpu", "--steps", "1", "--dataset-size", "64", "--progress-interval", "0", "--json"]
    assert main([*argv, "--batch-size", "4", "--no-pin-memory"]) == 0
    knobs = json.loads(capsys.readouterr().out)["knobs"]
    assert (knobs["batch_size"], knobs["pin_memory"], knobs["log_every"]) == (4, False, 3)


def wait_for_workers(process: subprocess.Popen[str], count: int, timeout: float = 60.0) -> list[psutil.Process]:
    parent = psutil.Process(process.pid)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        children = parent.children(recursive=True)
        if len(children) >= count:
            return children
        assert process.poll() is None, process.communicate()
        time.sleep(0.05)
    raise AssertionError(f"no {count} DataLoader workers after {timeout} s")


def wait_for_steps(process: subprocess.Popen[str], count: int) -> str:
    """Reads progress lines ('gpumon-demo: step N ...') from stderr until N >= count; returns what it read."""
    assert process.stderr is not None
    lines = []
    for line in process.stderr:
        lines.append(line)
        words = line.split()
        if len(words) > 2 and words[1] == "step" and int(words[2]) >= count:
            return "".join(lines)
    raise AssertionError(f"the demo ended before reaching step {count}: " + "".join(lines))


@pytest.mark.parametrize(
    ("signum", "whole_group", "knobs", "exit_code"),
    [
        (signal.SIGTERM, False, '{"num_workers": 2}', 143),
        (signal.SIGINT, True, '{"num_workers": 2, "persistent_workers": true, "augment_in_workers": true}', 130),
    ],
    ids=["SIGTERM-to-the-trainer", "Ctrl+C-to-the-process-group"],
)
def test_a_signal_stops_the_run_and_leaves_no_worker_behind(
    signum: signal.Signals, whole_group: bool, knobs: str, exit_code: int
) -> None:
    process = start_demo(
        "--steps", "1000000", "--warmup-steps", "1", "--progress-interval", "0.2", knobs=knobs, start_new_session=True
    )  # fmt: skip
    try:
        workers = wait_for_workers(process, 2)
        early_stderr = wait_for_steps(process, 3)
        if whole_group:
            os.killpg(process.pid, signum)
        else:
            process.send_signal(signum)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    stderr = early_stderr + stderr
    assert process.returncode == exit_code, stderr
    summary = json.loads(stdout)
    assert summary["stopped_by"] == signal.Signals(signum).name
    assert summary["steps"] >= 3 and summary["samples_per_s"] > 0, "the steady window ends at the signal"
    assert "Traceback" not in stderr
    alive = [worker.pid for worker in workers if worker.is_running() and worker.status() != psutil.STATUS_ZOMBIE]
    assert alive == []


def read_reply(path: Path) -> dict[str, Any]:
    try:
        reply: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return reply


def test_a_trial_run_changes_the_trainers_own_knobs_while_it_runs(tmp_path: Path) -> None:
    """GPUMON_KNOBS_LIVE: a new batch size (a new DataLoader with the same workers, the old ones shut down),
    autocast, channels_last and log_every applied between steps and answered; a request it cannot honour is refused
    with its reason, and nothing of it applied."""
    request, reply = tmp_path / "live.json", tmp_path / "live-ack.json"
    channel = {KNOBS_LIVE_ENV: str(request), KNOBS_LIVE_ACK_ENV: str(reply)}
    process = start_demo(
        "--steps", "1000000", "--warmup-steps", "1", "--dataset-size", "5000", "--batch-size", "8",
        start_new_session=True, env=os.environ | {KNOBS_ENV: '{"num_workers": 2}'} | channel,
    )  # fmt: skip
    try:
        wait_until(lambda: read_reply(reply).get("seq") == 0, 60, "the trainer's announcement")
        announced = read_reply(reply)
        assert set(announced["live"]) == {"batch_size", "amp_bf16", "channels_last", "log_every"}
        assert announced["knobs"] == {"batch_size": 8, "amp_bf16": False, "channels_last": False, "log_every": 1}
        old_workers = wait_for_workers(process, 2)
        wanted = {"batch_size": 16, "amp_bf16": True, "channels_last": True, "log_every": 5}
        request.write_text(json.dumps({"seq": 1, "knobs": wanted}))
        wait_until(lambda: read_reply(reply).get("seq") == 1, 60, "the trainer's answer")
        assert read_reply(reply)["knobs"] == wanted and "error" not in read_reply(reply)
        wait_until(lambda: not any(w.is_running() and w.status() != psutil.STATUS_ZOMBIE for w in old_workers), 30,
                   "the old DataLoader's workers shut down")  # fmt: skip
        wait_for_workers(process, 2)
        request.write_text(json.dumps({"seq": 2, "knobs": {"batch_size": 10**6, "log_every": 1}}))
        wait_until(lambda: read_reply(reply).get("seq") == 2, 60, "the trainer's refusal")
        assert "dataset size 5000" in read_reply(reply)["error"]
        assert read_reply(reply)["knobs"] == wanted, "nothing of a refused request is applied"
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 143, stderr
    summary = json.loads(stdout)
    assert summary["dataloader"]["batch_size"] == 16 and summary["dataloader"]["num_workers"] == 2
    assert summary["knobs"] | wanted == summary["knobs"], "the summary reports the knobs in effect at the end"
    assert "Traceback" not in stderr


def test_channels_last_converts_weights_gradients_and_optimizer_state_both_ways() -> None:
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(), torch.nn.LazyLinear(2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(2, 3, 8, 8)).sum().backward()
    optimizer.step()
    conv = model[0].weight
    _convert_memory_format(model, optimizer, channels_last=True)
    assert conv is model[0].weight, "the optimizer still holds the model's parameters"
    assert conv.is_contiguous(memory_format=torch.channels_last) and not conv.is_contiguous()
    assert conv.grad is not None and conv.grad.is_contiguous(memory_format=torch.channels_last)
    assert optimizer.state[conv]["momentum_buffer"].is_contiguous(memory_format=torch.channels_last)
    _convert_memory_format(model, optimizer, channels_last=False)
    assert conv.is_contiguous() and optimizer.state[conv]["momentum_buffer"].is_contiguous()
