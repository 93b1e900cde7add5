"""How the fleet view proves itself to Prometheus: a bearer token or basic-auth file, a CA file, extra headers.

Secrets are read from files (never from the command line, where `ps` shows them) and never printed: every error
names the file and what is wrong with it, not its content. A token file is read again when it changes (a
Kubernetes service-account token rotates under a running pod).
"""

from __future__ import annotations

import base64
import os
import re
import ssl
from collections.abc import Sequence
from dataclasses import dataclass, field

from gpumon.printable import printable
from gpumon.regular_files import check_regular, read_regular

MAX_SECRET_BYTES = 64 * 1024
"""A credentials file bigger than this is refused (a token is a few KiB at most)."""
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
"""RFC 9110's token: the characters a header name may hold."""
_FORBIDDEN_HEADERS = frozenset({"authorization", "host", "content-length", "transfer-encoding", "connection"})


class AuthError(ValueError):
    """One line naming the file or flag and what is wrong with it (never the secret)."""


@dataclass(frozen=True, slots=True)
class SecretFile:
    """A file holding one credential line; `kind` names it in errors ('bearer token file')."""

    path: str
    kind: str

    def read(self) -> str:
        """The file's one line, stripped; AuthError when it cannot be read, is empty, or holds what no header may."""
        name = printable(self.path)
        try:
            raw = read_regular(self.path, MAX_SECRET_BYTES + 1)
        except OSError as error:
            raise AuthError(f"cannot read {self.kind} {name}: {error.strerror or type(error).__name__}") from None
        if len(raw) > MAX_SECRET_BYTES:
            raise AuthError(f"{self.kind} {name} is over {MAX_SECRET_BYTES} bytes")
        try:
            text = raw.decode("ascii").strip()
        except UnicodeDecodeError:
            raise AuthError(f"{self.kind} {name} holds non-ASCII bytes") from None
        if not text:
            raise AuthError(f"{self.kind} {name} is empty")
        if any(not char.isprintable() for char in text):
            raise AuthError(f"{self.kind} {name} holds more than one line or control characters")
        return text

    def stamp(self) -> tuple[float, int] | None:
        try:
            status = os.stat(self.path)
        except OSError:
            return None
        return (status.st_mtime, status.st_size)


@dataclass(slots=True)
class PromAuth:
    """Headers for every request (the Authorization one re-read when its file changes) and the TLS context."""

    token_file: SecretFile | None = None
    basic_auth_file: SecretFile | None = None
    headers: tuple[tuple[str, str], ...] = ()
    tls: ssl.SSLContext | None = None
    _authorization: str | None = field(default=None, repr=False)
    _stamp: tuple[float, int] | None = field(default=None, repr=False)

    def __repr__(self) -> str:  # never the secret
        return f"PromAuth(headers={[name for name, _ in self.headers]}, tls={self.tls is not None})"

    def authorization(self) -> str | None:
        """The Authorization header's value, read again when its file changed; AuthError when it went bad."""
        source = self.token_file or self.basic_auth_file
        if source is None:
            return None
        stamp = source.stamp()
        if self._authorization is None or stamp != self._stamp:
            self._authorization = _authorization(source)
            self._stamp = stamp
        return self._authorization


def _authorization(source: SecretFile) -> str:
    secret = source.read()
    if source.kind == BASIC_AUTH_KIND:
        if ":" not in secret or not secret.split(":", 1)[0]:
            raise AuthError(f"{source.kind} {printable(source.path)} is not one line 'user:password'")
        return "Basic " + base64.b64encode(secret.encode("ascii")).decode("ascii")
    return "Bearer " + secret


BEARER_KIND = "bearer token file"
BASIC_AUTH_KIND = "basic auth file"


def parse_header(text: str) -> tuple[str, str]:
    """'X-Scope-OrgID: team' -> ('X-Scope-OrgID', 'team'); AuthError naming only the header's name when bad."""
    name, colon, value = text.partition(":")
    name, value = name.strip(), value.strip()
    if not colon or not _HEADER_NAME.fullmatch(name):
        shown = printable(name[:40]) if _HEADER_NAME.fullmatch(name) else "?"
        raise AuthError(f"bad --header (name {shown}): expected 'Name: value'")
    if name.lower() in _FORBIDDEN_HEADERS:
        raise AuthError(f"--header {name}: not allowed (use --bearer-token-file or --basic-auth-file for credentials)")
    if any(not char.isprintable() for char in value):
        raise AuthError(f"--header {name}: its value holds control characters")
    return name, value


def read_auth(
    base_url: str,
    bearer_token_file: str | None = None,
    basic_auth_file: str | None = None,
    ca_file: str | None = None,
    headers: Sequence[str] = (),
) -> PromAuth:
    """Check every file and header now (AuthError with one line), so a bad one fails before any view starts."""
    if bearer_token_file is not None and basic_auth_file is not None:
        raise AuthError("--bearer-token-file and --basic-auth-file: choose one")
    https = base_url.lower().startswith("https://")
    if ca_file is not None and not https:
        raise AuthError("--ca-file needs an https:// Prometheus URL")
    auth = PromAuth(
        token_file=SecretFile(bearer_token_file, BEARER_KIND) if bearer_token_file is not None else None,
        basic_auth_file=SecretFile(basic_auth_file, BASIC_AUTH_KIND) if basic_auth_file is not None else None,
        headers=tuple(parse_header(header) for header in headers),
        tls=_tls(ca_file) if https else None,
    )
    auth.authorization()
    return auth


def _tls(ca_file: str | None) -> ssl.SSLContext:
    """The system's CAs, or only those of `ca_file`."""
    if ca_file is None:
        return ssl.create_default_context()
    try:
        check_regular(ca_file)  # ssl opens it by name, and would wait forever on a FIFO
        return ssl.create_default_context(cafile=ca_file)
    except FileNotFoundError:
        raise AuthError(f"cannot read CA file {printable(ca_file)}: No such file or directory") from None
    except ssl.SSLError:  # an OSError too: first
        raise AuthError(f"CA file {printable(ca_file)} holds no PEM certificate") from None
    except OSError as error:
        raise AuthError(f"cannot read CA file {printable(ca_file)}: {error.strerror or 'unreadable'}") from None
