"""The control plane's calls: one method per rpc, every gRPC failure turned into a dstp error.

Requests and answers go through the client's protobuf codec (``_codec.py``);
the streams that carry data (Fetch, Run, FetchFile) are opened with the
codec's parsers, so an IPC message or a file block arrives as a view of the
bytes gRPC received, not as a protobuf copy.

Every call carries the token (``authorization: Bearer …`` metadata) when the
client has one; with ``tls`` the channel is TLS, trusting ``ca_file`` (PEM)
or the system's roots. Fetch and FetchFile prove their ticket with the
offer's key (``FetchRequest.proof``).
"""

from __future__ import annotations

import threading
import time
import urllib.parse
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import grpc

from dstp.errors import (DstpError, IntegrityError, LimitExceededError, ServerUnreachableError, TransportError,
                         error_from_status)
from dstp.proto import dstp_pb2 as pb
from dstp.proto import dstp_pb2_grpc as pb_grpc
from dstp.client import _codec as codec
from dstp.transport.wire.values import PartitionInfo, QueryInfo
from dstp.transport.wire.proofs import fetch_proof

if TYPE_CHECKING:  # built by codec when a listing or description arrives
    import pyarrow as pa

    from dstp.metadata import DatasetDetails, DatasetSummary

__all__ = ["Rpc", "rpc_error"]

_SERVICE = "/" + pb.DESCRIPTOR.services_by_name["Dstp"].full_name


def rpc_error(exc: grpc.RpcError, target: str) -> DstpError:
    """Return the dstp error a failed rpc stands for (its code, message, and the query position if any)."""
    code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
    details = (exc.details() if hasattr(exc, "details") else None) or str(exc)
    meta: dict[str, str] = {}
    if hasattr(exc, "trailing_metadata"):
        items: Any = exc.trailing_metadata() or ()
        meta = {str(k): v.decode() if isinstance(v, bytes) else str(v) for k, v in items}
    if code == grpc.StatusCode.UNAVAILABLE and "dstp-error-code" not in meta:
        return ServerUnreachableError(f"cannot reach the dstp server at {target}: {unreachable_because(details)}")
    if code == grpc.StatusCode.DEADLINE_EXCEEDED and "dstp-error-code" not in meta:
        return error_from_status("DEADLINE_EXCEEDED", f"no answer from {target} in time: {details}")
    err = error_from_status(code.name, details, meta.get("dstp-error-code"))
    if "dstp-error-line" in meta:
        err.line = int(meta["dstp-error-line"])  # type: ignore[attr-defined]
        err.column = int(meta["dstp-error-column"])  # type: ignore[attr-defined]
        if "dstp-error-token" in meta:
            err.token = urllib.parse.unquote(meta["dstp-error-token"])  # type: ignore[attr-defined]
    if "retry-after" in meta and isinstance(err, LimitExceededError):
        err.retry_after_s = float(meta["retry-after"])  # back-pressure: when trying again may succeed
    return err


# gRPC's words for why a channel did not connect ("failed to connect to all addresses; last error: UNKNOWN:
# ipv4:127.0.0.1:50051: Failed to connect to remote host: Connection refused"), in a user's words.
_WHY_UNREACHABLE = (
    (("connection refused",), "nothing listens there (connection refused)"),
    (("dns resolution failed", "name or service not known", "could not resolve", "nodename nor servname",
      "errors resolving", "domain name not found", "lookup failed"), "the host name does not resolve"),
    (("http1.x server", "failed parsing http/2"),
     "an HTTP/1 server answers there, not dstp's gRPC: is that the server's HTTP port? (`dstp serve` prints both)"),
    (("no route to host", "network is unreachable"), "there is no network route to that host"),
    (("timed out", "timeout", "deadline"), "the host did not answer in time"),
    (("handshake", "ssl", "tls", "certificate"),
     "the TLS handshake failed (a TLS server needs TLS on, --tls or tls=True, and for a self-signed one its "
     "certificate, --ca-file or ca_file=; a plain server neither)"),
    (("socket closed", "connection reset", "end of stream", "goaway", "protocol error", "http2"),
     "the other end closed the connection: is it a TLS server (then TLS on, --tls or tls=True), or another "
     "program's port?"),
)


def unreachable_because(details: str) -> str:
    """Return why a gRPC channel could not reach its server, without gRPC's vocabulary."""
    low = details.lower()
    for needles, because in _WHY_UNREACHABLE:
        if any(n in low for n in needles):
            return because
    return "the connection failed"


class Rpc:
    """The rpcs of one dstp server."""

    def __init__(self, target: str, *, timeout: float = 30.0, max_message_bytes: int = 64 * 2**20,
                 token: str | None = None, tls: bool = False, ca_file: str | None = None) -> None:
        self.target = target
        self.timeout = timeout
        self.tls = tls
        #: Set by close(): a stream that breaks then is not connected again (Client.watch).
        self.closed = False
        #: Sent with every call: the token, when there is one.
        self.metadata: tuple[tuple[str, str], ...] = (("authorization", f"Bearer {token}"),) if token else ()
        options = [
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", max_message_bytes),
        ]
        if tls:
            roots = None
            if ca_file:
                try:
                    with open(ca_file, "rb") as f:
                        roots = f.read()
                except OSError as exc:
                    raise TransportError(f"cannot read the CA file {ca_file}: {exc.strerror}") from None
            self._channel = grpc.secure_channel(target, grpc.ssl_channel_credentials(root_certificates=roots),
                                                options=options)
        else:
            self._channel = grpc.insecure_channel(target, options=options)
        self._stub = pb_grpc.DstpStub(self._channel)
        self._fetch = self._channel.unary_stream(
            f"{_SERVICE}/Fetch", request_serializer=pb.FetchRequest.SerializeToString,
            response_deserializer=codec.parse_fetch_response)
        self._run = self._channel.unary_stream(
            f"{_SERVICE}/Run", request_serializer=pb.QueryRequest.SerializeToString,
            response_deserializer=codec.parse_fetch_response)
        self._fetch_file = self._channel.unary_stream(
            f"{_SERVICE}/FetchFile", request_serializer=pb.FetchRequest.SerializeToString,
            response_deserializer=codec.parse_file_chunk)

    def error(self, exc: grpc.RpcError) -> DstpError:
        return rpc_error(exc, self.target)

    def datasets(self) -> list[DatasetSummary]:
        try:
            reply = self._stub.ListDatasets(pb.ListDatasetsRequest(), timeout=self.timeout, metadata=self.metadata)
        except grpc.RpcError as exc:
            raise self.error(exc) from None
        return [codec.summary_from_pb(m) for m in reply.datasets]

    def datasets_page(self, offset: int, limit: int, search: str = "") -> tuple[list[DatasetSummary], int, int]:
        """Return one page of the listing: its datasets, how many match in all, and the next page's offset (0:
        none)."""
        try:
            reply = self._stub.ListDatasets(pb.ListDatasetsRequest(offset=offset, limit=limit, search=search),
                                            timeout=self.timeout, metadata=self.metadata)
        except grpc.RpcError as exc:
            raise self.error(exc) from None
        return [codec.summary_from_pb(m) for m in reply.datasets], reply.total, reply.next_offset

    def ready(self, timeout: float) -> bool:
        """Return whether the channel to the server is connected, connecting now if it is not and waiting at most
        ``timeout`` seconds (gRPC waits between its own tries: a call made before it connects fails at once)."""
        try:
            grpc.channel_ready_future(self._channel).result(timeout=timeout)
        except grpc.FutureTimeoutError:
            return False
        return True

    def watch(self, since: int, epoch: str, follow: bool) -> Iterator[pb.WatchCatalogResponse]:
        """Yield the messages of a WatchCatalog stream (no deadline when following)."""
        stream = self._stub.WatchCatalog(pb.WatchCatalogRequest(since=since, epoch=epoch, follow=follow),
                                         timeout=None if follow else self.timeout, metadata=self.metadata)
        try:
            yield from stream
        except grpc.RpcError as exc:
            raise self.error(exc) from None
        finally:
            stream.cancel()

    def describe(self, dataset_id: str) -> DatasetDetails:
        try:
            reply = self._stub.Describe(pb.DescribeRequest(id=dataset_id), timeout=self.timeout,
                                        metadata=self.metadata)
        except grpc.RpcError as exc:
            raise self.error(exc) from None
        return codec.details_from_pb(reply)

    def axis_values(self, dataset_id: str, dimension: str) -> pa.Array:
        try:
            reply = self._stub.AxisValues(pb.AxisValuesRequest(dataset=dataset_id, dimension=dimension),
                                          timeout=self.timeout, metadata=self.metadata)
        except grpc.RpcError as exc:
            raise self.error(exc) from None
        return codec.axis_values_from_pb(reply)

    def usage(self) -> dict[str, Any]:
        """Return the caller's usage against its quotas, in the JSON shape of the HTTP ``/usage.json``."""
        try:
            reply = self._stub.Usage(pb.UsageRequest(), timeout=self.timeout, metadata=self.metadata)
        except grpc.RpcError as exc:
            raise self.error(exc) from None
        return {
            "principal": reply.principal,
            "queries": {"running": reply.running, "waiting": reply.waiting, "limit": reply.concurrent_limit},
            "bytes_today": {"used": reply.bytes_today,
                            "limit": reply.bytes_per_day if reply.HasField("bytes_per_day") else None,
                            "resets_at_unix": reply.resets_at_unix_ms / 1000},
        }

    def connect(self) -> None:
        """Return once the control connection is up (or after ``timeout``: the next rpc reports why not)."""
        try:
            grpc.channel_ready_future(self._channel).result(timeout=self.timeout)
        except grpc.FutureTimeoutError:
            pass

    def ping(self, payload: bytes = b"") -> float:
        """Return the round-trip time of one Ping, in seconds."""
        started = time.perf_counter()
        try:
            self._stub.Ping(pb.PingRequest(payload=payload), timeout=self.timeout, metadata=self.metadata)
        except grpc.RpcError as exc:
            raise self.error(exc) from None
        return time.perf_counter() - started

    def query(self, sql: str, channels: Sequence[str], *, streams: int = 0, compression: str = "none",
              congestion_control: str = "") -> QueryInfo:
        """Return the server's plan of ``sql`` and its offers for ``channels``."""
        request = pb.QueryRequest(
            sql=sql, channels=[codec.channel_kind_pb(k) for k in channels], streams=streams,
            compression=codec.compression_pb(compression), congestion_control=congestion_control,
        )
        try:
            reply = self._stub.Query(request, timeout=self.timeout, metadata=self.metadata)
        except grpc.RpcError as exc:
            raise self.error(exc) from None
        return codec.query_info_from_pb(reply)

    def resolve(self, query_id: str, partition: int) -> PartitionInfo:
        """Return where partition ``partition`` of a partitioned query can be fetched now (a fresh ticket)."""
        try:
            reply = self._stub.Resolve(pb.ResolveRequest(query_id=query_id, partition=partition),
                                       timeout=self.timeout, metadata=self.metadata)
        except grpc.RpcError as exc:
            raise self.error(exc) from None
        return codec.partition_from_pb(reply)

    def run(self, sql: str, compression: str = "none", *, channels: Sequence[str] = ("grpc",),
            inline_max_bytes: int | None = None, streams: int = 0,
            congestion_control: str = "") -> tuple[QueryInfo, Any]:
        """Start a Run call (plan and records in one round trip); return the plan and the open call.

        With ``inline_max_bytes`` the server streams the records only when the result is under it (or no data
        channel among ``channels`` is available); otherwise the plan carries offers for ``channels``, as
        Query's does, and the call is over (then the returned call is None). :func:`inline` tells which.
        """
        request = pb.QueryRequest(sql=sql, channels=[codec.channel_kind_pb(k) for k in channels],
                                  compression=codec.compression_pb(compression), streams=streams,
                                  congestion_control=congestion_control)
        if inline_max_bytes is not None:
            request.inline_max_bytes = inline_max_bytes
        call: Any = self._run(request, metadata=self.metadata)
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
            raise self.error(exc) from None
        except StopIteration:
            raise IntegrityError("the server ended the Run stream before sending the plan") from None
        finally:
            timer.cancel()
        if not isinstance(first, pb.FetchResponse) or not first.HasField("plan"):
            call.cancel()
            raise IntegrityError("the Run stream did not start with the plan")
        info = codec.query_info_from_pb(first.plan)
        if inline(info):
            return info, call
        call.cancel()  # offers instead of records: the server has ended the call
        return info, None

    def fetch(self, ticket: bytes, key: bytes) -> Any:
        """Return the open Fetch call of a gRPC ticket (iterate it: IPC message views, then a FetchResponse).

        ``key`` is the offer's ticket key: the request proves with it that this client asked.
        """
        return self._fetch(pb.FetchRequest(ticket=ticket, proof=fetch_proof(key, ticket)), metadata=self.metadata)

    def open_file(self, dataset: str, name: str, offset: int, length: int, missing: Sequence[tuple[int, int]],
                  channels: Sequence[str], streams: int, congestion_control: str,
                  accept_parts: bool = False) -> pb.OpenFileResponse:
        request = pb.OpenFileRequest(
            dataset=dataset, file=name, range=pb.ByteRange(offset=offset, length=length),
            missing=[pb.ByteRange(offset=o, length=n) for o, n in missing],
            channels=[codec.channel_kind_pb(k) for k in channels], streams=streams,
            congestion_control=congestion_control, accept_parts=accept_parts,
        )
        try:
            return self._stub.OpenFile(request, timeout=self.timeout, metadata=self.metadata)
        except grpc.RpcError as exc:
            raise self.error(exc) from None

    def fetch_file(self, ticket: bytes, key: bytes) -> Iterator[tuple[int, memoryview]]:
        """Yield (offset, data) of a FetchFile stream, the data a view of what arrived (``key``: the offer's)."""
        try:
            yield from self._fetch_file(pb.FetchRequest(ticket=ticket, proof=fetch_proof(key, ticket)),
                                        metadata=self.metadata)
        except grpc.RpcError as exc:
            raise self.error(exc) from None

    def close(self) -> None:
        self.closed = True
        self._channel.close()


def inline(info: QueryInfo) -> bool:
    """Return whether a Run plan says the records follow on the Run call (its one offer: gRPC, no ticket)."""
    return len(info.offers) == 1 and info.offers[0].kind == "grpc" and not info.offers[0].ticket and \
        not info.partitions
