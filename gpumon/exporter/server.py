"""The /metrics HTTP(S) server: prometheus_client's WSGI app behind optional basic auth, one thread per request
(bounded in number and in time; a newcomer evicts the oldest connection still waiting for its request), TLS
handshakes on the request's thread so a silent client blocks nobody."""

from __future__ import annotations

import base64
import hmac
import os
import socket
import ssl
import stat
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from socketserver import ThreadingMixIn
from typing import Any, cast
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import make_wsgi_app
from prometheus_client.registry import CollectorRegistry

MAX_CONNECTIONS = 16
"""Connections open at once. A newcomer beyond it evicts the oldest one still waiting for its request; with every
one being answered, it is closed at once (Prometheus scrapes one at a time)."""
REQUEST_TIMEOUT = 10.0
"""Seconds a connection may take to send its request (or finish its TLS handshake) before it is dropped."""
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
        context.load_cert_chain(certfile=files.certfile, keyfile=files.keyfile)
        if files.client_cafile is not None:
            context.load_verify_locations(cafile=files.client_cafile)
            context.verify_mode = ssl.CERT_REQUIRED
    except (OSError, ssl.SSLError) as error:
        raise ServerConfigError(f"cannot load the TLS certificate, key or client CA: {error}") from None
    return context


def read_basic_auth_file(path: str) -> tuple[str, str]:
    """(user, password) from a file holding one 'user:password' line, readable by its owner only."""
    try:
        info = os.stat(path)
        with open(path, encoding="utf-8") as stream:
            line = stream.readline(4096).rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as error:
        raise ServerConfigError(f"cannot read the basic auth file {path!r}: {error}") from None
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


class _QuietHandler(WSGIRequestHandler):
    timeout = REQUEST_TIMEOUT
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes are not logged."""

    def parse_request(self) -> bool:
        parsed = super().parse_request()
        if parsed:  # the request line and headers are in: no longer a connection to evict for a newcomer
            self.server.request_read()
        return parsed


class _Connection:
    """One accepted connection: the socket its thread reads (the TLS one once wrapped)."""

    __slots__ = ("sock",)

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def evict(self) -> None:
        try:  # the plain socket's shutdown (not SSLSocket's): wakes its thread's read at once, from here
            socket.socket.shutdown(self.sock, socket.SHUT_RDWR)
        except OSError:
            pass


class _Server(ThreadingMixIn, WSGIServer):
    """At most MAX_CONNECTIONS connections; when they are all taken, a newcomer evicts the oldest one still
    waiting for its request (idle, silent, mid-handshake or trickling headers): only connections being answered
    hold their place, so idle or slow clients never lock scrapes out."""

    daemon_threads = True
    block_on_close = False
    request_queue_size = 64
    tls: ssl.SSLContext | None = None

    def server_activate(self) -> None:
        super().server_activate()
        self._lock = threading.Lock()
        self._open = 0
        self._waiting: dict[int, _Connection] = {}  # id(request) -> connection, oldest first
        self._local = threading.local()

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._lock:
            if self._open >= MAX_CONNECTIONS:
                if not self._waiting or self._open >= 2 * MAX_CONNECTIONS:  # all being answered, or evictees
                    self.shutdown_request(request)  # still leaving: the newcomer is closed at once
                    return
                oldest = next(iter(self._waiting))
                self._waiting.pop(oldest).evict()
            self._open += 1
            self._waiting[id(request)] = _Connection(request)
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._forget(request)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        self._local.key = id(request)
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._forget(request)

    def _forget(self, request: Any) -> None:
        with self._lock:
            self._open -= 1
            self._waiting.pop(id(request), None)

    def request_read(self) -> None:
        """The calling connection's request is read: it is being answered, and keeps its place."""
        with self._lock:
            self._waiting.pop(getattr(self._local, "key", -1), None)

    def finish_request(self, request: Any, client_address: Any) -> None:
        request.settimeout(REQUEST_TIMEOUT)
        if self.tls is None:
            super().finish_request(request, client_address)
            return
        try:
            wrapped = self.tls.wrap_socket(request, server_side=True)
        except (OSError, ssl.SSLError):  # a failed or silent handshake costs only this connection
            return
        with self._lock:
            connection = self._waiting.get(id(request))
            if connection is not None:
                connection.sock = wrapped
        try:
            super().finish_request(wrapped, client_address)
        finally:
            wrapped.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that goes away mid-answer is not worth a traceback."""


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
        server_class = cast("type[_Server]", type("_Server", (_Server,), {"address_family": _family(host, port)}))
        try:
            self._httpd: _Server = make_server(host, port, app, server_class, handler_class=_QuietHandler)
        except OSError as error:
            raise ServerConfigError(f"cannot listen on {address}: {error.strerror or error}") from None
        self._httpd.tls = tls_context(tls) if tls is not None else None
        self.scheme = "https" if tls is not None else "http"
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="gpumon-exporter-http", daemon=True)

    @property
    def host(self) -> str:
        return str(self._httpd.server_address[0])

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}/metrics"

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        if self._thread.is_alive():
            self._httpd.shutdown()
        self._httpd.server_close()


def _family(host: str, port: int) -> socket.AddressFamily:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as error:
        raise ServerConfigError(f"cannot listen on {host!r}: {error}") from None
    return infos[0][0]
