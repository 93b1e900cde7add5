"""The gpumon package's log: a size-capped rotating file under the XDG state dir, level from GPUMON_LOG_LEVEL."""

from __future__ import annotations

import logging
import logging.handlers
import os
from collections.abc import Mapping
from pathlib import Path

LEVEL_VARIABLE = "GPUMON_LOG_LEVEL"
DEFAULT_LEVEL = logging.WARNING
MAX_BYTES = 1 << 20
"""A log file rotates at 1 MiB ..."""
BACKUPS = 2
"""... keeping this many old ones: at most 3 MiB on disk."""
FORMAT = "%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s"

_handler: logging.Handler | None = None


class _QuietFileHandler(logging.handlers.RotatingFileHandler):
    """A file that stops taking records (a full disk) drops them: logging's own complaint would go to stderr."""

    def handleError(self, record: logging.LogRecord) -> None:
        pass


def log_path(environ: Mapping[str, str] = os.environ) -> Path:
    """$XDG_STATE_HOME/gpumon/gpumon.log, or ~/.local/state/gpumon/gpumon.log (a relative XDG_STATE_HOME is ignored,
    as the XDG spec says)."""
    base = environ.get("XDG_STATE_HOME", "")
    root = Path(base) if base and os.path.isabs(base) else Path(environ.get("HOME") or Path.home()) / ".local" / "state"
    return root / "gpumon" / "gpumon.log"


def log_level(environ: Mapping[str, str] = os.environ) -> int:
    """GPUMON_LOG_LEVEL as a level: a name (debug, INFO...) or a number; anything else is WARNING."""
    text = environ.get(LEVEL_VARIABLE, "").strip()
    if text.isdigit():
        return int(text)
    level = logging.getLevelName(text.upper()) if text else DEFAULT_LEVEL
    return level if isinstance(level, int) else DEFAULT_LEVEL


def configure(environ: Mapping[str, str] = os.environ) -> Path | None:
    """Send the `gpumon` loggers to the log file and nowhere else (never the terminal, where a dashboard may be
    drawing); the file's path, or None where it cannot be opened (then records are dropped, quietly)."""
    global _handler
    logger = logging.getLogger("gpumon")
    logger.setLevel(log_level(environ))
    logger.propagate = False  # the root logger's handlers (and logging's last resort, stderr) never see them
    if _handler is not None:
        logger.removeHandler(_handler)
        _handler.close()
    path = log_path(environ)
    handler: logging.Handler
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handler = _QuietFileHandler(path, maxBytes=MAX_BYTES, backupCount=BACKUPS, encoding="utf-8")
    except OSError:
        handler = logging.NullHandler()
    handler.setFormatter(logging.Formatter(FORMAT))
    logger.addHandler(handler)
    _handler = handler
    return path if isinstance(handler, _QuietFileHandler) else None
