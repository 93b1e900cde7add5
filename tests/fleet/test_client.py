"""The PromQL client: Prometheus's recorded JSON answers parsed to typed results, every failure one printable line."""

from __future__ import annotations

import socket
import threading
import time

import pytest
from fleet_helpers import closed_port_url, recorded, recorded_prometheus

from gpumon.fleet.client import PromClient, PromError, check_url, parse_matrix, parse_vector


def test_instant_answer_parsed_per_host() -> None:
    samples = parse_vector(recorded("query-utilization.json"))
    assert {s.label("host"): s.value for s in samples} == {"sim-node-a": 0.44, "sim-node-b": 0.25}
    assert all(s.label("gpu") == "0" for s in samples)


def test_range_answer_parsed_oldest_first() -> None:
    series = parse_matrix(recorded("query_range-utilization.json"))
    assert {s.label("host") for s in series} == {"sim-node-a", "sim-node-b"}
    for one in series:
        stamps = [stamp for stamp, _ in one.points]
        assert len(stamps) >= 2 and stamps == sorted(stamps)
        assert {value for _, value in one.points} <= {0.44, 0.25}


def test_empty_answer_is_no_samples() -> None:
    assert parse_vector(recorded("query-empty.json")) == ()


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"<html>proxy error</html>", "not JSON"),
        (b"[1, 2]", "not an object"),
        (b'{"status":"success"}', "without data"),
        (b'{"status":"success","data":{"resultType":"matrix","result":[]}}', "where a vector was expected"),
        (b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{}}]}}', "without value"),
        (
            b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"x"]}]}}',
            "not a number",
        ),
        (b'{"status":"error","error":"bad\\u001b[2J\\nthing"}', "Prometheus: bad\\x1b[2J thing"),
    ],
)
def test_bad_answers_are_one_printable_line(body: bytes, expected: str) -> None:
    with pytest.raises(PromError) as raised:
        parse_vector(body)
    message = str(raised.value)
    assert expected in message
    assert "\n" not in message and "\x1b" not in message


def test_prometheus_error_answer_over_http() -> None:
    promql = "rate("
    with (
        recorded_prometheus({promql: (400, recorded("query-bad-promql.json"))}) as url,
        pytest.raises(PromError) as raised,
    ):
        PromClient(url).query(promql)
    assert str(raised.value) == (
        f'Prometheus at {url}: HTTP 400: invalid parameter "query": 1:6: parse error: unclosed left parenthesis'
    )


def test_recorded_answer_over_http() -> None:
    with recorded_prometheus({"up": recorded("query-utilization.json")}) as url:
        assert len(PromClient(url + "/").query("up")) == 2
        assert PromClient(url).query("gpumon_nothing") == ()


def test_lost_prometheus_is_one_line() -> None:
    url = closed_port_url()
    with pytest.raises(PromError) as raised:
        PromClient(url, timeout=2.0).query("up")
    assert str(raised.value) == f"Prometheus at {url} unreachable: Connection refused"


@pytest.mark.parametrize(
    "url", ["ftp://x:9090", "127.0.0.1:9090", "http://", "http://host:99999", "http://host:9090/?q=1", "http://h:x"]
)
def test_bad_urls_refused_in_one_line(url: str) -> None:
    with pytest.raises(ValueError, match=r"^bad Prometheus URL") as raised:
        check_url(url)
    assert "\n" not in str(raised.value)


def test_good_url_loses_its_trailing_slash() -> None:
    assert check_url("https://prom.example:9090/prometheus/") == "https://prom.example:9090/prometheus"


def test_an_answer_that_trickles_in_is_cut_at_the_timeout() -> None:
    """The timeout bounded each read, not the answer: one byte a while kept a query forever."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def trickle() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
            end = time.monotonic() + 8.0  # then closed: without the fix, the query ends here, not at the timeout
            while not stop.wait(0.05) and time.monotonic() < end:
                try:
                    conn.sendall(b" ")
                except OSError:
                    return

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    client = PromClient(f"http://127.0.0.1:{listener.getsockname()[1]}", timeout=1.0)
    started = time.monotonic()
    try:
        with pytest.raises(PromError, match="too long"):
            client.query("up")
        assert time.monotonic() - started < 5.0
    finally:
        stop.set()
        listener.close()
        thread.join(5)
