"""What the catalog keeps of each file so that a dataset is rebuilt without opening it again: its facts.

A file's *facts* are the version of it that was read (:class:`FileIdentity`:
real path, device, inode, size, mtime, ctime), its header (:class:`FileMeta`:
dimensions, variables, attributes, as ``inspect`` reads them) and the whole raw
values of the variables a dataset build reads from it (coordinates, bounds,
ragged-array counts). :meth:`GriddedDataset.open` builds a dataset through a
:class:`FactsReader`, which answers headers and reads from the facts; a read
of a variable it does not hold is made once, from the version named, and kept.
So a dataset whose files are all known is rebuilt — after a descriptor edit, a
new file beside them — without opening any of them.

Facts are gathered in the server process for a few files (through the one
handle cache: HDF5 must never open a file twice in a process), and by a pool
of processes for many (a cold index build: netCDF-C runs under one lock per
process, so threads would read one header at a time). A file that cannot be
opened is :class:`Unreadable`, kept with its version so it is not tried again
until it changes.
"""

from __future__ import annotations

import math
import os
import pickle
import queue
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping, Sequence

import numpy as np

from dstp.catalog._stored import blob_key, dumps, loads
from dstp.catalog.headers import DIMENSION_ALWAYS_BELIEVED, DIMENSION_POINTS_PER_FILE_BYTE
from dstp.catalog.netcdf4_ import FileHandles, FileIdentity, FileMeta, ReadStats, resolve_in_group
from dstp.errors import DataFileError

if TYPE_CHECKING:
    from dstp.catalog.descriptor import Descriptor

__all__ = ["FactsReader", "FileFacts", "Headers", "Prefetch", "Unreadable", "fetch_ahead", "gather", "gather_many",
           "serve_gathering", "stat_identity"]

#: A variable read while a dataset is built is kept whole up to this many bytes (bigger ones are read again).
VALUES_LIMIT = 64 * 2**20
#: Beside the descriptor's coordinates, variables up to this size are read ahead when facts are gathered.
PREFETCH_BYTES = 64 * 2**10
#: Gathering uses helper processes from this many files on (below, starting them costs more).
POOL_MIN_FILES = 256
#: Files per batch handed to a helper process.
POOL_BATCH = 64

_NO_PATH = Path()


@dataclass(slots=True)
class FileFacts:
    """What is known of one version of a file: its header and the whole values of some variables."""

    path: Path
    identity: FileIdentity
    meta: FileMeta
    #: The name of the stored header (:class:`Headers`): files with equal headers share it.
    header_key: bytes
    #: Whole raw values by variable, read-only (shared by every dataset build that reads them).
    values: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A version of a file that could not be opened: held back, and tried again once it changes."""

    path: Path
    identity: FileIdentity
    reason: str


class Headers:
    """Headers by stored name, each unpickled once: files with equal headers share one FileMeta's contents."""

    def __init__(self) -> None:
        self._by_key: dict[bytes, FileMeta] = {}
        #: Pickled headers met for the first time, to be kept in the index.
        self.new: dict[bytes, bytes] = {}

    def encode(self, meta: FileMeta) -> tuple[bytes, FileMeta]:
        """Return (name, shared header) of ``meta``; a header not seen before is remembered in ``new``."""
        pathless = _with_path(meta, _NO_PATH)
        data = dumps(pathless)
        key = blob_key(data)
        known = self._by_key.get(key)
        if known is None:
            self._by_key[key] = known = pathless
            self.new[key] = data
        return key, _with_path(known, meta.path)

    def decode(self, key: bytes, path: Path, data: Any) -> FileMeta:
        """Return the header stored as ``key`` for ``path``; ``data()`` gives its pickle when not yet known."""
        known = self._by_key.get(key)
        if known is None:
            known = loads(data())
            if not isinstance(known, FileMeta):
                raise TypeError("a stored header is not a FileMeta")
            self._by_key[key] = known
        return _with_path(known, path)

    def add_encoded(self, key: bytes, data: bytes, path: Path) -> FileMeta:
        """Return the header a gathering process sent (pickled, named ``key``) for ``path``."""
        if key not in self._by_key:
            self.new[key] = data
        return self.decode(key, path, lambda: data)


#: FileMeta's fields after ``path``, in order.
_META_REST = tuple(f.name for f in fields(FileMeta) if f.name != "path")
assert fields(FileMeta)[0].name == "path"


def _with_path(meta: FileMeta, path: Path) -> FileMeta:
    """Return ``meta`` for another file (dataclasses.replace, without its introspection: 100,000 calls)."""
    return FileMeta(path, *(getattr(meta, name) for name in _META_REST))


def stat_identity(path: Path) -> FileIdentity | None:
    """Return the version of ``path`` on disk now, from one stat (None when it is gone or not a file)."""
    import stat as _stat

    from dstp.catalog.zarr_ import icechunk_identity

    try:
        st = os.stat(path)
    except OSError:
        st = None
    if st is None or not _stat.S_ISREG(st.st_mode):
        try:  # an Icechunk repository (``x.icechunk`` or ``x.icechunk@tag:v1``) is one file of a dataset
            found: FileIdentity | None = icechunk_identity(path)
        except OSError:
            return None
        return found
    return FileIdentity.of(os.path.realpath(path), st)


@dataclass(frozen=True, slots=True)
class Prefetch:
    """Which variables to read ahead when gathering a dataset's facts: its coordinates (and their CF bounds), the
    structure of ragged arrays, and every small variable that is not one of its data variables."""

    coordinates: frozenset[str]
    data: frozenset[str]
    group: str = ""
    #: Read ahead, beside coordinates, only small variables of at most this many dimensions (publishing, which
    #: does not know the data variables yet, reads no 2-D grid of every file ahead).
    most_dimensions: int = 99

    @classmethod
    def of(cls, descriptor: Descriptor) -> "Prefetch":
        return cls(frozenset(c.variable for c in descriptor.coordinates),
                   frozenset(a.variable for a in descriptor.attributes) - {c.variable for c in descriptor.coordinates},
                   descriptor.group or "")

    def variables(self, meta: FileMeta, file_bytes: int) -> list[str]:
        """Return the variables of ``meta`` (a file of ``file_bytes``) to read ahead: none bigger than the file
        can hold (a 9 KB file declaring 10⁹ times is refused by the build, before anything of that size is read)."""
        wanted: list[str] = []
        coords = {resolve_in_group(meta.variables, self.group, c) for c in self.coordinates}
        data = {resolve_in_group(meta.variables, self.group, d) for d in self.data}
        believed = max(DIMENSION_ALWAYS_BELIEVED, DIMENSION_POINTS_PER_FILE_BYTE * file_bytes)
        for name, var in meta.variables.items():
            count = math.prod(var.shape)  # exact: np.prod wraps past 2**63
            nbytes = count * max(1, var.dtype.itemsize)
            if nbytes > VALUES_LIMIT or count > believed:
                continue
            if name in coords or any(k in var.attrs for k in ("sample_dimension", "instance_dimension")):
                wanted.append(name)
                for key in ("bounds", "climatology"):
                    ref = var.attrs.get(key)
                    if isinstance(ref, str) and ref in meta.variables:
                        wanted.append(ref)
            elif nbytes <= PREFETCH_BYTES and name not in data and len(var.dimensions) <= self.most_dimensions:
                wanted.append(name)
        return list(dict.fromkeys(wanted))


def gather(handles: FileHandles, path: Path, prefetch: Prefetch | None,
           headers: Headers) -> FileFacts | Unreadable | None:
    """Return the facts of the version of ``path`` on disk now (None when it is gone)."""
    try:
        meta, identity = handles.inspect_current(path)
    except DataFileError as exc:
        # an object of a store has no stat: the version its listing holds (else every refusal read "it vanished")
        seen = handles.objects.current(path) if handles.objects is not None and handles.is_object(path) \
            else stat_identity(path)
        return Unreadable(path, seen, exc.message) if seen is not None else None  # type: ignore[arg-type]
    key, meta = headers.encode(meta)
    facts = FileFacts(path, identity, meta, key)
    if handles.is_object(path) and handles.chunks is not None and meta.format.startswith("NETCDF4"):
        # the whole copy is here now: list every variable's chunks once, so queries read them by ranges later
        for name, var in meta.variables.items():
            if var.shape:
                handles.chunks.layout(path, name, identity)
    for name in prefetch.variables(meta, identity.size) if prefetch is not None else ():
        try:
            facts.values[name] = _frozen(handles.read(path, name, (), None, identity))
        except DataFileError:
            continue  # read again (and refused, if it must be) when the build needs it
    return facts


def _frozen(values: np.ndarray) -> np.ndarray:
    values = np.asarray(values)
    values.flags.writeable = False
    return values


# -- many files: helper processes ------------------------------------------------------------------------------

def gather_once(handles: FileHandles, path: Path, prefetch: Prefetch | None,
                headers: Headers) -> FileFacts | Unreadable | None:
    """Return :func:`gather`'s facts of ``path`` from one open of it outside ``handles``' cache, closed at once
    (:meth:`FileHandles.read_once`): only in a process that holds no other open of the file (a helper process)."""
    try:
        found = handles.read_once(path, lambda meta, identity: prefetch.variables(meta, identity.size)
                                  if prefetch is not None else ())
    except DataFileError as exc:
        seen = stat_identity(path)
        return Unreadable(path, seen, exc.message) if seen is not None else None
    if found is None:  # a Zarr-like source: read through the cache
        return gather(handles, path, prefetch, headers)
    meta, identity, values = found
    key, meta = headers.encode(meta)
    return FileFacts(path, identity, meta, key, {name: _frozen(v) for name, v in values.items()})


def _gather_batch(handles: FileHandles, batch: Sequence[tuple[str, Prefetch | None]],
                  once: bool = False) -> list[tuple[Any, ...]]:
    """Return, per file, ("facts", path, identity, header key, header, values), ("unreadable", path, identity,
    reason), or ("gone", path); ``once``: in a helper process, each file opened once (:func:`gather_once`)."""
    headers = Headers()
    out: list[tuple[Any, ...]] = []
    for text, prefetch in batch:
        path = Path(text)
        found = (gather_once if once else gather)(handles, path, prefetch, headers)
        if found is None:
            out.append(("gone", text))
        elif isinstance(found, Unreadable):
            out.append(("unreadable", text, found.identity, found.reason))
        else:
            out.append(("facts", text, found.identity, found.header_key, headers.new.pop(found.header_key, None),
                        {k: np.asarray(v) for k, v in found.values.items()}))
    handles.close()  # a batch's files are not read again here
    return out


def serve_gathering() -> None:
    """The helper process's loop: read batches of files from stdin, answer their facts on stdout, until EOF."""
    import faulthandler

    faulthandler.enable()
    handles = FileHandles(capacity=8, direct_chunks=False)
    handles.fast_headers = True  # the common file read through netCDF-C directly (catalog/fastheader.py)
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while True:
        try:
            batch = pickle.load(stdin)
        except EOFError:
            # nothing is open and every answer is written: end now, not after the interpreter's teardown of
            # netCDF-C, numpy and the catalog's modules (0.07–0.16 s that a cold build waited for at its end)
            os._exit(0)
        pickle.dump(_gather_batch(handles, batch, once=True), stdout, pickle.HIGHEST_PROTOCOL)
        stdout.flush()


class _Helper:
    """One helper process (``serve_gathering``): a plain child process, so this works from any process (a Dask
    worker may have no ``multiprocessing`` children) and imports nothing of the caller's main module."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", "from dstp.catalog.facts import serve_gathering; serve_gathering()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def ask(self, batch: list[tuple[str, Prefetch | None]]) -> list[tuple[Any, ...]]:
        assert self.process.stdin is not None and self.process.stdout is not None
        pickle.dump(batch, self.process.stdin, pickle.HIGHEST_PROTOCOL)
        self.process.stdin.flush()
        answer: list[tuple[Any, ...]] = pickle.load(self.process.stdout)
        return answer

    def close(self) -> None:
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                pipe.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def fetch_ahead(handles: FileHandles, paths: Sequence[Path], concurrency: int) -> None:
    """Fetch what netCDF-C will open of the store objects among ``paths`` — the image of each one's header read by
    ranges, or its whole copy (:meth:`~dstp.catalog.objects.ObjectFiles.local`) — ``concurrency`` at once, outside
    the netCDF lock: one after another, a cold look at 12 objects 80 ms away waited for each one's GETs in turn.
    What is fetched is what a later open reads (the same version: the store's last listing); a failure is left for
    that open to meet again and report."""
    objects = handles.objects
    if objects is None or concurrency <= 1:
        return
    todo = [p for p in paths if objects.owns(p) and not objects.is_zarr(p)]
    if len(todo) < 2:
        return

    def one(path: Path) -> None:
        try:
            objects.local(path, objects.current(path))
        except DataFileError:
            pass  # the open that follows fails the same way, and says so

    with ThreadPoolExecutor(min(concurrency, len(todo)), thread_name_prefix="dstp-store-header") as pool:
        for _ in pool.map(one, todo):
            pass


def gather_many(handles: FileHandles, wanted: Sequence[tuple[Path, Prefetch | None]], headers: Headers,
                processes: int, store_reads: int = 1) -> Iterator[FileFacts | Unreadable]:
    """Yield the facts of many files, read by ``processes`` helper processes (in this one when few); a file gone
    meanwhile is left out. A batch a helper fails on (it died) is read in this process. The headers of objects of
    stores are fetched ``store_reads`` at once (:func:`fetch_ahead`), then read here."""
    # objects of stores are read here: a helper process has no store (nor their credentials)
    if any(handles.is_object(p) for p, _ in wanted):
        fetch_ahead(handles, [p for p, _ in wanted], store_reads)
    if processes <= 1 or len(wanted) < POOL_MIN_FILES or any(handles.is_object(p) for p, _ in wanted):
        for path, prefetch in wanted:
            found = gather(handles, path, prefetch, headers)
            if found is not None:
                yield found
        return
    batches: queue.Queue[list[tuple[str, Prefetch | None]] | None] = queue.Queue()
    for i in range(0, len(wanted), POOL_BATCH):
        batches.put([(str(p), f) for p, f in wanted[i:i + POOL_BATCH]])
    paths = {str(p): p for p, _ in wanted}  # the caller's paths back, not 10,000 parsed again
    answers: queue.Queue[tuple[list[tuple[str, Prefetch | None]], list[tuple[Any, ...]] | None]] = queue.Queue()
    helpers = [_Helper() for _ in range(processes)]

    def work(helper: _Helper) -> None:
        while True:
            try:
                batch = batches.get_nowait()
            except queue.Empty:
                return
            if batch is None:
                return
            try:
                answers.put((batch, helper.ask(batch)))
            except (OSError, EOFError, pickle.UnpicklingError):  # the helper died: this process reads the batch
                answers.put((batch, None))
                return

    shared: dict[tuple[str, tuple[int, ...], bytes], np.ndarray] = {}  # equal values received once are one array
    threads = [threading.Thread(target=work, args=(h,), name="dstp-gather", daemon=True) for h in helpers]
    for t in threads:
        t.start()
    try:
        for _ in range(-(-len(wanted) // POOL_BATCH)):
            batch, answer = answers.get()
            if answer is None:
                answer = _gather_batch(handles, batch)
            yield from _received(answer, headers, shared, paths)
    finally:
        while True:  # stop the workers early if the caller stopped reading
            try:
                batches.get_nowait()
            except queue.Empty:
                break
        for t in threads:
            t.join()
        for h in helpers:
            h.close()


def _received(answer: list[tuple[Any, ...]], headers: Headers,
              shared: dict[tuple[str, tuple[int, ...], bytes], np.ndarray],
              paths: Mapping[str, Path]) -> Iterator[FileFacts | Unreadable]:
    def one(values: np.ndarray) -> np.ndarray:
        if values.dtype.kind == "O":
            return _frozen(values)
        return shared.setdefault((values.dtype.str, values.shape, values.tobytes()), _frozen(values))

    for item in answer:
        if item[0] == "facts":
            _, text, identity, key, data, values = item
            path = paths.get(text) or Path(text)
            meta = headers.add_encoded(key, data, path) if data is not None else \
                headers.decode(key, path, lambda: _missing_header(path))
            yield FileFacts(path, identity, meta, key, {k: one(v) for k, v in values.items()})
        elif item[0] == "unreadable":
            yield Unreadable(paths.get(item[1]) or Path(item[1]), item[2], item[3])


def _missing_header(path: Path) -> bytes:
    raise DataFileError(f"{path.name}: its header was named by a gathering process but never sent")


class FactsReader:
    """The files a dataset is built through: headers and values from facts; other reads made once and kept.

    A read of a variable the facts do not hold reads it whole (up to :data:`VALUES_LIMIT`) from the version
    the facts name, through ``handles``, and keeps it; ``used`` records which values a build read, so that
    only those are kept in the index.
    """

    def __init__(self, handles: FileHandles, facts: Mapping[Path, FileFacts]) -> None:
        self.handles = handles
        self.facts = facts
        #: Variables read per file during the build.
        self.used: dict[Path, set[str]] = {}
        #: Files whose variables had to be read from disk (facts that did not hold them).
        self.opened: set[Path] = set()

    def inspect(self, path: Path) -> FileMeta:
        return self.facts[path].meta

    def identity(self, path: Path) -> FileIdentity | None:
        return self.facts[path].identity

    def read(self, path: Path, variable: str, index: Sequence[slice | int], stats: ReadStats | None = None,
             version: FileIdentity | None = None) -> np.ndarray:
        facts = self.facts[path]
        values = facts.values.get(variable)
        if values is None:
            var = facts.meta.variables.get(variable)
            nbytes = int(np.prod(var.shape, dtype=np.int64)) * max(1, var.dtype.itemsize) if var is not None else -1
            if var is None or nbytes > VALUES_LIMIT:
                return self.handles.read(path, variable, index, stats, facts.identity)
            values = _frozen(self.handles.read(path, variable, (), None, facts.identity))
            facts.values[variable] = values
            self.opened.add(path)
        self.used.setdefault(path, set()).add(variable)
        # a copy: what a build does with the values must never reach the facts other builds share
        return np.array(values[tuple(index)] if index else values)


def used_values(facts: FileFacts, used: Iterable[str]) -> dict[str, np.ndarray]:
    """Return the values of ``facts`` a build read (what the index keeps)."""
    return {k: facts.values[k] for k in used if k in facts.values}
