"""Reading compressed netCDF-4 chunks without holding the netCDF lock (issue 15, item 5).

On unless ``direct_chunks`` is false (``DSTP_DIRECT_CHUNKS=false``). It was opt-in until one fresh-clone CI
run with it on died of SIGBUS inside netCDF-C's close of a file, never reproduced. A likely cause: h5py,
which lists the chunks, loaded a second HDF5 library into the process beside netCDF4's own (their wheels
bundle different versions — here 2.0.0 and 2.2.0), which upstream reports as failing at open and close
(h5py issue 1541; netcdf4-python issues 653, 694, 1214). So the listing runs in a helper process of its
own (:class:`~dstp.catalog.chunk_lister.ChunkLister`, :mod:`dstp._chunk_index`): the process that reads netCDF holds one HDF5.
(Until da592a3 the setting also never reached a dataset's reads: each dataset had a handle cache of
its own, with defaults.)

netCDF-C and HDF5 are not thread-safe, so every call into them holds
``NETCDF_LOCK`` (:mod:`.netcdf4_`): a scan of zlib-compressed files then
inflates one chunk at a time on one core, and that — not the network — bounds
a big query (1.1 GB of result: 1.4 s of 2.7 s in ``nc_get_vara``).

For the common layout of model output — a chunked variable whose only filters
are HDF5's shuffle and deflate, with a fixed-size native numeric type — this
module reads the chunks itself: h5py, in the helper process, lists each chunk's byte offset, size and
filter mask once per (file, variable); then a read ``pread``s the chunks it
needs, inflates them (``isal`` when installed, an ISA-L build of the same
deflate that is 2–3× faster than zlib; else ``zlib``) and undoes the shuffle
with numpy — all of which release the GIL, so scan threads decode in
parallel. Decoded chunks stay in a cache (``cache_bytes``; by default
:func:`default_cache_bytes`, a share of the machine's memory) so a chunk
read by several blocks of a scan, or by the next query, is inflated once;
two threads that need the same chunk wait for one decode. The cache is
scan-resistant (:class:`ChunkReader`): a full scan larger than the cache
keeps what it already holds instead of cycling it out.

Anything else is left to netCDF-C, byte for byte what it always was:
contiguous or classic files, other filters (fletcher32, szip, zstd, blosc…),
strings, chars, enums, compound and big-endian types, and any read that
touches a chunk never written (its fill value is netCDF-C's business).
``tests/catalog/test_chunks.py`` generates such files with hypothesis and
checks every read against netCDF4-python's, bit for bit.
"""

from __future__ import annotations

import collections
import os
import threading
import types
import zlib
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol, Sequence

import numpy as np

from dstp._chunk_index import DEFLATE as _DEFLATE
from dstp._chunk_index import MAX_LISTED_CHUNKS, Listing, file_identity
from dstp.catalog.chunk_lister import LISTER, ListingFailed

if TYPE_CHECKING:
    from dstp.catalog.objects import ObjectFiles
    from dstp.catalog.readahead import ReadAhead

_inflate_module: types.ModuleType
try:  # ISA-L's inflate: the same deflate streams, 2-3x faster than zlib; optional.
    from isal import isal_zlib as _inflate_module
except ImportError:  # pragma: no cover - isal is a dependency; zlib is the fallback
    _inflate_module = zlib

__all__ = ["ChunkLayout", "ChunkReader", "INFLATE", "LayoutStore", "chunk_offsets", "decode_chunk", "layout_of"]

#: Which inflate is in use ("isal" or "zlib"), for the server's log and the benchmarks.
INFLATE = "isal" if _inflate_module is not zlib else "zlib"

#: What says a listing is of one version of a file: device, inode, size, mtime and ctime (ns).
FileStamp = tuple[int, int, int, int, int]


class LayoutStore(Protocol):
    """Where chunk listings are kept between runs (the catalog index): listed once per version of a file."""

    def chunk_listing(self, path: Path, stamp: FileStamp, variable: str) -> tuple[bool, Listing | None]:
        """Return (known, listing): known is False when this version's variable was never listed."""

    def keep_chunk_listing(self, path: Path, stamp: FileStamp, variable: str, listing: Listing | None) -> None:
        """Keep the listing of a version's variable (None: netCDF-C reads it)."""


@dataclass(frozen=True, slots=True)
class ChunkLayout:
    """Where one variable's chunks lie in its file, and how to decode them."""

    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    dtype: np.dtype
    #: The filter pipeline in write order (a subset of shuffle, deflate).
    filters: tuple[int, ...]
    #: chunk offset (in elements) -> (byte offset, stored size, filter mask)
    index: dict[tuple[int, ...], tuple[int, int, int]]


def layout_of(listing: Listing | None) -> ChunkLayout | None:
    """Return the layout a listing (:func:`dstp._chunk_index.chunk_listing`) describes."""
    if listing is None:
        return None
    shape, chunks, dtype, filters, index = listing
    return ChunkLayout(shape, chunks, np.dtype(dtype), filters, index)


def _unshuffle(data: bytes, itemsize: int) -> np.ndarray:
    """Undo HDF5's shuffle: byte k of element i is stored at k*n + i (trailing bytes stay as they are)."""
    raw = np.frombuffer(data, np.uint8)
    if itemsize == 1:
        return raw
    n = len(raw) // itemsize
    out = np.empty(len(raw), np.uint8)
    grid = out[: n * itemsize].reshape(n, itemsize)
    for k in range(itemsize):
        grid[:, k] = raw[k * n:(k + 1) * n]
    out[n * itemsize:] = raw[n * itemsize:]
    return out


def decode_chunk(raw: bytes, layout: ChunkLayout, filter_mask: int) -> np.ndarray:
    """Return one stored chunk, decoded, as an array of the chunk's shape."""
    data: bytes | np.ndarray = raw
    for position in range(len(layout.filters) - 1, -1, -1):
        if filter_mask & (1 << position):
            continue  # this filter was skipped for this chunk when it was written
        if layout.filters[position] == _DEFLATE:
            data = _inflate_module.decompress(data)
        else:
            data = _unshuffle(bytes(data) if isinstance(data, np.ndarray) else data, layout.dtype.itemsize)
    values = np.frombuffer(data, layout.dtype) if not isinstance(data, np.ndarray) else data.view(layout.dtype)
    expected = int(np.prod(layout.chunks))
    if values.size != expected:
        raise ValueError(f"a stored chunk decodes to {values.size} values, expected {expected}")
    return values.reshape(layout.chunks)


def chunk_offsets(layout: ChunkLayout, index: Sequence[slice | int]) -> list[tuple[int, ...]] | None:
    """Return the offsets of the chunks a read of ``index`` needs, in order; None when the chunk reader leaves it to
    netCDF-C (an index it does not take, a chunk never written)."""
    spans = [_spans(i, n, c) for i, n, c in zip(index, layout.shape, layout.chunks)]
    if len(index) != len(layout.shape) or any(s is None for s in spans):
        return None
    offsets: list[tuple[int, ...]] = [()]
    for dim_spans in spans:
        offsets = [o + (s[0],) for o in offsets for s in dim_spans]  # type: ignore[union-attr]
    return None if any(o not in layout.index for o in offsets) else sorted(set(offsets))


def _spans(index: slice | int, size: int, chunk: int) -> list[tuple[int, slice, slice]] | None:
    """Return, for one dimension, (chunk start, slice of the chunk, slice of the output) per chunk touched.

    ``size`` is the HDF5 dataset's extent, which can be shorter than the netCDF dimension (a variable
    written less far along an unlimited dimension than another): an index past it is None, for
    netCDF-C, which answers fill values there. So are open-ended and backward slices.
    """
    if isinstance(index, (int, np.integer)):
        i = int(index)
        if not 0 <= i < size:
            return None
        start, stop, step = i, i + 1, 1
    else:
        if index.start is None or index.stop is None or not 0 <= index.start <= index.stop <= size:
            return None
        start, stop, step = index.start, index.stop, 1 if index.step is None else index.step
        if step < 1:
            return None
    out, position = [], 0
    i = start
    while i < stop:
        c0 = (i // chunk) * chunk
        last = min(stop, c0 + chunk)
        count = len(range(i, last, step))
        out.append((c0, slice(i - c0, i - c0 + (count - 1) * step + 1, step), slice(position, position + count)))
        position += count
        i += count * step
    return out




#: The decoded-chunk cache, by default, holds this share of the memory the server may use …
CACHE_MEMORY_SHARE = 1 / 16
#: … but no less (the fixed size it had before) and no more than this.
CACHE_MIN_BYTES = 64 * 2**20
CACHE_MAX_BYTES = 8 * 2**30


def memory_bytes() -> int:
    """Return the memory this process may use: the machine's, or its cgroup's limit when lower (0 if unknown)."""
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        total = 0
    for limit in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(limit).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and 0 < int(text) < (total or int(text) + 1):
            total = int(text)
    return total


def default_cache_bytes(memory: int | None = None) -> int:
    """Return the decoded-chunk cache's size when none is set: :data:`CACHE_MEMORY_SHARE` of
    :func:`memory_bytes`, within [:data:`CACHE_MIN_BYTES`, :data:`CACHE_MAX_BYTES`]."""
    memory = memory_bytes() if memory is None else memory
    return int(min(CACHE_MAX_BYTES, max(CACHE_MIN_BYTES, memory * CACHE_MEMORY_SHARE)))


class ChunkReader:
    """Reads eligible variables chunk by chunk, outside the netCDF lock; see the module's docstring.

    Decoded chunks are kept up to ``cache_bytes`` (None: :func:`default_cache_bytes`) in two parts, as
    W-TinyLFU does: a small window (``window_bytes``, 1/64 of the cache, at least 8 MiB) that every decoded
    chunk enters, least recently used out first, and the main part, which a chunk leaving the window enters
    if it fits or if it has been asked for more often than each chunk it would evict (counts halved every
    :data:`AGE_EVERY` × cached chunks requests, so a working set that moved wins after a few passes). A
    repeated scan of more chunks than fit then keeps the first cache-full and finds them every pass, where
    plain LRU evicts every chunk before its next use and finds none (5,000 files of 21 KB chunks through a
    64 MiB cache: issue 38).

    ``open_fd(path, version)`` returns a checked read-only descriptor of that
    version of a published file (:meth:`FileHandles.open_raw`); the helper
    process lists a variable's chunks once per version, from the same file (its
    device, inode, size and mtime must be the descriptor's), and ``layouts``
    keeps the listing for the next run. Everything read is kept by version, so
    a chunk of one version is never served for another. A descriptor is closed
    only while no read uses it (a closed number reused by another file must
    never be read).
    """

    #: Request counts are halved once this many requests per cached chunk went by.
    AGE_EVERY = 8

    def __init__(self, open_fd: Callable[[Path, Any], int], cache_bytes: int | None = None, open_files: int = 32,
                 layouts: LayoutStore | None = None, objects: "ObjectFiles | None" = None) -> None:
        self._open_fd = open_fd
        #: Files in object stores: their chunks are ranged GETs, a read's all at once (:meth:`_fetch_missing`).
        self.objects = objects
        self.cache_bytes = default_cache_bytes() if cache_bytes is None or cache_bytes < 0 else cache_bytes
        self.open_files = max(1, open_files)
        self.layouts = layouts
        #: A variable stored in more chunks than this is left to netCDF-C (its index would cost more memory).
        self.max_chunks = MAX_LISTED_CHUNKS
        self._lock = threading.Lock()
        self._layouts: dict[tuple[Path, Any, str], ChunkLayout | None] = {}
        # (path, version) -> [fd, users]
        self._fds: collections.OrderedDict[tuple[Path, Any], list[int]] = collections.OrderedDict()
        self._retired: dict[int, list[int]] = {}  # fd -> [fd, users]: forgotten while reads still used it
        self._chunks: collections.OrderedDict[tuple[Path, Any, str, tuple[int, ...]], np.ndarray] = \
            collections.OrderedDict()
        self._cached = 0
        #: Chunks just decoded, least recently used first: every one gets in here (a chunk that the next
        #: block of the same scan reads again is found), and what leaves competes for ``_chunks``.
        self._window: collections.OrderedDict[tuple[Path, Any, str, tuple[int, ...]], np.ndarray] = collections.OrderedDict()
        self._window_cached = 0
        self.window_bytes = min(self.cache_bytes // 2, max(self.cache_bytes // 64, 8 * 2**20))
        #: How often each chunk was asked for lately (the admission rule's counts), and requests since the
        #: counts were last halved.
        self._asked: dict[tuple[Path, Any, str, tuple[int, ...]], int] = {}
        self._requests = 0
        #: Chunks being fetched or decoded; a future read ahead (:meth:`prefetch`) may end with None: read it here.
        self._pending: dict[tuple[Path, Any, str, tuple[int, ...]], Future[np.ndarray | None]] = {}
        #: Chunks a scan's read-ahead asked for and the scan has not read yet (fetching, or decoded and held in
        #: ``_held`` outside the cache, so that a read-ahead longer than the cache's window loses none): by whom,
        #: and their decoded size.
        self._ahead: dict[tuple[Path, Any, str, tuple[int, ...]], tuple["ReadAhead", int]] = {}
        self._held: dict[tuple[Path, Any, str, tuple[int, ...]], np.ndarray] = {}
        #: Reads served here, chunks inflated, and variables listed by the helper (the tests check the fast
        #: path was taken, and that a listing kept in ``layouts`` is not listed again).
        self.reads = 0
        self.inflated = 0
        self.listed = 0
        #: Chunks of objects a scan read that its read-ahead had fetched (the tests check it ran).
        self.read_ahead = 0

    def start(self) -> None:
        """Start the listing helper now rather than at the first read (servers call this as they start)."""
        LISTER.start()

    # -- layouts ------------------------------------------------------------------------

    def layout(self, path: Path, variable: str, version: Any = None) -> ChunkLayout | None:
        """Return the variable's layout in that version of the file (listed once; None when netCDF-C must
        read it)."""
        key = (path, version, variable)
        with self._lock:
            if key in self._layouts:
                return self._layouts[key]
        found = self._list(path, version, variable)
        with self._lock:
            self._layouts[key] = found
        return found

    def _list(self, path: Path, version: Any, variable: str) -> ChunkLayout | None:
        listed_path = path
        if self._is_object(path):
            # an object's version is its identity (ETag-drawn inode, size, time): known listings need no request
            stamp: FileStamp = (version.device, version.inode, version.size, version.mtime_ns, version.ctime_ns)
            if self.layouts is not None:
                known, listing = self.layouts.chunk_listing(path, stamp, variable)
                if known:
                    return layout_of(listing)
            assert self.objects is not None
            known, listing = self.objects.listing(path, version, variable)  # listed as its header was read by ranges
            if known:
                self.listed += 1
                if self.layouts is not None:
                    self.layouts.keep_chunk_listing(path, stamp, variable, listing)
                return layout_of(listing)
            listed_path = self.objects.copy(path, version)  # netCDF-3 or unreadable by ranges: the whole copy
            st = os.stat(listed_path)
        else:
            fd = self._open_fd(path, version)
            try:
                st = os.fstat(fd)
            finally:
                os.close(fd)
            stamp = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            if self.layouts is not None:
                known, listing = self.layouts.chunk_listing(path, stamp, variable)
                if known:
                    return layout_of(listing)
        try:
            listing = LISTER.listing(listed_path, file_identity(st), variable, self.max_chunks)
        except ListingFailed:
            return None  # not kept: listed again next time
        self.listed += 1
        if self.layouts is not None:
            self.layouts.keep_chunk_listing(path, stamp, variable, listing)
        return layout_of(listing)

    # -- reading ------------------------------------------------------------------------

    def read(self, path: Path, variable: str, index: Sequence[slice | int], version: Any = None) -> np.ndarray | None:
        """Return ``variable[index]`` decoded from its chunks, or None when netCDF-C must read it."""
        layout = self.layout(path, variable, version)
        if layout is None or len(index) != len(layout.shape):
            return None
        spans = [_spans(i, n, c) for i, n, c in zip(index, layout.shape, layout.chunks)]
        if any(s is None for s in spans):
            return None
        keep_dims = [not isinstance(i, (int, np.integer)) for i in index]
        out_shape = tuple(sum(o.stop - o.start for _, _, o in s) for s in spans)  # type: ignore[union-attr]
        pieces = [()]  # type: list[tuple[tuple[int, slice, slice], ...]]
        for dim_spans in spans:
            pieces = [p + (s,) for p in pieces for s in dim_spans]  # type: ignore[union-attr]
        if any(tuple(s[0] for s in piece) not in layout.index for piece in pieces):
            return None  # a chunk never written: netCDF-C knows its fill value
        if self._is_object(path):  # what a read-ahead asked for is waited for, not fetched again
            self._fetch_missing(path, version, variable, layout, {tuple(s[0] for s in piece) for piece in pieces})
        out = np.empty(out_shape, layout.dtype)
        for piece in pieces:
            chunk = self._chunk(path, version, variable, layout, tuple(s[0] for s in piece))
            out[tuple(s[2] for s in piece)] = chunk[tuple(s[1] for s in piece)]
        self.reads += 1
        return out.reshape(tuple(n for n, keep in zip(out_shape, keep_dims) if keep))

    def claim_ahead(self, path: Path, version: Any, variable: str, offsets: Sequence[tuple[int, ...]],
                    ahead: "ReadAhead", size: int) -> dict[tuple[int, ...], "Future[np.ndarray | None]"]:
        """Return a future for each chunk of ``offsets`` neither cached nor on its way, now on its way for ``ahead``
        (:mod:`.readahead`): a read that needs it waits for it; each is settled by :meth:`hold_ahead` or
        :meth:`give_back`."""
        futures: dict[tuple[int, ...], Future[np.ndarray | None]] = {}
        with self._lock:
            if ahead.closed:
                return futures
            for o in offsets:
                key = (path, version, variable, o)
                if key not in self._chunks and key not in self._window and key not in self._pending \
                        and key not in self._held:
                    futures[o] = self._pending[key] = Future()
                    self._ahead[key] = (ahead, size)
        return futures

    def hold_ahead(self, key: tuple[Path, Any, str, tuple[int, ...]], chunk: np.ndarray, ahead: "ReadAhead") -> None:
        """Keep a chunk read ahead for its scan (or, when the scan ended or let go of it, in the cache)."""
        with self._lock:
            self.inflated += 1
            del self._pending[key]
            if key in self._ahead and not ahead.closed:
                self._held[key] = chunk
            else:
                self._let_go_ahead(key)
                if key not in self._chunks and key not in self._window:
                    self._admit(key, chunk)

    def give_back(self, path: Path, version: Any, variable: str,
                  futures: dict[tuple[int, ...], "Future[np.ndarray | None]"]) -> None:
        """End with None the futures of chunks claimed ahead but not fetched: whoever waits reads them itself."""
        with self._lock:
            for offset in futures:
                key = (path, version, variable, offset)
                self._pending.pop(key, None)
                self._let_go_ahead(key, failed=True)
        for future in futures.values():
            future.set_result(None)

    def _let_go_ahead(self, key: tuple[Path, Any, str, tuple[int, ...]], failed: bool = False) -> np.ndarray | None:
        """Stop holding ``key`` for a read-ahead (under the lock); return the chunk if it was held."""
        owner = self._ahead.pop(key, None)
        if owner is not None:
            owner[0].release(owner[1], failed=failed)
        return self._held.pop(key, None)

    def held_ahead(self) -> int:
        """Return how many chunks read-aheads hold or fetch for their scans now (0 once every scan ended)."""
        with self._lock:
            return len(self._ahead)

    def drop_ahead(self, ahead: "ReadAhead") -> None:
        """Let go of what ``ahead`` holds (its scan ended): held chunks join the cache, as if read."""
        with self._lock:
            for key in [k for k, (owner, _) in self._ahead.items() if owner is ahead]:
                chunk = self._let_go_ahead(key)
                if chunk is not None and key not in self._chunks and key not in self._window:
                    self._admit(key, chunk)

    def raw(self, path: Path, variable: str, offset: tuple[int, ...], version: Any = None) -> tuple[bytes, int] | None:
        """Return the stored bytes and filter mask of the chunk at element ``offset``, None if never written.

        The bytes are the file's, still compressed: the Zarr door passes them on unchanged (not cached here:
        nothing is decoded).
        """
        layout = self.layout(path, variable, version)
        if layout is None:
            return None
        found = layout.index.get(offset)
        if found is None:
            return None
        byte_offset, size, mask = found
        if self._is_object(path):
            assert self.objects is not None
            (data,) = self.objects.read_ranges(path, version, [(byte_offset, byte_offset + size)])
        else:
            fd = self._take_fd(path, version)
            try:
                data = os.pread(fd, size, byte_offset)
            finally:
                self._give_fd(path, version, fd)
        if len(data) != size:
            raise OSError(f"{path.name} ends inside a chunk of {variable!r} (read {len(data)} of {size} bytes)")
        return bytes(data), mask

    def _is_object(self, path: Path) -> bool:
        return self.objects is not None and self.objects.owns(path)

    def _fetch_missing(self, path: Path, version: Any, variable: str, layout: ChunkLayout,
                       offsets: set[tuple[int, ...]]) -> None:
        """Fetch and decode, in one batch of ranged GETs, the chunks of a read of an object that are not cached."""
        assert self.objects is not None
        futures: dict[tuple[int, ...], Future[np.ndarray | None]] = {}
        with self._lock:
            missing = sorted(o for o in offsets if (path, version, variable, o) not in self._chunks
                             and (path, version, variable, o) not in self._window
                             and (path, version, variable, o) not in self._pending
                             and (path, version, variable, o) not in self._held)
            for o in missing:  # a read of another block needing these chunks meanwhile waits for them (_chunk)
                futures[o] = self._pending[(path, version, variable, o)] = Future()
        if not missing:
            return
        done: set[tuple[int, ...]] = set()
        try:
            ranges = [(layout.index[o][0], layout.index[o][0] + layout.index[o][1]) for o in missing]
            raws = self.objects.read_ranges(path, version, ranges)
            for offset, raw in zip(missing, raws):
                _, size, mask = layout.index[offset]
                if len(raw) != size:
                    raise OSError(f"{path.name} ends inside a chunk of {variable!r} (read {len(raw)} of {size} "
                                  "bytes)")
                chunk = decode_chunk(raw, layout, mask)
                key = (path, version, variable, offset)
                with self._lock:
                    self.inflated += 1
                    del self._pending[key]
                    if key not in self._chunks and key not in self._window:
                        self._admit(key, chunk)  # a chunk the cache does not keep is fetched alone by _chunk
                futures[offset].set_result(chunk)
                done.add(offset)
        except BaseException as exc:
            with self._lock:
                for offset in missing:
                    if offset not in done:
                        self._pending.pop((path, version, variable, offset), None)
            for offset in missing:
                if offset not in done:
                    futures[offset].set_exception(exc)
            raise

    def _chunk(self, path: Path, version: Any, variable: str, layout: ChunkLayout,
               offset: tuple[int, ...]) -> np.ndarray:
        key = (path, version, variable, offset)
        with self._lock:
            self._count(key)
            held = self._let_go_ahead(key)
            if held is not None:  # read ahead for this scan: now it is read, and cached as any chunk read
                self.read_ahead += 1
                if key not in self._chunks and key not in self._window:
                    self._admit(key, held)
                return held
            for part in (self._window, self._chunks):
                hit = part.get(key)
                if hit is not None:
                    part.move_to_end(key)
                    return hit
            waiting = self._pending.get(key)
            if waiting is None:
                future: Future[np.ndarray | None] = Future()
                self._pending[key] = future
        if waiting is not None:
            got = waiting.result()
            if got is None:  # its read-ahead failed or was dropped: read it here
                return self._chunk(path, version, variable, layout, offset)
            with self._lock:
                if key in self._ahead:  # read ahead and waited for: no longer held for the scan
                    self.read_ahead += 1
                    self._let_go_ahead(key)
            return got
        try:
            byte_offset, size, mask = layout.index[offset]
            if self._is_object(path):
                assert self.objects is not None
                (raw,) = self.objects.read_ranges(path, version, [(byte_offset, byte_offset + size)])
            else:
                fd = self._take_fd(path, version)
                try:
                    raw = os.pread(fd, size, byte_offset)
                finally:
                    self._give_fd(path, version, fd)
            if len(raw) != size:
                raise OSError(f"{path.name} ends inside a chunk of {variable!r} (read {len(raw)} of {size} bytes)")
            chunk = decode_chunk(raw, layout, mask)
        except BaseException as exc:
            with self._lock:
                del self._pending[key]
            future.set_exception(exc)
            raise
        with self._lock:
            del self._pending[key]
            self.inflated += 1
            self._admit(key, chunk)
        future.set_result(chunk)
        return chunk

    def _count(self, key: tuple[Path, Any, str, tuple[int, ...]]) -> None:
        """Count one request of ``key`` (under the lock); halve every count now and then."""
        self._asked[key] = self._asked.get(key, 0) + 1
        self._requests += 1
        if self._requests >= self.AGE_EVERY * max(1024, len(self._chunks)):
            self._asked = {k: n // 2 for k, n in self._asked.items() if n > 1}
            self._requests = 0

    def _admit(self, key: tuple[Path, Any, str, tuple[int, ...]], chunk: np.ndarray) -> None:
        """Keep a chunk just decoded (under the lock): first in the window, whose overflow competes for the main part."""
        if chunk.nbytes > self.cache_bytes:
            return
        self._window[key] = chunk
        self._window_cached += chunk.nbytes
        while self._window_cached > self.window_bytes and len(self._window) > 1:
            old, value = self._window.popitem(last=False)
            self._window_cached -= value.nbytes
            self._promote(old, value)

    def _promote(self, key: tuple[Path, Any, str, tuple[int, ...]], chunk: np.ndarray) -> None:
        """Keep ``chunk`` in the main part if it fits, or if each chunk it would evict was asked for less often."""
        room = self.cache_bytes - self.window_bytes
        if chunk.nbytes > room:
            return
        excess = self._cached + chunk.nbytes - room
        if excess > 0:
            asked = self._asked.get(key, 0)
            victims = []
            for old, value in self._chunks.items():  # least recently used first
                if self._asked.get(old, 0) >= asked:
                    return  # a chunk used as often stays: this one is dropped
                victims.append(old)
                excess -= value.nbytes
                if excess <= 0:
                    break
            for old in victims:
                self._cached -= self._chunks.pop(old).nbytes
        self._chunks[key] = chunk
        self._cached += chunk.nbytes

    def _take_fd(self, path: Path, version: Any) -> int:
        """Return the descriptor of that version of ``path``, counted as in use until :meth:`_give_fd` (only
        idle ones are closed)."""
        key = (path, version)
        with self._lock:
            entry = self._fds.get(key)
            if entry is not None:
                self._fds.move_to_end(key)
                entry[1] += 1
                return entry[0]
        fd = self._open_fd(path, version)
        with self._lock:
            entry = self._fds.get(key)
            if entry is not None:
                os.close(fd)
                entry[1] += 1
                return entry[0]
            self._fds[key] = [fd, 1]
            idle = [k for k, (_, users) in self._fds.items() if users == 0]
            for old in idle[:max(0, len(self._fds) - self.open_files)]:
                os.close(self._fds.pop(old)[0])
        return fd

    def _give_fd(self, path: Path, version: Any, fd: int) -> None:
        with self._lock:
            entry = self._fds.get((path, version))
            if entry is None or entry[0] != fd:
                entry = self._retired[fd]  # forgotten while in use: the last user closes it
                entry[1] -= 1
                if entry[1] == 0:
                    del self._retired[fd]
                    os.close(fd)
                return
            entry[1] -= 1

    def forget(self, path: Path, keep: Any = None) -> None:
        """Drop what is known of ``path`` (it changed on disk, or a read of it failed); with ``keep``, only of
        its other versions."""
        closing = []
        with self._lock:
            for k in [k for k in self._fds if k[0] == path and (keep is None or k[1] != keep)]:
                entry = self._fds.pop(k)
                if entry[1] > 0:
                    self._retired[entry[0]] = entry
                else:
                    closing.append(entry[0])
            for listed in [k for k in self._layouts if k[0] == path and (keep is None or k[1] != keep)]:
                del self._layouts[listed]
            for decoded in [k for k in self._chunks if k[0] == path and (keep is None or k[1] != keep)]:
                self._cached -= self._chunks.pop(decoded).nbytes
            for decoded in [k for k in self._window if k[0] == path and (keep is None or k[1] != keep)]:
                self._window_cached -= self._window.pop(decoded).nbytes
            for counted in [k for k in self._asked if k[0] == path and (keep is None or k[1] != keep)]:
                del self._asked[counted]
            for held in [k for k in self._ahead if k[0] == path and (keep is None or k[1] != keep)]:
                self._let_go_ahead(held)
        for fd in closing:
            os.close(fd)

    def close(self) -> None:
        with self._lock:
            idle = [fd for fd, users in self._fds.values() if users == 0]
            self._retired.update({fd: [fd, users] for fd, users in self._fds.values() if users > 0})
            self._fds.clear()
            self._layouts.clear()
            self._chunks.clear()
            self._window.clear()
            self._asked.clear()
            for key in list(self._ahead):
                self._let_go_ahead(key)
            self._cached = self._window_cached = 0
        for fd in idle:
            os.close(fd)
