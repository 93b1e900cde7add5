"""The dashboard's keys, in one table: each key's action, footer label and tooltip, help line, palette title and where
it applies; the bindings, the help screen's key lines and the command palette are built from it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

from textual.binding import Binding


class Where(Enum):
    """Where a key applies (and who binds it)."""

    DASHBOARD = "dashboard"
    """Every dashboard: GpumonApp's BINDINGS, AdvisorApp's too."""
    PLAIN = "plain"
    """The dashboard without the advisor only (its a and g say where the advisor is)."""
    ADVISOR = "advisor"
    """AdvisorApp only (its a and g run by the Advisor it owns: gpumon/tui/extension.py)."""
    PROCESSES = "processes"
    """The process table's own BINDINGS (process_bindings(); gpumon/tui/process_table.py adds its filter's Esc)."""
    TEXTUAL = "textual"
    """Bound by Textual itself (the palette's key, the table's cursor keys): help lines only."""


class HelpWhen(Enum):
    """Which help screens list a key's line."""

    ALWAYS = "always"
    JOB = "job"
    """With a job attached or offered."""
    ADVISOR = "advisor"
    """Where the advisor runs."""
    NO_ADVISOR = "no advisor"
    """The plain dashboard."""


@dataclass(frozen=True)
class Key:
    """One key: what it is bound to, how the footer and the help show it, its command palette entry."""

    key: str
    """Textual's key name(s) (comma-separated); empty for a help line of keys Textual binds."""
    action: str
    """The action run, as a Binding names it (on the app, or on the process table for Where.PROCESSES)."""
    label: str
    """The footer's description."""
    binding_id: str = ""
    tooltip: str = ""
    help: tuple[str, str] | None = None
    """The help screen's line: the keys as shown, what they do. Keys sharing a line give the same one."""
    help_when: HelpWhen = HelpWhen.ALWAYS
    palette: str = ""
    """The command palette's title (empty: not in the palette)."""
    palette_help: str = ""
    palette_place: int = 0
    """The entry's place in the palette's list (the palette's own order: the most used first)."""
    where: Where = Where.DASHBOARD
    key_display: str | None = None
    show: bool = True
    """In the footer."""
    show_with_advisor: bool | None = None
    """In the advisor's footer, where it differs (None: as show); the advisor's a and g take the room of + and -."""
    priority: bool = False

    def binding(self, *, advisor: bool = False) -> Binding:
        show = self.show_with_advisor if advisor and self.show_with_advisor is not None else self.show
        return Binding(
            self.key,
            self.action,
            self.label,
            show=show,
            key_display=self.key_display,
            priority=self.priority,
            tooltip=self.tooltip,
            id=self.binding_id or None,
        )


_SPEED = ("+ / -", "sample faster / slower (replay: play faster / slower)")
_SORT = ("s / S", "sort processes by the next column / reverse the order")
_SCROLL = ("← → End", "while paused: scroll the GPU graphs back / forward through the history (10 min) / to the newest")
_SIGNALS = (
    "I T K",
    "send SIGINT / SIGTERM / SIGKILL to the highlighted process, or to its whole job (its launcher, ranks "
    "and DataLoader workers), after a confirm (p: process, j: job, n or escape: nothing); your own "
    "processes unless root; never with --read-only or on a replay",
)
_ADVISOR_ELSEWHERE = ("a g", "the advisor and its guided run: they need a job (gpumon run -- CMD, attach PID, demo)")

KEYS: tuple[Key, ...] = (
    Key(
        "q",
        "quit",
        "Quit",
        "quit",
        "Stop sampling and leave gpumon",
        ("q", "quit"),
        palette="Quit gpumon",
        palette_help="q",
        palette_place=14,
    ),
    Key(
        "p",
        "toggle_pause",
        "Pause",
        "pause",
        "Freeze the dashboard; p again resumes",
        ("p", "pause / resume sampling (the screen freezes, history keeps its place)"),
        palette="Pause / resume sampling",
        palette_help="p: freeze or unfreeze the dashboard",
        palette_place=1,
    ),
    Key(
        "plus",
        "faster",
        "Faster",
        "faster",
        "Shorter interval (replay: faster)",
        _SPEED,
        palette="Faster: shorter interval",
        palette_help="+: sample more often (replay: play faster)",
        palette_place=2,
        key_display="+",
        show_with_advisor=False,
    ),
    Key(
        "minus",
        "slower",
        "Slower",
        "slower",
        "Longer interval (replay: slower)",
        _SPEED,
        palette="Slower: longer interval",
        palette_help="-: sample less often (replay: play slower)",
        palette_place=3,
        key_display="-",
        show_with_advisor=False,
    ),
    Key("s", "cycle_sort", "Sort", "sort", "Sort processes by the next column", _SORT),
    Key(
        "S",
        "reverse_sort",
        "Reverse",
        "reverse-sort",
        "Reverse the process order",
        _SORT,
        palette="Reverse process sort order",
        palette_help="S: biggest first / smallest first",
        palette_place=4,
        show=False,
    ),
    Key(
        "t",
        "toggle_graph_style",
        "Graph style",
        "graph-style",
        "GPU graphs in braille (2x4 dots a cell) or block characters",
        ("t", "GPU graphs in braille (2x4 dots a cell) or block characters"),
        palette="GPU graph style: braille / blocks",
        palette_help="t: braille dots or block characters",
        palette_place=5,
        show=False,
    ),
    Key(
        "h",
        "toggle_host_graphs",
        "Host graphs",
        "host-graphs",
        "CPU and memory history graphs beside the GPU graphs (wide terminals)",
        ("h", "CPU and memory history graphs beside the GPU graphs (wide terminals; host_graphs in the config)"),
        palette="CPU and memory graphs: show / hide",
        palette_help="h: beside the GPU graphs",
        palette_place=6,
        show=False,
    ),
    Key(
        "e",
        "health",
        "Health",
        "health",
        "Each GPU's health in full: XID errors, ECC, memory repairs, PCIe link, clock events, MIG",
        (
            "e",
            "each GPU's health in full: XID errors with their times, ECC, memory repairs, PCIe link, clock events, MIG",
        ),
        show=False,
    ),
    Key(
        "left",
        "scroll_graphs(1)",
        "Back",
        "graphs-back",
        "While paused: scroll the GPU graphs back through the history",
        _SCROLL,
        key_display="←",
        priority=True,
    ),
    Key(
        "right",
        "scroll_graphs(-1)",
        "Forward",
        "graphs-forward",
        "While paused: scroll the GPU graphs forward",
        _SCROLL,
        key_display="→",
        priority=True,
    ),
    Key(
        "end",
        "scroll_graphs(0)",
        "Newest",
        "graphs-newest",
        "While paused: back to the newest samples",
        _SCROLL,
        show=False,
        priority=True,
    ),
    Key(
        "",
        "",
        "",
        help=("↑ ↓ PgUp PgDn", "move in the process table; the highlight stays on its process"),
        where=Where.TEXTUAL,
    ),
    Key(
        "slash",
        "open_filter",
        "Filter",
        "filter",
        "Filter processes by command line, user or pid (Esc clears)",
        ("/", "filter processes by command line, user or pid as you type; Enter keeps it, Esc clears it"),
        palette="Filter processes",
        palette_help="/: by command line, user or pid; Esc clears",
        palette_place=7,
        where=Where.PROCESSES,
        key_display="/",
        show=False,
        # Priority: run while the app takes the key, so the keys typed right after it reach the open line.
        priority=True,
    ),
    Key(
        "v",
        "toggle_all_processes",
        "All processes",
        "all-processes",
        "GPU processes only, or every process with its tree",
        ("v", "GPU processes only / every process with its tree (live only)"),
        palette="All processes / GPU processes only",
        palette_help="v: every process as trees",
        palette_place=8,
        where=Where.PROCESSES,
        show=False,
    ),
    Key(
        "I",
        "signal('SIGINT')",
        "Interrupt",
        "signal-int",
        "Send SIGINT (Ctrl+C) to the highlighted process or its whole job, after a confirm",
        _SIGNALS,
        palette="Interrupt process or job (SIGINT)",
        palette_help="I: after a confirm",
        palette_place=9,
        where=Where.PROCESSES,
        show=False,
    ),
    Key(
        "T",
        "signal('SIGTERM')",
        "Terminate",
        "signal-term",
        "Send SIGTERM to the highlighted process or its whole job, after a confirm",
        _SIGNALS,
        palette="Terminate process or job (SIGTERM)",
        palette_help="T: after a confirm",
        palette_place=10,
        where=Where.PROCESSES,
        show=False,
    ),
    Key(
        "K",
        "signal('SIGKILL')",
        "Kill",
        "signal-kill",
        "Send SIGKILL to the highlighted process or its whole job, after a confirm",
        _SIGNALS,
        palette="Kill process or job (SIGKILL)",
        palette_help="K: after a confirm",
        palette_place=11,
        where=Where.PROCESSES,
        show=False,
    ),
    Key(
        "question_mark",
        "help",
        "Help",
        "help",
        "Keys and what each field means",
        ("?", "this help (escape closes it)"),
        palette="Help: keys and fields",
        palette_help="?: what each pane and field means",
        palette_place=13,
        key_display="?",
    ),
    Key("", "", "", help=("ctrl+p", "command palette: every action by name"), where=Where.TEXTUAL),
    Key(
        "j",
        "pick_job",
        "Jobs",
        "jobs",
        "Pick a hooked training job to watch",
        ("j", "look for hooked training jobs and pick one to watch"),
        HelpWhen.JOB,
        show=False,
    ),
    Key(
        "c",
        "capture_profile",
        "Profile",
        "profile",
        "Capture the job's next steps with torch.profiler: a trace and its summary (needs the hook)",
        (
            "c",
            "capture the job's next 5 steps with torch.profiler (hooked jobs; a DDP job's primary rank): the trace "
            "(.json.gz for Perfetto) and its summary: top kernels, GPU idle gaps, copies, NCCL overlap",
        ),
        HelpWhen.JOB,
        palette="Profile the job (torch.profiler)",
        palette_help="c: trace the next steps, summarize",
        palette_place=12,
        show=False,
    ),
    Key(
        "a",
        "toggle_advisor",
        "Advisor",
        "advisor",
        "The advisor (needs a job)",
        _ADVISOR_ELSEWHERE,
        HelpWhen.NO_ADVISOR,
        where=Where.PLAIN,
        show=False,
    ),
    Key(
        "g",
        "guided",
        "Guided run",
        "guided",
        "The guided run (needs a job)",
        _ADVISOR_ELSEWHERE,
        HelpWhen.NO_ADVISOR,
        where=Where.PLAIN,
        show=False,
    ),
    Key(
        "a",
        "toggle_advisor",
        "Advisor",
        "advisor",
        "Show or hide the advisor panel",
        ("a", "show / hide the advisor panel: what holds the job back, and the experiments to try"),
        HelpWhen.ADVISOR,
        where=Where.ADVISOR,
    ),
    Key(
        "g",
        "guided",
        "Guided run",
        "guided",
        "Run the guided experiments on the job (g again stops them)",
        ("g", "start the guided run: each experiment measured on the job, the winner kept (g again stops it)"),
        HelpWhen.ADVISOR,
        where=Where.ADVISOR,
    ),
    Key(
        "ctrl+c",
        "quit",
        "Quit",
        "interrupt",
        "Quit (a demo or trial run started here is stopped)",
        where=Where.ADVISOR,
        show=False,
        priority=True,
    ),
)


def bindings(*, advisor: bool = False) -> list[Binding]:
    """The app's bindings: the plain dashboard's, or (advisor) AdvisorApp's."""
    wanted = (Where.DASHBOARD, Where.ADVISOR if advisor else Where.PLAIN)
    return [key.binding(advisor=advisor) for key in KEYS if key.where in wanted]


def process_bindings() -> list[Binding]:
    """The process table's keys (its BINDINGS, less the filter's Esc)."""
    return [key.binding() for key in KEYS if key.where is Where.PROCESSES]


def help_lines(*, job: bool = False, advisor: bool = False) -> tuple[tuple[str, str], ...]:
    """The help screen's key lines, each once, in the table's order: the job's keys with a job, the advisor's where it
    runs (else where to find it) last."""
    order = [HelpWhen.ALWAYS, *([HelpWhen.JOB] if job else []), HelpWhen.ADVISOR if advisor else HelpWhen.NO_ADVISOR]
    lines: list[tuple[str, str]] = []
    for when in order:
        lines += _unique(key.help for key in KEYS if key.help is not None and key.help_when is when)
    return tuple(lines)


def palette_keys() -> list[Key]:
    """The keys offered in the command palette, in its order."""
    return sorted((key for key in KEYS if key.palette), key=lambda key: key.palette_place)


def _unique(lines: Iterable[tuple[str, str] | None]) -> list[tuple[str, str]]:
    seen: list[tuple[str, str]] = []
    for line in lines:
        if line is not None and line not in seen:
            seen.append(line)
    return seen
