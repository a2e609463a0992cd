"""Bulk download of published files: ``Client.get(dataset, file, out)``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc

from dstp.errors import IntegrityError
from dstp.proto import dstp_pb2 as pb
from dstp.transport.files import FileSink, RemoteFile
from dstp.transport.receiver import StripedReceiver

if TYPE_CHECKING:
    from dstp.client._client import Client, ProgressCallback

__all__ = ["download"]

_KIND = {"grpc": pb.GRPC_STREAM, "striped": pb.STRIPED_TCP, "udt": pb.UDT}
_KIND_NAME = {v: k for k, v in _KIND.items()}
AUTO_STRIPED_MIN_BYTES = 8 * 2**20


def _open(client: "Client", dataset: str, name: str, offset: int, length: int,
          missing: list[tuple[int, int]], kinds: list[str], streams: int, cc: str) -> pb.OpenFileResponse:
    from dstp.client._client import _raise

    request = pb.OpenFileRequest(
        dataset=dataset, file=name, range=pb.ByteRange(offset=offset, length=length),
        missing=[pb.ByteRange(offset=o, length=n) for o, n in missing],
        channels=[_KIND[k] for k in kinds], streams=streams, congestion_control=cc,
    )
    try:
        return client._stub.OpenFile(request, timeout=client.timeout)
    except grpc.RpcError as exc:
        raise _raise(exc, client.target) from None


def download(
    client: "Client",
    dataset: str,
    name: str,
    out: Path,
    *,
    offset: int = 0,
    length: int = -1,
    transport: str = "auto",
    streams: int = 0,
    congestion_control: str = "",
    progress: "ProgressCallback | None" = None,
) -> dict[str, Any]:
    """Download bytes [offset, offset+length) of a published file into ``out``; return a summary.

    Blocks are written in place, as they arrive, into ``out.dstp-partial.data``;
    an interrupted download leaves it and its state ``out.dstp-partial``
    behind, and the same call later fetches only what is missing. The bytes
    are checked against the server's CRC-32C of the range, and only then
    renamed to ``out``: ``out`` never holds an incomplete download.
    """
    from dstp.client._client import Progress

    choice = client._choose(transport, streams, congestion_control)
    kinds = ["grpc", "striped", "udt"] if transport == "auto" else [choice.transport]
    out = Path(out)
    reply = _open(client, dataset, name, offset, length, [], kinds, choice.streams, choice.congestion_control)
    remote = RemoteFile(dataset, name, reply.size, reply.mtime_ns, reply.range.offset, reply.range.length, reply.crc32c)
    sink = FileSink(out, remote)
    resumed = sink.load_state()  # what an earlier attempt left, if the server's file is the same
    missing = sink.missing()
    if resumed and missing != [(remote.offset, remote.length)]:
        reply = _open(client, dataset, name, remote.offset, remote.length, missing, kinds, choice.streams,
                      choice.congestion_control)
        if (reply.size, reply.mtime_ns, reply.crc32c) != (remote.size, remote.mtime_ns, remote.crc32c):
            raise IntegrityError(f"{name} changed on the server while resuming; start the download again")
    want = sum(n for _, n in missing)
    offers = {_KIND_NAME[o.kind]: o for o in reply.offers}
    kind = choice.transport
    if transport == "auto":
        kind = client._pick(set(offers), want, AUTO_STRIPED_MIN_BYTES, choice, "file")
    offer = offers[kind]
    started = time.perf_counter()
    granted = max(1, offer.streams)
    received = 0

    def report() -> None:
        if progress is not None:
            progress(Progress(0, received, time.perf_counter() - started, 0, kind, granted, -1))

    end_summary: dict[str, Any] = {}
    sink.open()
    try:
        if not missing:
            pass
        elif kind == "grpc":
            from dstp.client._client import _raise

            try:
                for chunk in client._stub.FetchFile(pb.FetchRequest(ticket=offer.ticket)):
                    sink.write(chunk.offset, chunk.data)
                    received += len(chunk.data)
                    report()
            except grpc.RpcError as exc:
                raise _raise(exc, client.target) from None
        else:
            receiver = StripedReceiver(offer.ticket, granted, client._dialer(kind, offer, choice), sink=sink,
                                       fault=client._fault)
            receiver.start()
            for _, _, block in receiver.messages():
                sink.block_done(block)
                received += block.length
                report()
            end_summary = receiver.summary or {}
        sink.finish()
    except BaseException:
        sink.save_state(force=True)
        sink.close()
        raise
    seconds = time.perf_counter() - started
    client._learn(kind, choice, received, seconds, end_summary)
    return {
        "file": name, "dataset": dataset, "out": str(out), "bytes": received, "size": remote.length,
        "resumed_from": remote.length - want, "seconds": seconds, "transport": kind, "streams": granted,
        "crc32c": f"{remote.crc32c:08x}", "choice": choice.reason,
        "bytes_per_s": received / seconds if seconds > 0 else 0.0,
    }
