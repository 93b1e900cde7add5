"""NVLink rates from GPM (what the fast tier reads) beside those from NVML's NVLink counters, under peer copies.

Usage (on a machine with two NVLink-connected GPUs, from the project root):

    python benchmarks/nvlink_gpm_check.py --seconds 6

A child process copies a 256 MiB tensor back and forth between cuda:0 and cuda:1 (peer-to-peer, over NVLink) and
counts its round trips, which gives the bytes that truly crossed each way (the ground truth for both readings). Each
second this prints, per GPU, the rx/tx rates `GpuCollector.collect_fast` gives (GPM's NVLINK_TOTAL_*_PER_SEC) and
those from two readings of the NVLINK_THROUGHPUT_DATA counters one second apart (what the health read used to give
every 10 s), then the CPU time of one counter read and of one GPM metrics computation with and without the two
NVLink metrics.
"""

from __future__ import annotations

import argparse
import sys
import time

import pynvml
from copy_load import COPY_BYTES, CopyLoad

from gpumon.sampling.nvml import GpuCollector

COPY_SETUP = f"""
a = torch.empty({COPY_BYTES} // 4, device="cuda:0")
b = torch.empty({COPY_BYTES} // 4, device="cuda:1")
"""
COPY_TRIP = "b.copy_(a); a.copy_(b); torch.cuda.synchronize(0); torch.cuda.synchronize(1)"
ALL_LINKS = 0xFFFFFFFF


def counters(handle: object) -> tuple[float, float]:
    """KiB received and sent over all links so far."""
    values = pynvml.nvmlDeviceGetFieldValues(
        handle,
        [
            (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, ALL_LINKS),
            (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, ALL_LINKS),
        ],
    )
    members = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")  # by NVML_VALUE_TYPE_*
    received, sent = (float(getattr(value.value, members[value.valueType])) for value in values)
    return received, sent


def cpu_per_call(call: object, repeats: int = 200) -> float:
    """Milliseconds of this thread's CPU per call."""
    started = time.thread_time()
    for _ in range(repeats):
        call()  # type: ignore[operator]
    return (time.thread_time() - started) * 1000.0 / repeats


def gpm_cost(handle: object, metric_ids: list[int]) -> float:
    """CPU per nvmlGpmMetricsGet over two samples, with these metrics asked."""
    first, second = pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()
    try:
        pynvml.nvmlGpmSampleGet(handle, first)
        time.sleep(0.2)
        pynvml.nvmlGpmSampleGet(handle, second)
        request = pynvml.c_nvmlGpmMetricsGet_t()
        request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(metric_ids)
        for slot, metric_id in enumerate(metric_ids):
            request.metrics[slot].metricId = metric_id
        request.sample1, request.sample2 = first, second
        return cpu_per_call(lambda: pynvml.nvmlGpmMetricsGet(request))
    finally:
        pynvml.nvmlGpmSampleFree(first)
        pynvml.nvmlGpmSampleFree(second)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=6)
    args = parser.parse_args()
    collector = GpuCollector()
    try:
        pynvml.nvmlInit()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(index) for index in range(min(2, pynvml.nvmlDeviceGetCount()))]
        with CopyLoad(COPY_SETUP, COPY_TRIP) as load:
            for _ in range(3):  # the first health read finds the NVLink counters, then GPM's pair is trusted
                collector.collect_fast()
                collector.collect_slow()
                time.sleep(0.5)
            print("second  GPU  GPM rx GB/s  GPM tx GB/s  counters rx GB/s  counters tx GB/s")
            previous = [counters(handle) for handle in handles]
            collector.collect_fast()
            previous_time = window_start = time.monotonic()
            gpm_sums, counter_sums = [0.0, 0.0], [0.0, 0.0]
            for second in range(1, args.seconds + 1):
                time.sleep(1.0)
                gpus = collector.collect_fast()
                now = time.monotonic()
                current = [counters(handle) for handle in handles]
                elapsed = now - previous_time
                for gpu, before, after in zip(gpus, previous, current, strict=False):
                    rx = (after[0] - before[0]) * 1024 / elapsed / 1e9
                    tx = (after[1] - before[1]) * 1024 / elapsed / 1e9
                    gpm_rx = f"{gpu.nvlink_rx / 1e9:11.1f}" if gpu.nvlink_rx is not None else "        N/A"
                    gpm_tx = f"{gpu.nvlink_tx / 1e9:11.1f}" if gpu.nvlink_tx is not None else "        N/A"
                    print(f"{second:6d}  {gpu.index:3d}  {gpm_rx}  {gpm_tx}  {rx:16.1f}  {tx:16.1f}")
                    if gpu.index == 0:
                        gpm_sums[0] += (gpu.nvlink_rx or 0.0) / 1e9
                        gpm_sums[1] += (gpu.nvlink_tx or 0.0) / 1e9
                        counter_sums[0] += rx
                        counter_sums[1] += tx
                previous, previous_time = current, now
            copied = load.rate(window_start, previous_time)
            if copied is not None:
                print(
                    f"GPU 0 over the {args.seconds} s: the load's own count {copied:.1f} GB/s each way; "
                    f"GPM rx {gpm_sums[0] / args.seconds:.1f}, tx {gpm_sums[1] / args.seconds:.1f}; "
                    f"counters rx {counter_sums[0] / args.seconds:.1f}, tx {counter_sums[1] / args.seconds:.1f} GB/s"
                )
        handle = handles[0]
        base = [
            pynvml.NVML_GPM_METRIC_SM_UTIL,
            pynvml.NVML_GPM_METRIC_SM_OCCUPANCY,
            pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
            pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL,
            pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC,
            pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC,
        ]
        nvlink = [pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC, pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC]
        print(f"CPU per NVLink counter read (all links, rx+tx): {cpu_per_call(lambda: counters(handle)):.3f} ms")
        print(f"CPU per nvmlGpmMetricsGet, 6 metrics: {gpm_cost(handle, base):.3f} ms")
        print(f"CPU per nvmlGpmMetricsGet, 6 + 2 NVLink metrics: {gpm_cost(handle, base + nvlink):.3f} ms")
    finally:
        collector.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
