"""Files: bulk access to published files, checked, checksummed and ticketed.

    files.open(dataset, name, offset, length, missing, channels, …) -> FileHandle (size, CRC-32C, offers)
    files.source(request, …)  -> FileSource of a redeemed ticket, holding a transfer slot

Only files that belong to a published dataset can be opened (no path leaves
the catalog), and each is opened the careful way every time — at OpenFile and
again when its ticket is redeemed — by the catalog's handles (``open_raw``:
real path, O_NOFOLLOW, the file first seen): a file swapped for a symlink
after the server started is refused. The CRC-32C of a requested range is
computed once per file version and range (holding a slot: it reads the whole
range), and kept for the next request. A transfer holds a slot until its
source is closed, then writes its audit line.
"""

from __future__ import annotations

import logging
import os
import threading
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Sequence

from dstp.auth import ANONYMOUS, Principal
from dstp.catalog.registry import Catalog
from dstp.errors import QueryError
from dstp.service.access import Access
from dstp.service.admission import Admission
from dstp.service.audit import AuditLog
from dstp.service.offers import Offer, Offers
from dstp.settings import Settings
from dstp.transport.wire.crc import block_crcs_of_file
from dstp.transport.server.sources import FileSource

__all__ = ["FileHandle", "FileRequest", "Files"]

log = logging.getLogger("dstp.service")

#: Range checksums kept (per file version and range).
CHECKSUMS_KEPT = 256
#: Block checksums are kept for ranges of at most this many blocks (64 GiB at 4 MiB blocks; 4 bytes a block,
#: at most 16 MiB for all kept ranges); a longer range's frames compute their own.
BLOCK_CRCS_KEPT = 16_384


@dataclass(frozen=True, slots=True)
class FileRequest:
    """A checked bulk-file request: the file, the range, what is still missing, its checksum."""

    path: Path
    size: int
    mtime_ns: int
    offset: int
    length: int
    missing: tuple[tuple[int, int], ...]
    crc32c: int
    #: The dataset the file belongs to (access is checked again when its ticket is redeemed).
    dataset_id: str = ""
    #: The CRC-32C of each ``block_bytes`` piece of the range from ``offset`` (empty: not known), computed
    #: in the same pass as ``crc32c``; the frames carrying those blocks reuse them instead of reading the
    #: file a second time.
    block_crcs: tuple[int, ...] = ()
    block_bytes: int = 0


@dataclass(frozen=True, slots=True)
class FileHandle:
    """The answer to OpenFile."""

    file_id: str
    request: FileRequest
    offers: tuple[Offer, ...]
    block_size: int


class Files:
    """Bulk access to the published files of one catalog."""

    def __init__(self, catalog: Catalog, settings: Settings, offers: Offers, admission: Admission,
                 access: Access | None = None, audit: AuditLog | None = None) -> None:
        self.catalog = catalog
        self.settings = settings
        self.offers = offers
        self.admission = admission
        self.access = access or Access(catalog)
        self.audit = audit or AuditLog(admission.clock)
        self._lock = threading.Lock()
        self._checksums: dict[tuple[int, ...], tuple[int, array[int]]] = {}

    def open(
        self,
        dataset_id: str,
        name: str,
        offset: int = 0,
        length: int = -1,
        missing: Sequence[tuple[int, int]] = (),
        channels: Sequence[str] = (),
        *,
        streams: int = 0,
        congestion_control: str = "",
        principal: Principal = ANONYMOUS,
    ) -> FileHandle:
        """Check a bulk-file request, checksum its range and issue tickets for it, bound to ``principal``.

        A file of a dataset ``principal`` may not read is DatasetNotFoundError, as if there were none.
        """
        available = self.offers.available(channels, "none")
        path = self.access.catalog_for(principal).published_file(dataset_id, name)
        fd = self.catalog.get(dataset_id).handles.open_raw(path)
        try:
            st = os.fstat(fd)
            request = self._check(path, st, name, offset, length, missing, dataset_id, fd, principal)
        finally:
            os.close(fd)
        file_id = self.offers.label("f")
        offers = self.offers.issue(file_id, available, request, streams=streams, compression="none",
                                   congestion_control=congestion_control, principal=principal)
        log.info("file %s opened: %s/%s %d+%d (%d parts)", file_id, dataset_id, name, request.offset,
                 request.length, len(request.missing))
        return FileHandle(file_id, request, offers, self.settings.block_bytes)

    def _check(self, path: Path, st: os.stat_result, name: str, offset: int, length: int,
               missing: Sequence[tuple[int, int]], dataset_id: str, fd: int, principal: Principal) -> FileRequest:
        if length < 0:
            length = st.st_size - offset
        if not 0 <= offset <= st.st_size or length < 0 or offset + length > st.st_size:
            raise QueryError(
                f"the range {offset}+{length} lies outside {name} ({st.st_size} bytes)"
            )
        parts = tuple(missing) or ((offset, length),)
        for start, size in parts:
            if start < offset or size < 0 or start + size > offset + length:
                raise QueryError(f"missing range {start}+{size} lies outside the requested {offset}+{length}")
        checksum, blocks = self._range_checksum(path, st, offset, length, fd, principal)
        return FileRequest(path, st.st_size, st.st_mtime_ns, offset, length, parts, checksum, dataset_id,
                           blocks, self.settings.block_bytes)

    def source(self, request: FileRequest, *, label: str, expires_at: float, congestion_control: str = "",
               cancel: threading.Event | None = None, principal: Principal = ANONYMOUS,
               channel: str = "") -> FileSource:
        """Return the blocks of a redeemed file request, holding a slot until the source is closed."""
        slot = self.admission.acquire(principal.share_key, "transfers", label)
        handles = self.catalog.get(request.dataset_id).handles if request.dataset_id else None

        def opener(path: Path) -> BinaryIO:
            if handles is None:
                return open(path, "rb")
            return os.fdopen(handles.open_raw(path), "rb")

        def finished() -> None:
            summary = source.summary()
            slot.release(summary.bytes)
            wanted = sum(size for _, size in request.missing)
            reclaimed = slot.reclaimed
            outcome = ("stalled" if reclaimed.code == "cancelled" else reclaimed.code) if reclaimed is not None \
                else "ok" if summary.bytes >= wanted else "client_closed"
            self.audit.record("file", label, principal=principal.name, credential=principal.key, channel=channel,
                              datasets=(request.dataset_id,), outcome=outcome, sent=summary.bytes,
                              seconds=self.admission.clock() - slot.started, file=request.path.name,
                              range=f"{request.offset}+{request.length}")

        step, end = request.block_bytes, request.offset + request.length
        known = {start: (min(step, end - start), crc)
                 for start, crc in zip(range(request.offset, end, step or 1), request.block_crcs)}
        source = FileSource(request.path, request.missing, self.settings.block_bytes, on_close=finished,
                            label=label, expires_at=expires_at, congestion_control=congestion_control, cancel=cancel,
                            opener=opener, pace=slot,
                            block_crcs=known if request.block_bytes == self.settings.block_bytes else None)
        slot.on_stall(lambda error: source.cancel())
        return source

    def _range_checksum(self, path: Path, st: os.stat_result, offset: int, length: int, fd: int,
                        principal: Principal) -> tuple[int, tuple[int, ...]]:
        """Return the range's CRC-32C and its blocks' (kept for the file as it is: same inode, size, times)."""
        block = self.settings.block_bytes
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, offset, length, block)
        with self._lock:
            if key in self._checksums:
                whole, kept = self._checksums[key]
                return whole, tuple(kept)
        slot = self.admission.acquire(principal.share_key, "transfers", f"checksum of {path.name}")
        try:
            here = Path(f"/proc/self/fd/{fd}")  # exactly the file checked, whatever the path names now
            whole, blocks = block_crcs_of_file(here if here.exists() else path, offset, length, block)
        finally:
            slot.release()
        if len(blocks) > BLOCK_CRCS_KEPT:
            blocks = ()
        with self._lock:
            self._checksums[key] = (whole, array("I", blocks))
            while len(self._checksums) > CHECKSUMS_KEPT:
                self._checksums.pop(next(iter(self._checksums)))
        return whole, blocks
