"""The Python client: ``c = dstp.connect("host:port")``.

Every method raises the typed errors of :mod:`dstp.errors`; a gRPC status
never escapes. Records come back as Arrow: ``query`` collects a
``pyarrow.Table``, ``query_batches`` streams ``RecordBatch`` objects as they
arrive, ``query_pandas`` and :func:`dstp.client.to_xarray` convert.

The client is three parts: the rpcs (:mod:`._rpc`), the channel policy that
decides how data travels (:mod:`._policy`), and the protobuf codec (:mod:`._codec`)
over the values the server answers with (:mod:`dstp.transport.wire.values`); this
module puts them together.

A server that needs a token gets one from ``token=`` or, when that is not
given, the ``DSTP_TOKEN`` environment variable; ``tls=True`` (implied by
``ca_file=`` or ``DSTP_CA_FILE``) speaks TLS and receives data channels only
sealed.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

import grpc

from dstp.client._channels import receive_grpc, receive_stripes
from dstp.client._download import download
from dstp.client._policy import TRANSPORTS, ChannelPolicy, handshake_seconds, udt_built
from dstp.client._rpc import Rpc
from dstp.client._stream import Progress, ProgressCallback, QueryStream, truncation_message
from dstp.client._watch import Reconnect, follow
from dstp.credentials import client_credentials
from dstp.errors import DstpTruncationWarning, TransportError, TransportUnavailableError
from dstp.transport.client.channels import DataChannel
from dstp.transport.wire.values import QueryInfo, TransferSummary
from dstp.transport.client.tuning import AutoTuner

if TYPE_CHECKING:  # imported where used: `dstp get` never needs pyarrow (nor dstp.metadata)
    import pyarrow as pa

    from dstp.catalog.changes import Change, ChangeFeed
    from dstp.metadata import DatasetDetails, DatasetSummary

__all__ = ["Client", "DatasetPage", "connect"]


@dataclass(frozen=True, slots=True)
class DatasetPage:
    """One page of a server's dataset listing (:meth:`Client.datasets_page`)."""

    datasets: tuple["DatasetSummary", ...]
    #: Datasets matching in all pages.
    total: int
    #: The ``offset`` of the next page; 0 when this page is the last.
    next_offset: int


class Client:
    """A connection to one dstp server.

    ``tuner`` keeps what auto-tuning learned (a shared cache file by default);
    ``wrap_channel`` receives every data channel the client opens (striped TCP,
    UDT) and returns the one to use: the seam for a proxy, a byte counter or a
    fault-injecting channel. ``token`` (default ``$DSTP_TOKEN``) goes with
    every call; ``tls`` (default: on when ``ca_file`` or ``$DSTP_CA_FILE`` is
    set, or ``$DSTP_TLS``) speaks TLS, trusting ``ca_file`` (a PEM
    certificate, e.g. a self-signed server's) or the system's roots.
    """

    def __init__(
        self,
        target: str,
        *,
        timeout: float = 30.0,
        max_message_bytes: int = 64 * 2**20,
        tuner: AutoTuner | None = None,
        wrap_channel: Callable[[DataChannel], DataChannel] | None = None,
        token: str | None = None,
        tls: bool | None = None,
        ca_file: str | None = None,
    ) -> None:
        self.target = target
        self.timeout = timeout
        token, tls, ca_file = client_credentials(token, tls, ca_file)
        #: Whether the control connection speaks TLS (then data channels must be sealed).
        self.tls = tls
        self._rpc = Rpc(target, timeout=timeout, max_message_bytes=max_message_bytes, token=token, tls=tls,
                        ca_file=ca_file)
        #: Which channel, how many stripes, what the path measured: one policy for queries and downloads.
        self.policy = ChannelPolicy(target, self._rpc.ping, tuner, timeout=timeout, wrap_channel=wrap_channel,
                                    require_sealed=tls, handshake=lambda: handshake_seconds(target, timeout),
                                    connect=self._rpc.connect)
        #: Summary of the last ``query()``: rows, bytes, truncated, what the server read.
        self.last_summary: TransferSummary | None = None

    @property
    def tuner(self) -> AutoTuner:
        """Remembers streams/buffers/throughput per endpoint (GridCopy's rule)."""
        return self.policy.tuner

    # -- discovery ----------------------------------------------------------------------

    def datasets(self) -> list[DatasetSummary]:
        """Return the published datasets (each has ``.id``, ``.title``, ``.attributes``…)."""
        return self._rpc.datasets()

    def datasets_page(self, offset: int = 0, limit: int = 100, search: str = "") -> DatasetPage:
        """Return one page of the published datasets, in id order: ``.datasets``, ``.total`` (matching in all
        pages) and ``.next_offset`` (0: this is the last page). ``search``: words that must all occur in a
        dataset's id, title, summary or keywords. The server answers at most 1,000 per page."""
        found, total, nxt = self._rpc.datasets_page(offset, limit, search)
        return DatasetPage(tuple(found), total, nxt)

    def changes(self, since: int = 0, epoch: str | None = None) -> "ChangeFeed":
        """Return what changed in the catalog after catalog version ``since``: which datasets, files, columns and
        time ranges, with versions (``dstp.catalog.changes.ChangeFeed``; ask again with ``since=feed.version``).
        With the ``epoch`` of an earlier feed, ``complete`` is False when the server's index was rebuilt since."""
        from dstp.catalog.changes import ChangeFeed
        from dstp.client._codec import change_from_pb

        messages = self._rpc.watch(since, epoch or "", follow=False)
        head = next(messages)
        found = tuple(change_from_pb(m.change) for m in messages)
        version = max([head.version, *(c.seq for c in found)])
        return ChangeFeed(head.epoch, version, found, complete=head.complete)

    def watch(self, since: int | None = None, epoch: str | None = None, *,
              reconnect: Reconnect | None = Reconnect()) -> Iterator["Change"]:
        """Yield each change of the catalog as the server publishes it (``since=None``: from now on; a number:
        first those after that catalog version), until you stop iterating.

        When the connection drops or the server restarts, it connects again as ``reconnect`` says (waiting 0.5 s,
        doubling up to 30 s, for ever by default; None: the error is raised) and goes on after the last change it
        delivered: none twice, none skipped. ChangesLostError when the server no longer holds every change after
        that point (its index was rebuilt, or more changes than it keeps happened meanwhile): list the catalog
        again, then watch from its version."""
        return follow(self._rpc, since, epoch, reconnect)

    def describe(self, dataset_id: str) -> DatasetDetails:
        """Return dimensions, coordinates, attributes, files and keys of one dataset."""
        return self._rpc.describe(dataset_id)

    def axis_values(self, dataset_id: str, dimension: str) -> pa.Array:
        """Return the values of one dimension of a dataset, in index order, as the server holds them in memory.

        They equal what ``query(f"select {coordinate} from {dataset_id}")`` returns for the dimension's
        coordinate (its index 0…n-1 when it has none), but no query runs on the server. QueryError naming the
        dataset's dimensions for one it does not have; DatasetNotFoundError for a dataset you may not read (as for
        one that does not exist) and for a dataset this server publishes from another (ask that server).
        """
        return self._rpc.axis_values(dataset_id, dimension)

    def usage(self) -> dict[str, Any]:
        """Return what you run now and fetched today against your quotas (the JSON of HTTP ``/usage.json``):
        ``{"principal", "queries": {"running", "waiting", "limit"}, "bytes_today": {"used", "limit",
        "resets_at_unix"}}``; ``limit`` of bytes is None when there is no daily quota."""
        return self._rpc.usage()

    def ping(self, payload: bytes = b"") -> float:
        """Return the round-trip time of one Ping, in seconds."""
        seconds = self._rpc.ping(payload)
        self.policy.observe_rtt(seconds)
        return seconds

    def rtt(self) -> float:
        """Return the path's round-trip time: the least of the last 5 minutes' Pings (at least 3)."""
        return self.policy.rtt()

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
        channels = self._auto_channels() if transport == "auto" else [transport]
        return self._rpc.query(sql, channels, streams=streams, compression=compression,
                               congestion_control=congestion_control)

    def query_batches(
        self,
        sql: str,
        *,
        transport: str = "auto",
        compression: str | None = None,
        progress: ProgressCallback | None = None,
        streams: int = 0,
        congestion_control: str = "",
        allow_truncated: bool = False,
    ) -> QueryStream:
        """Run ``sql``; return a stream of RecordBatches as they arrive.

        ``transport``: "auto" (the default: the gRPC stream for a result under 32 MiB, on the Run call
        itself, else the data channel measured fastest on this endpoint; a server on this host is
        never pinged for it), "grpc" (the control connection), "striped" (parallel TCP; ``streams`` 0
        lets the auto-tuner choose) or "udt". The stream's ``transport`` and ``choice`` (and the
        summary's) say what was used and why. A transport the server does not offer raises
        TransportUnavailableError.
        A result cut at a server limit raises TruncatedResultError after its
        last batch unless ``allow_truncated`` (then DstpTruncationWarning).
        ``compression``: "none", "lz4", "zstd", or "auto" (the policy's cost model picks from the
        path's bandwidth and RTT); not given, it is "auto" with ``transport="auto"`` (the default) and
        "none" otherwise.
        A compression given is never overridden.
        """
        if compression is None:
            compression = "auto" if transport == "auto" else "none"
        choice = self.policy.choose(transport, streams, congestion_control, compression)
        compression = choice.compression
        call = None
        if transport == "grpc":
            info, call = self._rpc.run(sql, compression)  # one round trip instead of Query + Fetch
        elif transport == "auto":  # one round trip: the records at once if small, else offers to pick from
            info, call = self._rpc.run(sql, compression, channels=self._auto_channels(),
                                       inline_max_bytes=self.policy.grpc_max_bytes("result"), streams=choice.streams,
                                       congestion_control=choice.congestion_control)
        else:
            if transport == "striped":  # (auto may yet choose gRPC: its stripes would go unused)
                self.policy.predial(choice)  # the stripes' handshakes overlap the Query rpc
            info = self.plan(sql, transport=transport, streams=choice.streams, compression=compression,
                             congestion_control=choice.congestion_control)
        if info.partitions:  # a scale-out coordinator: one partition per worker, fetched in parallel
            from dstp.client._partitions import fetch_partitions

            kind = info.partitions[0].offer.kind  # the workers' striped TCP, or UDT when that was asked for
            if choice.transport != kind:
                choice = self.policy.choose(kind, streams, congestion_control, compression)
            return fetch_partitions(self._rpc, self.policy, choice, info, self.target,
                                    allow_truncated=allow_truncated)
        if transport == "auto":
            choice = self.policy.pick(choice, {o.kind for o in info.offers}, info.max_bytes,
                                      inline=call is not None)
        kind = choice.transport
        stream = QueryStream(info, iter(()), kind, allow_truncated)
        stream.choice = choice.reason
        started = time.perf_counter()
        offer = info.offer(kind)
        granted = max(1, offer.streams)

        def report(rows: int, nbytes: int, batches: int) -> None:
            if progress is not None:
                progress(Progress(rows, nbytes, time.perf_counter() - started, batches, kind, granted,
                                  info.estimated_rows, info.max_rows))

        def on_summary(summary: TransferSummary) -> None:
            seconds = time.perf_counter() - started
            stream.summary = summary.replace(transport=kind, seconds=seconds, choice=choice.reason)
            self.policy.learn(choice, summary.wire_bytes, seconds, summary)

        if kind == "grpc":
            if call is None:
                call = self._rpc.fetch(offer.ticket, offer.key)
            stream._call = call
            stream._batches = self._broken_off(receive_grpc(call, info.schema, report, on_summary, offer.compression))
        else:
            transfer = self.policy.open(choice, offer, self.target).open(offer.ticket, granted, key=offer.key,
                                                                         cipher=offer.cipher)
            stream._batches = receive_stripes(transfer, info.schema, report, on_summary, offer.compression)
        return stream

    @staticmethod
    def _auto_channels() -> list[str]:
        """Return the channels ``auto`` asks for: gRPC, striped TCP, and UDT when this client has it built."""
        return ["grpc", "striped", "udt"] if udt_built() else ["grpc", "striped"]

    def _broken_off(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Yield ``batches``, turning a gRPC failure mid-stream into the dstp error it stands for."""
        rows = 0
        try:
            for batch in batches:
                rows += batch.num_rows
                yield batch
        except grpc.RpcError as exc:
            err = self._rpc.error(exc)
            # The server was reached (it planned the query), so a lost connection here is a result that broke off,
            # never "cannot reach the server".
            if isinstance(err, TransportError):
                when = f"after {rows:,} records" if rows else "before its first records arrived"
                err = TransportError(f"the result from {self.target} broke off {when} "
                                     f"({exc.details() if hasattr(exc, 'details') else exc}); it is incomplete")
            raise err from None

    def query(
        self,
        sql: str,
        *,
        transport: str = "auto",
        compression: str | None = None,
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
            warnings.warn(truncation_message(self.last_summary or {}), DstpTruncationWarning, stacklevel=2)
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
        return download(self._rpc, self.policy, dataset, file, Path(out), offset=offset, length=length,
                        transport=transport, streams=streams, congestion_control=congestion_control,
                        progress=progress)

    def query_pandas(self, sql: str, **kwargs: Any) -> Any:
        """Run ``sql`` and return a pandas DataFrame (NULL becomes NaN/NaT); options as ``query``.

        With ``allow_truncated=True`` a cut-off result's frame has ``attrs["dstp:truncated_reason"]``.
        """
        table = self._collect(sql, **kwargs)
        frame = table.to_pandas()
        reason = (table.schema.metadata or {}).get(b"dstp:truncated_reason")
        if reason is not None:
            frame.attrs["dstp:truncated_reason"] = reason.decode()
            warnings.warn(truncation_message(self.last_summary or {}), DstpTruncationWarning, stacklevel=2)
        return frame

    # -- lifecycle ----------------------------------------------------------------------

    def close(self) -> None:
        self.policy.close()
        self._rpc.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(target: str, *, timeout: float = 30.0, token: str | None = None, tls: bool | None = None,
            ca_file: str | None = None) -> Client:
    """Return a client of the dstp server at ``target`` ("host:port").

    ``token``: an API token (or a JWT of the server's OIDC issuer), else ``$DSTP_TOKEN``; ``tls=True``
    speaks TLS (implied by ``ca_file``, a PEM certificate to trust, e.g. a ``--tls-self-signed`` server's).
    """
    return Client(target, timeout=timeout, token=token, tls=tls, ca_file=ca_file)
