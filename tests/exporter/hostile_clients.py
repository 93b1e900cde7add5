"""Clients that hold an exporter's connections without asking for anything: silent ones that never start their TLS
handshake, slow ones trickling a real ClientHello a byte at a time; each is opened again as soon as it drops."""

from __future__ import annotations

import selectors
import socket
import ssl
import threading
import time
from types import TracebackType


def client_hello() -> bytes:
    """The first flight of a real TLS client (what a scraper sends on connecting)."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    tls = context.wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    try:
        tls.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


class HostileClients:
    """`silent` + `slow` connections to `port`, kept open (reopened when dropped) on a thread until closed.

    `source` is the address they connect from (127.0.0.x on loopback); `trickle` the seconds between two bytes of a
    slow client's ClientHello."""

    def __init__(
        self,
        port: int,
        silent: int,
        slow: int,
        source: str = "127.0.0.1",
        trickle: float = 0.2,
        host: str = "127.0.0.1",
    ) -> None:
        self._address = (host, port)
        self._source = source
        self._trickle = trickle
        self._hello = client_hello()
        self._selector = selectors.DefaultSelector()
        self._sent: dict[socket.socket, int] = {}  # slow client -> bytes of the hello sent
        self._stop = threading.Event()
        self.reopened = 0
        self.opened = 0
        for _ in range(silent):
            self._open(slow=False)
        for _ in range(slow):
            self._open(slow=True)
        self._thread = threading.Thread(target=self._run, name="hostile-clients", daemon=True)

    def __enter__(self) -> HostileClients:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        for key in list(self._selector.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]
        self._selector.close()

    def open_count(self) -> int:
        return len(self._selector.get_map())

    def _open(self, slow: bool) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind((self._source, 0))
        sock.settimeout(5)
        try:
            sock.connect(self._address)
        except OSError:
            sock.close()
            return
        sock.setblocking(False)
        self.opened += 1
        if slow:
            self._sent[sock] = 0
        self._selector.register(sock, selectors.EVENT_READ, slow)

    def _drop(self, sock: socket.socket, slow: bool) -> None:
        self._selector.unregister(sock)
        self._sent.pop(sock, None)
        sock.close()
        if not self._stop.is_set():
            self.reopened += 1
            self._open(slow)

    def _run(self) -> None:
        next_trickle = time.monotonic()
        while not self._stop.is_set():
            for key, _ in self._selector.select(timeout=0.05):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                try:
                    closed = not sock.recv(4096)
                except BlockingIOError:
                    closed = False
                except OSError:
                    closed = True
                if closed:
                    self._drop(sock, key.data)
            if time.monotonic() >= next_trickle:
                next_trickle = time.monotonic() + self._trickle
                for sock, sent in list(self._sent.items()):
                    try:
                        sock.send(self._hello[sent % len(self._hello) : sent % len(self._hello) + 1])
                        self._sent[sock] = sent + 1
                    except BlockingIOError:
                        pass
                    except OSError:
                        self._drop(sock, slow=True)
