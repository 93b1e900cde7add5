"""The one stack classifier (gpumon.protocol.activity) on stacks as the hook's sampler and py-spy see them."""

from __future__ import annotations

from gpumon.protocol import activity
from gpumon.protocol.activity import Frame, classify

JOB = "/home/me/train.py"
LINES = {
    10: "        x = batch.to(device, non_blocking=True)\n",
    11: "        log.append(f'{loss.item():.4f}')\n",
    12: "        images = preprocess(images)\n",
    13: "        if loss < best:\n",
    14: "    x = images.float().div_(255.0).sub_(0.45).div_(0.225)\n",
    15: "        print(float(loss))\n",
}


def source(file: str, line: int) -> str:
    return LINES.get(line, "") if file == JOB else ""


def test_gpumon_s_own_wrappers_are_transparent() -> None:
    # The step budget wraps Tensor.to and .item(): the job's line below the wrapper says what runs.
    wrapper = Frame("/site-packages/gpumon/hook/budget.py", "wrapper", 250)
    assert classify([wrapper, Frame(JOB, "main", 10)], source) == (activity.H2D, activity.SEEN_SOURCE)
    assert classify([wrapper, Frame(JOB, "main", 11)], source) == (activity.SYNC, activity.SEEN_SOURCE)
    assert classify([wrapper], source) == (activity.OTHER, None)


def test_functional_called_from_the_job_is_its_own_cpu_work_but_inside_a_module_is_forward() -> None:
    interpolate = Frame("/site-packages/torch/nn/functional.py", "interpolate", 4877)
    assert classify([interpolate, Frame(JOB, "preprocess", 12)], source)[0] == activity.CPU
    call = Frame("/site-packages/torch/nn/modules/module.py", "_call_impl", 1750)
    assert classify([interpolate, Frame(JOB, "forward", 5), call, Frame(JOB, "main", 20)], source)[0] == (
        activity.FORWARD
    )


def test_a_sync_in_cpp_reads_as_the_job_s_line() -> None:
    # `if loss < best:` waits inside C++ (Tensor.__bool__): only py-spy --native or the budget's wrapper tell.
    assert classify([Frame(JOB, "main", 13)], source) == (activity.CPU, None)
    assert classify([Frame(JOB, "main", 13)], source, native_sync=True) == (activity.SYNC, None)


def test_data_and_communication_win_over_the_job_s_frames() -> None:
    fetch = Frame("/site-packages/torch/utils/data/_utils/fetch.py", "fetch", 52)
    getitem = Frame(JOB, "__getitem__", 30)
    assert classify([getitem, fetch, Frame(JOB, "main", 12)], source)[0] == activity.DATA_LOAD
    queue = Frame("/usr/lib/python3.11/threading.py", "wait", 359)
    loader = Frame("/site-packages/torch/utils/data/dataloader.py", "_next_data", 1400)
    assert classify([queue, loader, Frame(JOB, "main", 12)], source)[0] == activity.DATA_WAIT
    reduce = Frame("/site-packages/torch/distributed/distributed_c10d.py", "all_reduce", 2500)
    assert classify([reduce, Frame(JOB, "main", 12)], source)[0] == activity.COMM
    assert classify([], source) == (activity.OTHER, None)


def test_tensor_conversions_are_not_the_builtins_that_sync() -> None:
    # .float() converts on the tensor's device; float(loss) and print() of a CUDA tensor wait for it.
    assert classify([Frame(JOB, "preprocess", 14)], source)[0] == activity.CPU
    assert classify([Frame(JOB, "main", 15)], source) == (activity.SYNC, activity.SEEN_SOURCE)
