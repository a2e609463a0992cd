"""Bulk download of published files: ``Client.get(dataset, file, out)``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from dstp.client._policy import ChannelPolicy
from dstp.client._rpc import Rpc
from dstp.client._stream import Progress, ProgressCallback
from dstp.errors import IntegrityError
from dstp.transport import codec
from dstp.transport.codec import TransferSummary
from dstp.transport.files import FileSink, RemoteFile

__all__ = ["download"]


def download(
    rpc: Rpc,
    policy: ChannelPolicy,
    dataset: str,
    name: str,
    out: Path,
    *,
    offset: int = 0,
    length: int = -1,
    transport: str = "auto",
    streams: int = 0,
    congestion_control: str = "",
    progress: ProgressCallback | None = None,
) -> dict[str, Any]:
    """Download bytes [offset, offset+length) of a published file into ``out``; return a summary.

    Blocks are written in place, as they arrive, into ``out.dstp-partial.data``;
    an interrupted download leaves it and its state ``out.dstp-partial``
    behind, and the same call later fetches only what is missing. The bytes
    are checked against the server's CRC-32C of the range, and only then
    renamed to ``out``: ``out`` never holds an incomplete download.
    """
    choice = policy.choose(transport, streams, congestion_control)
    kinds = ["grpc", "striped", "udt"] if transport == "auto" else [choice.transport]
    out = Path(out)
    reply = rpc.open_file(dataset, name, offset, length, [], kinds, choice.streams, choice.congestion_control)
    remote = RemoteFile(dataset, name, reply.size, reply.mtime_ns, reply.range.offset, reply.range.length, reply.crc32c)
    sink = FileSink(out, remote)
    resumed = sink.load_state()  # what an earlier attempt left, if the server's file is the same
    missing = sink.missing()
    if resumed and missing != [(remote.offset, remote.length)]:
        reply = rpc.open_file(dataset, name, remote.offset, remote.length, missing, kinds, choice.streams,
                              choice.congestion_control)
        if (reply.size, reply.mtime_ns, reply.crc32c) != (remote.size, remote.mtime_ns, remote.crc32c):
            raise IntegrityError(f"{name} changed on the server while resuming; start the download again")
    want = sum(n for _, n in missing)
    offers = {o.kind: o for o in (codec.offer_from_pb(m) for m in reply.offers)}
    if transport == "auto":
        choice = policy.pick(choice, offers, want, "file")
    kind = choice.transport
    offer = offers[kind]
    started = time.perf_counter()
    granted = max(1, offer.streams)
    received = 0

    def report() -> None:
        if progress is not None:
            progress(Progress(0, received, time.perf_counter() - started, 0, kind, granted, -1))

    summary = TransferSummary(content="file")
    data_path = "grpc"
    sink.open()
    try:
        if not missing:
            pass
        elif kind == "grpc":
            for chunk_offset, data in rpc.fetch_file(offer.ticket, offer.key):
                sink.write(chunk_offset, data)
                received += data.nbytes
                report()
        else:
            transfer = policy.open(choice, offer, rpc.target).open(offer.ticket, granted, sink=sink, key=offer.key,
                                                                   cipher=offer.cipher)
            for _, _, block in transfer.messages():
                sink.block_done(block)
                received += block.length
                report()
            summary = transfer.summary()
            data_path = _data_path(transfer.stats.native_frames, transfer.stats.frames)
        sink.finish()
    except BaseException:
        sink.save_state(force=True)
        sink.close()
        raise
    seconds = time.perf_counter() - started
    policy.learn(choice, received, seconds, summary)
    return {
        "file": name, "dataset": dataset, "out": str(out), "bytes": received, "size": remote.length,
        "resumed_from": remote.length - want, "seconds": seconds, "transport": kind, "streams": granted,
        "crc32c": f"{remote.crc32c:08x}", "choice": choice.reason, "data_path": data_path,
        "bytes_per_s": received / seconds if seconds > 0 else 0.0,
    }


def _data_path(native_frames: int, frames: int) -> str:
    """Return which code moved the received frames: native (C++), python, or how many of each."""
    from dstp.transport import native

    if frames and native_frames == frames:
        return f"native ({native.reason()})"
    if native_frames:
        return f"mixed ({native_frames} of {frames} frames native)"
    return f"python (native: {native.reason() if not native.enabled() else 'not used on this connection'})"
