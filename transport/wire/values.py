"""The values that cross the wire, free of any encoding: offers, query plans, partitions, transfer summaries.

    ChannelOffer            how to fetch one result (or file) on one channel: ticket, key, endpoint, expiry
    QueryInfo               Query's (or Run's) answer before any record: schema, sizes (-1: unknown), offers
    PartitionInfo, OrderKeyInfo, FilePartInfo    scale-out: partitions, their merge keys, download shares
    TransferSummary         what a transfer carried: FetchSummary, END frames, the client's account
    size_estimate           a plan's result size for a person ("at most 1,024 records, 96.0 KiB")
    reachable_address / _endpoint    the one rewrite of a wildcard host (0.0.0.0, ::)

The service (dstp/service/) owns their meaning: it builds them and the doors
only carry them. They live here, at the bottom of ``dstp.transport``, because
the Python client (clients/python/, which never imports the service) reads the
same values. No encoding is imported: the protobuf mapping is beside the gRPC
door (:mod:`dstp.grpc_codec`) and in the client (``dstp.client._codec``), and
a data channel's END frame is :meth:`TransferSummary.end_payload`, so
``import dstp.service`` loads neither protobuf nor gRPC (tests/test_layers.py).
pyarrow is imported only for type checking: ``dstp get`` never loads it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from dstp.errors import TransportUnavailableError

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "UNBOUNDED_ROWS",
    "WILDCARD_HOSTS",
    "ChannelOffer",
    "FilePartInfo",
    "OrderKeyInfo",
    "PartitionInfo",
    "QueryInfo",
    "TransferSummary",
    "query_transfer_summary",
    "reachable_address",
    "reachable_endpoint",
    "size_estimate",
]


# -------------------------------------------------------------------------------- offers and plans


@dataclass(frozen=True, slots=True)
class ChannelOffer:
    """How to fetch one result (or file) on one channel, as the wire carries it."""

    kind: str
    ticket: bytes
    expires_at_unix_ms: int
    endpoint: str
    streams: int
    compression: str = "none"
    congestion_control: str = ""
    #: The ticket key (only the client that asked gets it): proves a redeemer is that client.
    key: bytes = field(default=b"", repr=False)
    #: How the data channel seals the transfer's frames ("aes-256-gcm"), or "" for plaintext.
    cipher: str = ""


@dataclass(frozen=True, slots=True)
class QueryInfo:
    """What the server answered to Query (or Run's plan), before any record is fetched.

    Sizes are -1 where unknown: ``estimated_rows``/``estimated_bytes`` are known
    only when every scanned grid point is a result row; ``max_rows`` and
    ``max_bytes`` bound the result (scan capped by LIMIT and sampling).
    """

    query_id: str
    schema: pa.Schema
    scan_rows: int
    estimated_rows: int
    estimated_bytes: int
    grid: tuple[str, ...]
    hyperslab: Mapping[str, tuple[int, int, int]]
    offers: tuple[ChannelOffer, ...]
    sample_seed: int | None
    max_rows: int = -1
    max_bytes: int = -1
    #: Scale-out: the partitions cluster workers hold (then ``offers`` is empty); docs/scale-out.md.
    partitions: tuple["PartitionInfo", ...] = ()
    #: Scale-out: the ORDER BY keys every partition is sorted by (merge by them).
    order: tuple["OrderKeyInfo", ...] = ()

    def offer(self, kind: str) -> ChannelOffer:
        """Return the offer for channel ``kind``; TransportUnavailableError if the server made none."""
        for o in self.offers:
            if o.kind == kind:
                return o
        raise TransportUnavailableError(f"the server made no {kind} offer for this query")

    def size_estimate(self) -> dict[str, Any]:
        """Return the result's size as :func:`size_estimate` says it, from this plan."""
        return size_estimate(self.estimated_rows, self.estimated_bytes, self.max_rows, self.max_bytes,
                             self.scan_rows)


#: A row bound at least this large says nothing (dstp.query.plan.ROW_BOUND: joins whose bound overflows).
UNBOUNDED_ROWS = 2**62


def _size(nbytes: int) -> str:
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def size_estimate(estimated_rows: int, estimated_bytes: int, max_rows: int, max_bytes: int,
                  scan_rows: int = -1) -> dict[str, Any]:
    """Return a query's result size before it runs, from its plan: ``records`` and ``bytes`` (Arrow bytes as the
    server counts them), ``exact`` (True: every scanned point is a record; False: the most there can be, the
    plan's row bound), ``scan_rows`` (grid points read), and ``text`` for a person ("at most 1,024 records,
    96.0 KiB"); records and bytes are -1 when the plan bounds nothing (a cross join)."""
    if estimated_rows >= 0:
        records, nbytes, exact = estimated_rows, estimated_bytes, True
    elif 0 <= max_rows < UNBOUNDED_ROWS:
        records, nbytes, exact = max_rows, max_bytes, False
    else:
        records, nbytes, exact = -1, -1, False
    if records < 0:
        text = "size unknown until it runs"
    else:
        plural = "record" if records == 1 else "records"
        text = f"{'' if exact else 'at most '}{records:,} {plural}" + (f", {_size(nbytes)}" if nbytes >= 0 else "")
    return {"records": records, "bytes": nbytes, "exact": exact, "scan_rows": scan_rows, "text": text}


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """One partition of a partitioned (scale-out) result: which worker holds it and how to fetch it."""

    index: int
    worker: str
    offer: ChannelOffer
    rows: int
    bytes: int
    hyperslab: Mapping[str, tuple[int, int, int]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class OrderKeyInfo:
    """One ORDER BY key of a partitioned result, as an output column."""

    column: str
    descending: bool = False
    nulls_first: bool = False


@dataclass(frozen=True, slots=True)
class FilePartInfo:
    """One share of a file download (scale-out): the worker that serves it, its byte ranges, its offer."""

    worker: str
    ranges: tuple[tuple[int, int], ...]
    offer: ChannelOffer


# -------------------------------------------------------------------------------- transfer summaries

#: The server's account of a transfer, by what was sent: the keys of an END frame besides
#: "messages" and "paths", and (for queries) the fields of FetchSummary.
_SERVER_KEYS = {
    "query": ("rows", "bytes", "batches", "truncated", "truncated_reason", "server_seconds",
              "hyperslabs_read", "elements_read", "bytes_read"),
    "file": ("bytes", "blocks"),
}


@dataclass(frozen=True, slots=True)
class TransferSummary:
    """What one transfer carried: the server's account, then what the receiving side measured.

    The server builds it when its source is exhausted (a query's rows and
    reads, or a file's bytes and blocks) and sends it as the gRPC stream's
    FetchSummary or a data channel's END frame; the receiver adds what it saw
    on the wire (bytes, resumes, corrupted frames, per stripe), and the client
    the channel, the time and why that channel was chosen. Reading it as the
    dict it used to be (``summary["rows"]``, ``summary.get("rows")``) still works.
    """

    #: "query" (an Arrow result) or "file" (blocks of a published file).
    content: str = "query"
    # -- the server's account
    rows: int = 0
    bytes: int = 0
    batches: int = 0
    truncated: bool = False
    truncated_reason: str = ""
    server_seconds: float = 0.0
    hyperslabs_read: int = 0
    elements_read: int = 0
    bytes_read: int = 0
    blocks: int = 0
    #: Messages of a data-channel transfer (the END frame's sequence).
    messages: int = 0
    #: Per stripe (as text), what the server's socket measured: rtt_ms, retransmits, segments, ...
    paths: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    # -- the receiver's account
    wire_bytes: int = 0
    reconnects: int = 0
    corrupted_frames: int = 0
    streams: int = 1
    per_stripe_bytes: Mapping[int, int] = field(default_factory=dict)
    transfer_seconds: float = 0.0
    # -- the client's
    transport: str = ""
    seconds: float = 0.0
    choice: str = ""

    def replace(self, **changes: Any) -> "TransferSummary":
        """Return a copy with ``changes`` applied."""
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        """Return every field as a plain dict (JSON-ready)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def end_payload(self) -> dict[str, Any]:
        """Return the JSON object of a data channel's END frame."""
        return {"messages": self.messages, **{k: getattr(self, k) for k in _SERVER_KEYS[self.content]},
                "paths": {str(k): dict(v) for k, v in self.paths.items()}}

    @classmethod
    def from_end_payload(cls, payload: Mapping[str, Any]) -> "TransferSummary":
        """Return the summary an END frame carries (unknown keys ignored, missing ones at their defaults)."""
        content = "file" if "blocks" in payload and "rows" not in payload else "query"
        values: dict[str, Any] = {"content": content}
        for key in ("messages", *_SERVER_KEYS[content]):
            if key in payload:
                default = getattr(cls(), key)
                values[key] = type(default)(payload[key])
        paths = payload.get("paths")
        if isinstance(paths, Mapping):
            values["paths"] = {str(k): dict(v) for k, v in paths.items() if isinstance(v, Mapping)}
        return cls(**values)

    # Reading the summary as the dict it replaced.
    def __getitem__(self, key: str) -> Any:
        if key not in _FIELDS:
            raise KeyError(key)
        return getattr(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        """Return field ``key``, or ``default`` if there is no such field."""
        return getattr(self, key) if key in _FIELDS else default


_FIELDS = frozenset(f.name for f in dataclasses.fields(TransferSummary))


def query_transfer_summary(summary: Any) -> TransferSummary:
    """Return the server's account of a query from its execution summary (dstp.query.execute.QuerySummary)."""
    return TransferSummary(
        rows=summary.rows, bytes=summary.bytes, batches=summary.batches, truncated=summary.truncated,
        truncated_reason=summary.truncated_reason, server_seconds=summary.seconds,
        hyperslabs_read=summary.stats.hyperslabs, elements_read=summary.stats.elements,
        bytes_read=summary.stats.bytes,
    )


# -------------------------------------------------------------------------------- addresses

#: Hosts a server binds to mean "every address of mine".
WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::"})


def reachable_address(endpoint: str, host: str) -> tuple[str, int]:
    """Return (host, port) of a server's ``endpoint`` as a client reaches it.

    A server listening on a wildcard (``0.0.0.0:50052``, ``[::]:50052``) means
    "my address": the host the client reached the server by, ``host``.
    """
    bound, _, port = endpoint.rpartition(":")
    bound = bound.strip("[]")
    return (host.strip("[]") if bound in WILDCARD_HOSTS else bound), int(port)


def reachable_endpoint(endpoint: str, host: str) -> str:
    """Return ``endpoint`` as ``host:port`` a client reaches (see :func:`reachable_address`)."""
    address, port = reachable_address(endpoint, host)
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"
