"""netCDF file access through the netCDF4 library: one handle cache, one lock.

The netCDF-C and HDF5 libraries are not thread-safe, so every call into them
holds ``NETCDF_LOCK``. Open files live in an LRU cache so that a query over a
hundred files does not reopen each one per hyperslab. Named ``netcdf4_`` so it
never shadows the ``netCDF4`` package it wraps.

Every hyperslab read is counted in :class:`ReadStats`, which a query's
summary reports: it is how a user (and the tests) see that coordinate
predicates kept the server from reading what it did not need.

Files are opened the same careful way every time, not only when the catalog
is scanned (:meth:`FileHandles.open_raw`): through their real path, with
``O_NOFOLLOW`` on the last component, and only if the real path and the file
(device and inode) are the ones first seen — a published file replaced by a
symlink to ``/etc/passwd`` after the server started is refused, not served.
netCDF-C then opens ``/proc/self/fd/N``, the very file checked. The header-reading
helper processes of a cold index build open each file that way once, outside the
cache, and close it at once (:meth:`FileHandles.read_once`).
"""

from __future__ import annotations

import logging
import os
import stat
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol, Sequence

import netCDF4
import numpy as np

from dstp.catalog import hdfeos
from dstp.catalog.chunks import INFLATE, ChunkReader, LayoutStore
from dstp.catalog.fastheader import read_plain
# What a header says lives in .headers; FileMeta, VariableMeta and the two helpers are importable from here too.
from dstp.catalog.headers import (
    FileMeta,
    VariableMeta,
    computed_values,
    read_header,
    resolve_in_group,
    string_length_dimensions,
    unmappable,
)
from dstp.errors import DataFileError

if TYPE_CHECKING:
    from dstp.catalog.objects import ObjectFiles
    from dstp.catalog.readahead import ReadAhead
    from dstp.catalog.zarr_ import ZarrFiles

log = logging.getLogger("dstp.catalog")

__all__ = [
    "NETCDF_LOCK",
    "FileHandles",
    "FileIdentity",
    "FileMeta",
    "FileSource",
    "ReadStats",
    "VariableMeta",
    "inspect_file",
    "resolve_in_group",
    "string_length_dimensions",
]

NETCDF_LOCK = threading.RLock()
_STATS_LOCK = threading.Lock()

#: Files of FileHandles collected without close(). Deallocating a netCDF4.Dataset closes its file, in whatever
#: thread the garbage collector runs and outside NETCDF_LOCK; so they are kept here and closed, under the lock,
#: by the next FileHandles that opens or closes a file.
_ORPHANS: list[netCDF4.Dataset] = []


def _adopt(open_files: OrderedDict[Path, netCDF4.Dataset]) -> None:
    """Keep the files of a collected FileHandles for :func:`_close_orphans` (list.extend: no lock needed)."""
    _ORPHANS.extend(open_files.values())
    open_files.clear()


def _close_orphans() -> None:
    """Close adopted files; the caller holds NETCDF_LOCK."""
    while _ORPHANS:
        ds = _ORPHANS.pop()
        try:
            ds.close()
        except (OSError, RuntimeError):
            pass


@dataclass(slots=True)
class ReadStats:
    """Counts of what a scan read from netCDF files."""

    hyperslabs: int = 0
    elements: int = 0
    bytes: int = 0

    def add(self, array: np.ndarray) -> None:
        with _STATS_LOCK:  # scan threads read in parallel (dstp.query.scan)
            self.hyperslabs += 1
            self.elements += int(array.size)
            self.bytes += int(array.nbytes)


@dataclass(frozen=True, slots=True)
class FileIdentity:
    """One version of a published file: its real path, device and inode, size and times.

    The catalog publishes a file as the version it read (:meth:`FileHandles.publish`); every read says
    which version it expects, so a query keeps reading the version its catalog snapshot names, or fails.
    """

    real: str
    device: int
    inode: int
    size: int
    mtime_ns: int
    #: The inode's change time: set by the kernel on every change (content, permissions, links) and never
    #: settable from user space, so a replacement that reuses the freed inode with size and mtime copied
    #: (``touch -r``) still differs.
    ctime_ns: int = 0

    @classmethod
    def of(cls, real: str, st: os.stat_result) -> "FileIdentity":
        """Return the identity ``st`` (a stat of the file at ``real``) gives."""
        return cls(real, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    def same_file(self, st: os.stat_result) -> bool:
        """Return whether ``st`` is this version: the same inode, size and times."""
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns) == \
            (self.device, self.inode, self.size, self.mtime_ns, self.ctime_ns)


_RELOAD_HINT = ("the catalog publishes what is there now once it settles (its next rescan, or `dstp catalog "
                "reload`); run the query again then")


def _replaced(path: Path) -> DataFileError:
    return DataFileError(
        f"{path.name} was replaced on disk (by another file or a link) after the catalog published it; "
        f"this version is not served — {_RELOAD_HINT}"
    )


def _refuse_changed(path: Path, first: FileIdentity, st: os.stat_result) -> None:
    """Raise DataFileError unless ``st`` is the file ``first`` saw: the same inode, unchanged since (its ctime),
    the same size and modification time.

    Every read checks it — a query's and a bulk download's alike — so a file rewritten or cut short after the
    scan is never served as the version the catalog (and a download's size and checksum) describe.
    """
    if (st.st_dev, st.st_ino) != (first.device, first.inode):
        raise _replaced(path)
    if (st.st_size, st.st_mtime_ns) != (first.size, first.mtime_ns):
        what = "cut short" if st.st_size < first.size else "changed"
        raise DataFileError(
            f"{path.name} was {what} on disk after the catalog published it ({first.size} → {st.st_size} bytes); "
            + _RELOAD_HINT
        )
    if st.st_ctime_ns != first.ctime_ns:  # size and mtime kept (touch -r), or its permissions or links changed
        raise DataFileError(
            f"{path.name} was changed on disk after the catalog published it (its inode changed, though its size "
            f"and modification time are as they were); {_RELOAD_HINT}"
        )


class FileSource(Protocol):
    """What a dataset is opened through: headers, raw values and versions of files.

    :class:`FileHandles` reads the files; the catalog index's reader answers from what it kept
    (:class:`dstp.catalog.facts.FactsReader`), so that a dataset is rebuilt without opening its files.
    """

    def inspect(self, path: Path) -> "FileMeta":
        """Return a file's metadata."""

    def read(self, path: Path, variable: str, index: Sequence[slice | int], stats: "ReadStats | None" = None,
             version: FileIdentity | None = None) -> np.ndarray:
        """Return the raw values of ``variable[index]``."""

    def identity(self, path: Path) -> FileIdentity | None:
        """Return the version of ``path`` that was read."""


_FD_PATHS = "/proc/self/fd"
#: Whether this system names open descriptors in ``/proc/self/fd`` (Linux): looked at once, not at every open.
_HAS_FD_PATHS: list[bool] = []


def _descriptor_path(fd: int, path: Path) -> str:
    """Return a path that opens exactly the file behind ``fd`` (Linux), else ``path`` itself."""
    if not _HAS_FD_PATHS:
        _HAS_FD_PATHS.append(os.path.isdir(_FD_PATHS))
    return f"{_FD_PATHS}/{fd}" if _HAS_FD_PATHS[0] else str(path)


class FileHandles:
    """An LRU cache of open netCDF files.

    HDF5 keeps a chunk cache per open variable, 64 MiB by default in
    netCDF-C: a scan over twenty files then holds gigabytes of chunks it
    will never read again (dstp reads each chunk once, in order). So files
    are opened with a small cache, ``chunk_cache_bytes`` per variable (enough
    for a few chunks, so a chunk read in several hyperslabs is decompressed
    once).

    A path has one published version at a time (:meth:`publish`; by default
    the version first opened). A read may name the version it expects
    (``version``: the one its dataset snapshot holds): it is served only
    while that version is on disk. ``layouts`` keeps the chunk listings of
    the direct reader between runs (the catalog index).
    """

    def __init__(self, capacity: int = 32, chunk_cache_bytes: int = 8 * 2**20, direct_chunks: bool = True,
                 layouts: LayoutStore | None = None, decoded_chunk_cache_bytes: int | None = None,
                 objects: "ObjectFiles | None" = None) -> None:
        self.capacity = max(1, capacity)
        #: Files that live in object stores (:mod:`.objects`): opened from a whole local copy, chunks by ranges.
        self.objects = objects
        #: The local copy each open store-backed file was opened from.
        self._local: dict[Path, Path] = {}
        #: Store-backed files open from an image (header and chunk indexes only, :meth:`ObjectFiles.local`): a
        #: variable's data is read through netCDF-C there only if the image holds all of it.
        self._imaged: set[Path] = set()
        #: Reads compressed netCDF-4 chunks outside NETCDF_LOCK where it can (dstp.catalog.chunks); None: off.
        #: Its decoded chunks are kept up to ``decoded_chunk_cache_bytes`` (None or -1: sized from memory).
        self.chunks: ChunkReader | None = \
            ChunkReader(self.open_raw, cache_bytes=decoded_chunk_cache_bytes, open_files=capacity, layouts=layouts,
                        objects=objects) \
            if direct_chunks else None
        self.chunk_cache_bytes = chunk_cache_bytes
        #: :meth:`read_once` reads the files :mod:`.fastheader` reads exactly through netCDF-C directly (a cold
        #: build's helper processes turn it on).
        self.fast_headers = False
        self._open: OrderedDict[Path, netCDF4.Dataset] = OrderedDict()
        #: The version each open file was opened as.
        self._opened_as: dict[Path, FileIdentity] = {}
        weakref.finalize(self, _adopt, self._open)  # never let the garbage collector call netCDF-C
        # Each file's published version (by default as first opened): a file changed, cut short or replaced
        # afterwards must fail loudly, not be served (netCDF-C reads a truncated classic file as fill values).
        self._identity: dict[Path, FileIdentity] = {}
        self._identity_lock = threading.Lock()
        #: Files opened so far (netCDF handles and raw descriptors alike): a warm start opens none.
        self.opened = 0
        #: Coordinates HDF-EOS5 grids define by formula, by (file, version, variable); None: the file holds it.
        self._computed: dict[tuple[Path, FileIdentity | None, str], np.ndarray | None] = {}
        #: Local Zarr-like sources (reference files) opened, by (path, version) (:mod:`.zarr_`).
        self._local_zarr: "ZarrFiles | None" = None
        #: Whether each local path is a Zarr-like source (asked on every read: one stat at its first).
        self._zarr_kinds: dict[Path, bool] = {}

    def describe(self) -> str:
        """Return how this cache reads files, for the server's log (what is in effect, not what was asked)."""
        how = (f"deflate/shuffle chunks read outside the netCDF lock ({INFLATE} inflate), the rest through netCDF-C"
               if self.chunks is not None else "every read through netCDF-C")
        cache = self.chunk_cache_bytes / 2**20
        decoded = f", {self.chunks.cache_bytes / 2**20:,.0f} MiB of decoded chunks" if self.chunks is not None else ""
        return f"{how}; up to {self.capacity} files open, {cache:g} MiB chunk cache per variable{decoded}"

    def open_raw(self, path: Path, version: FileIdentity | None = None) -> int:
        """Return a read-only file descriptor of published file ``path``, checked as it is opened.

        Opened through its real path with O_NOFOLLOW; the real path, device, inode, size and times must be
        those of ``version`` (default: the published version, else the first open's). Raises DataFileError
        otherwise. The caller closes it. An object of a store: its whole local copy (fetched once), never the
        image netCDF-C opens for its header (whose other bytes are zeros) — ``dstp get`` streams these bytes.
        """
        return self._open_checked(path, version, current=False, whole=True)[0]

    def is_object(self, path: Path) -> bool:
        """Return whether ``path`` is an object of a store (:mod:`.objects`), not a local file."""
        return self.objects is not None and self.objects.owns(path)

    def _open_object(self, path: Path, version: FileIdentity | None, current: bool,
                     whole: bool = False) -> tuple[int, FileIdentity]:
        """Return (descriptor of its local image or whole copy — ``whole``: the copy —, version) of a store-backed
        ``path`` (:meth:`ObjectFiles.local`)."""
        assert self.objects is not None
        with self._identity_lock:
            expected = version if version is not None else None if current else self._identity.get(path)
        if expected is None:
            expected = self.objects.current(path)  # type: ignore[assignment]
            assert isinstance(expected, FileIdentity)
            if not current:
                with self._identity_lock:
                    expected = self._identity.setdefault(path, expected)
        if whole:
            local, image = self.objects.copy(path, expected), False
        else:
            local, image = self.objects.local(path, expected)
        try:
            fd = os.open(local, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise DataFileError(f"cannot open the local copy of {path.name}: {exc.strerror or exc}") from exc
        with self._identity_lock:
            self.opened += 1
            self._local[path] = local
            if image:
                self._imaged.add(path)
            else:
                self._imaged.discard(path)
        return fd, expected

    def _open_checked(self, path: Path, version: FileIdentity | None, current: bool,
                      whole: bool = False) -> tuple[int, FileIdentity]:
        """Return (descriptor, version seen) of ``path``; ``current``: whatever version is on disk now; ``whole``:
        an object's whole copy, never its image."""
        if self.objects is not None and self.objects.owns(path):
            return self._open_object(path, version, current, whole)
        try:
            real = os.path.realpath(path)
            fd = os.open(real, os.O_RDONLY | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0))
        except OSError as exc:
            raise DataFileError(f"cannot open {path.name}: {exc.strerror or exc}") from exc
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise DataFileError(f"{path.name} is not a regular file; only files are published")
            seen = FileIdentity.of(real, st)
            with self._identity_lock:
                self.opened += 1
                expected = seen if current else version if version is not None else \
                    self._identity.setdefault(path, seen)
            if expected.real != seen.real:
                raise _replaced(path)
            _refuse_changed(path, expected, st)
        except BaseException:
            os.close(fd)
            raise
        return fd, seen

    def identity(self, path: Path) -> FileIdentity | None:
        """Return the published version of ``path`` (None if it never was opened nor published)."""
        with self._identity_lock:
            return self._identity.get(path)

    def publish(self, path: Path, version: FileIdentity) -> None:
        """Make ``version`` the one ``path`` is served as; what was open of another version is let go.

        Reads that name an older version (queries on an older catalog snapshot) fail from then on
        unless that version is still on disk.
        """
        with self._identity_lock:
            before = self._identity.get(path)
            self._identity[path] = version
        if before is not None and before != version:
            self._let_go(path, keep=version)

    def unpublish(self, path: Path) -> None:
        """Forget ``path`` (the catalog no longer serves it) and close what was open of it."""
        with self._identity_lock:
            self._identity.pop(path, None)
        self._let_go(path, keep=None)

    def _let_go(self, path: Path, keep: FileIdentity | None) -> None:
        if self.chunks is not None:
            self.chunks.forget(path, keep=keep)
        with NETCDF_LOCK:
            if keep is None or self._opened_as.get(path, keep) != keep:
                self._close_handle(path)
            for key in [k for k in self._computed if k[0] == path and k[1] != keep]:
                del self._computed[key]

    def _get(self, path: Path, version: FileIdentity | None = None, current: bool = False,
             whole: bool = False) -> netCDF4.Dataset:
        """Return the open file ``path`` (the caller holds NETCDF_LOCK): as ``version`` if given, as it is on
        disk now if ``current``, else as it was opened; ``whole``: an object from its whole copy, not its image."""
        ds = self._open.get(path)
        if ds is not None:
            if not current and (version is None or self._opened_as.get(path) == version) and \
                    not (whole and path in self._imaged):
                self._open.move_to_end(path)
                return ds
            self._drop(path)
        _close_orphans()
        try:
            return self._opened(path, version, current, whole)
        except DataFileError:
            if whole or path not in self._imaged:
                raise
            log.warning("%s: netCDF-C cannot open the image of its header; it is fetched whole", path.name)
            return self._opened(path, version, current, True)

    def _opened(self, path: Path, version: FileIdentity | None, current: bool, whole: bool) -> netCDF4.Dataset:
        fd, seen = self._open_checked(path, version, current, whole)
        try:
            ds = self._netcdf(fd, path)
        finally:
            os.close(fd)  # the library holds its own descriptor of the same file
        self._open[path] = ds
        self._opened_as[path] = seen
        while len(self._open) > self.capacity:
            old_path, old = self._open.popitem(last=False)
            self._opened_as.pop(old_path, None)
            old.close()
        return ds

    def _netcdf(self, fd: int, path: Path) -> netCDF4.Dataset:
        """Return netCDF-C's open of the file behind ``fd`` (checked by :meth:`_open_checked`; the caller holds
        NETCDF_LOCK and closes ``fd``), raw values on."""
        opened = _descriptor_path(fd, path)
        try:
            previous = netCDF4.get_chunk_cache()
            netCDF4.set_chunk_cache(self.chunk_cache_bytes, 1009, 0.75)  # applies to files opened now
            try:
                ds = netCDF4.Dataset(opened, "r")
            finally:
                netCDF4.set_chunk_cache(*previous)
        except (OSError, RuntimeError) as exc:
            raise DataFileError(f"cannot open {path.name}: {str(exc).replace(opened, path.name)}") from exc
        except Exception as exc:  # noqa: BLE001 - netCDF4-python fails on some HDF5 layouts with any exception
            raise unmappable(path, exc) from exc
        # dstp decodes CF packing, fill values and char arrays itself, the way xarray does.
        ds.set_auto_maskandscale(False)
        ds.set_always_mask(False)
        ds.set_auto_chartostring(False)
        return ds

    def read_once(self, path: Path, wanted: Callable[[FileMeta, FileIdentity], Sequence[str]]
                  ) -> tuple[FileMeta, FileIdentity, dict[str, np.ndarray]] | None:
        """Return (header, version, whole raw values of the variables ``wanted(header, version)`` names) of the
        version of local file ``path`` on disk now, from one open outside the cache, closed on return; None for
        a Zarr-like source or an object of a store (read through :meth:`inspect_current`).

        For a process that reads each file once and holds no other open of it — the helper processes of a cold
        index build (HDF5 must never open a file twice in a process: the server goes through the cache). The
        file is opened as :meth:`open_raw` opens it, and netCDF-C opens that descriptor; the values are kept
        only if that descriptor is still the version read once they are read (one ``fstat``: a file rewritten
        meanwhile gives no values, which a build then reads, and refuses, by version). A variable that cannot
        be read is left out (read, or refused, when a build needs it).
        """
        from dstp.catalog.zarr_references import is_reference

        if self.is_object(path) or is_reference(path.name):
            return None
        with NETCDF_LOCK:
            _close_orphans()
            try:
                fd, seen = self._open_checked(path, None, current=True)
            except DataFileError:
                if self._is_zarr(path):  # an Icechunk repository: a folder, or a name with a ref (x.icechunk@v1)
                    return None
                raise
            try:
                fast = self._read_plain(fd, path, lambda meta: wanted(meta, seen)) if self.fast_headers else None
                if fast is not None:
                    meta, values = fast
                else:
                    meta, values = self._read_whole(fd, path, lambda meta: wanted(meta, seen))
                if values and not seen.same_file(os.fstat(fd)):
                    values = {}
            finally:
                os.close(fd)
        return meta, seen, values

    def _read_plain(self, fd: int, path: Path, wanted: Callable[[FileMeta], Sequence[str]]
                    ) -> tuple[FileMeta, dict[str, np.ndarray]] | None:
        """Return :meth:`_read_whole`'s answer from netCDF-C directly (:mod:`.fastheader`), None for a file it
        does not read exactly."""
        previous = netCDF4.get_chunk_cache()
        netCDF4.set_chunk_cache(self.chunk_cache_bytes, 1009, 0.75)  # applies to files opened now
        try:
            return read_plain(_descriptor_path(fd, path), path, wanted)
        finally:
            netCDF4.set_chunk_cache(*previous)

    def _read_whole(self, fd: int, path: Path, wanted: Callable[[FileMeta], Sequence[str]]
                    ) -> tuple[FileMeta, dict[str, np.ndarray]]:
        """Return (header, whole raw values of the variables ``wanted(header)`` names) of the file behind ``fd``,
        through netCDF4-python; a variable that cannot be read is left out."""
        ds = self._netcdf(fd, path)
        try:
            meta = read_header(ds, path)
            values: dict[str, np.ndarray] = {}
            for name in wanted(meta):
                try:
                    values[name] = self._whole(ds, path, name)
                except DataFileError:
                    continue
        finally:
            ds.close()
        return meta, values

    @staticmethod
    def _whole(ds: netCDF4.Dataset, path: Path, variable: str) -> np.ndarray:
        """Return the whole raw values of ``variable`` of open file ``ds`` (a coordinate an HDF-EOS5 grid defines
        by formula computed, as :meth:`read` gives it)."""
        if hdfeos.is_computed(variable):
            computed = computed_values(ds, path, variable)
            if computed is not None:
                return computed
        try:
            var = ds[variable] if "/" in variable else ds.variables[variable]
            return np.asarray(var[...])
        except (OSError, RuntimeError, IndexError, KeyError) as exc:
            raise DataFileError(f"cannot read {variable!r} from {path.name}: {exc}") from exc

    def prefetch(self, path: Path, variable: str, index: Sequence[slice | int], version: FileIdentity | None,
                 ahead: "ReadAhead") -> None:
        """Start reading ahead the chunks a :meth:`read` of object ``path`` will need (:mod:`.readahead`); files on
        disk, Zarr stores and what netCDF-C reads are read when asked."""
        if self.chunks is not None and index and version is not None and self.objects is not None \
                and self.objects.owns(path) and not self.objects.is_zarr(path):
            ahead.prefetch(self.chunks, path, variable, index, version)

    def read(
        self, path: Path, variable: str, index: Sequence[slice | int], stats: ReadStats | None = None,
        version: FileIdentity | None = None,
    ) -> np.ndarray:
        """Return the raw (still packed) values of ``variable[index]`` from ``path`` (as ``version``, if given)."""
        if self._is_zarr(path):
            array = self._zarr_read(path, variable, index, version)
            if stats is not None:
                stats.add(array)
            return array
        if hdfeos.is_computed(variable):
            computed = self._computed_values(path, variable, version)
            if computed is not None:
                array = computed[tuple(index)] if index else computed
                if stats is not None:
                    stats.add(array)
                return array
        if self.chunks is not None and index:
            self._check_unchanged(path, version)
            try:
                array = self.chunks.read(path, variable, index, version or self.identity(path))
            except (OSError, ValueError) as exc:
                self._drop(path)
                raise DataFileError(f"cannot read {variable!r} from {path.name}: {exc}") from exc
            if array is not None:
                if stats is not None:
                    stats.add(array)
                return array
        with NETCDF_LOCK:
            ds = self._get(path, version)
            if path in self._imaged and not self._in_image(path, variable):
                ds = self._get(path, version, whole=True)  # its data is not all in the image: the whole copy
            self._check_unchanged(path, version)
            try:
                var = ds[variable] if "/" in variable else ds.variables[variable]
                array = np.asarray(var[tuple(index)] if index else var[...])
            except (OSError, RuntimeError, IndexError, KeyError) as exc:
                self._drop(path)
                raise DataFileError(f"cannot read {variable!r} from {path.name}: {exc}") from exc
        if stats is not None:
            stats.add(array)
        return array

    def _computed_values(self, path: Path, variable: str, version: FileIdentity | None) -> np.ndarray | None:
        """Return (and keep) a coordinate an HDF-EOS5 grid defines by formula (:func:`computed_values`)."""
        with NETCDF_LOCK:
            key = (path, version, variable)
            hit = self._computed.get(key)
            if hit is None and key not in self._computed:
                ds = self._get(path, version)
                self._check_unchanged(path, version)
                hit = self._computed[key] = computed_values(ds, path, variable)
            return hit

    def inspect(self, path: Path) -> FileMeta:
        """Return a file's metadata, opening it through the cache (where it then stays open).

        A server never opens a file twice: HDF5 (1.14) crashes opening a file
        with netCDF-4 string variables that the process holds open already --
        two datasets over the same files, say.
        """
        if self._is_zarr(path):
            return self._zarr_meta(path, None)[0]
        with NETCDF_LOCK:
            ds = self._get(path)
            try:
                return read_header(ds, path, self._local.get(path))
            except DataFileError:
                if path not in self._imaged:
                    self._drop(path)
                    raise
            log.warning("%s: its header cannot be read from the image fetched by ranges; it is fetched whole",
                        path.name)
            ds = self._get(path, whole=True)
            try:
                return read_header(ds, path, self._local.get(path))
            except DataFileError:
                self._drop(path)
                raise

    def _in_image(self, path: Path, variable: str) -> bool:
        """Return whether the image ``path`` is open from holds all of ``variable``'s data."""
        assert self.objects is not None
        return self.objects.covers(path, self._opened_as[path], variable.lstrip("/"))

    def inspect_current(self, path: Path) -> tuple[FileMeta, FileIdentity]:
        """Return the metadata of the version of ``path`` on disk now, and that version (not yet published)."""
        if self._is_zarr(path):
            return self._zarr_meta(path, self._zarr_current(path))
        with NETCDF_LOCK:
            ds = self._get(path, current=True)
            try:
                return read_header(ds, path, self._local.get(path)), self._opened_as[path]
            except DataFileError:
                if path not in self._imaged:
                    self._drop(path)
                    raise
            ds = self._get(path, self._opened_as[path], whole=True)
            try:
                return read_header(ds, path, self._local.get(path)), self._opened_as[path]
            except DataFileError:
                self._drop(path)
                raise

    def _zarr_meta(self, path: Path, version: FileIdentity | None) -> tuple[FileMeta, FileIdentity]:
        """Return the metadata and version of a Zarr store of a store (:mod:`.zarr_`)."""
        from dstp.catalog.zarr_ import zarr_meta

        if version is None:
            with self._identity_lock:
                version = self._identity.get(path)
            if version is None:
                current = self._zarr_current(path)
                with self._identity_lock:
                    version = self._identity.setdefault(path, current)
        return zarr_meta(self._zarr_group(path, version), path), version

    def _is_zarr(self, path: Path) -> bool:
        """Return whether ``path`` is read through zarr-python: a Zarr store of a store, or a Zarr-like source
        (a kerchunk/VirtualiZarr reference file, :mod:`.zarr_references`) local or in a store."""
        if self.objects is not None and self.objects.owns(path):
            return self.objects.is_zarr(path)
        known = self._zarr_kinds.get(path)
        if known is None:
            from dstp.catalog.zarr_ import is_zarr_source

            known = self._zarr_kinds[path] = is_zarr_source(path)
        return known

    def _zarr_current(self, path: Path) -> FileIdentity:
        """Return the version of the Zarr-like source ``path`` now (a store's listing, else a stat)."""
        if self.objects is not None and self.objects.owns(path):
            current = self.objects.current(path)
            assert isinstance(current, FileIdentity)
            return current
        from dstp.catalog.zarr_ import icechunk_identity

        try:
            repo: FileIdentity | None = icechunk_identity(path)
            return repo if repo is not None else FileIdentity.of(os.path.realpath(path), path.stat())
        except OSError as exc:
            raise DataFileError(f"{path.name} is no longer readable: {exc.strerror}") from exc

    def _zarr_group(self, path: Path, version: FileIdentity) -> Any:
        """Return the open Zarr group of that version of the Zarr-like source ``path``."""
        from dstp.catalog.zarr_ import ZarrFiles, open_source

        if self.objects is not None and self.objects.owns(path):
            return self.objects.zarr_group(path, version)
        if self._local_zarr is None:
            self._local_zarr = ZarrFiles()
        stores = self.objects.stores if self.objects is not None else {}

        def opener() -> Any:
            if self._zarr_current(path) != version:
                raise _replaced(path)
            return open_source(path, stores)

        return self._local_zarr.group(path, hash(version) & (2**63 - 1), opener)

    def _zarr_read(self, path: Path, variable: str, index: Sequence[slice | int],
                   version: FileIdentity | None) -> np.ndarray:
        from dstp.catalog.zarr_ import ZarrFiles

        expected = version or self.identity(path)
        if expected is None:
            expected = self._zarr_meta(path, None)[1]
        return ZarrFiles.read(self._zarr_group(path, expected), path, variable, index)

    def _check_unchanged(self, path: Path, version: FileIdentity | None = None) -> None:
        if self.objects is not None and self.objects.owns(path):
            return  # read from a copy of that very version, or by ranges checked against its ETag
        try:
            st = path.stat()
        except OSError as exc:
            self._drop(path)
            raise DataFileError(f"{path.name} is no longer readable: {exc.strerror}") from exc
        first = version if version is not None else self.identity(path)
        if first is not None:
            try:
                _refuse_changed(path, first, st)
            except DataFileError:
                self._drop(path)
                raise

    def _drop(self, path: Path) -> None:
        if self.chunks is not None:
            self.chunks.forget(path)
        self._close_handle(path)

    def _close_handle(self, path: Path) -> None:
        with NETCDF_LOCK:
            ds = self._open.pop(path, None)
            self._opened_as.pop(path, None)
            self._imaged.discard(path)
            if ds is not None:
                try:
                    ds.close()
                except (OSError, RuntimeError):
                    pass

    def close(self) -> None:
        """Close every cached file."""
        if self.chunks is not None:
            self.chunks.close()
        with NETCDF_LOCK:
            _close_orphans()
            self._opened_as.clear()
            while self._open:
                _, ds = self._open.popitem()
                try:
                    ds.close()
                except (OSError, RuntimeError):
                    pass

    def __len__(self) -> int:
        return len(self._open)


def inspect_file(path: Path, handles: FileHandles | None = None) -> FileMeta:
    """Return the metadata of one netCDF file, raising DataFileError if it is unreadable.

    Variables in netCDF-4 groups are listed by their path without the leading
    slash (``Grid/precipitation``); those of the root group by their name.
    With ``handles`` the file is opened through that cache and stays open there
    (:meth:`FileHandles.inspect`); without, it is opened and closed here.
    """
    if handles is not None:
        return handles.inspect(path)
    with NETCDF_LOCK:
        try:
            ds = netCDF4.Dataset(path, "r")
        except (OSError, RuntimeError) as exc:
            raise DataFileError(f"cannot open {path}: {exc}") from exc
        except Exception as exc:  # noqa: BLE001 - netCDF4-python fails on some HDF5 layouts with any exception
            raise unmappable(path, exc) from exc
        try:
            return read_header(ds, path)
        finally:
            ds.close()
