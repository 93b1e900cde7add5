"""The fleet's rows (a GPU, or a host without GPU rows), filtered and sorted by host, label, state, utilization.

A filter is terms, all of which a row must match: `host=~node-1.*`, `state!=ok`, `util<20`, `model=~.*H100.*`,
`rack=r7` (any label of the host's scrape target), or a bare word (a part of the host's name). `=~` and `!~` are
regular expressions matched against the whole value, as in PromQL; names and states compare without case.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpumon.fleet.health import ALERT, WARNING
from gpumon.fleet.hosts import HostRow, HostState
from gpumon.fleet.snapshot import FleetSnapshot, GpuRow, natural_host
from gpumon.printable import printable

SORT_KEYS = ("host", "state", "util", "mem")
"""host: by name; state: the worst first; util and mem: the least used first (the idle GPUs). '-KEY' reverses."""
STATE_RANK = {"DOWN": 0, "NVML FAILED": 1, "OFF BUS": 2, "ALERT": 3, "WARN": 4, "NO GPUS": 5, "OK": 6}
_TERM = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|<=|>=|=|<|>)(.*)", re.DOTALL)
_NUMERIC = frozenset({"util", "mem"})
_STATES = tuple(state.casefold() for state in STATE_RANK)


class FilterError(ValueError):
    """One line saying which term is wrong and why."""


@dataclass(frozen=True, slots=True)
class FleetRow:
    """One line of the fleet: a GPU of a host, or the host alone (DOWN, NVML FAILED, or without GPUs)."""

    host: HostRow
    gpu: GpuRow | None = None

    @property
    def state(self) -> str:
        if self.host.state is not HostState.UP:
            return str(self.host.state.value)
        if self.gpu is None:
            return "NO GPUS"
        if self.gpu.off_bus:
            return "OFF BUS"
        severity = self.gpu.severity
        return "ALERT" if severity >= ALERT else "WARN" if severity >= WARNING else "OK"

    @property
    def utilization(self) -> float | None:
        return self.gpu.utilization if self.gpu is not None else None

    @property
    def memory_share(self) -> float | None:
        """Percent of the GPU's memory in use."""
        gpu = self.gpu
        if gpu is None or gpu.memory_used is None or not gpu.memory_total:
            return None
        return gpu.memory_used / gpu.memory_total * 100

    def field(self, name: str) -> str | None:
        """A term's string value: host, gpu, state, model, or a label of the host's target."""
        if name == "host":
            return self.host.name
        if name == "state":
            return self.state
        if name == "gpu":
            return self.gpu.gpu if self.gpu is not None else None
        if name == "model":
            return self.gpu.model if self.gpu is not None else None
        return dict(self.host.labels).get(name)


def fleet_rows(snapshot: FleetSnapshot) -> list[FleetRow]:
    """Each host's GPUs, in the snapshot's order; a host without GPU rows (down, failed, none) as one row."""
    by_host: dict[str, list[GpuRow]] = {}
    for gpu in snapshot.gpus:
        by_host.setdefault(gpu.host, []).append(gpu)
    states = {host.name: host for host in snapshot.host_rows}
    rows: list[FleetRow] = []
    for name in snapshot.hosts:
        host = states.get(name) or HostRow(name)
        gpus = by_host.get(name, [])
        rows.extend([FleetRow(host, gpu) for gpu in gpus] or [FleetRow(host)])
    return rows


Term = Callable[[FleetRow], bool]


def parse_filter(text: str | Sequence[str]) -> tuple[Term, ...]:
    """Terms from a filter line (split on spaces) or from --filter flags (one term each); FilterError when bad."""
    terms = text.split() if isinstance(text, str) else [part for item in text for part in item.split()]
    return tuple(_term(term) for term in terms)


def _term(term: str) -> Term:
    match = _TERM.fullmatch(term)
    if match is None:
        if any(op in term for op in "=<>!~"):
            raise FilterError(f"bad filter term '{printable(term)}': expected NAME=VALUE, NAME=~REGEX, util<NUMBER")
        word = term.lower()
        return lambda row: word in row.host.name.lower()
    name, op, value = match.group(1).lower(), match.group(2), match.group(3)
    if name in _NUMERIC:
        return _numeric(term, name, op, value)
    if op in ("<", ">", "<=", ">="):
        raise FilterError(f"bad filter term '{printable(term)}': {op} compares util or mem, not {name}")
    if op in ("=~", "!~"):
        try:
            pattern = re.compile(value, re.IGNORECASE)
        except re.error as error:
            raise FilterError(f"bad filter term '{printable(term)}': {error}") from None
        matches = op == "=~"
        return lambda row: (pattern.fullmatch(row.field(name) or "") is not None) == matches
    equal = op == "="
    folded = _state(term, value) if name == "state" else value.casefold()
    return lambda row: ((row.field(name) or "").casefold() == folded) == equal


def _state(term: str, value: str) -> str:
    """The state `value` names, folded ('nvml_failed', 'nvml-failed' -> 'nvml failed'); FilterError for no state."""
    folded = " ".join(value.casefold().replace("_", " ").replace("-", " ").split())
    if folded not in _STATES:
        known = ", ".join(state.replace(" ", "_") for state in _STATES)
        raise FilterError(f"bad filter term '{printable(term)}': no state '{printable(value)}' (one of {known})")
    return folded


def _numeric(term: str, name: str, op: str, value: str) -> Term:
    if op in ("=~", "!~"):
        raise FilterError(f"bad filter term '{printable(term)}': {name} takes <, >, <=, >=, = or != and a number")
    try:
        bound = float(value.rstrip("%"))
    except ValueError:
        raise FilterError(f"bad filter term '{printable(term)}': '{printable(value)}' is not a number") from None
    compare: dict[str, Callable[[float], bool]] = {
        "<": lambda x: x < bound,
        ">": lambda x: x > bound,
        "<=": lambda x: x <= bound,
        ">=": lambda x: x >= bound,
        "=": lambda x: x == bound,
        "!=": lambda x: x != bound,
    }
    test = compare[op]

    def numeric(row: FleetRow) -> bool:
        figure = row.utilization if name == "util" else row.memory_share
        return figure is not None and test(figure)

    return numeric


def check_sort(text: str) -> str:
    """The sort key as given ('util', '-util'); FilterError when it is none of SORT_KEYS."""
    if text.removeprefix("-") not in SORT_KEYS:
        keys = ", ".join(SORT_KEYS)
        raise FilterError(f"bad sort '{printable(text)}': expected one of {keys} (a leading - reverses)")
    return text


def select(rows: Sequence[FleetRow], terms: Sequence[Term] = (), sort: str = "host") -> list[FleetRow]:
    """The rows every term matches, in the sort's order (ties by host and GPU)."""
    kept = [row for row in rows if all(term(row) for term in terms)]
    key, reverse = sort.removeprefix("-"), sort.startswith("-")
    kept.sort(key=_by_host)
    if key == "state":
        kept.sort(key=lambda row: STATE_RANK.get(row.state, len(STATE_RANK)), reverse=reverse)
    elif key in ("util", "mem"):
        sign = -1.0 if reverse else 1.0

        def by_figure(row: FleetRow) -> tuple[bool, float]:
            figure = row.utilization if key == "util" else row.memory_share
            return (figure is None, sign * (figure or 0.0))  # rows without a figure last either way

        kept.sort(key=by_figure)
    elif reverse:
        kept.reverse()
    return kept


def _by_host(row: FleetRow) -> tuple[tuple[str | int, ...], int, str]:
    gpu = row.gpu.gpu if row.gpu is not None else ""
    return (natural_host(row.host.name), int(gpu) if gpu.isdigit() else -1, gpu)


def state_counts(rows: Sequence[FleetRow]) -> dict[str, int]:
    """Hosts by state (a host counted once, by its own state) — for the status line."""
    seen: dict[str, str] = {}
    for row in rows:
        seen.setdefault(row.host.name, str(row.host.state.value))
    counts: dict[str, int] = {}
    for state in seen.values():
        counts[state] = counts.get(state, 0) + 1
    return counts
