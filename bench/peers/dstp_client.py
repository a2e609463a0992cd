"""The dstp peers: ``dstp.connect(grpc).query(sql, transport=…)`` against ``dstp serve``.

One class covers the data channels: ``grpc`` (the control connection's stream),
``striped`` with a fixed number of TCP streams, ``auto`` (the client picks the channel and
streams from the result size and what it measured), and ``udt``. The timed region is one
``query()``: Query rpc, data channel set-up, transfer, decode into a ``pyarrow.Table``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

import dstp
from bench.peers.sql import table4_sql


class DstpClient:
    """A dstp client asking the Table 4 question over one data channel."""

    def __init__(self, url: str, transport: str = "grpc", streams: int = 0) -> None:
        self.transport = transport
        self.streams = streams
        self._client = dstp.connect(url.removeprefix("grpc://"), timeout=600)
        self._client.ping()
        self.last_summary: dict[str, Any] | None = None

    def fetch(self, limit: int) -> pa.Table:
        """Return the records of one query over this client's channel."""
        table = self._client.query(table4_sql(limit), transport=self.transport, streams=self.streams)
        self.last_summary = self._client.last_summary
        return table

    def describe(self, result: pa.Table) -> dict[str, Any]:
        """Return rows, temperature sum, first/last time and the channel used, of a fetched result."""
        when = result.column("time")
        summary = self.last_summary or {}
        return {"rows": result.num_rows,
                "temperature_sum": float(np.sum(result.column("temperature").to_numpy(), dtype=np.float64)),
                "time_first": when[0].as_py().isoformat(timespec="seconds") if len(when) else None,
                "time_last": when[-1].as_py().isoformat(timespec="seconds") if len(when) else None,
                "channel": summary.get("transport"), "response_bytes": summary.get("wire_bytes"),
                "choice": summary.get("choice")}

    def close(self) -> None:
        """Return after closing the gRPC channel."""
        self._client.close()
