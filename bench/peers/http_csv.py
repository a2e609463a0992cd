"""The HTTP CSV peer (ERDDAP-style): dstp's own HTTP API, ``GET /query?sql=…&format=csv``.

The server is ``dstp serve`` (its ``http`` endpoint); the client sends the SQL in the URL,
streams the chunked CSV body into ``pyarrow.csv.read_csv`` and gets a table
(``temperature: double``, ``time: timestamp``), the way a scientist would pull a CSV
subset from an ERDDAP ``tabledap`` URL.
"""

from __future__ import annotations

import urllib.parse
import urllib.request
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from bench.peers.sql import table4_sql


class HttpCsvClient:
    """A client of dstp's HTTP query API reading CSV."""

    def __init__(self, url: str) -> None:
        self.base = url if url.startswith("http") else f"http://{url}"
        self.base = self.base.rstrip("/")

    def fetch(self, limit: int) -> pa.Table:
        """Return the records of one ``/query`` CSV download, parsed by pyarrow."""
        query = urllib.parse.urlencode({"sql": table4_sql(limit), "format": "csv"})
        with urllib.request.urlopen(f"{self.base}/query?{query}", timeout=600) as response:
            return pacsv.read_csv(response)

    def describe(self, result: pa.Table) -> dict[str, Any]:
        """Return rows, temperature sum and first/last time of a fetched result."""
        when = result.column("time")
        return {"rows": result.num_rows,
                "temperature_sum": float(np.sum(result.column("temperature").to_numpy(), dtype=np.float64)),
                "time_first": when[0].as_py().isoformat(timespec="seconds") if len(when) else None,
                "time_last": when[-1].as_py().isoformat(timespec="seconds") if len(when) else None}

    def close(self) -> None:
        """Return (each request has its own connection)."""
