"""The /metrics HTTP(S) server: prometheus_client's WSGI app behind optional basic auth. Connections come in through
the intake (gpumon/exporter/intake.py: non-blocking TLS handshakes, deadlines, caps per address and on request
heads), so idle, silent or slow clients hold no thread and never starve a scrape."""

from __future__ import annotations

import base64
import hmac
import io
import os
import socket
import ssl
import stat
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, cast
from wsgiref.simple_server import WSGIRequestHandler

from prometheus_client import make_wsgi_app
from prometheus_client.registry import CollectorRegistry

from gpumon.exporter.intake import Intake
from gpumon.regular_files import check_regular, read_regular

BACKLOG = 128
"""Connections the kernel queues before the intake accepts them (20 at once overflowed 5, costing seconds of SYN
retries)."""
TLS_MIN_VERSION = ssl.TLSVersion.TLSv1_2

Environ = dict[str, Any]
StartResponse = Callable[..., Any]
WsgiApp = Callable[[Environ, StartResponse], Iterable[bytes]]


class ServerConfigError(ValueError):
    """A listen address, certificate or password file that cannot be used: one line for the user."""


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """A server certificate and key (PEM), and optionally the CA that client certificates must chain to."""

    certfile: str
    keyfile: str
    client_cafile: str | None = None


def parse_listen(text: str) -> tuple[str, int]:
    """'127.0.0.1:PORT', '[::1]:PORT' or ':PORT' (every address) -> (host, port)."""
    host, sep, port_text = text.rpartition(":")
    if not sep or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ServerConfigError(f"{text!r} is not HOST:PORT (e.g. 127.0.0.1:8000, [::1]:8000 or :8000)")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    return host or "0.0.0.0", int(port_text)


def tls_context(files: TlsFiles) -> ssl.SSLContext:
    """A server TLS context (TLS 1.2 or later), as prometheus_client's start_http_server builds it."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = TLS_MIN_VERSION
    try:
        for path in (files.certfile, files.keyfile, files.client_cafile):
            if path is not None:
                check_regular(path)  # ssl opens them by name, and would wait forever on a FIFO
        context.load_cert_chain(certfile=files.certfile, keyfile=files.keyfile)
        if files.client_cafile is not None:
            context.load_verify_locations(cafile=files.client_cafile)
            context.verify_mode = ssl.CERT_REQUIRED
    except (OSError, ssl.SSLError) as error:
        named = f" {error.filename}" if getattr(error, "filename", None) else ""
        reason = error.strerror or error
        raise ServerConfigError(f"cannot load the TLS certificate, key or client CA{named}: {reason}") from None
    return context


def read_basic_auth_file(path: str) -> tuple[str, str]:
    """(user, password) from a file holding one 'user:password' line, readable by its owner only."""
    try:
        info = os.stat(path)
        line = read_regular(path, 4096).decode("utf-8").split("\n", 1)[0].rstrip("\r")
    except OSError as error:
        raise ServerConfigError(f"cannot read the basic auth file {path!r}: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise ServerConfigError(f"the basic auth file {path!r} is not UTF-8 text") from None
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ServerConfigError(f"the basic auth file {path!r} is readable by others: chmod 600 it")
    user, sep, password = line.partition(":")
    if not sep or not user or not password:
        raise ServerConfigError(f"the basic auth file {path!r} must hold one 'user:password' line")
    return user, password


def with_basic_auth(app: WsgiApp, user: str, password: str, realm: str = "gpumon") -> WsgiApp:
    """`app` answering 401 unless the request carries these credentials (compared in constant time)."""
    expected = b"Basic " + base64.b64encode(f"{user}:{password}".encode())

    def guarded(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        given = str(environ.get("HTTP_AUTHORIZATION", "")).encode("utf-8", "replace")
        if hmac.compare_digest(given, expected):
            return app(environ, start_response)
        start_response(
            "401 Unauthorized",
            [("WWW-Authenticate", f'Basic realm="{realm}"'), ("Content-Type", "text/plain; charset=utf-8")],
        )
        return [b"401 Unauthorized\n"]

    return guarded


class _Site:
    """What wsgiref's request handler asks its server for: the application and the CGI variables of every request."""

    def __init__(self, app: WsgiApp, host: str, port: int) -> None:
        self.app = app
        self.base_environ: Environ = {
            "SERVER_NAME": host,
            "GATEWAY_INTERFACE": "CGI/1.1",
            "SERVER_PORT": str(port),
            "REMOTE_HOST": "",
            "CONTENT_LENGTH": "",
            "SCRIPT_NAME": "",
        }

    def get_app(self) -> WsgiApp:
        return self.app


class _SocketWriter(io.BufferedIOBase):
    """A write-only file over a socket, every write sent in full."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self._sock.sendall(data)
        return len(data)


class _HeadHandler(WSGIRequestHandler):
    """wsgiref's handler over a request whose head the intake has read already (no body: /metrics is a GET)."""

    def setup(self) -> None:
        sock, head = self.request
        self.connection = sock
        self.rfile = io.BytesIO(head)
        self.wfile = _SocketWriter(sock)

    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes are not logged."""


class MetricsServer:
    """Serves `registry` on `address` ('HOST:PORT'; port 0 picks a free one) on its own thread."""

    def __init__(
        self,
        registry: CollectorRegistry,
        address: str,
        *,
        tls: TlsFiles | None = None,
        basic_auth: tuple[str, str] | None = None,
    ) -> None:
        host, port = parse_listen(address)
        app: WsgiApp = make_wsgi_app(registry)
        if basic_auth is not None:
            app = with_basic_auth(app, *basic_auth)
        context = tls_context(tls) if tls is not None else None
        try:
            self._listener = socket.create_server((host, port), family=_family(host, port), backlog=BACKLOG)
        except OSError as error:
            raise ServerConfigError(f"cannot listen on {address}: {error.strerror or error}") from None
        self._site = _Site(app, host, self.port)
        self._intake = Intake(self._listener, context, self._answer)
        self.scheme = "https" if tls is not None else "http"
        self._thread = threading.Thread(target=self._intake.serve, name="gpumon-exporter-http", daemon=True)

    def _answer(self, sock: socket.socket, head: bytes, address: Any) -> None:
        _HeadHandler(cast(Any, (sock, head)), address, cast(Any, self._site))

    @property
    def host(self) -> str:
        return str(self._listener.getsockname()[0])

    @property
    def port(self) -> int:
        return int(self._listener.getsockname()[1])

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}/metrics"

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        if self._thread.is_alive():
            self._intake.stop()
            self._thread.join(timeout=5)
        self._listener.close()


def _family(host: str, port: int) -> socket.AddressFamily:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as error:
        raise ServerConfigError(f"cannot listen on {host!r}: {error}") from None
    return infos[0][0]
