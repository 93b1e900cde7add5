"""A small PromQL client over Prometheus's HTTP API (stdlib urllib): instant and range queries, typed results."""

from __future__ import annotations

import http.client
import json
import math
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from gpumon.fleet.auth import AuthError, PromAuth
from gpumon.printable import printable

DEFAULT_TIMEOUT = 5.0
MAX_ANSWER_BYTES = 32 * 1024 * 1024
"""A bigger answer is refused: the fleet view's queries return a few series per GPU and job (a range query over
10,000 GPUs is about 20 MiB; its series past MAX_SERIES are parsed by json but then left out)."""
MAX_SERIES = 2048
"""Series taken from one answer (256 hosts of 8 GPUs); the rest are left out and counted in `PromClient.left_out`
(10,000 GPUs took 15 s a refresh)."""
MAX_LABELS = 48
"""Labels kept per series (the exporter's series carry at most about 20)."""
MAX_LABEL_CHARS = 256
"""A longer label name or value is cut to this, with an ellipsis (2 MB label values took 328 MB)."""
REFRESH_SECONDS = 15.0
"""The most one refresh (every query, each answer read and parsed) may take; past it the refresh fails in one
line, whatever Prometheus answers."""
_CHECK_EVERY = 256
"""Series parsed between two looks at the clock."""
MAX_ERROR_CHARS = 200
MAX_ERROR_BODY_BYTES = 64 * 1024
"""An error answer's body is read up to this much (for Prometheus's own error line)."""
_CHUNK = 64 * 1024


class PromError(Exception):
    """One line saying why a query got no answer (connection, HTTP status, bad JSON, Prometheus's own error)."""


@dataclass(frozen=True, slots=True)
class Sample:
    """One series' newest value from an instant query."""

    labels: tuple[tuple[str, str], ...]
    value: float

    def label(self, name: str) -> str | None:
        return dict(self.labels).get(name)


@dataclass(frozen=True, slots=True)
class Series:
    """One series' values over time from a range query, oldest first."""

    labels: tuple[tuple[str, str], ...]
    points: tuple[tuple[float, float], ...]

    def label(self, name: str) -> str | None:
        return dict(self.labels).get(name)


def check_url(url: str) -> str:
    """The base URL without a trailing slash; ValueError with one line when it is not http(s)://host[:port][/path]."""
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 -- raises ValueError on a bad port
    except ValueError as error:
        raise ValueError(f"bad Prometheus URL '{printable(url)}': {error}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"bad Prometheus URL '{printable(url)}': expected http://HOST:PORT or https://HOST:PORT")
    if parts.query or parts.fragment:
        raise ValueError(f"bad Prometheus URL '{printable(url)}': no query or fragment, please")
    return url.rstrip("/")


class PromClient:
    """Queries one Prometheus server; every failure is a PromError with one printable line."""

    def __init__(self, base_url: str, timeout: float = DEFAULT_TIMEOUT, auth: PromAuth | None = None) -> None:
        self.base_url = check_url(base_url)
        self.timeout = timeout
        self.auth = auth if auth is not None else PromAuth()
        handlers: list[urllib.request.BaseHandler] = []
        if self.auth.tls is not None:
            handlers.append(urllib.request.HTTPSHandler(context=self.auth.tls))
        self._opener = urllib.request.build_opener(*handlers)
        self._refresh_deadline: float | None = None
        self._refresh_seconds = REFRESH_SECONDS
        self.left_out = 0
        """Series left out of the answers (over MAX_SERIES) since the refresh began."""

    @contextmanager
    def refresh(self, seconds: float = REFRESH_SECONDS) -> Iterator[None]:
        """The queries inside share one deadline, `seconds` from now; `left_out` counts from zero."""
        self._refresh_deadline = time.monotonic() + seconds
        self._refresh_seconds = seconds
        self.left_out = 0
        try:
            yield
        finally:
            self._refresh_deadline = None

    def query(self, promql: str, at: float | None = None) -> tuple[Sample, ...]:
        params = {"query": promql} if at is None else {"query": promql, "time": f"{at:.3f}"}
        deadline = self._deadline()
        samples, left_out = _vector(self._get("/api/v1/query", params, deadline), deadline)
        self.left_out += left_out
        return samples

    def query_range(self, promql: str, start: float, end: float, step: float) -> tuple[Series, ...]:
        params = {"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        deadline = self._deadline()
        series, left_out = _matrix(self._get("/api/v1/query_range", params, deadline), deadline)
        self.left_out += left_out
        return series

    def _deadline(self) -> float:
        """When the next query's answer must be read and parsed: its timeout, or the refresh's end if sooner."""
        deadline = time.monotonic() + self.timeout
        if self._refresh_deadline is not None:
            if time.monotonic() >= self._refresh_deadline:
                raise PromError(f"Prometheus at {self.base_url}: the refresh took over {self._refresh_seconds:g} s")
            deadline = min(deadline, self._refresh_deadline)
        return deadline

    def _request(self, url: str) -> urllib.request.Request:
        """The request with the extra headers and the credentials; those are never sent on to a redirect's target."""
        request = urllib.request.Request(url)
        for name, value in self.auth.headers:
            request.add_unredirected_header(name, value)
        try:
            authorization = self.auth.authorization()
        except AuthError as error:
            raise PromError(str(error)) from None
        if authorization is not None:
            request.add_unredirected_header("Authorization", authorization)
        return request

    def _get(self, path: str, params: dict[str, str], deadline: float) -> bytes:
        """The answer's body, read whole by `deadline` (not each read: a trickle cannot hold us)."""
        request = self._request(f"{self.base_url}{path}?{urllib.parse.urlencode(params)}")
        try:
            with self._opener.open(request, timeout=max(0.1, deadline - time.monotonic())) as response:
                body = _read_bounded(response, MAX_ANSWER_BYTES + 1, deadline)
        except urllib.error.HTTPError as error:
            body = _read_quietly(error, deadline)
            detail = _error_of(body) or str(error.reason)
            raise PromError(f"Prometheus at {self.base_url}: HTTP {error.code}: {_line(detail)}") from None
        except urllib.error.URLError as error:
            reason = error.reason.strerror if isinstance(error.reason, OSError) else error.reason
            if isinstance(error.reason, ssl.SSLError):  # its strerror is empty; its text says what failed
                reason = getattr(error.reason, "verify_message", None) or error.reason.reason or str(error.reason)
            raise PromError(f"Prometheus at {self.base_url} unreachable: {_line(str(reason or error))}") from None
        except (OSError, http.client.HTTPException, ValueError) as error:  # timeouts, resets, broken answers
            raise PromError(f"Prometheus at {self.base_url}: {_line(str(error) or type(error).__name__)}") from None
        if len(body) > MAX_ANSWER_BYTES:
            raise PromError(f"Prometheus at {self.base_url}: answer over {MAX_ANSWER_BYTES} bytes")
        return body


def parse_vector(body: bytes) -> tuple[Sample, ...]:
    """The samples of an instant query's answer (resultType vector, or a scalar as one unlabelled sample)."""
    return _vector(body, time.monotonic() + REFRESH_SECONDS)[0]


def parse_matrix(body: bytes) -> tuple[Series, ...]:
    """The series of a range query's answer (resultType matrix)."""
    return _matrix(body, time.monotonic() + REFRESH_SECONDS)[0]


def _vector(body: bytes, deadline: float) -> tuple[tuple[Sample, ...], int]:
    """An instant query's first MAX_SERIES samples, parsed by `deadline`, and how many were left out."""
    data = _data(body)
    kind, result = data.get("resultType"), data.get("result")
    if kind == "scalar" and isinstance(result, list):
        return (Sample((), _number(result)),), 0
    if kind != "vector" or not isinstance(result, list):
        raise PromError(f"Prometheus answered a {_line(str(kind))} where a vector was expected")
    samples = []
    for index, item in enumerate(result[:MAX_SERIES]):
        _on_time(index, deadline)
        samples.append(Sample(_labels(item), _number(_field(item, "value"))))
    return tuple(samples), max(0, len(result) - MAX_SERIES)


def _matrix(body: bytes, deadline: float) -> tuple[tuple[Series, ...], int]:
    """A range query's first MAX_SERIES series, parsed by `deadline`, and how many were left out."""
    data = _data(body)
    result = data.get("result")
    if data.get("resultType") != "matrix" or not isinstance(result, list):
        raise PromError(f"Prometheus answered a {_line(str(data.get('resultType')))} where a matrix was expected")
    series = []
    for index, item in enumerate(result[:MAX_SERIES]):
        _on_time(index, deadline)
        values = _field(item, "values")
        if not isinstance(values, list):
            raise PromError("Prometheus answered a series without a list of values")
        points = tuple((_timestamp(point), _number(point)) for point in values)
        series.append(Series(_labels(item), points))
    return tuple(series), max(0, len(result) - MAX_SERIES)


def _on_time(index: int, deadline: float) -> None:
    if index % _CHECK_EVERY == 0 and time.monotonic() > deadline:
        raise PromError(f"Prometheus's answer took over {REFRESH_SECONDS:g} s to read")


def _read_bounded(response: Any, limit: int, deadline: float) -> bytes:
    """Up to `limit` bytes of `response`, read piece by piece until `deadline` (TimeoutError past it)."""
    parts: list[bytes] = []
    size = 0
    while size < limit:
        if time.monotonic() > deadline:
            raise TimeoutError("the answer took too long")
        part: bytes = response.read1(min(_CHUNK, limit - size))
        if not part:
            break
        parts.append(part)
        size += len(part)
    return b"".join(parts)


def _json(body: bytes) -> object:
    """The JSON value of `body`; PromError for anything else, nesting too deep for the parser included."""
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise PromError("Prometheus answered something that is not JSON") from None


def _data(body: bytes) -> dict[str, Any]:
    answer = _json(body)
    if not isinstance(answer, dict):
        raise PromError("Prometheus answered JSON that is not an object")
    if answer.get("status") != "success":
        raise PromError(f"Prometheus: {_line(str(answer.get('error') or answer.get('status')))}")
    data = answer.get("data")
    if not isinstance(data, dict):
        raise PromError("Prometheus answered success without data")
    return data


def _field(item: object, name: str) -> object:
    if not isinstance(item, dict) or name not in item:
        raise PromError(f"Prometheus answered a result without {name}")
    return item[name]


def _labels(item: object) -> tuple[tuple[str, str], ...]:
    metric = _field(item, "metric")
    if not isinstance(metric, dict):
        raise PromError("Prometheus answered labels that are not an object")
    if len(metric) > MAX_LABELS:
        metric = dict(sorted(metric.items())[:MAX_LABELS])
    return tuple(sorted((_cut(str(key)), _cut(str(value))) for key, value in metric.items()))


def _cut(text: str) -> str:
    return text if len(text) <= MAX_LABEL_CHARS else text[: MAX_LABEL_CHARS - 1] + "…"


def _timestamp(point: object) -> float:
    if not isinstance(point, list) or len(point) != 2 or not isinstance(point[0], (int, float)):
        raise PromError("Prometheus answered a point that is not [time, value]")
    return float(point[0])


def _number(point: object) -> float:
    if not isinstance(point, list) or len(point) != 2 or not isinstance(point[1], str):
        raise PromError('Prometheus answered a point that is not [time, "value"]')
    try:
        return float(point[1])  # Prometheus sends values as strings, "NaN" and "+Inf" included
    except ValueError:
        raise PromError(f"Prometheus answered a value that is not a number: {_line(point[1])}") from None


def _error_of(body: bytes) -> str | None:
    try:
        answer = _json(body)
    except PromError:
        return None
    error = answer.get("error") if isinstance(answer, dict) else None
    return str(error) if error else None


def _read_quietly(error: urllib.error.HTTPError, deadline: float) -> bytes:
    try:
        return _read_bounded(error, MAX_ERROR_BODY_BYTES, deadline)
    except (OSError, http.client.HTTPException, ValueError, AttributeError):
        return b""


def _line(text: str) -> str:
    """One printable line, cut to MAX_ERROR_CHARS."""
    flat = printable(" ".join(text.split()))
    return flat if len(flat) <= MAX_ERROR_CHARS else flat[: MAX_ERROR_CHARS - 1] + "…"


def finite(value: float) -> float | None:
    """None for NaN and infinities (a stale or undefined ratio)."""
    return value if math.isfinite(value) else None
