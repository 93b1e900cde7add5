"""`steps` messages as encoded lines, each step record encoded once and shared by every client of the server."""

from __future__ import annotations

import json
import time
from typing import Any

from gpumon import protocol
from gpumon.hook import info
from gpumon.hook.runtime import MAX_RECORDS, R_SEQ, HookRuntime


def _dumps(value: Any) -> bytes:
    """Compact JSON as protocol.encode writes it. Raises ValueError for NaN or infinity."""
    return json.dumps(value, separators=(",", ":"), allow_nan=False, ensure_ascii=False).encode()


class StepsLines:
    """Builds a client's next `steps` line from a snapshot of the runtime's records. Server thread only."""

    def __init__(self, runtime: HookRuntime) -> None:
        self.runtime = runtime
        self._encoded: dict[int, bytes] = {}
        """Records by seq, as JSON. Records never change once completed; at most MAX_RECORDS kept."""

    def stats_json(self, records: list[list[Any]]) -> bytes:
        """The step stats over `records`, as JSON."""
        try:
            return _dumps(info.step_stats(self.runtime, records, self.runtime.clock()))
        except ValueError as exc:  # a non-finite figure: the stats are left out, never the records
            self.runtime.error(exc)
            return b"{}"

    def next_line(
        self, cursor: int, records: list[list[Any]], stats_json: bytes, newest: bool = False
    ) -> tuple[bytes, int, bool]:
        """The `steps` line for a client at `cursor`: the records after it (at most MAX_RECORDS_PER_MESSAGE, records
        already gone from the runtime counted as dropped; with `newest`, the newest of them, the older ones counted as
        dropped too), or just the stats when there are none. Returns the line, the client's cursor after it and
        whether more records wait for another line."""
        last_seq = records[-1][R_SEQ] if records else 0
        chunk: list[list[Any]] = []
        dropped = 0
        if records and last_seq > cursor:
            first_seq = records[0][R_SEQ]
            dropped = max(0, first_seq - (cursor + 1))
            start = max(0, cursor + 1 - first_seq)
            if newest:
                start = max(start, len(records) - info.MAX_RECORDS_PER_MESSAGE)
                dropped = max(0, records[start][R_SEQ] - (cursor + 1))
            chunk = records[start : start + info.MAX_RECORDS_PER_MESSAGE]
        sent_to = chunk[-1][R_SEQ] if chunk else last_seq
        head = _dumps({"type": protocol.STEPS, "t": round(time.time(), 4), "last_seq": sent_to, "dropped": dropped})
        body = b",".join(self._encode(record) for record in chunk)
        line = b"".join((head[:-1], b',"stats":', stats_json, b',"records":[', body, b"]}\n"))
        return line, max(cursor, sent_to), sent_to < last_seq

    def _encode(self, record: list[Any]) -> bytes:
        seq = record[R_SEQ]
        encoded = self._encoded.get(seq)
        if encoded is None:
            try:
                encoded = _dumps(info.record_dict(self.runtime, record))
            except ValueError as exc:  # a non-finite figure: the record goes without its figures, so seq has no gap
                self.runtime.error(exc)
                encoded = _dumps({"seq": seq})
            if len(self._encoded) >= MAX_RECORDS:
                del self._encoded[next(iter(self._encoded))]
            self._encoded[seq] = encoded
        return encoded
