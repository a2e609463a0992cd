"""Files: bulk access to published files, checked, checksummed and ticketed.

    files.open(dataset, name, offset, length, missing, channels, …) -> FileHandle (size, CRC-32C, offers)
    files.source(request, …)  -> FileSource of a redeemed ticket, holding a transfer slot

Only files that belong to a published dataset can be opened (no path leaves
the catalog). The CRC-32C of a requested range is computed once per file
version and range, and kept for the next request.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from dstp.catalog.registry import Catalog
from dstp.errors import QueryError
from dstp.service.admission import Admission
from dstp.service.offers import Offer, Offers
from dstp.settings import Settings
from dstp.transport.files import crc32c_of_file
from dstp.transport.sources import FileSource

__all__ = ["FileHandle", "FileRequest", "Files"]

log = logging.getLogger("dstp.service")

#: Range checksums kept (per file version and range).
CHECKSUMS_KEPT = 256


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


@dataclass(frozen=True, slots=True)
class FileHandle:
    """The answer to OpenFile."""

    file_id: str
    request: FileRequest
    offers: tuple[Offer, ...]
    block_size: int


class Files:
    """Bulk access to the published files of one catalog."""

    def __init__(self, catalog: Catalog, settings: Settings, offers: Offers, admission: Admission) -> None:
        self.catalog = catalog
        self.settings = settings
        self.offers = offers
        self.admission = admission
        self._lock = threading.Lock()
        self._checksums: dict[tuple[str, int, int, int, int], int] = {}

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
    ) -> FileHandle:
        """Check a bulk-file request, checksum its range and issue tickets for it."""
        available = self.offers.available(channels, "none")
        path = self.catalog.published_file(dataset_id, name)
        st = path.stat()
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
        request = FileRequest(path, st.st_size, st.st_mtime_ns, offset, length, parts,
                              self._range_checksum(path, st.st_size, st.st_mtime_ns, offset, length))
        file_id = self.offers.label("f")
        offers = self.offers.issue(file_id, available, request, streams=streams, compression="none",
                                   congestion_control=congestion_control)
        log.info("file %s opened: %s/%s %d+%d (%d parts)", file_id, dataset_id, name, offset, length, len(parts))
        return FileHandle(file_id, request, offers, self.settings.block_bytes)

    def source(self, request: FileRequest, *, label: str, expires_at: float, congestion_control: str = "",
               cancel: threading.Event | None = None) -> FileSource:
        """Return the blocks of a redeemed file request, holding a slot until the source is closed."""
        self.admission.acquire("transfers")
        return FileSource(request.path, request.missing, self.settings.block_bytes, on_close=self.admission.release,
                          label=label, expires_at=expires_at, congestion_control=congestion_control, cancel=cancel)

    def _range_checksum(self, path: Path, size: int, mtime_ns: int, offset: int, length: int) -> int:
        key = (str(path), size, mtime_ns, offset, length)
        with self._lock:
            if key in self._checksums:
                return self._checksums[key]
        value = crc32c_of_file(path, offset, length)
        with self._lock:
            self._checksums[key] = value
            while len(self._checksums) > CHECKSUMS_KEPT:
                self._checksums.pop(next(iter(self._checksums)))
        return value
