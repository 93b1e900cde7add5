"""Hook messages are read once into their TypedDicts (protocol.conform): the views' fields need no type checks."""

from __future__ import annotations

from gpumon import protocol
from gpumon.jobs.job_info import JobInfo
from gpumon.jobs.jobstate import JobState


def test_conform_keeps_fields_of_the_right_kind_at_every_depth() -> None:
    raw = {
        "autocast": {"enabled": True, "dtype": 16, "device_type": "cuda", "surprise": 1},
        "tf32_matmul": "yes",
        "cudnn_benchmark": False,
        "unknown": [1, 2],
    }
    assert protocol.conform(protocol.PrecisionInfo, raw) == {
        "autocast": {"enabled": True, "device_type": "cuda"},
        "cudnn_benchmark": False,
    }
    cuda = {"initialized": 1, "device": True, "devices": [{"index": 0, "uuid": "GPU-a", "capability": [9, "0"]}, "x"]}
    assert protocol.conform(protocol.CudaInfo, cuda) == {"devices": [{"index": 0, "uuid": "GPU-a", "capability": [9]}]}
    assert protocol.conform(protocol.State, "not an object") == {}
    assert protocol.conform(protocol.State, {"memory": None, "flops": None}) == {"memory": None, "flops": None}


def test_a_hostile_state_reaches_the_view_as_typed_fields() -> None:
    state = JobState(7)
    state.apply({"type": "hello", "protocol": protocol.PROTOCOL_VERSION, "pid": 7, "argv": ["train.py", 5, None]})
    state.apply(
        {
            "type": "state",
            "t": 1.0,
            "dataloaders": [{"num_workers": "4", "worker_pids": [11, "12", True, 13]}, 3],
            "precision": {"autocast": "on", "tf32_matmul": True},
            "cuda": {"initialized": True, "device": 0, "devices": [{"index": 0, "uuid": "GPU-a"}, {"index": 1}]},
            "memory": {"max_allocated": "big", "ooms": 2},
        }
    )
    view = state.view()
    assert view.info is not None and view.info.argv == ["train.py"]
    assert view.dataloaders == [{"worker_pids": [11, 13]}]
    assert view.worker_pids == [11, 13]
    assert view.precision == {"tf32_matmul": True}
    assert view.device_uuids == ["GPU-a"]
    assert view.memory == {"ooms": 2}


def test_job_info_of_a_hello_reads_dist_and_cuda_typed() -> None:
    info = JobInfo.of(
        3, "/x.sock", {"pid": 3, "dist": {"rank": "0", "world_size": 2}, "cuda": {"device": 1, "devices": "none"}}
    )
    assert info.rank is None and info.world_size == 2
    assert info.device == 1 and info.devices == []
