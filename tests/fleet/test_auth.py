"""`--prometheus` with credentials: a bearer token or basic-auth file, a CA file, extra headers; against a real
Prometheus behind TLS and basic auth where one can be had. A secret is never printed; a bad file is one line."""

from __future__ import annotations

import base64
import os
import re
from pathlib import Path

import pytest
from fleet_helpers import recorded_prometheus
from secured_prometheus import PASSWORD, USER, missing_tools, secured_prometheus

from gpumon.cli import main
from gpumon.fleet import PromClient, PromError
from gpumon.fleet.auth import AuthError, read_auth

TOKEN = "tok-0123456789abcdef"


def token_file(tmp_path: Path, text: str = TOKEN + "\n", name: str = "token") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_token_and_headers_reach_prometheus(tmp_path: Path) -> None:
    seen: list[dict[str, str]] = []
    with recorded_prometheus({}, headers_seen=seen) as url:
        auth = read_auth(url, bearer_token_file=str(token_file(tmp_path)), headers=["X-Scope-OrgID: team-a"])
        PromClient(url, auth=auth).query("up")
    headers = {name.lower(): value for name, value in seen[-1].items()}  # HTTP header names have no case
    assert headers["authorization"] == f"Bearer {TOKEN}"
    assert headers["x-scope-orgid"] == "team-a"
    assert TOKEN not in repr(auth)


def test_basic_auth_file_and_a_rotated_token_is_read_again(tmp_path: Path) -> None:
    seen: list[dict[str, str]] = []
    basic = token_file(tmp_path, "user:pa:ss\n", "basic")
    token = token_file(tmp_path)
    with recorded_prometheus({}, headers_seen=seen) as url:
        PromClient(url, auth=read_auth(url, basic_auth_file=str(basic))).query("up")
        assert seen[-1]["Authorization"] == "Basic " + base64.b64encode(b"user:pa:ss").decode()
        client = PromClient(url, auth=read_auth(url, bearer_token_file=str(token)))
        token.write_text("tok-rotated-and-longer\n")
        os.utime(token, (1, 1))  # a new mtime even on a coarse clock
        client.query("up")
    assert seen[-1]["Authorization"] == "Bearer tok-rotated-and-longer"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"bearer_token_file": "/nonexistent/token"}, "cannot read bearer token file /nonexistent/token: No such file"),
        ({"basic_auth_file": "TOKEN_FILE"}, "basic auth file TOKEN_FILE is not one line 'user:password'"),
        ({"bearer_token_file": "EMPTY"}, "bearer token file EMPTY is empty"),
        ({"bearer_token_file": "TWO_LINES"}, "bearer token file TWO_LINES holds more than one line"),
        ({"ca_file": "/nonexistent/ca.pem"}, "--ca-file needs an https:// Prometheus URL"),
        ({"headers": ["X-Scope-OrgID team"]}, "bad --header (name ?): expected 'Name: value'"),
        ({"headers": ["Authorization: Bearer x"]}, "--header Authorization: not allowed"),
        ({"headers": ["X-A: b\x1bc"]}, "--header X-A: its value holds control characters"),
    ],
)
def test_bad_credentials_are_one_line_without_the_secret(
    tmp_path: Path, kwargs: dict[str, object], message: str
) -> None:
    files = {
        "TOKEN_FILE": token_file(tmp_path),
        "EMPTY": token_file(tmp_path, "\n", "empty"),
        "TWO_LINES": token_file(tmp_path, f"{TOKEN}\nsecond\n", "two"),
    }
    resolved = {
        key: str(files[value]) if isinstance(value, str) and value in files else value for key, value in kwargs.items()
    }
    with pytest.raises(AuthError) as raised:
        read_auth("http://127.0.0.1:9090", **resolved)  # type: ignore[arg-type]
    text = str(raised.value)
    for name, path in files.items():
        text = text.replace(str(path), name)
    assert text.startswith(message) and "\n" not in text and TOKEN not in text


def test_a_bad_ca_file_is_one_line(tmp_path: Path) -> None:
    not_pem = token_file(tmp_path, "not a certificate\n", "ca.pem")
    with pytest.raises(AuthError, match=f"^CA file {re.escape(str(not_pem))} holds no PEM certificate$"):
        read_auth("https://prom:9090", ca_file=str(not_pem))
    with pytest.raises(AuthError, match=r"^cannot read CA file /nonexistent/ca\.pem: No such file or directory$"):
        read_auth("https://prom:9090", ca_file="/nonexistent/ca.pem")


def test_the_cli_says_one_line_and_exits_2_never_printing_the_secret(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = token_file(tmp_path, f"{TOKEN}\nsecond\n")
    argv = ["fleet", "--prometheus", "http://127.0.0.1:9090", "--bearer-token-file", str(bad)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err == f"gpumon: error: bearer token file {bad} holds more than one line or control characters\n"
    assert main([*argv[:3], "--bearer-token-file", str(bad), "--basic-auth-file", str(bad)]) == 2
    assert capsys.readouterr().err == "gpumon: error: --bearer-token-file and --basic-auth-file: choose one\n"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    why = missing_tools()
    if why is not None:
        pytest.skip(why)
    with secured_prometheus(tmp_path_factory.mktemp("secured")) as found:
        yield found


def test_real_prometheus_with_tls_and_basic_auth(secured, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    auth = read_auth(secured.url, basic_auth_file=str(secured.basic_auth_file), ca_file=str(secured.ca_file))
    (answer,) = PromClient(secured.url, auth=auth).query("vector(42)")
    assert answer.value == 42.0

    wrong = token_file(tmp_path, f"{USER}:not-{PASSWORD}\n", "wrong")
    auth = read_auth(secured.url, basic_auth_file=str(wrong), ca_file=str(secured.ca_file))
    with pytest.raises(PromError) as refused:
        PromClient(secured.url, auth=auth).query("vector(1)")
    assert "HTTP 401" in str(refused.value) and PASSWORD not in str(refused.value)

    system_cas = read_auth(secured.url, basic_auth_file=str(secured.basic_auth_file))
    with pytest.raises(PromError) as untrusted:
        PromClient(secured.url, auth=system_cas).query("vector(1)")
    assert "unreachable" in str(untrusted.value) and "certificate" in str(untrusted.value).lower()
