"""The catalog index: what the catalog knows of its files and datasets, kept between runs in one SQLite file.

A server restarted on an unchanged archive reads no data file: each dataset
comes back as the object it served (its *snapshot*), once the versions of its
descriptor and files (path, device, inode, size, mtime, ctime) are those the
snapshot was built from. A changed dataset is rebuilt from the files' kept
*facts* (:mod:`.facts`: header, coordinate values), so only new or changed
files are opened. A dataset grown by files appended at its end
(:mod:`.appending`) is kept as its snapshot and the appends since (table
``appends``), applied in order when it is loaded; every :data:`APPENDS_KEPT`
appends the snapshot is written whole again. The index also keeps each dataset's version, the change log
(:mod:`.changes`) and the chunk listings of the direct reader (:mod:`.chunks`).

Why SQLite (the standard library's ``sqlite3``): one file, transactional (a
server killed mid-write leaves the last committed state, never a torn index),
indexed lookups of one file among 100,000, concurrent readers while the server
writes (WAL), and no dependency. DuckDB is columnar and built for scans, not
for the point lookups and small transactions an index makes; a folder of JSON
or pickle files is neither atomic nor fast to open at 100,000 entries.

The index is a cache of the files: it is rebuilt from them, with a warning,
when it is missing, damaged, or written by another dstp (:data:`INDEX_FORMAT`,
or other code: :func:`code_fingerprint` covers the catalog's source and the
libraries that decode files). One process writes it (an ``flock`` on its
``.lock`` file, which also holds that process's id for ``dstp catalog
reload``); another process opening it meanwhile reads it and writes nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import pickle
import re
import sqlite3
import threading
import time
import uuid
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from dstp.catalog._stored import blob_key, decode_values, dumps, encode_values, loads, pack, stored_key, unpack
from dstp.catalog.appending import Appended, apply
from dstp.catalog.changes import Change, ChangeFeed
from dstp.catalog.chunks import FileStamp
from dstp.catalog.dataset import GriddedDataset
from dstp.catalog.facts import FileFacts, Headers, Unreadable
from dstp.catalog.netcdf4_ import FileHandles, FileIdentity

__all__ = ["INDEX_FORMAT", "CatalogIndex", "StoredEntry", "code_fingerprint", "index_path", "writer_pid"]

log = logging.getLogger("dstp.catalog")

#: The layout of the index's tables; an index of another format is rebuilt.
INDEX_FORMAT = 2
#: Appends kept beside a dataset's snapshot; at this many more, the next one writes the snapshot whole instead.
APPENDS_KEPT = 64
#: Change records kept; older ones are dropped (a reader asking for them is told to list again).
CHANGES_KEPT = 100_000

_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE blobs (key BLOB PRIMARY KEY, data BLOB NOT NULL) WITHOUT ROWID;
CREATE TABLE files (
    path TEXT PRIMARY KEY, real TEXT NOT NULL, device INTEGER NOT NULL, inode INTEGER NOT NULL,
    size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, ctime_ns INTEGER NOT NULL,
    header BLOB, vals TEXT, unreadable TEXT, first TEXT, last TEXT);
CREATE TABLE chunk_listings (
    path TEXT NOT NULL, variable TEXT NOT NULL, stamp TEXT NOT NULL, listing BLOB, PRIMARY KEY (path, variable));
CREATE TABLE entries (
    descriptor TEXT PRIMARY KEY, sha BLOB NOT NULL, glob TEXT, content BLOB NOT NULL, dataset TEXT,
    snapshot BLOB, problem TEXT);
CREATE TABLE appends (descriptor TEXT NOT NULL, seq INTEGER NOT NULL, delta BLOB NOT NULL,
    PRIMARY KEY (descriptor, seq));
CREATE TABLE versions (dataset TEXT PRIMARY KEY, version INTEGER NOT NULL, content BLOB NOT NULL);
CREATE TABLE changes (seq INTEGER PRIMARY KEY, record TEXT NOT NULL);
"""


def index_path(state_dir: Path, root: Path) -> Path:
    """Return the index file of catalog ``root`` in ``state_dir``: one per catalog root."""
    root = Path(root).resolve()
    name = re.sub(r"[^A-Za-z0-9._-]", "_", root.name or "root")[:40]
    return Path(state_dir) / f"{name}-{hashlib.sha256(str(root).encode()).hexdigest()[:12]}.sqlite"


@lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """Return a digest of what a kept dataset depends on besides its files: the catalog's source, dstp's
    version and the versions of the libraries that read and decode files."""
    import cftime
    import netCDF4
    import numpy
    import pyarrow

    import dstp
    from dstp import catalog

    h = hashlib.sha256()
    for path in sorted(Path(catalog.__file__).parent.glob("*.py")):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    versions = (dstp.__version__, numpy.__version__, netCDF4.__version__, getattr(netCDF4, "__netcdf4libversion__", ""),
                getattr(netCDF4, "__hdf5libversion__", ""), pyarrow.__version__, cftime.__version__)
    h.update(repr(versions).encode())
    return h.hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class StoredEntry:
    """What the index holds of one descriptor: the digests it was published from, and how that went."""

    descriptor: Path
    sha: bytes
    #: The descriptor's files glob (None when it has no dataset): its files are listed without parsing it.
    glob: str | None
    content: bytes
    dataset: str | None
    problem: str | None
    has_snapshot: bool


class IndexDamaged(Exception):
    """The index file cannot be read any more: it is rebuilt."""


class CatalogIndex:
    """The index of one catalog root (see the module's docstring); ``path`` None keeps it in memory only."""

    def __init__(self, path: Path | None, root: Path, connection: sqlite3.Connection, writable: bool,
                 lock: Any = None, reason: str = "") -> None:
        self.path = path
        self.root = root
        self._db = connection
        self._lock = threading.RLock()
        #: Chunk listings made by queries, waiting for the index (see keep_chunk_listing).
        self._listings: list[tuple[Any, ...]] = []
        self._listing_lock = threading.Lock()
        self._lockfile = lock
        #: False when another process writes this index: this one reads it and keeps nothing.
        self.writable = writable
        #: Why the index was (re)built at open ("" when an existing one was used).
        self.reason = reason
        self.epoch = self._meta("epoch")
        #: Versions and changes made by a process that may not write (kept in memory only).
        self._versions: dict[str, tuple[int, bytes]] = {}
        self._changes: list[Change] = []
        #: Loads and stores done, for the tests and the benchmark (snapshots loaded, facts loaded, ...).
        self.counts: dict[str, int] = {}

    # -- opening ----------------------------------------------------------------------------------------------

    @classmethod
    def open(cls, path: Path | None, root: Path) -> "CatalogIndex":
        """Return the index of ``root`` at ``path`` (None: in memory), rebuilt empty with a warning when it is
        missing, damaged or of another format or dstp."""
        root = Path(root).resolve()
        if path is None:
            return cls(None, root, _create(sqlite3.connect(":memory:", check_same_thread=False), root), True)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        lock = open(path.with_name(path.name + ".lock"), "a+")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            owner = lock.read().strip() or "?"
            lock.close()
            if not path.exists():
                log.warning("catalog index %s is being created by process %s; this one keeps its own in memory",
                            path, owner)
                return cls.open(None, root)
            log.info("catalog index %s is kept by process %s: read here, not written", path, owner)
            db = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, check_same_thread=False)
            try:
                _check(db, root)
            except (sqlite3.DatabaseError, _Stale) as exc:
                db.close()
                log.warning("catalog index %s cannot be used here (%s); this process keeps its own in memory",
                            path, exc)
                return cls.open(None, root)
            return cls(path, root, db, False)
        lock.seek(0)
        lock.truncate()
        lock.write(f"{os.getpid()}\n")
        lock.flush()
        reason = ""
        if not path.exists():
            reason = "there is none yet (or it was deleted)"
        else:
            db = sqlite3.connect(path, check_same_thread=False)
            try:
                _check(db, root)
                return cls(path, root, _tune(db), True, lock)
            except _Stale as exc:
                reason = str(exc)
            except sqlite3.DatabaseError as exc:
                reason = f"it is damaged ({exc})"
            db.close()
            _remove(path)
        log.warning("catalog index %s: %s; building it from the files (each file's header is read once)", path,
                    reason)
        db = sqlite3.connect(path, check_same_thread=False)
        os.chmod(path, 0o600)
        return cls(path, root, _create(_tune(db), root), True, lock, reason)

    def close(self) -> None:
        with self._lock:
            self._db.close()
            if self._lockfile is not None:
                self._lockfile.close()  # releases the flock
                self._lockfile = None

    def _meta(self, key: str) -> str:
        rows = self._rows("SELECT value FROM meta WHERE key = ?", (key,))
        return rows[0][0] if rows else ""

    # -- plumbing ---------------------------------------------------------------------------------------------

    def _query(self, sql: str, args: Sequence[Any] = ()) -> sqlite3.Cursor:
        with self._lock:
            try:
                return self._db.execute(sql, args)
            except sqlite3.DatabaseError as exc:
                self._damaged(exc)
                raise IndexDamaged(str(exc)) from exc

    def _rows(self, sql: str, args: Sequence[Any] = ()) -> list[Any]:
        """Return the rows of a query; none when the index turns out damaged (it then starts again, empty)."""
        try:
            return self._query(sql, args).fetchall()
        except IndexDamaged:
            return []

    def _write(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        if not self.writable:
            return
        with self._lock:
            try:
                self._db.executemany(sql, rows)
            except sqlite3.DatabaseError as exc:
                self._damaged(exc)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """Group the writes made inside into one transaction (committed at the end, or on the way out)."""
        with self._lock:
            try:
                yield
            finally:
                if self.writable:
                    self._flush_listings()
                    try:
                        self._db.commit()
                    except sqlite3.DatabaseError as exc:
                        self._damaged(exc)

    def _damaged(self, exc: Exception) -> None:
        """Start the index again, empty, after ``exc`` showed it cannot be read (the caller holds the lock)."""
        if self.path is None or not self.writable:
            return
        log.warning("catalog index %s is damaged (%s); it is built again from the files", self.path, exc)
        try:
            self._db.close()
        except sqlite3.Error:
            pass
        _remove(self.path)
        self._db = _create(_tune(sqlite3.connect(self.path, check_same_thread=False)), self.root)
        os.chmod(self.path, 0o600)
        self.epoch = self._meta("epoch")
        self.reason = f"it was damaged ({exc})"

    def _count(self, what: str, n: int = 1) -> None:
        self.counts[what] = self.counts.get(what, 0) + n

    # -- blobs --------------------------------------------------------------------------------------------------

    def _keep_blob(self, data: bytes, pending: dict[bytes, bytes]) -> bytes:
        key = blob_key(data)
        pending.setdefault(key, data)
        return key

    def _blob(self, key: bytes) -> bytes:
        rows = self._rows("SELECT data FROM blobs WHERE key = ?", (key,))
        if not rows:
            raise pickle.UnpicklingError("a blob the index names is missing")
        return unpack(rows[0][0])

    def _store_blobs(self, blobs: dict[bytes, bytes]) -> None:
        self._write("INSERT OR IGNORE INTO blobs (key, data) VALUES (?, ?)",
                    ((k, pack(v)) for k, v in blobs.items()))

    # -- facts ----------------------------------------------------------------------------------------------

    def facts(self, wanted: Sequence[tuple[str, FileIdentity]], headers: Headers) -> dict[str, FileFacts]:
        """Return the kept facts of the files in ``wanted`` (paths as text) whose kept version is the one named."""
        out: dict[str, FileFacts] = {}
        # Equal values stored once are loaded once: one read-only array for the latitudes of every file.
        arrays: dict[Any, Any] = {}
        blobs: dict[bytes, bytes] = {}

        def blob(key: bytes) -> bytes:
            if key not in blobs:
                blobs[key] = self._blob(key)
            return blobs[key]

        def value(stored: list[Any]) -> Any:
            key = stored_key(stored)
            if key not in arrays:
                arrays[key] = decode_values(stored, blob)
            return arrays[key]

        for start in range(0, len(wanted), 500):
            part = dict(wanted[start:start + 500])
            marks = ",".join("?" * len(part))
            rows = self._rows(f"SELECT path, real, device, inode, size, mtime_ns, ctime_ns, header, vals FROM files "
                              f"WHERE path IN ({marks}) AND header IS NOT NULL", list(part))
            for text, *ident, header, vals in rows:
                identity = FileIdentity(*ident)
                if part.get(text) != identity:
                    continue
                path = Path(text)
                try:
                    meta = headers.decode(header, path, lambda: blob(header))
                    values = {k: value(v) for k, v in json.loads(vals).items()} if vals else {}
                except (pickle.UnpicklingError, TypeError, ValueError, EOFError, AttributeError, ImportError) as exc:
                    log.warning("catalog index: the kept facts of %s cannot be read (%s); the file is read again",
                                path, exc)
                    continue
                out[text] = FileFacts(path, identity, meta, header, values)
        self._count("facts loaded", len(out))
        return out

    def unreadable(self) -> dict[Path, Unreadable]:
        """Return the file versions that could not be opened (tried again once they change)."""
        rows = self._rows("SELECT path, real, device, inode, size, mtime_ns, ctime_ns, unreadable FROM files "
                          "WHERE unreadable IS NOT NULL")
        return {Path(r[0]): Unreadable(Path(r[0]), FileIdentity(*r[1:7]), r[7]) for r in rows}

    def keep_facts(self, facts: Iterable[FileFacts], headers: Headers,
                   spans: dict[Path, tuple[str, str]] | None = None) -> None:
        """Keep the facts of files (their header, and the values in them) for the next build or start."""
        if not self.writable:
            return
        blobs: dict[bytes, bytes] = {}
        rows = []
        # Files share their equal values as one array (the latitudes of 10,000 daily files): encoded once. Each
        # array stays referenced by its facts until the end, so no id is reused meanwhile.
        encoded: dict[int, list[Any]] = {}

        def encode(values: np.ndarray) -> list[Any]:
            found = encoded.get(id(values))
            if found is None:
                found = encoded[id(values)] = encode_values(values, lambda data: self._keep_blob(data, blobs))
            return found

        for f in facts:
            vals = {k: encode(v) for k, v in f.values.items()}
            first, last = (spans or {}).get(f.path, (None, None))
            i = f.identity
            rows.append((str(f.path), i.real, i.device, i.inode, i.size, i.mtime_ns, i.ctime_ns, f.header_key,
                         json.dumps(vals, separators=(",", ":")) if vals else None, first, last))
        for key in [k for k in headers.new]:
            blobs.setdefault(key, headers.new.pop(key))
        self._store_blobs(blobs)
        self._write("INSERT OR REPLACE INTO files (path, real, device, inode, size, mtime_ns, ctime_ns, header, vals, "
                    "unreadable, first, last) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, ?, ?)", rows)
        self._count("facts kept", len(rows))

    def keep_unreadable(self, items: Iterable[Unreadable]) -> None:
        rows = [(str(u.path), u.identity.real, u.identity.device, u.identity.inode, u.identity.size,
                 u.identity.mtime_ns, u.identity.ctime_ns, u.reason) for u in items]
        self._write("INSERT OR REPLACE INTO files (path, real, device, inode, size, mtime_ns, ctime_ns, header, vals, "
                    "unreadable) VALUES (?, ?, ?, ?, ?, ?, ?, NULL, NULL, ?)", rows)

    def forget_files(self, paths: Iterable[Path]) -> None:
        """Forget files no dataset serves any more."""
        rows = [(str(p),) for p in paths]
        self._write("DELETE FROM files WHERE path = ?", rows)
        self._write("DELETE FROM chunk_listings WHERE path = ?", rows)

    def file_paths(self) -> set[Path]:
        return {Path(r[0]) for r in self._rows("SELECT path FROM files")}

    def span(self, path: Path) -> tuple[str, str] | None:
        """Return the first and last value of the aggregation coordinate a file holds, as published."""
        rows = self._rows("SELECT first, last FROM files WHERE path = ?", (str(path),))
        return (rows[0][0], rows[0][1]) if rows and rows[0][0] is not None else None

    # -- entries: descriptors and their datasets --------------------------------------------------------------

    def entries(self) -> dict[Path, StoredEntry]:
        rows = self._rows("SELECT descriptor, sha, glob, content, dataset, problem, snapshot IS NOT NULL FROM entries")
        return {Path(r[0]): StoredEntry(Path(r[0]), r[1], r[2], r[3], r[4], r[5], bool(r[6])) for r in rows}

    def load_dataset(self, descriptor: Path, handles: FileHandles) -> GriddedDataset | None:
        """Return the dataset kept for ``descriptor``, reading through ``handles`` (None when there is none,
        or it cannot be read: it is then forgotten, with a warning, and rebuilt from the files)."""
        rows = self._rows("SELECT snapshot FROM entries WHERE descriptor = ?", (str(descriptor),))
        if not rows or rows[0][0] is None:
            return None
        try:
            ds = loads(unpack(rows[0][0]))
            if not isinstance(ds, GriddedDataset):
                raise TypeError(f"a {type(ds).__name__}, not a dataset")
            ds.attach(handles)
            for (delta,) in self._rows("SELECT delta FROM appends WHERE descriptor = ? ORDER BY seq",
                                       (str(descriptor),)):
                ds = apply(ds, Appended.from_state(loads(unpack(delta))), handles)
                self._count("appends applied")
        except Exception as exc:  # noqa: BLE001 - whatever a damaged or foreign snapshot raises, rebuild it
            log.warning("catalog index: the dataset kept for %s cannot be read (%s: %s); it is rebuilt from its "
                        "files", descriptor, type(exc).__name__, exc)
            self._write("UPDATE entries SET snapshot = NULL WHERE descriptor = ?", [(str(descriptor),)])
            self._write("DELETE FROM appends WHERE descriptor = ?", [(str(descriptor),)])
            return None
        self._count("datasets loaded")
        return ds

    def keep_entry(self, descriptor: Path, sha: bytes, content: bytes, dataset: GriddedDataset | None,
                   problem: str | None, glob: str | None = None) -> None:
        """Keep what ``descriptor`` published: its dataset (None: only the problem, beside any dataset kept)."""
        if not self.writable:
            return
        if dataset is None:
            self._write("INSERT INTO entries (descriptor, sha, glob, content, dataset, snapshot, problem) "
                        "VALUES (?, ?, NULL, ?, NULL, NULL, ?) ON CONFLICT (descriptor) DO UPDATE SET problem = ?",
                        [(str(descriptor), sha, content, problem, problem)])
            return
        snapshot = pack(dumps(dataset))
        self._write("DELETE FROM appends WHERE descriptor = ?", [(str(descriptor),)])
        self._write("INSERT OR REPLACE INTO entries (descriptor, sha, glob, content, dataset, snapshot, problem) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)", [(str(descriptor), sha, glob, content, dataset.id, snapshot,
                                                      problem)])
        self._count("datasets kept")

    def keep_append(self, descriptor: Path, sha: bytes, content: bytes, dataset: GriddedDataset, delta: Appended,
                    glob: str | None) -> None:
        """Keep ``dataset``, its kept snapshot grown by ``delta`` (:mod:`.appending`): the delta is written beside
        the snapshot, not the whole dataset again (every :data:`APPENDS_KEPT` appends, the snapshot is)."""
        if not self.writable:
            return
        rows = self._rows("SELECT COUNT(*), COALESCE(MAX(seq), 0) FROM appends WHERE descriptor = ?",
                          (str(descriptor),))
        held = self._rows("SELECT snapshot IS NOT NULL FROM entries WHERE descriptor = ?", (str(descriptor),))
        if not rows or not held or not held[0][0] or rows[0][0] >= APPENDS_KEPT:
            self.keep_entry(descriptor, sha, content, dataset, None, glob)
            return
        self._write("INSERT INTO appends (descriptor, seq, delta) VALUES (?, ?, ?)",
                    [(str(descriptor), rows[0][1] + 1, pack(dumps(delta.to_state())))])
        self._write("UPDATE entries SET sha = ?, glob = ?, content = ?, dataset = ?, problem = NULL "
                    "WHERE descriptor = ?", [(sha, glob, content, dataset.id, str(descriptor))])
        self._count("appends kept")

    def forget_entry(self, descriptor: Path) -> None:
        self._write("DELETE FROM entries WHERE descriptor = ?", [(str(descriptor),)])
        self._write("DELETE FROM appends WHERE descriptor = ?", [(str(descriptor),)])

    # -- versions and changes ---------------------------------------------------------------------------------

    def version_of(self, dataset: str) -> tuple[int, bytes]:
        """Return (version, content digest it was given for) of a dataset; (0, b"") if it never had one."""
        if dataset in self._versions:
            return self._versions[dataset]
        rows = self._rows("SELECT version, content FROM versions WHERE dataset = ?", (dataset,))
        return (rows[0][0], rows[0][1]) if rows else (0, b"")

    def next_version(self, dataset: str, content: bytes) -> tuple[int, bool]:
        """Return (version, whether it is new) of a dataset published from ``content``: the kept version when
        it was given for this content, else one more than the last."""
        version, kept = self.version_of(dataset)
        if kept == content and version:
            return version, False
        version += 1
        self._versions[dataset] = (version, content)
        self._write("INSERT OR REPLACE INTO versions (dataset, version, content) VALUES (?, ?, ?)",
                    [(dataset, version, content)])
        return version, True

    @property
    def version(self) -> int:
        """The catalog version: the number of the last change."""
        rows = self._rows("SELECT MAX(seq) FROM changes")
        stored = rows[0][0] if rows and rows[0][0] is not None else 0
        return max(stored, self._changes[-1].seq if self._changes else 0)

    def log_change(self, dataset: str, version: int, kind: str, fields: dict[str, Any], at: float) -> Change:
        """Record one change; return it with the catalog version it made."""
        change = Change(seq=self.version + 1, at=at, dataset=dataset, version=version, kind=kind, **fields)
        if self.writable:
            self._write("INSERT INTO changes (seq, record) VALUES (?, ?)", [(change.seq, change.to_json())])
            self._write("DELETE FROM changes WHERE seq <= ?", [(change.seq - CHANGES_KEPT,)])
        else:
            self._changes.append(change)
        return change

    def changes(self, since: int = 0, epoch: str | None = None, limit: int = 10_000) -> ChangeFeed:
        """Return the changes after catalog version ``since`` (at most ``limit``, oldest first)."""
        now = self.version
        if epoch is not None and epoch != self.epoch:
            return ChangeFeed(self.epoch, now, (), complete=False)
        rows = self._rows("SELECT record FROM changes WHERE seq > ? ORDER BY seq LIMIT ?", (since, limit))
        found = [Change.from_json(r[0]) for r in rows] + [c for c in self._changes if c.seq > since]
        kept = [r[0] for r in self._rows("SELECT MIN(seq) FROM changes") if r[0] is not None]
        oldest = min([*kept, *(c.seq for c in self._changes)], default=None)
        # complete: nothing between `since` and the oldest change kept was dropped
        complete = since >= now or (oldest is not None and oldest <= since + 1)
        return ChangeFeed(self.epoch, now, tuple(found[:limit]), complete=complete)

    # -- chunk listings (catalog.chunks.LayoutStore) ----------------------------------------------------------

    def chunk_listing(self, path: Path, stamp: FileStamp, variable: str) -> tuple[bool, Any]:
        rows = self._rows("SELECT stamp, listing FROM chunk_listings WHERE path = ? AND variable = ?",
                          (str(path), variable))
        if not rows or rows[0][0] != repr(tuple(stamp)):
            return False, None
        row = rows[0]
        try:
            listing = loads(unpack(row[1])) if row[1] is not None else None
        except Exception:  # noqa: BLE001 - a listing that cannot be read is listed again
            return False, None
        self._count("chunk listings loaded")
        return True, listing

    def keep_chunk_listing(self, path: Path, stamp: FileStamp, variable: str, listing: Any) -> None:
        """Keep a listing a query's read made; while a look holds the index (a rebuild can take seconds), it is
        kept at the end of that look, so that the query never waits for it."""
        if not self.writable:
            return
        row = (str(path), variable, repr(tuple(stamp)), pack(dumps(listing)) if listing is not None else None)
        with self._listing_lock:
            self._listings.append(row)
        if self._lock.acquire(blocking=False):
            try:
                with self.transaction():
                    pass  # writes what is pending
            finally:
                self._lock.release()

    def _flush_listings(self) -> None:
        with self._listing_lock:
            rows, self._listings = self._listings, []
        self._write("INSERT OR REPLACE INTO chunk_listings (path, variable, stamp, listing) VALUES (?, ?, ?, ?)", rows)

    # -- refreshes (dstp catalog reload waits for the next one) -----------------------------------------------

    def mark_refreshed(self, at: float) -> None:
        self._write("INSERT OR REPLACE INTO meta (key, value) VALUES ('refreshed', ?)", [(repr(at),)])

    def refreshed(self) -> float:
        value = self._meta("refreshed")
        return float(value) if value else 0.0


def writer_pid(path: Path) -> int | None:
    """Return the id of the process that writes the index at ``path`` (a running server), None if none does."""
    lock = path.with_name(path.name + ".lock")
    try:
        with open(lock) as held:
            try:
                fcntl.flock(held, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                text = held.read().strip()
                return int(text) if text.isdigit() else None
            fcntl.flock(held, fcntl.LOCK_UN)
            return None
    except FileNotFoundError:
        return None


class _Stale(Exception):
    """The index was written by another format or dstp."""


def _check(db: sqlite3.Connection, root: Path) -> None:
    """Raise _Stale unless ``db`` is an index of this format and code for ``root`` (DatabaseError if damaged)."""
    (fmt,) = db.execute("PRAGMA user_version").fetchone()
    if fmt != INDEX_FORMAT:
        raise _Stale(f"it is of index format {fmt}, this dstp reads format {INDEX_FORMAT}")
    meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
    if meta.get("code") != code_fingerprint():
        raise _Stale(f"it was written by another dstp or library version ({meta.get('dstp', '?')}); "
                     "what it kept may no longer be what this one would build")
    if meta.get("root") != str(root):
        raise _Stale(f"it is the index of {meta.get('root')}, not of {root}")


def _tune(db: sqlite3.Connection) -> sqlite3.Connection:
    db.execute("PRAGMA journal_mode = WAL")  # readers (dstp catalog validate) while the server writes
    db.execute("PRAGMA synchronous = NORMAL")  # durable at checkpoints; a crash loses at most the last commits
    return db


def _create(db: sqlite3.Connection, root: Path) -> sqlite3.Connection:
    import dstp

    db.executescript(_SCHEMA)
    db.execute(f"PRAGMA user_version = {INDEX_FORMAT}")
    db.executemany("INSERT INTO meta (key, value) VALUES (?, ?)", [
        ("code", code_fingerprint()), ("dstp", dstp.__version__), ("root", str(root)),
        ("epoch", uuid.uuid4().hex), ("created", repr(time.time()))])
    db.commit()
    return db


def _remove(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            Path(str(path) + suffix).unlink()
