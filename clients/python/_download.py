"""Bulk download of published files: ``Client.get(dataset, file, out)``.

From a scale-out coordinator a big download may come in *shares*: the bytes
still missing cut into one share per cluster worker that holds the file, each
served by that worker on its own striped channel (m workers, n stripes each).
Every share is fetched at once into the same partial file; a share that fails
(its worker died) is asked for again with OpenFile, which hands what is still
missing to the workers alive then (or sends it from the coordinator). The
whole range is checked against the coordinator's CRC-32C either way; if that
fails after shares, the download is done once more from the coordinator alone.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any, Callable

from dstp.client._policy import ChannelChoice, ChannelPolicy
from dstp.client._rpc import Rpc
from dstp.client._stream import Progress, ProgressCallback
from dstp.errors import IntegrityError, TicketError, TransportError
from dstp.proto import dstp_pb2 as pb
from dstp.client import _codec as codec
from dstp.transport.wire.values import ChannelOffer, FilePartInfo, TransferSummary
from dstp.transport.client.files import FileSink, RemoteFile

__all__ = ["SHARE_ATTEMPTS", "download"]

#: Rounds of shares (the first and the re-asked ones) before a download from cluster workers fails.
SHARE_ATTEMPTS = 3


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
    attempt = _Download(rpc, policy, dataset, name, Path(out), offset, length, transport, streams, congestion_control,
                        progress)
    try:
        return attempt.run(accept_parts=True)
    except IntegrityError as exc:
        if not attempt.shares:
            raise
        # The workers' bytes did not add up to the coordinator's file (the partial file was discarded):
        # once more, every byte from the coordinator.
        again = _Download(rpc, policy, dataset, name, Path(out), offset, length, transport, streams,
                          congestion_control, progress)
        summary = again.run(accept_parts=False)
        summary["retried"] = f"from the coordinator alone: {exc}"
        return summary


class _Download:
    """One attempt at a download (one FileSink)."""

    def __init__(self, rpc: Rpc, policy: ChannelPolicy, dataset: str, name: str, out: Path, offset: int, length: int,
                 transport: str, streams: int, congestion_control: str, progress: ProgressCallback | None) -> None:
        self.rpc, self.policy, self.dataset, self.name, self.out = rpc, policy, dataset, name, out
        self.offset, self.length, self.transport = offset, length, transport
        self.streams, self.congestion_control, self.progress = streams, congestion_control, progress
        #: The shares fetched from cluster workers (one entry per share and round).
        self.shares: list[dict[str, Any]] = []
        self.received = 0
        self._lock = threading.Lock()
        self._started = time.perf_counter()
        self._kind = ""
        self._granted = 1

    def run(self, accept_parts: bool) -> dict[str, Any]:
        policy, transport = self.policy, self.transport
        choice = policy.choose(transport, self.streams, self.congestion_control, what="file")
        kinds = ["grpc", "striped", "udt"] if transport == "auto" else [choice.transport]

        def reopen(missing: list[tuple[int, int]]) -> pb.OpenFileResponse:
            return self.rpc.open_file(self.dataset, self.name, self.offset, self.length, missing, kinds, choice.streams,
                                      choice.congestion_control, accept_parts=accept_parts)

        reply = reopen([])
        remote = RemoteFile(self.dataset, self.name, reply.size, reply.mtime_ns, reply.range.offset,
                            reply.range.length, reply.crc32c)
        self.offset, self.length = remote.offset, remote.length

        def again(missing: list[tuple[int, int]]) -> pb.OpenFileResponse:
            reply = reopen(missing)
            if (reply.size, reply.mtime_ns, reply.crc32c) != (remote.size, remote.mtime_ns, remote.crc32c):
                raise IntegrityError(f"{self.name} changed on the server while resuming; start the download again")
            return reply

        sink = FileSink(self.out, remote)
        resumed = sink.load_state()  # what an earlier attempt left, if the server's file is the same
        missing = sink.missing()
        if resumed and missing != [(remote.offset, remote.length)]:
            reply = again(missing)
        want = sum(n for _, n in missing)
        offers = {o.kind: o for o in (codec.offer_from_pb(m) for m in reply.offers)}
        if transport == "auto":
            choice = policy.pick(choice, offers, want)
        self._kind = kind = choice.transport
        offer = offers[kind]
        self._started = time.perf_counter()
        self._granted = max(1, offer.streams)
        summary = TransferSummary(content="file")
        data_path = "grpc"
        sink.open()
        try:
            if not missing:
                pass
            elif kind == "grpc":
                for chunk_offset, data in self.rpc.fetch_file(offer.ticket, offer.key):
                    sink.write(chunk_offset, data)
                    self._count(data.nbytes)
            elif kind == "striped" and reply.parts:
                summary, data_path = self._from_shares(choice, reply, sink, again)
            else:
                summary, data_path = self._from_offer(choice, offer, sink)
            sink.finish()
        except BaseException:
            sink.save_state(force=True)
            sink.close()
            raise
        seconds = time.perf_counter() - self._started
        policy.learn(choice, self.received, seconds, summary)
        result = {
            "file": self.name, "dataset": self.dataset, "out": str(self.out), "bytes": self.received,
            "size": remote.length, "resumed_from": remote.length - want, "seconds": seconds, "transport": kind,
            "streams": self._granted, "crc32c": f"{remote.crc32c:08x}", "choice": choice.reason,
            "data_path": data_path, "bytes_per_s": self.received / seconds if seconds > 0 else 0.0,
        }
        if self.shares:
            workers = {s["worker"] for s in self.shares if s["worker"]}
            result["shares"] = self.shares
            result["choice"] = f"{choice.reason}; in shares from {len(workers)} cluster workers"
        return result

    def _count(self, nbytes: int) -> None:
        with self._lock:
            self.received += nbytes
            received = self.received
        if self.progress is not None:
            self.progress(Progress(0, received, time.perf_counter() - self._started, 0, self._kind, self._granted,
                                   -1))

    def _from_offer(self, choice: ChannelChoice, offer: ChannelOffer, sink: FileSink) -> tuple[TransferSummary, str]:
        """Receive one data-channel offer's blocks into ``sink``; return its summary and data path."""
        transfer = self.policy.open(choice, offer, self.rpc.target).open(
            offer.ticket, max(1, offer.streams), sink=sink, key=offer.key, cipher=offer.cipher)
        for _, _, block in transfer.messages():
            sink.block_done(block)
            self._count(block.length)
        return transfer.summary(), _data_path(transfer.stats.native_frames, transfer.stats.frames)

    def _from_shares(self, choice: ChannelChoice, reply: pb.OpenFileResponse, sink: FileSink,
                     again: Callable[[list[tuple[int, int]]], pb.OpenFileResponse]) -> tuple[TransferSummary, str]:
        """Fetch every share of ``reply`` at once into ``sink``; ask again for what failed shares left."""
        summaries: list[TransferSummary] = []
        paths: set[str] = set()
        failures: list[str] = []
        for attempt in range(1, SHARE_ATTEMPTS + 1):
            parts = [codec.file_part_from_pb(m) for m in reply.parts]
            if not parts:  # the coordinator sends the rest itself
                offers = {o.kind: o for o in (codec.offer_from_pb(m) for m in reply.offers)}
                before = self.received
                summary, path = self._from_offer(choice, offers["striped"], sink)
                self.shares.append({"worker": "", "endpoint": offers["striped"].endpoint,
                                    "bytes": self.received - before, "attempt": attempt})
                summaries.append(summary)
                paths.add(path)
                break
            stop = threading.Event()
            pool = ThreadPoolExecutor(max_workers=len(parts), thread_name_prefix="dstp-share")
            try:
                futures = {pool.submit(self._share, choice, part, sink, stop): part for part in parts}
                for future in as_completed(futures):
                    part = futures[future]
                    try:
                        summary, path, nbytes = future.result()
                    except (TransportError, TicketError) as exc:
                        failures.append(f"{part.worker}: {exc}")
                        continue
                    summaries.append(summary)
                    paths.add(path)
                    self.shares.append({"worker": part.worker, "endpoint": part.offer.endpoint, "bytes": nbytes,
                                        "attempt": attempt})
            except BaseException:
                stop.set()  # interrupted (Ctrl-C) or a share failed otherwise: the other shares stop at their next block
                raise
            finally:
                pool.shutdown(wait=True)
            missing = sink.missing()
            if not missing:
                break
            if attempt == SHARE_ATTEMPTS:
                raise TransportError(
                    f"{self.name}: shares from cluster workers failed {SHARE_ATTEMPTS} times "
                    f"({'; '.join(failures[-3:])}); the bytes that arrived are kept — run the same download again "
                    "to fetch only what is missing")
            reply = again(missing)
        return _merged(summaries), " + ".join(sorted(paths))

    def _share(self, choice: ChannelChoice, part: FilePartInfo, sink: FileSink,
               stop: threading.Event) -> tuple[TransferSummary, str, int]:
        """Receive one worker's share into ``sink`` (until ``stop``); return its summary, data path and bytes."""
        offer = part.offer
        transfer = self.policy.open(choice, offer, self.rpc.target).open(
            offer.ticket, max(1, offer.streams), sink=sink, key=offer.key, cipher=offer.cipher)
        nbytes = 0
        for _, _, block in transfer.messages():
            sink.block_done(block)
            self._count(block.length)
            nbytes += block.length
            if stop.is_set():
                break
        return transfer.summary(), _data_path(transfer.stats.native_frames, transfer.stats.frames), nbytes


def _merged(summaries: list[TransferSummary]) -> TransferSummary:
    """Return one summary of several concurrent transfers (streams and bytes summed)."""
    if not summaries:
        return TransferSummary(content="file")
    first = summaries[0]
    return TransferSummary(
        content="file", bytes=sum(s.bytes for s in summaries), blocks=sum(s.blocks for s in summaries),
        wire_bytes=sum(s.wire_bytes for s in summaries), streams=sum(s.streams for s in summaries),
        reconnects=sum(s.reconnects for s in summaries), transport=first.transport,
        paths={f"{i}/{k}": v for i, s in enumerate(summaries) for k, v in s.paths.items()},
    )


def _data_path(native_frames: int, frames: int) -> str:
    """Return which code moved the received frames: native (C++), python, or how many of each."""
    from dstp.transport import native

    if frames and native_frames == frames:
        return f"native ({native.reason()})"
    if native_frames:
        return f"mixed ({native_frames} of {frames} frames native)"
    return f"python (native: {native.reason() if not native.enabled() else 'not used on this connection'})"
