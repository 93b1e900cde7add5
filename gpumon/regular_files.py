"""Files named on the command line read as regular files only: a FIFO, device or directory is refused, not waited on."""

from __future__ import annotations

import errno
import os
import stat

NOT_REGULAR = "not a regular file"


def check_regular(path: str) -> None:
    """OSError (strerror NOT_REGULAR, or why it cannot be looked at) unless `path` is a regular file."""
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise OSError(errno.EINVAL, NOT_REGULAR, path)


def read_regular(path: str, limit: int) -> bytes:
    """Up to `limit` bytes of the regular file `path`, opened without blocking (a FIFO's open would wait for a
    writer); OSError (strerror NOT_REGULAR) for anything else."""
    check_regular(path)
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):  # swapped for something else since the check
            raise OSError(errno.EINVAL, NOT_REGULAR, path)
        parts: list[bytes] = []
        size = 0
        while size < limit and (part := os.read(descriptor, limit - size)):
            parts.append(part)
            size += len(part)
        return b"".join(parts)
    finally:
        os.close(descriptor)
