"""Which GPUs a view or an exporter covers: --only's indices or UUID prefixes, or CUDA_VISIBLE_DEVICES."""

from __future__ import annotations

import argparse
import re
from collections.abc import Collection, Mapping
from dataclasses import replace

from gpumon.sampling.snapshot import GpuSample, Snapshot

_GPU_ID = re.compile(r"\d{1,4}|(GPU|MIG)-[0-9A-Fa-f-]{1,64}")


def gpu_list(text: str) -> frozenset[str]:
    """--only: GPU indices or UUID prefixes, comma-separated ('0,2' or 'GPU-8f3c')."""
    entries = [entry.strip() for entry in text.split(",")]
    for entry in entries:
        if not _GPU_ID.fullmatch(entry):
            raise argparse.ArgumentTypeError(f"{entry!r} is not a GPU index or UUID (e.g. --only 0,2)")
    return frozenset(str(int(entry)) if entry.isdigit() else entry for entry in entries)


def add_gpu_choice_arguments(parser: argparse.ArgumentParser, verb: str) -> None:
    """--only and --only-visible, which exclude each other; `verb` says what is done with the chosen GPUs."""
    gpus = parser.add_mutually_exclusive_group()
    gpus.add_argument("--only", type=gpu_list, metavar="0,2", help=f"{verb} only these GPUs (indices or UUIDs)")
    gpus.add_argument(
        "--only-visible",
        action="store_true",
        help=f"{verb} only the GPUs CUDA_VISIBLE_DEVICES names (all when it is unset)",
    )


def chosen_gpus(args: argparse.Namespace, environ: Mapping[str, str]) -> frozenset[str] | None:
    """The GPUs --only or --only-visible chose; None: all of them."""
    only: frozenset[str] | None = args.only
    if only is not None:
        return only
    return visible_devices(environ) if args.only_visible else None


def visible_devices(environ: Mapping[str, str]) -> frozenset[str] | None:
    """CUDA_VISIBLE_DEVICES as GPU indices or UUID prefixes ('0,2', 'GPU-8f...'); None when unset (all GPUs).

    CUDA stops at the first invalid entry, and so does this; an empty value hides every GPU."""
    value = environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    devices: list[str] = []
    for entry in value.split(","):
        entry = entry.strip()
        if not entry or entry.startswith("-"):
            break
        devices.append(entry)
    return frozenset(devices)


def is_chosen(gpu: GpuSample, gpus: Collection[str]) -> bool:
    """Whether `gpu` is among `gpus`: by index, or by a UUID prefix (a key that is not all digits)."""
    return str(gpu.index) in gpus or any(not key.isdigit() and gpu.uuid.startswith(key) for key in gpus)


def only_gpus(snapshot: Snapshot, chosen: Collection[str] | None) -> Snapshot:
    """The snapshot with only the chosen GPUs and the processes on them; a gpu_error when none of them is here."""
    if chosen is None:
        return snapshot
    gpus = tuple(gpu for gpu in snapshot.gpus if is_chosen(gpu, chosen))
    indices = {gpu.index for gpu in gpus}
    processes = tuple(process for process in snapshot.processes if indices.intersection(process.gpu_indices))
    gpu_error = snapshot.gpu_error
    if snapshot.gpus and not gpus:
        gpu_error = "no GPU here matches " + ",".join(sorted(chosen))
    return replace(snapshot, gpus=gpus, processes=processes, gpu_error=gpu_error)
