"""What Textual itself costs, as a floor under the dashboard's CPU: a minimal app (one line) in a 160x50 pty.

Usage (no GPU needed; from the project root):

    python benchmarks/textual_floor.py --intervals 0 1 0.25 --rounds 3 --window 15

For each interval the app repaints its one line that often (0: never, the idle app) and the CPU time of the
process over `--window` seconds after `--warmup` is reported as % of one core (perf's task-clock when `perf` is
installed, exact; else psutil's user+system time, in clock ticks). Compare with `monitor_overhead.py --replay` at the
same interval: what gpumon's dashboard costs above this floor is its own.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from monitor_overhead import run_in_pty, stop_group, tree_cpu_seconds

APP = """
import sys, time
from textual.app import App
from textual.widget import Widget

class Line(Widget):
    DEFAULT_CSS = "Line { height: 1; }"
    text = "floor"

    def render(self):
        return self.text

class Floor(App):
    def compose(self):
        self.line = Line()
        yield self.line

    def on_mount(self):
        interval = float(sys.argv[1])
        if interval > 0:
            self.set_interval(interval, self.tick)

    def tick(self):
        self.line.text = f"{time.time():.3f}"
        self.line.refresh()  # a repaint without a layout pass, as the dashboard's panes ask for

Floor().run()
"""


def cpu_percent(pid: int, window: float) -> float:
    perf = shutil.which("perf")
    if perf is not None:
        done = subprocess.run(
            [perf, "stat", "-e", "task-clock", "-p", str(pid), "--", "sleep", str(window)],
            capture_output=True,
            text=True,
            check=False,
        )
        found = re.search(r"([\d.,]+)\s+msec task-clock", done.stderr)
        if found:
            return float(found.group(1).replace(",", "")) / 10 / window
    before = tree_cpu_seconds(pid)
    time.sleep(window)
    return 100 * (tree_cpu_seconds(pid) - before) / window


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--intervals", type=float, nargs="+", default=[0.0, 1.0, 0.25])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--window", type=float, default=15.0)
    parser.add_argument("--warmup", type=float, default=6.0)
    args = parser.parse_args()
    if args.rounds < 1 or args.window <= 0 or any(interval < 0 for interval in args.intervals):
        print("textual_floor: --rounds must be >= 1, --window > 0 and every interval >= 0", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as scratch:
        script = Path(scratch) / "floor_app.py"
        script.write_text(APP)
        for interval in args.intervals:
            values = []
            for _ in range(args.rounds):
                process, master, _ = run_in_pty([sys.executable, str(script), f"{interval:g}"], 160, 50)
                try:
                    time.sleep(args.warmup)
                    values.append(cpu_percent(process.pid, args.window))
                finally:
                    stop_group(process)
                    os.close(master)
            label = "idle" if interval == 0 else f"one line repainted every {interval:g} s"
            print(
                f"{label}: {statistics.median(values):.3f}% of one core "
                f"(min {min(values):.3f}, max {max(values):.3f}, {args.rounds} x {args.window:g} s)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
