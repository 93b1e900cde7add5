#!/usr/bin/env bash
# Runs tests/tui (all but the SVG snapshots, which differ across Textual versions, and the profiler capture, which
# needs torch) on the lowest and the highest Textual that pyproject.toml allows, each in a throwaway venv with the
# project's other runtime and test dependencies (no torch), gpumon from this tree (PYTHONPATH).
#   bash scripts/check_textual_range.sh [LOWEST [HIGHEST]]     # defaults: 8.0.0 8.2.8
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
lowest=${1:-8.0.0}
highest=${2:-8.2.8}
for version in "$lowest" "$highest"; do
  venv=${TMPDIR:-/tmp}/gpumon-textual-$version
  if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q "textual==$version" nvidia-ml-py psutil prometheus-client "pytest>=8" pytest-asyncio \
      hypothesis syrupy==4.8.0 packaging pyte
    "$venv/bin/pip" install -q --no-deps pytest-textual-snapshot==1.1.0 jinja2 markupsafe
  fi
  echo "== Textual $version"
  (cd "$root" && PYTHONPATH="$root" "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/tui \
    --deselect tests/tui/test_tui_snapshots.py --deselect tests/tui/test_profile_capture_tui.py)
done
