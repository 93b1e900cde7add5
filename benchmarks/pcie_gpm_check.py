"""PCIe rates from GPM (what the fast tier reads) beside the bytes a host-to-GPU copy load counts moving.

Usage (on a machine with a GPU, from the project root):

    python benchmarks/pcie_gpm_check.py --seconds 6

A child process copies a pinned 256 MiB host tensor to cuda:0 and back, over and over, and counts its round trips:
the bytes that truly crossed PCIe each way (the ground truth). Each second this prints GPU 0's rx/tx rates as
`GpuCollector.collect_fast` gives them (GPM's PCIE_RX/TX_PER_SEC, taken as NVML documents them: MiB/s), then the
means beside the load's own count. NVML's other PCIe reading, nvmlDeviceGetPcieThroughput, blocks ~20 ms a call and
samples 20 ms only, so it is printed once per second for reference.
"""

from __future__ import annotations

import argparse
import sys
import time

import pynvml
from copy_load import COPY_BYTES, CopyLoad

from gpumon.sampling.nvml import GpuCollector

COPY_SETUP = f"""
host = torch.empty({COPY_BYTES} // 4).pin_memory()
device = torch.empty({COPY_BYTES} // 4, device="cuda:0")
"""
COPY_TRIP = "device.copy_(host, non_blocking=True); host.copy_(device, non_blocking=True); torch.cuda.synchronize(0)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=6)
    args = parser.parse_args()
    collector = GpuCollector()
    try:
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        with CopyLoad(COPY_SETUP, COPY_TRIP) as load:
            collector.collect_fast()
            window_start = time.monotonic()
            sums = [0.0, 0.0]
            print("second  GPM rx GB/s  GPM tx GB/s  PcieThroughput rx GB/s  tx GB/s (20 ms samples)")
            for second in range(1, args.seconds + 1):
                time.sleep(1.0)
                gpu = collector.collect_fast()[0]
                rx = pynvml.nvmlDeviceGetPcieThroughput(handle, pynvml.NVML_PCIE_UTIL_RX_BYTES) * 1024 / 1e9
                tx = pynvml.nvmlDeviceGetPcieThroughput(handle, pynvml.NVML_PCIE_UTIL_TX_BYTES) * 1024 / 1e9
                gpm_rx = (gpu.pcie_rx or 0.0) / 1e9
                gpm_tx = (gpu.pcie_tx or 0.0) / 1e9
                sums[0] += gpm_rx
                sums[1] += gpm_tx
                print(f"{second:6d}  {gpm_rx:11.2f}  {gpm_tx:11.2f}  {rx:22.2f}  {tx:7.2f}")
            copied = load.rate(window_start, time.monotonic())
            if copied is not None:
                print(
                    f"GPU 0 over the {args.seconds} s: the load's own count {copied:.2f} GB/s each way; "
                    f"GPM (as MiB/s) rx {sums[0] / args.seconds:.2f}, tx {sums[1] / args.seconds:.2f} GB/s"
                )
    finally:
        collector.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
