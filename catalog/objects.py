"""Files of datasets that live in object stores, as the catalog sees them: paths with versions.

A descriptor ``<files store="era5" glob="reanalysis/*.nc"/>`` in folder ``F`` publishes the objects of store
``era5`` (:mod:`.stores`) whose keys below the store's prefix match the glob. The catalog names each by a
path ``F/@era5/reanalysis/x.nc`` — what messages, file lists and STAC assets show; never the bucket's
endpoint or a credential — and by a :class:`~dstp.catalog.netcdf4_.FileIdentity` made of the object's
version: ``real`` is ``store://era5/<key>``, the inode a number drawn from its ETag, size and
last-modified time as on disk. So the index, versions, change log and snapshot rules of local files apply
unchanged: a replaced object is a new version; a query whose snapshot names the old one is refused.

What is read, and when (docs/object-stores.md):

* the store is **listed** at each look of the catalog, at most every ``list_s`` seconds per descriptor (there
  is no change notification; ``dstp catalog reload`` lists at once);
* a netCDF-4/HDF5 file's header, coordinates and chunk indexes are read once per version **by ranges**: h5py, in
  the listing helper process, reads them through a file-like object whose reads are ranged GETs made here
  (:meth:`ObjectFiles._image`); the blocks it read become a sparse local *image* that netCDF-C opens for the
  header. What netCDF-C reads is kept in the catalog index — a restart with the index makes no GET. A netCDF-3
  file (or one h5py cannot read) is fetched as a **whole copy** to a bounded local cache (``store_cache_bytes``);
* chunk listings (the direct chunk reader's) come from that same look, once per version, and are kept in the
  index;
* data of deflate/shuffle chunked variables is read **in place**: the chunks a hyperslab needs, as ranged GETs
  of exactly their bytes, adjacent ranges coalesced, ``concurrency`` in flight, each checked against the
  version (``If-Match``). Other variables (netCDF-3, other filters, contiguous) are read by netCDF-C from the
  image when it holds all their data (the helper says which), else from the whole copy, fetched then.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from dstp.catalog.stores import ObjectVersion, Store
from dstp.catalog.zarr_ import REF_MARK, ZarrFiles, icechunk_versions, open_in_store, split_ref
from dstp.catalog.zarr_references import is_reference
from dstp.errors import DataFileError

__all__ = ["MARK", "ObjectFiles", "store_glob"]

log = logging.getLogger("dstp.catalog")

#: How the catalog index spells a store's glob: ``store:era5/reanalysis/*.nc`` (a local glob never starts so:
#: ``store:`` would be a folder name, and a descriptor's local glob is kept as written).
MARK = "store:"


def store_glob(store: str, glob: str) -> str:
    """Return the glob the catalog keeps for ``<files store=… glob=…/>``."""
    return f"{MARK}{store}/{glob}"


@dataclass(frozen=True, slots=True)
class _Located:
    store: str
    key: str
    #: Read through zarr-python: a Zarr store (a folder of objects), or a reference file (:mod:`.zarr_references`).
    zarr: bool = False


#: Blocks in which the header of an HDF5 object is read by ranges (:meth:`ObjectFiles._image`): netCDF-C keeps
#: the metadata of a netCDF-4 file in its first 64 KiB (the ccm3 samples of 0.5, 6 and 127 MB: 1, 1 and 2
#: requests of 64 KiB, where 16 KiB blocks took 4-5 requests and 256 KiB blocks 4x the bytes); each further
#: block h5py needs costs one request, made one after another.
IMAGE_BLOCK = 64 * 2**10


@dataclass(frozen=True, slots=True)
class _Image:
    """A sparse local image of an HDF5 object (what netCDF-C's open reads), its chunk listings and, by variable,
    whether all its data lies in the image."""

    local: Path
    listings: dict[str, Any]
    covered: dict[str, bool]
    #: The blocks (of IMAGE_BLOCK bytes) it holds.
    blocks: frozenset[int]

    def holds(self, start: int, end: int) -> bool:
        return all(k in self.blocks for k in range(start // IMAGE_BLOCK, (end - 1) // IMAGE_BLOCK + 1))


_UNKNOWN: Any = object()


class ObjectFiles:
    """The store-backed files of one catalog: listings, versions, whole copies, ranged reads."""

    def __init__(self, stores: Mapping[str, Store], cache_dir: Path, cache_bytes: int = 8 * 2**30,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stores = dict(stores)
        self.cache_dir = cache_dir
        self.cache_bytes = cache_bytes
        self._clock = clock
        self._lock = threading.Lock()
        self._where: dict[Path, _Located] = {}
        #: Each path's version in its store's last listing.
        self._latest: dict[Path, object] = {}
        #: (store, version token) -> object version: what a FileIdentity's inode stands for.
        self._versions: dict[tuple[str, int], ObjectVersion] = {}
        self._listed: dict[tuple[str, str, str], tuple[float, list[tuple[str, object]]]] = {}
        self._fetching: dict[Path, threading.Lock] = {}
        #: Whole copies fetched (the tests and benchmarks check a warm start fetched none).
        self.fetched = 0
        #: Images made (:meth:`_image`): headers and chunk indexes read by ranges.
        self.imaged = 0
        #: (store, version token) -> its image; None: read from a whole copy (netCDF-3, unreadable by h5py).
        self._images: dict[tuple[str, int], _Image | None] = {}
        self._zarr = ZarrFiles()

    @staticmethod
    def is_store_glob(glob: str) -> bool:
        return glob.startswith(MARK)

    def owns(self, path: Path) -> bool:
        """Return whether ``path`` names an object of a store (listed by this catalog)."""
        return path in self._where

    def is_zarr(self, path: Path) -> bool:
        """Return whether ``path`` names a Zarr store (read through zarr-python, :mod:`.zarr_`)."""
        where = self._where.get(path)
        return where is not None and where.zarr

    def zarr_group(self, path: Path, identity: object) -> Any:
        """Return the open Zarr group of that version of ``path``."""
        version = self.version(path, identity)
        where = self._where[path]
        return self._zarr.group(path, version.token(),
                                lambda: open_in_store(self.stores, where.store, where.key, version, path.name))

    # -- listing --------------------------------------------------------------------------------------------

    def list_files(self, folder: Path, marked: str, *, force: bool = False) -> list[tuple[str, object]]:
        """Return (path text, FileIdentity) of the objects a store glob matches; raise DataFileError (naming the
        store) when the store cannot be listed. A listing younger than the store's ``list_s`` is reused."""
        from dstp.catalog.netcdf4_ import FileIdentity

        name, _, pattern = marked[len(MARK):].partition("/")
        store = self.stores.get(name)
        if store is None:
            known = ", ".join(sorted(self.stores)) or "none are configured"
            raise DataFileError(f"<files store={name!r}>: the server has no store of that name ({known}); the "
                                "operator configures stores in the server's settings (stores)")
        key = (str(folder), name, pattern)
        now = self._clock()
        with self._lock:
            cached = self._listed.get(key)
        if cached is not None and not force and now - cached[0] < store.config.list_s:
            return cached[1]
        pattern, ref = split_ref(pattern)  # <files ref=…>: Icechunk repositories at that ref (:mod:`.zarr_`)
        zarr = pattern.rstrip("/").endswith(".zarr")
        icechunk = ref is not None or pattern.rstrip("/").endswith(".icechunk")
        found = icechunk_versions(store, pattern.rstrip("/"), ref) if icechunk else \
            store.list_zarr(pattern.rstrip("/")) if zarr else store.list_objects(pattern)
        out: list[tuple[str, object]] = []
        with self._lock:
            for version in found:
                path = folder / f"@{name}" / (version.key + (f"{REF_MARK}{ref}" if ref is not None else ""))
                self._where[path] = _Located(name, version.key, zarr or icechunk or is_reference(version.key))
                self._versions[(name, version.token())] = version
                out.append((str(path), FileIdentity(f"store://{name}/{version.key}", 0, version.token(),
                                                    version.size, version.mtime_ns, 0)))
                self._latest[path] = out[-1][1]
            self._listed[key] = (now, out)
        return out

    def due(self) -> float | None:
        """Return when the oldest listing is due again (the clock's time); None before any listing."""
        with self._lock:
            times = [at + self.stores[store].config.list_s for (_, store, _), (at, _) in self._listed.items()]
        return min(times) if times else None

    def expire(self) -> None:
        """Make every listing due: the next look lists each store again."""
        with self._lock:
            self._listed.clear()

    def version(self, path: Path, identity: object) -> ObjectVersion:
        """Return the object version a FileIdentity of ``path`` stands for; raise DataFileError when the store no
        longer lists it (replaced or removed since)."""
        where = self._where[path]
        inode = getattr(identity, "inode")
        with self._lock:
            found = self._versions.get((where.store, inode))
        if found is None or found.key != where.key:
            raise DataFileError(f"{path.name} was replaced in store {where.store!r} after the catalog published it; "
                                "this version is not served — run the query again once the catalog lists it")
        return found

    def current(self, path: Path) -> object:
        """Return the FileIdentity of the version the store holds now: its last listing's (a fetch of it then checks
        it is still that one, If-Match), else one HEAD."""
        from dstp.catalog.netcdf4_ import FileIdentity

        with self._lock:
            listed = self._latest.get(path)
        if listed is not None:
            return listed
        where = self._where[path]
        version = self.stores[where.store].head(where.key)
        with self._lock:
            self._versions[(where.store, version.token())] = version
        return FileIdentity(f"store://{where.store}/{where.key}", 0, version.token(), version.size, version.mtime_ns, 0)

    # -- reading --------------------------------------------------------------------------------------------

    def read_ranges(self, path: Path, identity: object, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """Return the bytes of each [start, end) of that version of ``path``, by ranged GETs."""
        where = self._where[path]
        version = self.version(path, identity)
        with self._lock:
            image = self._images.get((where.store, version.token()))
        if image is not None and all(image.holds(s, e) for s, e in ranges if e > s):
            try:  # fetched with the header (coordinates): no request
                with open(image.local, "rb") as f:
                    return [os.pread(f.fileno(), e - s, s) if e > s else b"" for s, e in ranges]
            except OSError:
                pass  # evicted meanwhile: from the store
        return self.stores[where.store].read_ranges(version, ranges)

    def store_of(self, path: Path) -> str:
        """Return the name of the store ``path`` is an object of."""
        return self._where[path].store

    def window(self, path: Path) -> int:
        """Return the bytes a read-ahead keeps in flight to the store of ``path``: its measured bandwidth-delay
        product (:meth:`~dstp.catalog.stores.LinkMeter.window`)."""
        return self.stores[self._where[path].store].link.window()

    def _cached(self, where: _Located, version: ObjectVersion, suffix: str) -> Path:
        name = hashlib.sha256(f"{where.store}\0{where.key}".encode()).hexdigest()[:24]
        return self.cache_dir / where.store / f"{name}-{version.token():016x}{suffix}"

    def local(self, path: Path, identity: object) -> tuple[Path, bool]:
        """Return (the local file netCDF-C opens for that version of ``path``, whether it is an image).

        An HDF5 object gets an *image* (:meth:`_image`): a sparse file of the object's size holding only what
        netCDF-C's open and the catalog's look read, fetched by ranges; its variables' data netCDF-C may read
        from it only where :meth:`covers` says so. A netCDF-3 object, one h5py cannot read, or one whose whole
        copy is cached already: the whole copy."""
        version = self.version(path, identity)
        where = self._where[path]
        whole = self._cached(where, version, Path(where.key).suffix)
        if not whole.exists():
            image = self._image(path, version)
            if image is not None:
                return image.local, True
        return self.copy(path, identity), False

    def covers(self, path: Path, identity: object, variable: str) -> bool:
        """Return whether all the data of ``variable`` lies in the image of that version of ``path``."""
        version = self.version(path, identity)
        with self._lock:
            image = self._images.get((self._where[path].store, version.token()))
        return image is not None and image.covered.get(variable, False)

    def listing(self, path: Path, identity: object, variable: str) -> tuple[bool, Any]:
        """Return (known, chunk listing) of ``variable`` in that version of ``path``, from its image's look (no
        request when it was made); known is False for objects without an image (netCDF-3, unreadable by h5py)."""
        image = self._image(path, self.version(path, identity))
        if image is None:
            return False, None
        return True, image.listings.get(variable)

    def _image(self, path: Path, version: ObjectVersion) -> _Image | None:
        """Return the image of that version of ``path`` (made once; None: the object is read from a whole copy)."""
        from dstp.catalog.chunk_lister import LISTER, ListingFailed

        where = self._where[path]
        key = (where.store, version.token())
        local = self._cached(where, version, ".image")
        with self._lock:
            gate = self._fetching.setdefault(local, threading.Lock())
        with gate:
            with self._lock:
                known = self._images.get(key, _UNKNOWN)
            if known is None or (isinstance(known, _Image) and known.local.exists()):
                if isinstance(known, _Image):
                    os.utime(known.local)  # recently used: evicted last
                return known
            store = self.stores[where.store]
            try:
                answer = LISTER.image(version.size, IMAGE_BLOCK, lambda spans: store.read_ranges(version, spans))
            except ListingFailed as exc:
                log.warning("%s: %s: the h5py helper failed reading its header by ranges (%s); fetched whole",
                            store.config.where(), where.key, exc)
                return None  # not kept: tried again at the next open
            image: _Image | None = None
            if "blocks" in answer:
                self.cache_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
                local.parent.mkdir(exist_ok=True, mode=0o700)
                partial = local.with_name(local.name + ".part")
                fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
                try:
                    os.ftruncate(fd, version.size)  # sparse: what was not fetched takes no disk
                    for k, data in answer["blocks"].items():
                        os.pwrite(fd, data, k * IMAGE_BLOCK)
                finally:
                    os.close(fd)
                os.replace(partial, local)
                image = _Image(local, answer["listings"], answer["covered"], frozenset(answer["blocks"]))
                self.imaged += 1
                log.info("%s: read the header and chunk indexes of %s by ranges (%.2f of %.1f MiB)",
                         store.config.where(), where.key,
                         sum(len(b) for b in answer["blocks"].values()) / 2**20, version.size / 2**20)
            elif "failed" in answer:
                log.warning("%s: h5py cannot read %s by ranges (%s); it is fetched whole", store.config.where(),
                            where.key, answer["failed"])
            with self._lock:
                self._images[key] = image
        self._evict(keep=local)
        return image

    def copy(self, path: Path, identity: object) -> Path:
        """Return a local whole copy of that version of ``path``, fetched once into the cache."""
        version = self.version(path, identity)
        where = self._where[path]
        local = self._cached(where, version, Path(where.key).suffix)
        with self._lock:
            gate = self._fetching.setdefault(local, threading.Lock())
        with gate:
            if local.exists() and local.stat().st_size == version.size:
                os.utime(local)  # recently used: evicted last
                return local
            self.cache_dir.mkdir(parents=True, exist_ok=True, mode=0o700)  # copies of restricted data too
            local.parent.mkdir(exist_ok=True, mode=0o700)
            partial = local.with_name(local.name + ".part")
            partial.touch(mode=0o600)
            log.info("%s: fetching %s whole (%.1f MiB, version %s) for netCDF-C/h5py, which read local files only",
                     self.stores[where.store].config.where(), where.key, version.size / 2**20, version.etag[:12])
            self.stores[where.store].fetch(version, partial)
            os.replace(partial, local)
            self.fetched += 1
        self._evict(keep=local)
        return local

    def _evict(self, keep: Path) -> None:
        """Delete the least recently used copies beyond ``cache_bytes`` (an open copy stays readable: unlinked)."""
        copies = [p for p in self.cache_dir.glob("*/*") if p.is_file() and not p.name.endswith(".part")]
        stats = sorted(((p.stat().st_mtime_ns, p.stat().st_size, p) for p in copies), key=lambda t: t[0])
        total = sum(size for _, size, _ in stats)
        for _, size, p in stats:
            if total <= self.cache_bytes:
                break
            if p != keep:
                p.unlink(missing_ok=True)
                total -= size

    def close(self) -> None:
        for store in self.stores.values():
            closer = getattr(store, "close", None)
            if closer is not None:
                closer()
