"""The experiment catalogue: which knobs may fix each finding, with which value, and the code change to show.

Knobs the hook applies by itself (gpumon.protocol.KNOBS) work on any PyTorch script; the others (amp_bf16,
batch_size, channels_last, augment_in_workers, log_every) work only in a command that reads GPUMON_KNOBS itself,
as the demo trainer does; for any other script their trial run is reported as needing a code change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gpumon import protocol
from gpumon.advisor.categories import (
    ALLOCATOR_CHURN,
    CODE_ONLY,
    CPU_BOUND,
    GC_BOUND,
    HEALTHY,
    HOST_SYNC,
    INPUT_BOUND,
    IO_BOUND,
    LAUNCH_BOUND,
    LOW_PRECISION,
    TRANSFER_BOUND,
)
from gpumon.advisor.rules import Finding, gpu_busy
from gpumon.advisor.signals import Signals

BATCH_FLAG = "changes the optimisation: retune the learning rate"
NUMERICS_FLAG = "changes numerics: check the loss curve"
CONV_FLAG = "helps convolutional models only"

LOADER_KNOBS = ("batch_size", "num_workers", "pin_memory", "prefetch_factor", "persistent_workers")
OWNER_KNOBS = {
    "gc_freeze": (GC_BOUND, "the garbage collector's pauses"),
    "skip_empty_cache": (ALLOCATOR_CHURN, "torch.cuda.empty_cache()'s frees and the cudaMallocs after them"),
}
"""Knobs that each take one owner of GPU idle time away, math left alone: a win proves the owner, none refutes it."""
CLIMBING_KNOBS = ("num_workers", "batch_size")
"""Knobs tried further after a win (doubled while the finding and the resource allow), until a step does not win."""
FIRST_WORKERS_CAP = 16
"""The most workers a first, unmeasured jump proposes; a climb from a winning count goes up to the cores less two."""
BATCH_MEMORY_SHARE = 0.9
"""A doubled batch is tried only while twice the peak memory stays under this share of the GPU's memory: activations
grow with the batch and the weights do not, so twice the peak overstates the need; the rest is the allocator's slack
beyond torch.cuda.max_memory_allocated. An estimate, not a measurement: an OOM is still a row with its reason."""


@dataclass(frozen=True, slots=True)
class KnobInfo:
    """What the advisor knows about one knob."""

    name: str
    hook: bool
    """The hook applies it from GPUMON_KNOBS to any script."""
    live: bool
    """It can be changed on a running job (set_knob) without changing the math."""
    code: str
    """The code change, with {value} for the value (DataLoader knobs are merged into one DataLoader(...) line)."""
    flag: str = ""
    """A warning shown with the result (e.g. batch size changes the optimisation)."""


def _hook(name: str) -> bool:
    return name in protocol.KNOBS


def _live(name: str) -> bool:
    return name in protocol.KNOBS and protocol.KNOBS[name]["live"]


KNOBS: dict[str, KnobInfo] = {
    info.name: info
    for info in (
        KnobInfo("num_workers", _hook("num_workers"), _live("num_workers"), "DataLoader(..., num_workers={value})"),
        KnobInfo(
            "pin_memory",
            _hook("pin_memory"),
            _live("pin_memory"),
            "DataLoader(..., pin_memory={value}); x = x.to(device, non_blocking=True)",
        ),
        KnobInfo(
            "prefetch_factor",
            _hook("prefetch_factor"),
            _live("prefetch_factor"),
            "DataLoader(..., prefetch_factor={value})",
        ),
        KnobInfo(
            "persistent_workers",
            _hook("persistent_workers"),
            _live("persistent_workers"),
            "DataLoader(..., persistent_workers={value})",
        ),
        KnobInfo(
            "cudnn_benchmark",
            _hook("cudnn_benchmark"),
            _live("cudnn_benchmark"),
            "torch.backends.cudnn.benchmark = {value}",
        ),
        KnobInfo(
            "gc_freeze",
            _hook("gc_freeze"),
            _live("gc_freeze"),
            "import gc; gc.freeze(); gc.set_threshold(50000, 50, 100)  # once the model, optimizer and data are built",
        ),
        KnobInfo(
            "skip_empty_cache",
            _hook("skip_empty_cache"),
            _live("skip_empty_cache"),
            "# torch.cuda.empty_cache()  # out of the training loop: the caching allocator keeps its blocks",
        ),
        KnobInfo(
            "tf32",
            _hook("tf32"),
            False,
            "torch.backends.cuda.matmul.allow_tf32 = {value}; torch.backends.cudnn.allow_tf32 = {value}",
            NUMERICS_FLAG,
        ),
        KnobInfo(
            "amp_bf16",
            False,
            False,
            "with torch.autocast(device_type='cuda', dtype=torch.bfloat16): loss = loss_fn(model(x), y)",
            NUMERICS_FLAG,
        ),
        KnobInfo(
            "channels_last",
            False,
            False,
            "model = model.to(memory_format=torch.channels_last); x = x.to(device, memory_format=torch.channels_last)",
            CONV_FLAG,
        ),
        KnobInfo("batch_size", False, False, "DataLoader(..., batch_size={value})", BATCH_FLAG),
        KnobInfo("augment_in_workers", False, False, "move the CPU transforms into Dataset.__getitem__"),
        KnobInfo("log_every", False, False, "if step % {value} == 0: print(loss.item())  # not every step"),
    )
}


@dataclass(frozen=True, slots=True)
class Experiment:
    """One variant to measure: knob changes on top of the current settings."""

    knobs: Mapping[str, Any]
    previous: Mapping[str, Any] = field(default_factory=dict)
    """The values the knobs had before (None where unknown), for the label and for rolling back."""
    reason: str = ""
    """Why it is in the list (the finding it addresses)."""

    @property
    def key(self) -> str:
        return ",".join(sorted(self.knobs))

    @property
    def ident(self) -> str:
        """The knobs with their values: one step of a climb differs from the next."""
        return ",".join(f"{name}={self.knobs[name]!r}" for name in sorted(self.knobs))

    @property
    def label(self) -> str:
        return ", ".join(
            f"{name} -> {_show(value)}"
            if self.previous.get(name) is None
            else f"{name} {_show(self.previous[name])} -> {_show(value)}"
            for name, value in self.knobs.items()
        )

    @property
    def live(self) -> bool:
        """Every knob can be changed on the running job without a restart and without changing the math."""
        return all(KNOBS[name].live if name in KNOBS else False for name in self.knobs)

    @property
    def hook_only(self) -> bool:
        """Every knob is applied by the hook itself (works on any script)."""
        return all(KNOBS[name].hook if name in KNOBS else False for name in self.knobs)

    @property
    def owner(self) -> str:
        """Which owner of GPU idle time it tests, for the result's reason ("" for a knob that tests none)."""
        owners = [OWNER_KNOBS[name] for name in self.knobs if name in OWNER_KNOBS and self.knobs[name]]
        return "; ".join(f"tests the owner {category} ({what})" for category, what in owners)

    @property
    def flags(self) -> list[str]:
        return [KNOBS[name].flag for name in self.knobs if name in KNOBS and KNOBS[name].flag]


def _show(value: Any) -> str:
    if value is None:
        return "?"
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def worker_target(signals: Signals, cores: int | None, *, climbing: bool = False) -> int | None:
    """How many DataLoader workers to try: most free cores (two left for the main process and the rest).

    climbing: the current count won its step; the next is twice it, up to the cores less two and the cores still
    idle beside the current workers, and none once no core is idle."""
    cores = signals.host.cores or cores
    current = signals.loader.num_workers or 0
    if not cores:
        return None
    if climbing and current > 0:
        ceiling = max(2, cores - 2)
        if signals.host.idle_cores is not None:
            ceiling = min(ceiling, current + signals.host.idle_cores)
        target = min(ceiling, 2 * current)
    else:
        ceiling = max(2, min(FIRST_WORKERS_CAP, cores - 2))
        target = ceiling if current == 0 else min(ceiling, 2 * current)
    return target if target > current else None


def halfway_back(experiment: Experiment, kept: Mapping[str, Any]) -> Experiment | None:
    """After a climb step that lost ground (ran slower than the value kept, beyond the noise): the value halfway
    between the two, or None (not a climb step, or no value lies between).

    The mechanism: a doubling that runs slower than the count it came from has oversubscribed the resource (workers
    fighting the main process for cores, a batch spilling out of cache), so the best count lies between the two. A
    step that merely did not win is a plateau: the knob stopped being the limit, and the climb ends there."""
    if len(experiment.knobs) != 1:
        return None
    ((name, value),) = experiment.knobs.items()
    start = kept.get(name)
    if name not in CLIMBING_KNOBS or not isinstance(start, int) or not isinstance(value, int):
        return None
    middle = (start + value) // 2
    if not start < middle < value:
        return None
    return Experiment(
        knobs={name: middle},
        previous={name: start},
        reason=f"{name} {value} ran slower than {start}: the best lies between",
    )


def batch_target(signals: Signals, *, climbing: bool = False) -> int | None:
    """The batch size to try: a first jump to 256 (2x to 8x); climbing (the current one won its step), twice the
    current while twice its peak memory fits the GPU (where both are known)."""
    current = signals.loader.batch_size
    if not current:
        return None
    if not climbing:
        return max(2 * current, min(8 * current, 256))
    totals = [gpu.memory_total for gpu in signals.gpu.gpus if gpu.memory_total]
    if signals.memory.peak_memory and totals and 2 * signals.memory.peak_memory > BATCH_MEMORY_SHARE * min(totals):
        return None
    return 2 * current


def _candidates_for(
    category: str, signals: Signals, cores: int | None, climbing: Mapping[str, Any] | None = None
) -> list[tuple[str, Any]]:
    cuda = signals.has_gpu
    workers = signals.loader.num_workers or 0
    pairs: list[tuple[str, Any]] = []
    climbing = climbing or {}
    loader = (
        replace(signals, loader=replace(signals.loader, **climbing)) if climbing else signals
    )  # a climb goes on from the value kept

    def add_workers() -> None:
        target = worker_target(loader, cores, climbing="num_workers" in climbing)
        if target is not None:
            pairs.append(("num_workers", target))

    def add_pin() -> None:
        if cuda and signals.loader.pin_memory is not True:
            pairs.append(("pin_memory", True))

    def add_prefetch() -> None:
        if workers > 0 and (signals.loader.prefetch_factor or 2) < 4:
            pairs.append(("prefetch_factor", 4))

    def add_persistent() -> None:
        if workers > 0 and signals.loader.persistent_workers is not True:
            pairs.append(("persistent_workers", True))

    if category == INPUT_BOUND:
        for add in (add_workers, add_pin, add_prefetch, add_persistent):
            add()
    elif category == CPU_BOUND:
        # The training thread's own work: a script that reads GPUMON_KNOBS can move its per-batch transforms into
        # the Dataset, where DataLoader workers run them (workers too, when it has none).
        pairs.append(("augment_in_workers", True))
        if workers == 0:
            add_workers()
    elif category == IO_BOUND:
        for add in (add_workers, add_prefetch, add_persistent, add_pin):
            add()
    elif category == TRANSFER_BOUND:
        add_pin()
        if workers == 0:
            add_workers()
        add_prefetch()
    elif category == HOST_SYNC:
        pairs.append(("log_every", 50))
    elif category == GC_BOUND:
        pairs.append(("gc_freeze", True))
    elif category == ALLOCATOR_CHURN:
        pairs.append(("skip_empty_cache", True))
    elif category == LAUNCH_BOUND:
        target = batch_target(loader, climbing="batch_size" in climbing)
        if target:
            pairs.append(("batch_size", target))
        if cuda and not signals.precision.cudnn_benchmark:
            pairs.append(("cudnn_benchmark", True))
    elif category in (LOW_PRECISION, HEALTHY) and cuda:
        if not signals.precision.autocast:
            pairs.append(("amp_bf16", True))
        if not signals.precision.tf32_matmul and not signals.precision.autocast:
            pairs.append(("tf32", True))
        pairs.append(("channels_last", True))
        if not signals.precision.cudnn_benchmark:
            pairs.append(("cudnn_benchmark", True))
        target = batch_target(loader, climbing="batch_size" in climbing)
        if target and category == HEALTHY:
            pairs.append(("batch_size", target))
    return pairs


def experiments_for(
    finding: Finding, signals: Signals, *, cores: int | None = None, current: Mapping[str, Any] | None = None
) -> list[Experiment]:
    """The experiments worth trying for `finding` (its category first, then its secondary findings), best first.

    A busy GPU also gets the precision and throughput knobs (bf16, TF32, channels_last, cuDNN autotuning,
    a larger batch): nothing is wrong with it, but it may do the same work faster.
    current: knob values already set by earlier experiments (so labels say where they come from). A climbing knob
    among them (num_workers, batch_size: it won its step) is proposed again at its next value while the finding
    still calls for it and the resource is not used up: it climbs until a step does not win.
    """
    current = dict(current or {})
    climbing = {name: current[name] for name in CLIMBING_KNOBS if isinstance(current.get(name), int)}
    categories = [finding.category, *(f.category for f in finding.secondary)]
    if signals.has_gpu and gpu_busy(signals) and HEALTHY not in categories:
        categories.append(HEALTHY)
    seen: set[str] = set()
    experiments: list[Experiment] = []
    pairs = [
        (category, pair) for category in categories for pair in _candidates_for(category, signals, cores, climbing)
    ]
    if signals.has_gpu and signals.loader.num_workers is not None:
        # A GPU job with a DataLoader: its loader refinements are worth a try once the bigger fixes are in.
        pairs += [
            (INPUT_BOUND, pair)
            for pair in _candidates_for(INPUT_BOUND, signals, cores, climbing)
            if pair[0] != "num_workers"
        ]
    for category, (name, value) in pairs:
        if name in seen or current.get(name) == value:
            continue
        seen.add(name)
        previous = current.get(name, observed_value(name, signals))
        experiments.append(Experiment(knobs={name: value}, previous={name: previous}, reason=category))
    return experiments


def observed_value(name: str, signals: Signals) -> Any:
    """The knob's value as the job runs now, where the signals show it."""
    return {
        "num_workers": signals.loader.num_workers,
        "pin_memory": signals.loader.pin_memory,
        "prefetch_factor": signals.loader.prefetch_factor if signals.loader.num_workers else None,
        "persistent_workers": signals.loader.persistent_workers,
        "batch_size": signals.loader.batch_size,
        "cudnn_benchmark": signals.precision.cudnn_benchmark,
        "tf32": signals.precision.tf32_matmul,
        "amp_bf16": signals.precision.autocast,
        "gc_freeze": False,
        "skip_empty_cache": False,
    }.get(name)


def code_change(knobs: Mapping[str, Any]) -> list[str]:
    """The lines of code that make `knobs` permanent: DataLoader arguments merged into one call."""
    lines: list[str] = []
    loader_args = [f"{name}={value!r}" for name in LOADER_KNOBS if name in knobs for value in [knobs[name]]]
    if loader_args:
        lines.append(f"DataLoader(..., {', '.join(loader_args)})")
        if knobs.get("pin_memory"):
            lines.append("x = x.to(device, non_blocking=True)")
    for name, value in knobs.items():
        if name in LOADER_KNOBS:
            continue
        info = KNOBS.get(name)
        if info is None:
            lines.append(f"{name} = {value!r}")
        elif isinstance(value, bool) and not value and name in ("amp_bf16", "channels_last", *OWNER_KNOBS):
            continue
        else:
            lines.append(info.code.format(value=value))
    return lines


def needs_code_change(category: str) -> str | None:
    return CODE_ONLY.get(category)


def split_knobs(knobs: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(knobs the hook applies, knobs left to the script), the first checked with protocol.validate_knobs."""
    hook = {name: value for name, value in knobs.items() if name in protocol.KNOBS}
    script = {name: value for name, value in knobs.items() if name not in protocol.KNOBS}
    if hook:
        hook = protocol.validate_knobs(hook, live=False)
    return hook, script


def describe(experiments: Sequence[Experiment]) -> list[str]:
    return [experiment.label for experiment in experiments]
