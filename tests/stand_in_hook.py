"""A stand-in hook in a child process: a Unix socket that greets each client with one hello, served as any uid.

Run as a script by StandInHook; root's child drops to the uid asked for before it binds, so the socket file and
the server's SO_PEERCRED are that user's, as a real other user's (or an attacker's) would be.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from typing import Any

from gpumon import protocol


def serve(directory: str, uid: int, name_pid: int, hello: dict[str, Any], dead: bool) -> None:
    if uid != os.getuid():
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    pid = os.getpid()
    path = os.path.join(directory, f"{name_pid or pid}.sock")
    greeting = (json.dumps({**hello, "pid": hello.get("pid") or pid}) + "\n").encode()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    if dead:  # a socket file nobody will ever listen on (what a planted dead socket is)
        print(f"ready {pid} {path}", flush=True)
        return
    listener.listen(16)
    print(f"ready {pid} {path}", flush=True)
    clients = []
    while True:
        conn, _ = listener.accept()
        try:
            conn.sendall(greeting)
        except OSError:
            continue
        clients.append(conn)


class StandInHook:
    """The child serving (or, `dead`, leaving) `<directory>/<name_pid or its own pid>.sock` as `uid`, greeting with
    `hello` (its pid: the child's own unless given). Stop it with stop(); its socket file is removed then."""

    def __init__(
        self,
        directory: str,
        *,
        uid: int | None = None,
        name_pid: int = 0,
        hello: dict[str, Any] | None = None,
        dead: bool = False,
    ) -> None:
        fields = {"type": "hello", "protocol": protocol.PROTOCOL_VERSION, "argv": ["stand-in"], **(hello or {})}
        arguments = [directory, str(os.getuid() if uid is None else uid), str(name_pid), json.dumps(fields)]
        self.proc = subprocess.Popen(
            [sys.executable, __file__, *arguments, "dead" if dead else "live"],
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        assert self.proc.stdout is not None
        ready = self.proc.stdout.readline().split()
        if not ready or ready[0] != "ready":
            self.stop()
            raise RuntimeError(f"the stand-in hook did not start (exit code {self.proc.poll()})")
        self.pid = int(ready[1])
        self.path = ready[2]

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        if getattr(self, "path", None) and os.path.lexists(self.path):
            os.unlink(self.path)


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4]), sys.argv[5] == "dead")
