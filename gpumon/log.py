"""The gpumon package's log: a size-capped rotating file under the XDG state dir, level from GPUMON_LOG_LEVEL."""

from __future__ import annotations

import io
import logging
import logging.handlers
import os
from collections.abc import Mapping
from pathlib import Path

from gpumon.private_files import make_private_dirs

LEVEL_VARIABLE = "GPUMON_LOG_LEVEL"
DEFAULT_LEVEL = logging.WARNING
MAX_BYTES = 1 << 20
"""A log file rotates at 1 MiB ..."""
BACKUPS = 2
"""... keeping this many old ones: at most 3 MiB on disk."""
FORMAT = "%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s"

_handler: logging.Handler | None = None


class _QuietFileHandler(logging.handlers.RotatingFileHandler):
    """A file that stops taking records (a full disk) drops them: logging's own complaint would go to stderr.

    The file is created 0600 (records hold command lines) and never opened through a symlink."""

    def handleError(self, record: logging.LogRecord) -> None:
        pass

    def _open(self) -> io.TextIOWrapper:
        # "a" is the only mode a rotating file is opened with
        return open(self.baseFilename, "a", encoding=self.encoding, errors=self.errors, opener=_private_opener)


def _private_opener(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)


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
    drawing); the file's path, or None where it cannot be opened (then records are dropped, quietly).

    Its directory is created 0700 (with any missing parent); an existing one is used only when it is ours and
    nobody else may write in it, and is never chmodded."""
    global _handler
    logger = logging.getLogger("gpumon")
    logger.setLevel(log_level(environ))
    logger.propagate = False  # the root logger's handlers (and logging's last resort, stderr) never see them
    if _handler is not None:
        logger.removeHandler(_handler)
        _handler.close()
    path = log_path(environ)
    handler: logging.Handler = logging.NullHandler()
    if make_private_dirs(str(path.parent)) is None:
        try:
            handler = _QuietFileHandler(path, maxBytes=MAX_BYTES, backupCount=BACKUPS, encoding="utf-8")
        except OSError:
            pass
    handler.setFormatter(logging.Formatter(FORMAT))
    logger.addHandler(handler)
    _handler = handler
    return path if isinstance(handler, _QuietFileHandler) else None
