"""kerchunk / VirtualiZarr reference files as files of a dataset: a Zarr group whose chunks are byte ranges of
netCDF-4/HDF5 files, read where those files live.

A reference file (JSON, version 0 or 1 of the spec: https://fsspec.github.io/kerchunk/spec.html) maps each Zarr
key to inline bytes or to ``[target, offset, length]``. It is parsed by fsspec's
:class:`~fsspec.implementations.reference.ReferenceFileSystem` (templates, ``gen`` keys, inline ``base64:``
data: what kerchunk and VirtualiZarr write) and read by zarr-python 3 through :class:`ReferenceStore`, whose
chunk reads go through dstp's own readers rather than fsspec's filesystems, so that:

* a target in an S3 bucket or on an HTTPS server is read through the configured store that covers its URL
  (the operator's endpoint and credentials, ranged GETs with ``If-Match``, :mod:`.stores`) — a reference never
  carries credentials, and a URL no store covers is refused, never fetched;
* a relative target resolves against the reference file (a local folder, or the same store);
* each target's version (size and times, or ETag) is taken when the reference is opened, and every read is
  checked against it: a target missing, cut short of a referenced range or replaced since is a
  :class:`~dstp.errors.DataFileError` naming the reference file, the key and the target — never zeros or fill
  values in its place.

The references describe a netCDF-4 file, so its variables decode as netCDF-C reads them (:mod:`.cf`): kerchunk
writes ``fill_value: null`` for a netCDF variable without ``_FillValue``, where netCDF-C reads an unwritten
element as the type's default fill; such arrays are given that default (:attr:`ReferenceStore.defaulted`).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import posixpath
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Iterable, Mapping
from urllib.parse import urlsplit

import numpy as np

from dstp.catalog.stores import LocalStore, ObjectVersion, Store
from dstp.errors import DataFileError

__all__ = ["REFERENCE_SUFFIXES", "ReferenceStore", "is_reference", "open_references"]

#: Names of reference files (kerchunk's and VirtualiZarr's JSON output).
REFERENCE_SUFFIXES = (".json",)


def is_reference(name: str) -> bool:
    """Return whether ``name`` (a path, key or glob) names kerchunk/VirtualiZarr reference files."""
    return name.rstrip("/").lower().endswith(REFERENCE_SUFFIXES)


@dataclass(frozen=True, slots=True)
class Where:
    """Where a reference file was read from: a local path, or a key of a configured store."""

    #: How messages name it (the catalog path: ``era5/refs/x.json`` or ``era5/@arco/refs/x.json``).
    name: str
    local: Path | None = None
    store: str | None = None
    key: str | None = None


class _Target:
    """One target file of a reference file, as it was when the reference was opened: read by ranges, checked."""

    def __init__(self, url: str, describe: str, read: Callable[[int, int], bytes], size: int) -> None:
        self.url, self.describe, self._read, self.size = url, describe, read, size

    def read(self, start: int, end: int) -> bytes:
        return self._read(start, end)


def _local_target(path: Path, url: str, *, relative: bool = False) -> _Target:
    try:
        st = path.stat()
    except OSError as exc:
        where = f" (a relative target is read beside the reference file: {path})" if relative else ""
        raise FileNotFoundError(f"{url} cannot be read ({exc.strerror}){where}") from exc
    seen = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)

    def read(start: int, end: int) -> bytes:
        with open(path, "rb") as f:
            now = os.fstat(f.fileno())
            if (now.st_dev, now.st_ino, now.st_size, now.st_mtime_ns) != seen:
                raise _Changed(url)
            return os.pread(f.fileno(), end - start, start)

    return _Target(url, url, read, st.st_size)


def _store_target(store: Store, key: str, url: str) -> _Target:
    version: ObjectVersion = store.head(key)  # DataFileError "no longer in store …" when it is missing

    def read(start: int, end: int) -> bytes:
        return store.read_ranges(version, [(start, end)])[0]

    return _Target(url, f"{key} in {store.config.where()}", read, version.size)


class _Changed(Exception):
    pass


class Targets:
    """Resolves the target URLs of one reference file to readers, through the configured stores."""

    def __init__(self, where: Where, stores: Mapping[str, Store]) -> None:
        self.where = where
        self.stores = stores
        self._lock = threading.Lock()
        self._open: dict[str, _Target] = {}

    def target(self, url: str) -> _Target:
        with self._lock:
            hit = self._open.get(url)
        if hit is None:
            hit = self._resolve(url)
            with self._lock:
                hit = self._open.setdefault(url, hit)
        return hit

    def _resolve(self, url: str) -> _Target:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme in ("", "file") and len(parts.scheme) != 1:  # (a Windows drive letter is no scheme)
            path = parts.path if scheme == "file" else url
            if not posixpath.isabs(path):  # relative: beside the reference file, where that is
                if self.where.store is not None:
                    key = posixpath.normpath(posixpath.join(posixpath.dirname(self.where.key or ""), path))
                    if key.startswith("../") or key == "..":
                        raise _Refused(f"{url} lies outside store {self.where.store!r}")
                    return _store_target(self.stores[self.where.store], key, url)
                assert self.where.local is not None
                return _local_target(self.where.local.parent / path, url, relative=True)
            if self.where.store is not None and not self._in_local_store(path):
                raise _Refused(f"{url} is a path on the server's disk, which a reference file in a store may not "
                               "name (only relative targets, or URLs of configured stores)")
            return _local_target(Path(path), url)
        for store in self.stores.values():
            base = store.config.url.rstrip("/")
            if store.config.scheme == scheme and url.startswith(base + "/"):
                return _store_target(store, url[len(base) + 1:], url)
        raise _Refused(f"{url} is covered by no configured store; the operator configures a store whose url is a "
                       f"prefix of it (stores setting: {scheme}://… with its endpoint and credentials) — a reference "
                       "never carries credentials, and dstp fetches no URL the operator did not configure")

    def _in_local_store(self, path: str) -> bool:
        for store in self.stores.values():
            if isinstance(store, LocalStore):
                root = os.path.realpath(store.root)
                if os.path.realpath(path).startswith(root.rstrip(os.sep) + os.sep):
                    return True
        return False

    def urls(self, references: Mapping[str, Any]) -> set[str]:
        """Return every target URL ``references`` names (to open each, and check it exists, at once)."""
        return {v[0] for v in references.values() if isinstance(v, list) and v and isinstance(v[0], str)}


class _Refused(Exception):
    pass


def _numeric(dtype: Any) -> np.dtype | None:
    try:
        d = np.dtype(dtype)
    except TypeError:
        return None
    return d if d.kind in "iuf" else None


class ReferenceStore:
    """A read-only zarr-python store over one reference file's keys; chunks read from their targets, checked.

    (Defined as a subclass of ``zarr.abc.store.Store`` by :func:`_store_class`, so zarr is imported only when
    a reference file is opened.)
    """

    #: Arrays whose ``fill_value`` was null, given netCDF's default fill of their type (as netCDF-C reads them).
    defaulted: frozenset[str]


def _store_class() -> type:
    from zarr.abc.store import ByteRequest, OffsetByteRequest, RangeByteRequest, Store, SuffixByteRequest
    from zarr.core.buffer import Buffer, BufferPrototype, default_buffer_prototype

    class _ReferenceStore(Store, ReferenceStore):
        supports_writes = False
        supports_deletes = False
        supports_partial_writes = False
        supports_listing = True

        def __init__(self, references: dict[str, Any], targets: Targets, defaulted: frozenset[str]) -> None:
            super().__init__(read_only=True)
            self.references = references
            self.targets = targets
            self.defaulted = defaulted

        def __eq__(self, other: object) -> bool:
            return other is self

        def __hash__(self) -> int:
            return id(self)

        def _bytes(self, key: str) -> bytes | None:
            ref = self.references.get(key)
            if ref is None:
                return None  # a chunk never written: the array's fill value (zarr's rule, kerchunk's too)
            if isinstance(ref, str):
                ref = ref.encode()
            if isinstance(ref, bytes):
                return base64.b64decode(ref[7:]) if ref.startswith(b"base64:") else ref
            where = self.targets.where.name
            url = ref[0]
            try:
                target = self.targets.target(url)
            except (FileNotFoundError, DataFileError, _Refused) as exc:
                raise DataFileError(f"reference file {where}: key {key!r} names target {url}: {exc}") from exc
            start, length = (0, target.size) if len(ref) == 1 else (int(ref[1]), int(ref[2]))
            if start + length > target.size:
                raise DataFileError(f"reference file {where}: key {key!r} names bytes {start}–{start + length} of "
                                    f"target {target.describe}, which is {target.size} bytes long (cut short, or "
                                    "not the file the references were made from); regenerate the references")
            try:
                data = target.read(start, start + length)
            except _Changed as exc:
                raise DataFileError(f"reference file {where}: target {url} of key {key!r} changed after the "
                                    "references were opened; its byte offsets no longer hold; regenerate the "
                                    "references of the new file") from exc
            except DataFileError as exc:
                raise DataFileError(f"reference file {where}: key {key!r}, target {url}: {exc}") from exc
            except OSError as exc:
                raise DataFileError(f"reference file {where}: key {key!r}, target {url} cannot be read "
                                    f"({exc.strerror})") from exc
            if len(data) != length:
                raise DataFileError(f"reference file {where}: key {key!r} names bytes {start}–{start + length} of "
                                    f"target {target.describe}, which ends at byte {start + len(data)}")
            return data

        async def get(self, key: str, prototype: BufferPrototype | None = None,
                      byte_range: ByteRequest | None = None) -> Buffer | None:
            prototype = prototype or default_buffer_prototype()
            data = await asyncio.to_thread(self._bytes, key) if isinstance(self.references.get(key), list) \
                else self._bytes(key)
            if data is None:
                return None
            if isinstance(byte_range, RangeByteRequest):
                data = data[byte_range.start:byte_range.end]
            elif isinstance(byte_range, OffsetByteRequest):
                data = data[byte_range.offset:]
            elif isinstance(byte_range, SuffixByteRequest):
                data = data[-byte_range.suffix:]
            return prototype.buffer.from_bytes(data)

        async def get_partial_values(self, prototype: BufferPrototype,
                                     key_ranges: Iterable[tuple[str, ByteRequest | None]]) -> list[Buffer | None]:
            return [await self.get(k, prototype, r) for k, r in key_ranges]

        async def exists(self, key: str) -> bool:
            return key in self.references

        async def set(self, key: str, value: Buffer) -> None:
            raise PermissionError("reference files are read only")

        async def delete(self, key: str) -> None:
            raise PermissionError("reference files are read only")

        async def list(self) -> AsyncIterator[str]:
            for key in list(self.references):
                yield key

        async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
            for key in list(self.references):
                if key.startswith(prefix):
                    yield key

        async def list_dir(self, prefix: str) -> AsyncIterator[str]:
            prefix = prefix.rstrip("/")
            seen: set[str] = set()
            for key in list(self.references):
                if prefix and not key.startswith(prefix + "/"):
                    continue
                rest = key[len(prefix) + 1:] if prefix else key
                child = rest.split("/", 1)[0]
                if child and child not in seen:
                    seen.add(child)
                    yield child

    return _ReferenceStore


_STORE_CLASS: type | None = None


def _defaults(references: dict[str, Any]) -> frozenset[str]:
    """Give each numeric array whose ``fill_value`` is null netCDF's default fill of its type (in place); return
    their names."""
    import netCDF4

    out = set()
    for key, value in list(references.items()):
        if not key.endswith(".zarray") or not isinstance(value, (str, bytes)):
            continue
        try:
            meta = json.loads(value)
        except ValueError:
            continue
        dtype = _numeric(meta.get("dtype"))
        if meta.get("fill_value") is None and dtype is not None:  # (1-byte types too: read as -127, not masked)
            default = netCDF4.default_fillvals.get(dtype.str[1:])
            if default is not None:
                meta["fill_value"] = default.item() if hasattr(default, "item") else default
                references[key] = json.dumps(meta)
                out.add(key[:-len("/.zarray")] if "/" in key else "")
    return frozenset(out)


def open_references(text: bytes, where: Where, stores: Mapping[str, Store]) -> Any:
    """Return the Zarr group a reference file's ``text`` describes, its chunks read from their targets (each
    opened now: a target that is missing or no store covers raises DataFileError naming file and target)."""
    global _STORE_CLASS
    import zarr
    from fsspec.implementations.reference import ReferenceFileSystem

    try:
        spec = json.loads(text)
    except ValueError as exc:
        raise DataFileError(f"reference file {where.name} is not JSON ({exc})") from exc
    if not isinstance(spec, dict):
        raise DataFileError(f"reference file {where.name} is not a JSON object of references")
    try:  # templates, gen keys and both spec versions, as fsspec reads them
        parsed = ReferenceFileSystem(spec, fs={"file": _NoFiles()}).references
    except Exception as exc:  # noqa: BLE001 - fsspec raises ValueError, KeyError… on a malformed spec
        raise DataFileError(f"reference file {where.name} cannot be read as kerchunk references "
                            f"({type(exc).__name__}: {exc})") from exc
    references = {k: (v if not isinstance(v, tuple) else list(v)) for k, v in dict(parsed).items()}
    if ".zgroup" not in references and "zarr.json" not in references:
        raise DataFileError(f"reference file {where.name} names no Zarr group (.zgroup): not kerchunk references")
    targets = Targets(where, stores)
    for url in sorted(targets.urls(references)):
        try:
            targets.target(url)
        except (FileNotFoundError, DataFileError, _Refused) as exc:
            key = next(k for k, v in references.items() if isinstance(v, list) and v and v[0] == url)
            raise DataFileError(f"reference file {where.name}: key {key!r} names target {url}: {exc}") from exc
    defaulted = _defaults(references)
    if _STORE_CLASS is None:
        _STORE_CLASS = _store_class()
    store = _STORE_CLASS(references, targets, defaulted)
    return zarr.open_group(store, mode="r", zarr_format=2 if ".zgroup" in references else 3)


class _NoFiles:
    """What fsspec is handed as the targets' filesystem: it never reads one (ReferenceStore does)."""

    protocol = "file"
    async_impl = True
    asynchronous = False
