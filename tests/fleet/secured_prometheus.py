"""A real Prometheus (the Debian `prometheus` binary) behind TLS and basic auth (--web.config.file), for the fleet
client's credentials tests: a self-signed certificate from `openssl`, the password hashed with bcrypt by `crypt`."""

from __future__ import annotations

import shutil
import subprocess
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from gpumon.fleet import PromClient, PromError
from gpumon.fleet.auth import read_auth
from tests.prometheus_server import NO_BINARY, STARTUP_TIMEOUT, exited, launched_prometheus, prometheus_binary

USER, PASSWORD = "fleet-admin", "s3cret-pa55"


def missing_tools() -> str | None:
    """Why this Prometheus cannot be had here, or None."""
    if prometheus_binary() is None:
        return NO_BINARY
    if shutil.which("openssl") is None:
        return "no openssl binary to make a test certificate"
    if _bcrypt(PASSWORD) is None:
        return "this Python's crypt module cannot hash bcrypt (Prometheus's web config needs it)"
    return None


def _bcrypt(password: str) -> str | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            import crypt  # stdlib up to 3.12; deprecated, but the only bcrypt without a new package
    except ImportError:
        return None
    try:
        hashed = crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=1 << 4))
    except (OSError, ValueError):
        return None
    return hashed if hashed and hashed.startswith("$2") else None


@dataclass(frozen=True)
class Secured:
    url: str
    ca_file: Path
    basic_auth_file: Path


@contextmanager
def secured_prometheus(tmp_path: Path) -> Iterator[Secured]:
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
            "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
            "-keyout", str(tmp_path / "server.key"), "-out", str(tmp_path / "server.crt"),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    (tmp_path / "web.yml").write_text(
        f"tls_server_config:\n  cert_file: {tmp_path / 'server.crt'}\n  key_file: {tmp_path / 'server.key'}\n"
        f"basic_auth_users:\n  {USER}: '{_bcrypt(PASSWORD)}'\n"
    )
    credentials = tmp_path / "basic-auth"
    credentials.write_text(f"{USER}:{PASSWORD}\n")
    config = "global:\n  scrape_interval: 1s\nscrape_configs: []\n"
    with launched_prometheus(tmp_path, config, [f"--web.config.file={tmp_path / 'web.yml'}"]) as (server, port):
        secured = Secured(f"https://127.0.0.1:{port}", tmp_path / "server.crt", credentials)
        _wait_ready(secured, server, tmp_path)
        yield secured


def _wait_ready(secured: Secured, server: subprocess.Popen[bytes], tmp_path: Path) -> None:
    client = PromClient(
        secured.url,
        timeout=2.0,
        auth=read_auth(secured.url, basic_auth_file=str(secured.basic_auth_file), ca_file=str(secured.ca_file)),
    )
    deadline = time.monotonic() + STARTUP_TIMEOUT
    last = ""
    while time.monotonic() < deadline:
        exited(server, tmp_path)
        try:
            client.query("vector(1)")
            return
        except PromError as error:
            last = str(error)
        time.sleep(0.2)
    raise AssertionError(f"prometheus not ready within {STARTUP_TIMEOUT} s: {last}")
