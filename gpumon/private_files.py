"""Where gpumon writes its own files: directories it creates are 0700, files 0600, never through a symlink; an
existing directory is used only when it is ours and nobody else may write in it, and is never chmodded."""

from __future__ import annotations

import os
import stat

PRIVATE_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
"""A new file only: an existing name, a symlink included, is an error (EEXIST) rather than followed or truncated."""


def shared_dir_reason(path: str, uid: int | None = None) -> str | None:
    """Why gpumon must not write into the existing directory `path`, or None when it may.

    It may when `path` is a real directory (not a symlink) owned by `uid` (default: ours) that group and others
    cannot write: nobody else can then put a symlink or a file where gpumon is about to create one."""
    uid = os.getuid() if uid is None else uid
    try:
        st = os.lstat(path)
    except OSError as exc:
        return f"{path}: {exc.strerror}"
    if stat.S_ISLNK(st.st_mode):
        return f"{path} is a symlink"
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a directory"
    if st.st_uid != uid:
        return f"{path} is owned by uid {st.st_uid}, not {uid}"
    if st.st_mode & 0o022:
        return f"{path} is writable by others (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def make_private_dir(path: str) -> str | None:
    """Create `path` (mode 0700; its parent must exist) or check the existing one; why it is unusable, or None.

    An existing directory keeps its mode and owner: it is used as it is (shared_dir_reason) or refused."""
    try:
        os.mkdir(path, 0o700)  # the umask can only narrow it; it is process-wide, so it is left alone
    except FileExistsError:
        pass
    except OSError as exc:
        return f"cannot create {path}: {exc.strerror}"
    return shared_dir_reason(path)


def make_private_dirs(path: str) -> str | None:
    """make_private_dir for `path`, creating each missing parent 0700 first (existing parents are left alone)."""
    missing = []
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.lexists(parent):
        missing.append(parent)
        parent = os.path.dirname(parent)
    for directory in reversed(missing):
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:
            pass
        except OSError as exc:
            return f"cannot create {directory}: {exc.strerror}"
    return make_private_dir(path)


def create_private_file(path: str) -> int:
    """A descriptor of the new file `path`, mode 0600, open for writing; OSError (EEXIST) where anything, a symlink
    included, is already at `path`."""
    return os.open(path, PRIVATE_FILE_FLAGS, 0o600)
