"""The Python client: ``c = dstp.connect("host:port")``.

Every method raises the typed errors of :mod:`dstp.errors`; a gRPC status
never escapes. Records come back as Arrow: ``query`` collects a
``pyarrow.Table``, ``query_batches`` streams ``RecordBatch`` objects as they
arrive, ``query_pandas`` and :func:`dstp.client.to_xarray` convert.
"""

from __future__ import annotations

import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

import grpc

from dstp.errors import (
    DstpError,
    DstpTruncationWarning,
    IntegrityError,
    TransportError,
    TransportUnavailableError,
    TruncatedResultError,
    error_from_status,
)
from dstp.metadata import (
    ColumnInfo,
    CoverageRun,
    GridMappingInfo,
    DatasetDetails,
    DatasetSummary,
    DimensionInfo,
    FileInfo,
    KeyInfo,
)
from dstp.client._channels import endpoint_address, fetch_grpc, fetch_stripes
from dstp.client._download import download
from dstp.proto import dstp_pb2 as pb
from dstp.proto import dstp_pb2_grpc as pb_grpc
from dstp.transport import tcp
from dstp.transport.tuning import AutoTuner, StripePlan, path_loss

if TYPE_CHECKING:  # imported where used: `dstp get` never needs pyarrow
    import pyarrow as pa

__all__ = ["Client", "Progress", "QueryInfo", "QueryStream", "connect"]

#: Results smaller than this go over the gRPC stream when transport="auto".
AUTO_STRIPED_MIN_BYTES = 32 * 2**20
#: How long a measured round-trip time is trusted before the client pings again. Three Pings
#: cost 0.33 s on a 110 ms path, more than a small query; a path's RTT rarely moves in minutes,
#: and a moved path still shows in the throughput the tuner records.
RTT_MAX_AGE_S = 300.0


@dataclass(slots=True)
class _Choice:
    """The data path chosen for one query, and why (shown by `dstp query -v`)."""

    transport: str
    streams: int
    congestion_control: str
    plan: StripePlan | None
    rtt_s: float
    reason: str


def _width(t: pa.DataType) -> int:
    try:
        return max(1, t.bit_width // 8)
    except ValueError:
        return 24

TRANSPORTS = ("grpc", "striped", "udt", "auto")
_KIND = {"grpc": pb.GRPC_STREAM, "striped": pb.STRIPED_TCP, "udt": pb.UDT}
_KIND_NAME = {v: k for k, v in _KIND.items()}
_COMPRESSION = {"none": pb.NONE, "lz4": pb.LZ4_FRAME, "zstd": pb.ZSTD}


@dataclass(frozen=True, slots=True)
class Progress:
    """A progress report: records and bytes so far, seconds since the fetch began."""

    rows: int
    bytes: int
    seconds: float
    batches: int
    transport: str
    streams: int = 1
    estimated_rows: int = -1

    @property
    def rate_bytes_per_s(self) -> float:
        return self.bytes / self.seconds if self.seconds > 0 else 0.0


ProgressCallback = Callable[[Progress], None]


@dataclass(frozen=True, slots=True)
class QueryInfo:
    """What the server answered to Query, before any record is fetched."""

    query_id: str
    schema: pa.Schema
    scan_rows: int
    estimated_rows: int
    estimated_bytes: int
    grid: tuple[str, ...]
    hyperslab: dict[str, tuple[int, int, int]]
    offers: tuple[Any, ...]
    sample_seed: int | None
    #: Most rows the result can have (scan capped by LIMIT/sampling); -1 from older servers.
    max_rows: int = -1

    def offer(self, kind: str) -> Any:
        for o in self.offers:
            if _KIND_NAME.get(o.kind) == kind:
                return o
        raise TransportUnavailableError(f"the server made no {kind} offer for this query")


def _raise(exc: grpc.RpcError, target: str) -> DstpError:
    code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
    details = (exc.details() if hasattr(exc, "details") else None) or str(exc)
    meta: dict[str, str] = {}
    if hasattr(exc, "trailing_metadata"):
        items: Any = exc.trailing_metadata() or ()
        meta = {str(k): v.decode() if isinstance(v, bytes) else str(v) for k, v in items}
    if code == grpc.StatusCode.UNAVAILABLE and "dstp-error-code" not in meta:
        return TransportError(f"cannot reach the dstp server at {target}: {details}")
    if code == grpc.StatusCode.DEADLINE_EXCEEDED and "dstp-error-code" not in meta:
        return error_from_status("DEADLINE_EXCEEDED", f"no answer from {target} in time: {details}")
    err = error_from_status(code.name, details, meta.get("dstp-error-code"))
    if "dstp-error-line" in meta:
        err.line = int(meta["dstp-error-line"])  # type: ignore[attr-defined]
        err.column = int(meta["dstp-error-column"])  # type: ignore[attr-defined]
    return err


def summary_from_pb(m: pb.DatasetSummary) -> DatasetSummary:
    return DatasetSummary(
        id=m.id, title=m.title, summary=m.summary, keywords=tuple(m.keywords), attributes=tuple(m.attributes),
        default_grid=tuple(m.default_grid), default_grid_rows=m.default_grid_rows,
        time_start=m.time_start, time_end=m.time_end,
        bbox=(m.lat_min, m.lat_max, m.lon_min, m.lon_max) if m.has_bbox else None,
        size_bytes=m.size_bytes, access_policy=m.access_policy,
    )


def _column_from_pb(c: pb.Column) -> ColumnInfo:
    return ColumnInfo(
        name=c.name, variable=c.variable, dimensions=tuple(c.dimensions), units=c.units,
        description=c.description, arrow_type=c.arrow_type, cf=tuple((kv.key, kv.value) for kv in c.cf),
        packed=c.packed, nullable=c.nullable, coordinate=c.coordinate, missing_from=tuple(c.missing_from),
        role=c.role, note=c.note,
    )


def details_from_pb(m: pb.DatasetDescription) -> DatasetDetails:
    return DatasetDetails(
        summary=summary_from_pb(m.summary),
        dimensions=tuple(
            DimensionInfo(d.name, d.size, d.coordinate, d.min, d.max, d.order, d.units, d.calendar, d.axis)
            for d in m.dimensions
        ),
        coordinates=tuple(_column_from_pb(c) for c in m.coordinates),
        attributes=tuple(_column_from_pb(c) for c in m.attributes),
        files=tuple(FileInfo(f.name, f.size_bytes, f.format, f.start, f.count, f.first, f.last) for f in m.files),
        correlation_keys=tuple(KeyInfo(k.name, k.column, k.standard_name, k.units) for k in m.correlation_keys),
        aggregate_dimension=m.aggregate_dimension,
        global_attributes=tuple((kv.key, kv.value) for kv in m.global_attributes),
        license=m.license, source=m.source, descriptor_xml=m.descriptor_xml,
        coverage=tuple(CoverageRun(r.first, r.last, r.start, r.stop) for r in m.coverage),
        warnings=tuple(m.warnings),
        grid_mappings=tuple(
            GridMappingInfo(g.name, g.grid_mapping_name, tuple((kv.key, kv.value) for kv in g.parameters),
                            g.wkt, g.proj, g.problem)
            for g in m.grid_mappings
        ),
    )


def truncation_reason(summary: dict[str, Any] | None) -> str | None:
    """Return why the server cut a result (``"result cut at max_result_rows=…"``), or None if it is complete."""
    if not summary or not summary.get("truncated"):
        return None
    return str(summary.get("truncated_reason") or "result cut at a server limit")


def truncation_message(summary: dict[str, Any], accept: str | None = None) -> str:
    """Return the message for a cut-off result; ``accept`` names how the caller could accept it."""
    fix = f"or {accept} to keep the records that arrived" if accept else "to get all of it"
    return (f"the result is incomplete: the server stopped it after {int(summary.get('rows', 0)):,} records "
            f"({truncation_reason(summary)}); narrow the query (WHERE on coordinates, stride(), tablesample, "
            f"LIMIT) {fix}")


class QueryStream:
    """The records of one query as they arrive: iterate it for RecordBatches.

    ``schema`` is known before the first batch; ``summary`` (rows, bytes,
    truncated, what the server read) once iteration has finished. A result
    the server cut at ``max_result_rows``/``max_result_bytes`` raises
    :class:`~dstp.errors.TruncatedResultError` once its last batch has been
    yielded, unless the stream was opened with ``allow_truncated=True`` (then
    a :class:`~dstp.errors.DstpTruncationWarning` is issued instead).
    """

    def __init__(self, info: QueryInfo, batches: Iterator[pa.RecordBatch], transport: str,
                 allow_truncated: bool = False) -> None:
        self.info = info
        self.schema = info.schema
        self.transport = transport
        self.summary: dict[str, Any] | None = None
        #: Why this data path was chosen (auto-tuning decisions are visible here).
        self.choice = ""
        self.allow_truncated = allow_truncated
        #: Set by ``Client.query``, which warns itself (at its caller's line).
        self._warn = True
        self._batches = batches
        #: The open gRPC call behind the batches, if any: cancelled on close even before iteration.
        self._call: Any = None

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        return self

    def __next__(self) -> pa.RecordBatch:
        try:
            return next(self._batches)
        except StopIteration:
            self._ended()
            raise

    def _ended(self) -> None:
        """The last batch is in: raise for (or warn about, once) a result the server cut."""
        summary = self.summary or {}
        if truncation_reason(summary) is None:
            return
        if not self.allow_truncated:
            err = TruncatedResultError(truncation_message(summary, "pass allow_truncated=True"))
            err.summary = summary
            raise err
        if self._warn:
            self._warn = False
            warnings.warn(truncation_message(summary), DstpTruncationWarning, stacklevel=3)

    @property
    def truncated_reason(self) -> str | None:
        """Why the server cut this result (after iteration), or None if it arrived whole."""
        return truncation_reason(self.summary)

    def read_all(self) -> pa.Table:
        """Return every remaining batch as one table."""
        import pyarrow as pa

        return pa.Table.from_batches(list(self), schema=self.schema)

    def close(self) -> None:
        """Stop the transfer (the server stops reading files) and release the connection."""
        close = getattr(self._batches, "close", None)
        if close is not None:
            close()
        if self._call is not None:
            self._call.cancel()

    def __enter__(self) -> "QueryStream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Client:
    """A connection to one dstp server."""

    def __init__(
        self,
        target: str,
        *,
        timeout: float = 30.0,
        max_message_bytes: int = 64 * 2**20,
        tuner: AutoTuner | None = None,
    ) -> None:
        self.target = target
        self.timeout = timeout
        #: Remembers streams/buffers/throughput per endpoint (GridCopy's rule); shared cache file.
        self.tuner = tuner or AutoTuner()
        #: (monotonic time, seconds) of the Ping round trips measured lately; see ``rtt()``.
        self._rtt_samples: list[tuple[float, float]] = []
        #: Test hook for fault injection on striped transfers (see tests/transport).
        self._fault: Any = None
        #: Summary of the last ``query()``: rows, bytes, truncated, what the server read.
        self.last_summary: dict[str, Any] | None = None
        self._channel = grpc.insecure_channel(
            target,
            options=[
                ("grpc.max_receive_message_length", max_message_bytes),
                ("grpc.max_send_message_length", max_message_bytes),
            ],
        )
        self._stub = pb_grpc.DstpStub(self._channel)

    # -- discovery ----------------------------------------------------------------------

    def datasets(self) -> list[DatasetSummary]:
        """Return the published datasets (each has ``.id``, ``.title``, ``.attributes``…)."""
        try:
            reply = self._stub.ListDatasets(pb.ListDatasetsRequest(), timeout=self.timeout)
        except grpc.RpcError as exc:
            raise _raise(exc, self.target) from None
        return [summary_from_pb(m) for m in reply.datasets]

    def describe(self, dataset_id: str) -> DatasetDetails:
        """Return dimensions, coordinates, attributes, files and keys of one dataset."""
        try:
            reply = self._stub.Describe(pb.DescribeRequest(id=dataset_id), timeout=self.timeout)
        except grpc.RpcError as exc:
            raise _raise(exc, self.target) from None
        return details_from_pb(reply)

    def ping(self, payload: bytes = b"") -> float:
        """Return the round-trip time of one Ping, in seconds."""
        started = time.perf_counter()
        try:
            self._stub.Ping(pb.PingRequest(payload=payload), timeout=self.timeout)
        except grpc.RpcError as exc:
            raise _raise(exc, self.target) from None
        elapsed = time.perf_counter() - started
        now = time.monotonic()
        self._rtt_samples = [(t, v) for t, v in self._rtt_samples[-15:] if now - t < RTT_MAX_AGE_S] + [(now, elapsed)]
        return elapsed

    def rtt(self) -> float:
        """Return the path's round-trip time: the least of the last 5 minutes' Pings (at least 3).

        Channel choice and UDT's congestion control need it; caching it saves a
        query on a 100 ms path three round trips. Three samples, because the
        first Ping on a new connection also pays for the TCP and HTTP/2 set-up.
        """
        now = time.monotonic()
        recent = [v for t, v in self._rtt_samples if now - t < RTT_MAX_AGE_S]
        recent += [self.ping() for _ in range(3 - len(recent))]
        return min(recent)

    # -- queries ------------------------------------------------------------------------

    def plan(
        self,
        sql: str,
        *,
        transport: str = "grpc",
        streams: int = 0,
        compression: str = "none",
        congestion_control: str = "",
    ) -> QueryInfo:
        """Ask the server to validate and plan ``sql``; return its answer without fetching."""
        if transport not in TRANSPORTS:
            raise TransportUnavailableError(f"unknown transport {transport!r}; use one of {', '.join(TRANSPORTS)}")
        if compression not in _COMPRESSION:
            raise TransportUnavailableError(f"unknown compression {compression!r}; use none, lz4 or zstd")
        channels = [pb.GRPC_STREAM, pb.STRIPED_TCP, pb.UDT] if transport == "auto" else [_KIND[transport]]
        request = pb.QueryRequest(
            sql=sql, channels=channels, streams=streams, compression=_COMPRESSION[compression],
            congestion_control=congestion_control,
        )
        try:
            reply = self._stub.Query(request, timeout=self.timeout)
        except grpc.RpcError as exc:
            raise _raise(exc, self.target) from None
        return _info_from_pb(reply)

    def _run(self, sql: str, compression: str) -> tuple[QueryInfo, Any]:
        """Start a Run call (plan and records in one round trip); return the plan and the open call."""
        if compression not in _COMPRESSION:
            raise TransportUnavailableError(f"unknown compression {compression!r}; use none, lz4 or zstd")
        call = self._stub.Run(pb.QueryRequest(sql=sql, channels=[pb.GRPC_STREAM],
                                              compression=_COMPRESSION[compression]))
        # The stream has no deadline (a result may take minutes); its plan must come within the timeout.
        late = threading.Event()

        def give_up() -> None:
            late.set()
            call.cancel()

        timer = threading.Timer(self.timeout, give_up)
        timer.start()
        try:
            first = next(call)
        except grpc.RpcError as exc:
            if late.is_set():
                raise TransportError(f"the server at {self.target} did not answer within {self.timeout:g} s") from None
            raise _raise(exc, self.target) from None
        except StopIteration:
            raise IntegrityError("the server ended the Run stream before sending the plan") from None
        finally:
            timer.cancel()
        if not first.HasField("plan"):
            call.cancel()
            raise IntegrityError("the Run stream did not start with the plan")
        return _info_from_pb(first.plan), call

    def query_batches(
        self,
        sql: str,
        *,
        transport: str = "grpc",
        compression: str = "none",
        progress: ProgressCallback | None = None,
        streams: int = 0,
        congestion_control: str = "",
        allow_truncated: bool = False,
    ) -> QueryStream:
        """Run ``sql``; return a stream of RecordBatches as they arrive.

        ``transport``: "grpc" (the control connection), "striped" (parallel TCP;
        ``streams`` 0 lets the auto-tuner choose), "udt", or "auto" (chosen from
        the result's size and what was measured on this endpoint before). A
        transport the server does not offer raises TransportUnavailableError.
        A result cut at a server limit raises TruncatedResultError after its
        last batch unless ``allow_truncated`` (then DstpTruncationWarning).
        """
        choice = self._choose(transport, streams, congestion_control)
        call = None
        if choice.transport == "grpc" and transport == "grpc":
            info, call = self._run(sql, compression)  # one round trip instead of Query + Fetch
        else:
            info = self.plan(sql, transport="auto" if transport == "auto" else choice.transport,
                             streams=choice.streams, compression=compression,
                             congestion_control=choice.congestion_control)
        kind = self._pick_offer(info, choice) if transport == "auto" else choice.transport
        stream = QueryStream(info, iter(()), kind, allow_truncated)
        stream.choice = choice.reason
        started = time.perf_counter()
        offer = info.offer(kind)
        granted = max(1, offer.streams)

        def report(rows: int, nbytes: int, batches: int) -> None:
            if progress is not None:
                progress(Progress(rows, nbytes, time.perf_counter() - started, batches, kind, granted,
                                  info.estimated_rows))

        def on_summary(summary: dict[str, Any]) -> None:
            summary["transport"] = kind
            summary["seconds"] = time.perf_counter() - started
            summary["choice"] = choice.reason
            stream.summary = summary
            self._learn(kind, choice, summary.get("wire_bytes", 0), summary["seconds"], summary)

        if kind == "grpc":
            if call is None:
                call = self._stub.Fetch(pb.FetchRequest(ticket=offer.ticket))
            stream._call = call
            stream._batches = self._mapped(fetch_grpc(call, info.schema, report, on_summary))
        else:
            dial = self._dialer(kind, offer, choice)
            stream._batches = fetch_stripes(offer.ticket, granted, dial, info.schema, report, on_summary,
                                            fault=self._fault)
        return stream

    def _dialer(self, kind: str, offer: Any, choice: "_Choice") -> Callable[[int], Any]:
        """Return how to open one stripe of an offer's data channel."""
        host, port = endpoint_address(offer.endpoint, self.target)
        if kind == "udt":
            from dstp.transport import udt

            if not udt.available():
                raise TransportUnavailableError(f"this client's UDT channel is {udt.unavailable_reason()}")
            rtt = choice.rtt_s or self.rtt()
            return lambda stripe: udt.dial(host, port, rtt_s=rtt, timeout=self.timeout)
        buffer_bytes = choice.plan.buffer_bytes if choice.plan else 0
        return lambda stripe: tcp.connect(host, port, timeout=self.timeout, buffer_bytes=buffer_bytes)

    def _mapped(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        rows = 0
        try:
            for batch in batches:
                rows += batch.num_rows
                yield batch
        except grpc.RpcError as exc:
            err = _raise(exc, self.target)
            if type(err) is TransportError:  # the server was reached (it planned the query): the result broke off
                when = f"after {rows:,} records" if rows else "before its first records arrived"
                err = TransportError(f"the result from {self.target} broke off {when} "
                                     f"({exc.details() if hasattr(exc, 'details') else exc}); it is incomplete")
            raise err from None

    def _tuning_key(self) -> str:
        return self.target

    def _choose(self, transport: str, streams: int, congestion_control: str) -> "_Choice":
        if transport not in TRANSPORTS:
            raise TransportUnavailableError(f"unknown transport {transport!r}; use one of {', '.join(TRANSPORTS)}")
        if transport == "grpc":
            return _Choice("grpc", 0, congestion_control, None, 0.0, "asked for grpc")
        if transport == "udt":
            return _Choice("udt", 1, "", None, 0.0, "asked for udt")
        if streams and transport == "striped":
            return _Choice("striped", streams, congestion_control, None, 0.0, f"asked for {streams} streams")
        rtt = self.rtt()
        plan = self.tuner.plan(self._tuning_key(), rtt, allowed_cc=("bbr", "cubic", "reno"))
        if congestion_control:
            plan = StripePlan(plan.streams, plan.buffer_bytes, congestion_control, plan.reason)
        return _Choice("striped", plan.streams, plan.congestion_control, plan, rtt,
                       f"{plan.reason}; RTT {rtt * 1e3:.2f} ms")

    def _pick_offer(self, info: QueryInfo, choice: "_Choice") -> str:
        kinds = {_KIND_NAME.get(o.kind, "") for o in info.offers}
        rows = info.max_rows if info.max_rows >= 0 else info.scan_rows
        upper = info.estimated_bytes if info.estimated_bytes >= 0 else rows * sum(_width(f.type) for f in info.schema)
        return self._pick(kinds, upper, AUTO_STRIPED_MIN_BYTES, choice, "result")

    def _pick(self, kinds: set[str], upper: int, threshold: int, choice: "_Choice", what: str) -> str:
        """Return the offered channel for ``upper`` bytes: gRPC when small, else the measured best."""
        from dstp.transport import udt

        data = [k for k in ("striped", "udt") if k in kinds and (k != "udt" or udt.available())]
        if upper < threshold or not data:
            choice.reason = f"auto: grpc ({what} at most {upper / 2**20:.1f} MiB)"
            return "grpc"
        kind, why = self.tuner.choose_channel(self._tuning_key(), data, choice.rtt_s)
        detail = f" × {choice.streams} ({choice.reason})" if kind == "striped" else ""
        choice.reason = f"auto: {why}{detail}; {what} up to {upper / 2**20:.1f} MiB"
        return kind

    def _learn(self, kind: str, choice: "_Choice", nbytes: int, seconds: float, summary: dict[str, Any]) -> None:
        """Teach the auto-tuner what a data-channel transfer achieved."""
        if kind not in ("striped", "udt"):
            return
        rtt = choice.rtt_s or 0.0
        self.tuner.observe(self._tuning_key(), kind, nbytes, seconds, rtt, path_loss(summary))
        if kind == "striped" and choice.plan is not None:
            plan = choice.plan
            granted = int(summary.get("streams") or plan.streams)
            if granted < plan.streams:  # the server capped the count: learn what was really used
                plan = StripePlan(granted, plan.buffer_bytes, plan.congestion_control, plan.reason)
            self.tuner.record(self._tuning_key(), plan, nbytes, seconds, rtt)

    def query(
        self,
        sql: str,
        *,
        transport: str = "grpc",
        compression: str = "none",
        progress: ProgressCallback | None = None,
        streams: int = 0,
        congestion_control: str = "",
        allow_truncated: bool = False,
    ) -> pa.Table:
        """Run ``sql`` and return the whole result as a ``pyarrow.Table`` (options as ``query_batches``).

        A result the server cut at ``max_result_rows``/``max_result_bytes``
        raises TruncatedResultError; with ``allow_truncated=True`` the records
        that arrived are returned with a DstpTruncationWarning, and the table's
        schema metadata says ``dstp:truncated`` = ``true`` and why
        (``dstp:truncated_reason``).
        """
        table = self._collect(sql, transport=transport, compression=compression, progress=progress,
                              streams=streams, congestion_control=congestion_control,
                              allow_truncated=allow_truncated)
        if b"dstp:truncated" in (table.schema.metadata or {}):
            warnings.warn(truncation_message(self.last_summary or {}),
                          DstpTruncationWarning, stacklevel=2)
        return table

    def _collect(self, sql: str, **kwargs: Any) -> pa.Table:
        """Return the whole result of ``sql``; a truncated one (if allowed) is marked in its schema metadata."""
        stream = self.query_batches(sql, **kwargs)
        stream._warn = False
        try:
            table = stream.read_all()
        finally:
            self.last_summary = stream.summary
        reason = stream.truncated_reason
        if reason is not None:
            meta = dict(table.schema.metadata or {})
            meta.update({b"dstp:truncated": b"true", b"dstp:truncated_reason": reason.encode()})
            table = table.replace_schema_metadata(meta)
        return table

    def get(
        self,
        dataset: str,
        file: str,
        out: str | Path,
        *,
        offset: int = 0,
        length: int = -1,
        transport: str = "auto",
        streams: int = 0,
        congestion_control: str = "",
        progress: ProgressCallback | None = None,
    ) -> dict[str, Any]:
        """Download a published file (or bytes [offset, offset+length)) to ``out``; return a summary.

        Resumes an interrupted download of the same file; verifies the CRC-32C at the end.
        """
        return download(self, dataset, file, Path(out), offset=offset, length=length, transport=transport,
                        streams=streams, congestion_control=congestion_control, progress=progress)

    def query_pandas(self, sql: str, **kwargs: Any) -> Any:
        """Run ``sql`` and return a pandas DataFrame (NULL becomes NaN/NaT); options as ``query``.

        With ``allow_truncated=True`` a cut-off result's frame has ``attrs["dstp:truncated_reason"]``.
        """
        table = self._collect(sql, **kwargs)
        frame = table.to_pandas()
        reason = (table.schema.metadata or {}).get(b"dstp:truncated_reason")
        if reason is not None:
            frame.attrs["dstp:truncated_reason"] = reason.decode()
            warnings.warn(truncation_message(self.last_summary or {}),
                          DstpTruncationWarning, stacklevel=2)
        return frame

    # -- lifecycle ----------------------------------------------------------------------

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _info_from_pb(reply: Any) -> QueryInfo:
    """Return the QueryInfo of a QueryResponse."""
    import pyarrow as pa

    return QueryInfo(
        query_id=reply.query_id,
        schema=pa.ipc.read_schema(pa.py_buffer(reply.arrow_schema)),
        scan_rows=reply.scan_rows,
        estimated_rows=reply.estimated_rows,
        estimated_bytes=reply.estimated_bytes,
        grid=tuple(reply.grid),
        hyperslab={h.dimension: (h.start, h.stop, h.step) for h in reply.hyperslab},
        offers=tuple(reply.offers),
        sample_seed=reply.sample_seed if reply.sampled else None,
        max_rows=reply.max_rows if reply.HasField("max_rows") else -1,
    )


def connect(target: str, *, timeout: float = 30.0) -> Client:
    """Return a client of the dstp server at ``target`` ("host:port")."""
    return Client(target, timeout=timeout)
