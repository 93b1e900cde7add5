"""Choosing the hook's socket directory: the first safe one of the usual places, else a private one; and why
each place before it was refused (a directory pre-created by another user, a symlink, a file)."""

from __future__ import annotations

import os
import tempfile

from gpumon import protocol


def prepare_socket_dir(directory: str) -> str | None:
    """Create (mode 0700) or check the socket directory; return why it is unusable, or None.

    An existing directory is never chmodded: one that is not ours, is a symlink, or that group or others may
    enter is refused as it is (protocol.unsafe_dir_reason, the check discovery makes too).
    """
    try:
        os.mkdir(directory, 0o700)  # the umask can only narrow it; it is process-wide, so it is left alone
    except FileExistsError:
        pass
    except OSError as exc:
        return f"cannot create {directory}: {exc.strerror}"
    return protocol.unsafe_dir_reason(directory)


def choose_socket_dir(
    candidates: list[str], *, private_base: str | None = protocol.PRIVATE_DIR_BASE
) -> tuple[str | None, list[str]]:
    """(the directory to serve in or None, the refusals on the way).

    Tries `candidates` in order (protocol.fixed_socket_dirs(): what discovery searches, in the same order). A
    refusal is a place that exists but is unsafe; a place that cannot be created (no /run/user/<uid>) is skipped
    quietly. When none is usable and `private_base` is given: an existing safe gpumon-<uid>-* directory there, else
    a new one (mkdtemp: random name, mode 0700) - discovery lists these too (protocol.private_socket_dirs).
    """
    refused: list[str] = []
    for directory in candidates:
        reason = prepare_socket_dir(directory)
        if reason is None:
            return directory, refused
        if os.path.lexists(directory):
            refused.append(reason)
    if private_base is None:
        return None, refused
    prefix = protocol.PRIVATE_DIR_PREFIX.format(uid=os.getuid())
    for directory in sorted(os.listdir(private_base)) if os.path.isdir(private_base) else []:
        path = os.path.join(private_base, directory)
        if directory.startswith(prefix) and protocol.unsafe_dir_reason(path) is None:
            return path, refused
    try:
        return tempfile.mkdtemp(prefix=prefix, dir=private_base), refused
    except OSError as exc:
        refused.append(f"cannot create a private directory in {private_base}: {exc.strerror}")
        return None, refused
