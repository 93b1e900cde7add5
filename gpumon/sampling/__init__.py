"""Sampling: NVML, psutil and /proc -> immutable Snapshots, with their history, recording and replay.

interval.py       the sampling interval's range (MIN_INTERVAL_S, MAX_INTERVAL_S, MAX_RECORD_INTERVAL_S)
nvml_api.py       NvmlModule: the pynvml calls, typed; which errors mean absent, GPU lost or NVML down
nvml.py           GpuCollector: each GPU's fast, slow and health fields
xid_watcher.py    XidWatcher: the XID error events on their own thread
host.py           HostCollector: CPU, memory and disks from /proc and /sys
processes.py      ProcessCollector: the GPU processes and their children
process_tree.py   ProcessTreeCollector: every process on the host as trees
snapshot.py       Snapshot and its parts, frozen, with to_dict / from_dict
sampler.py        Sampler: the collectors on a fast and a slow thread, merged into snapshots
history.py        History: the recent snapshots' figures for the graphs
source.py         SnapshotSource: what the dashboard reads snapshots through (a sampler or a replay)
recording.py      RecordingWriter / read_recording: JSON Lines, plain or gzip
replay.py         Replayer: a recording played back as a SnapshotSource
summary.py        the text of `gpumon snapshot`
gpu_choice.py     --only / --only-visible: which GPUs are shown
"""
