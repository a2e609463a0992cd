"""One look at a catalog root: which datasets stay, which are rebuilt, loaded from the index, added or removed.

:class:`Rescanner` turns the catalog state it is given (None at start) into the
next one, with the :class:`~dstp.catalog.changes.Change` of every dataset that
changed. A look is stat-only where nothing changed: each descriptor and each
file its glob matches is stat'ed, and a dataset whose descriptor and files
(path, device, inode, size, mtime, ctime) are those it was built from is kept
as it is — in memory, or at start from the index without opening a file.

A dataset whose files changed is rebuilt from the facts the index kept
(:mod:`.facts`); only new or changed files are opened, and many at once are
read by a pool of processes. A new or changed file is published only once it
has *settled*: seen with the same size and times at two looks at least
``settle_s`` apart (at start, files are taken as they are). Until then — and
while it cannot be opened — it is *held back* with a warning: a new file is
left out, a changed one stays the version published before. A dataset whose
rebuild fails keeps being served as it was, with the failure listed as a
problem (at start too, when its kept version's files are all still on disk).
"""

from __future__ import annotations

import fnmatch
import gc
import glob
import hashlib
import logging
import os
import re
import stat
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable, Mapping

from dstp.catalog.appending import extend
from dstp.catalog.changes import ADDED, CHANGED, REMOVED, Change, describe_change, ends_of, render
from dstp.catalog.dataset import GriddedDataset
from dstp.catalog.descriptor import DESCRIPTOR_SUFFIX, Descriptor, parse_descriptor
from dstp.catalog.facts import FactsReader, FileFacts, Headers, Prefetch, Unreadable, gather_many, used_values
from dstp.catalog.index import CatalogIndex, StoredEntry
from dstp.catalog.netcdf4_ import FileHandles, FileIdentity
from dstp.catalog.objects import ObjectFiles, store_glob
from dstp.catalog.zarr_ import REF_MARK, folder_identity, is_icechunk, split_ref, with_ref
from dstp.catalog.remote import RemoteDataset
from dstp.errors import CatalogError, DataFileError, DescriptorError

__all__ = ["CatalogState", "Entry", "HeldBack", "Problem", "Rescanner", "list_files"]

log = logging.getLogger("dstp.catalog")

#: A descriptor bigger than this is refused (as descriptor.read_descriptor does).
_MAX_DESCRIPTOR_BYTES = 1 * 2**20


@dataclass(frozen=True, slots=True)
class Problem:
    """Why one descriptor was not published (or is served as it was)."""

    path: Path
    message: str

    def __str__(self) -> str:
        return self.message if self.message.startswith(str(self.path)) else f"{self.path}: {self.message}"


@dataclass(frozen=True, slots=True)
class HeldBack:
    """A file matched by a descriptor but not served as it is on disk: still being written, or unreadable."""

    path: Path
    reason: str
    #: Only waiting to settle (seen once): logged as information, not as a warning.
    waiting: bool = False


@dataclass(frozen=True, slots=True)
class Entry:
    """One descriptor as published: the digests its dataset was built from."""

    path: Path
    #: The descriptor file's version when it was read.
    stamp: FileIdentity | None
    #: Digest of the descriptor's bytes.
    sha: bytes
    #: The parsed descriptor (None until a rebuild needs it, when its dataset came from the index).
    descriptor: Descriptor | None
    #: Its files glob (None for a remote dataset).
    glob: str | None
    dataset_id: str | None
    #: The files its dataset serves (paths as text: a look compares 100,000 of them), each as the version served.
    files: tuple[tuple[str, FileIdentity], ...]
    #: Digest of ``sha`` and ``files``: a dataset's version follows it.
    content: bytes


@dataclass(frozen=True, slots=True)
class CatalogState:
    """Everything a catalog serves at one moment; never changed, replaced whole by the next look."""

    datasets: Mapping[str, GriddedDataset]
    remotes: Mapping[str, RemoteDataset]
    problems: tuple[Problem, ...] = ()
    entries: Mapping[Path, Entry] = field(default_factory=dict)
    held: tuple[HeldBack, ...] = ()
    #: The catalog version: the number of its last change.
    version: int = 0


def list_files(folder: Path, files_glob: str) -> list[tuple[str, FileIdentity]]:
    """Return the files a descriptor's glob matches in ``folder``, each with its version on disk, from stats only.

    The same files as :func:`~dstp.catalog.dataset.matching_files`: regular files (links followed) whose real
    path is inside the descriptor's folder, in name order (paths as text: no Path is made for 100,000 files
    that did not change).
    """
    files_glob, ref = split_ref(files_glob)
    real_folder = _real_folder(folder)
    inside = real_folder.rstrip(os.sep) + os.sep
    direct = "/" not in files_glob and os.sep not in files_glob
    found: list[tuple[str, os.DirEntry[str] | None]]
    if not direct or not glob.has_magic(files_glob):
        found = [(text, None) for text in sorted(glob.glob(str(folder / files_glob), recursive=True))]
    else:  # names in the folder itself: one scandir, the stats it makes from the folder (glob's rules)
        pattern = re.compile(fnmatch.translate(files_glob))
        hidden = files_glob.startswith(".")
        try:
            with os.scandir(folder) as entries:
                found = sorted((entry.path, entry) for entry in entries
                               if (hidden or not entry.name.startswith(".")) and pattern.match(entry.name))
        except OSError:
            return []
    out = []
    for text, entry in found:
        try:
            st = entry.stat(follow_symlinks=False) if entry is not None else os.lstat(text)
            if stat.S_ISLNK(st.st_mode):
                real = os.path.realpath(text)
                st = os.stat(text)
            elif direct:  # a file named in the folder itself, not a link: its real path is the folder's and its name
                real = real_folder + os.sep + os.path.basename(text)
            else:
                real = os.path.realpath(text)
        except OSError:
            continue  # gone between the listing and the stat
        if stat.S_ISREG(st.st_mode) and real.startswith(inside):
            out.append((text, FileIdentity.of(real, st)))
        elif stat.S_ISDIR(st.st_mode) and real.startswith(inside) and is_icechunk(Path(real)):
            # an Icechunk repository: one file, named with the ref it is read at (:mod:`.zarr_`)
            out.append((text if ref is None else f"{text}{REF_MARK}{ref}", folder_identity(real, st, ref)))
    return out


def _real_folder(folder: Path) -> str:
    """Return the real path of a folder: the kernel's, from one open (os.path.realpath stats every component)."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return os.path.realpath(folder)
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return os.path.realpath(folder)
    finally:
        os.close(fd)


def content_digest(sha: bytes, files: tuple[tuple[str, FileIdentity], ...], root: Path) -> bytes:
    """Return the digest a dataset's version follows: its descriptor's bytes and every file's version."""
    h = hashlib.sha256(sha)
    for path, i in files:
        h.update(f"{path}\0{i.real}\0{i.device}\0{i.inode}\0{i.size}\0{i.mtime_ns}\0{i.ctime_ns}\n".encode())
    return h.digest()


class Settler:
    """Which new file versions have settled: seen unchanged at two looks ``settle_s`` apart (by ``clock``)."""

    def __init__(self, settle_s: float, clock: Callable[[], float]) -> None:
        self.settle_s = settle_s
        self.clock = clock
        self._seen: dict[str, tuple[FileIdentity, float]] = {}

    def settled(self, path: str, identity: FileIdentity) -> bool:
        now = self.clock()
        seen = self._seen.get(path)
        if seen is None or seen[0] != identity:
            if seen is not None:
                log.warning("held back: %s is still being written (%d → %d bytes since the last look); it is "
                            "published once it keeps its size and times for %g s", path, seen[0].size,
                            identity.size, self.settle_s)
            self._seen[path] = (identity, now)
            return self.settle_s <= 0
        if now - seen[1] >= self.settle_s:
            del self._seen[path]
            return True
        return False

    def forget_except(self, paths: set[str]) -> None:
        for p in [p for p in self._seen if p not in paths]:
            del self._seen[p]

    def due(self) -> float | None:
        """Return when the earliest file held back can have settled (``clock`` time), None if none waits."""
        return min((t + self.settle_s for _, t in self._seen.values()), default=None)


@dataclass
class _Plan:
    """What one look decided for one descriptor."""

    path: Path
    stamp: FileIdentity | None
    sha: bytes
    descriptor: Descriptor | None = None
    glob: str | None = None
    problem: str | None = None
    files: list[tuple[str, FileIdentity]] = field(default_factory=list)
    #: Files whose version on disk is new and settled: their facts are needed.
    fresh: set[str] = field(default_factory=set)
    held: list[HeldBack] = field(default_factory=list)
    stored: StoredEntry | None = None
    old: Entry | None = None
    #: The new files, when the only change is files added to a served dataset (tried as an append first).
    appending: list[tuple[str, FileIdentity]] | None = None
    _content: tuple[list[tuple[str, FileIdentity]], int, bytes] | None = None

    def content(self, root: Path) -> bytes:
        """Return the content digest of the plan's files (computed once for the list it has: a digest of
        100,000 file versions takes a quarter of a second)."""
        kept = self._content
        if kept is None or kept[0] is not self.files or kept[1] != len(self.files):
            kept = self._content = (self.files, len(self.files), content_digest(self.sha, tuple(self.files), root))
        return kept[2]


class Rescanner:
    """Looks at one catalog root; see the module's docstring."""

    def __init__(self, root: Path, handles: FileHandles, index: CatalogIndex, *, settle_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time,
                 processes: int = 1, store_reads: int = 1) -> None:
        self.root = root
        self.handles = handles
        self.index = index
        self.settler = Settler(settle_s, clock)
        self.wall = wall
        self.processes = processes
        #: Store objects whose headers are fetched at once (facts.fetch_ahead).
        self.store_reads = store_reads
        self._unreadable: dict[str, Unreadable] = {str(p): u for p, u in index.unreadable().items()}
        #: Datasets grown by an append in the current look: id -> files appended.
        self._appended: dict[str, int] = {}
        #: Datasets grown by an append in this look: id -> files appended.
        self._warned: set[tuple[Path, str]] = set()

    # -- one look ---------------------------------------------------------------------------------------------

    def look(self, old: CatalogState | None) -> tuple[CatalogState, list[Change]]:
        """Return the state after one look at the root, and the changes from ``old`` (None: the first look).

        The cycle collector is paused meanwhile: a look makes hundreds of thousands of short-lived objects
        (a stat per file), and each full collection it set off walked every object of the catalog served — at
        100,000 files, 0.4 of a look's 1.4 s (measured). What a look leaves is collected after it.
        """
        paused = gc.isenabled()
        gc.disable()
        try:
            return self._look(old)
        finally:
            if paused:
                gc.enable()

    def _look(self, old: CatalogState | None) -> tuple[CatalogState, list[Change]]:
        stored = self.index.entries() if old is None else {}
        self._appended = {}
        looked = [self._plan(p, old, stored.get(p)) for p in sorted(self.root.rglob("*" + DESCRIPTOR_SUFFIX))]
        plans = [p for p in looked if p is not None]
        headers = Headers()
        facts = self._facts(plans, old, headers)
        datasets: dict[str, GriddedDataset] = {}
        remotes: dict[str, RemoteDataset] = {}
        problems: list[Problem] = []
        entries: dict[Path, Entry] = {}
        held: list[HeldBack] = []
        changes: list[Change] = []
        owners: dict[str, Path] = {}
        with self.index.transaction():
            for plan in plans:
                held += plan.held
                built = self._publish(plan, old, facts, headers, changes)
                if isinstance(built, Problem):
                    problems.append(built)
                    continue
                if built is None:
                    continue
                ds, entry, note = built
                if ds.id in owners:
                    problems.append(Problem(plan.path, f"dataset id {ds.id!r} is already published by "
                                                       f"{owners[ds.id]}"))
                    continue
                owners[ds.id] = plan.path
                if note:
                    problems.append(Problem(plan.path, note))
                if isinstance(ds, RemoteDataset):
                    remotes[ds.id] = ds
                else:
                    datasets[ds.id] = ds
                entries[plan.path] = entry
            gone = set(old.entries) if old is not None else set(stored)
            for path in sorted(gone - {p.path for p in plans}):
                changes += self._removed(path, old, stored.get(path))
            self._publish_files(old, datasets)
            self.index.mark_refreshed(self.wall())
        self.settler.forget_except({str(h.path) for h in held})
        for h in held:
            if (h.path, h.reason) not in self._warned:
                self._warned.add((h.path, h.reason))
                log.log(logging.INFO if h.waiting else logging.WARNING, "held back: %s", h.reason)
        self._warned &= {(h.path, h.reason) for h in held}
        for change in changes:
            log.info("catalog version %d: %s", change.seq, change.summary())
        state = CatalogState(datasets, remotes, tuple(problems), entries, tuple(held), self.index.version)
        return state, changes

    def due(self) -> float | None:
        """Return when a file held back can have settled (the clock's time), None if none waits."""
        return self.settler.due()

    # -- planning ------------------------------------------------------------------------------------------

    def _plan(self, path: Path, old: CatalogState | None, stored: StoredEntry | None) -> _Plan | None:
        """Return what to do with the descriptor at ``path`` (None when it vanished meanwhile).

        A descriptor is parsed only when it is new or changed: otherwise its files glob is known from the last
        look, or at start from the index.
        """
        try:
            st = os.stat(path)
        except OSError:
            return None
        stamp = FileIdentity.of(str(path), st)
        before = old.entries.get(path) if old is not None else None
        if before is not None and before.stamp == stamp:
            plan = _Plan(path, stamp, before.sha, before.descriptor, glob=before.glob, old=before, stored=stored)
        else:
            try:
                if st.st_size > _MAX_DESCRIPTOR_BYTES:
                    raise DescriptorError(f"descriptor is {st.st_size} bytes; the limit is {_MAX_DESCRIPTOR_BYTES}",
                                          path=str(path))
                data = path.read_bytes()
            except OSError as exc:
                return _Plan(path, stamp, b"", problem=f"cannot read descriptor: {exc.strerror}", old=before)
            except DescriptorError as exc:
                return _Plan(path, stamp, b"", problem=str(exc), old=before)
            sha = hashlib.sha256(data).digest()
            plan = _Plan(path, stamp, sha, old=before, stored=stored)
            if before is not None and before.sha == sha:
                plan.descriptor, plan.glob = before.descriptor, before.glob
            elif before is None and stored is not None and stored.sha == sha and stored.glob is not None:
                plan.glob = stored.glob
            else:
                try:
                    plan.descriptor = parse_descriptor(data, path=path)
                except CatalogError as exc:
                    plan.problem = str(exc)
                    return plan
                plan.glob = _glob_of(plan.descriptor)
        if plan.glob is not None:
            self._choose_files(plan, path.parent, plan.glob, old is None)
        return plan

    def _descriptor_of(self, plan: _Plan) -> Descriptor | None:
        """Return the descriptor of a plan whose dataset the index keeps (parsed only when it is rebuilt)."""
        if plan.descriptor is None:
            try:
                plan.descriptor = parse_descriptor(plan.path.read_bytes(), path=plan.path)
            except OSError as exc:
                plan.problem = f"cannot read descriptor: {exc.strerror}"
            except CatalogError as exc:
                plan.problem = str(exc)
        return plan.descriptor

    def _choose_files(self, plan: _Plan, folder: Path, files_glob: str, first_look: bool) -> None:
        """Decide which version of each matched file the dataset serves; hold back the unsettled and unreadable."""
        published = dict(plan.old.files) if plan.old is not None else {}
        objects = self.handles.objects
        if ObjectFiles.is_store_glob(files_glob):
            try:
                if objects is None:
                    raise DataFileError("<files store=…>: this server has no stores configured (stores setting)")
                listed = objects.list_files(folder, files_glob)  # type: ignore[assignment]
            except DataFileError as exc:
                plan.problem = str(exc)
                return
            first_look = True  # an object is written whole: nothing to settle
        else:
            listed = list_files(folder, files_glob)
        # a published file under a new name, unchanged (same inode, size and mtime; a rename sets only ctime)
        here = {p for p, _ in listed}
        moved = {(i.device, i.inode, i.size, i.mtime_ns) for p, i in published.items() if p not in here}
        for path, identity in listed:
            before = published.get(path)
            if before == identity:
                plan.files.append((path, identity))
                continue
            if before is None and (identity.device, identity.inode, identity.size, identity.mtime_ns) in moved:
                plan.files.append((path, identity))
                plan.fresh.add(path)
                continue
            bad = self._unreadable.get(path)
            if bad is not None and bad.identity == identity:
                self._hold(plan, path, before, f"{path} cannot be opened ({bad.reason}); it is tried again "
                                               "once it changes")
                continue
            if first_look or self.settler.settled(path, identity):
                plan.files.append((path, identity))
                plan.fresh.add(path)
            else:
                self._hold(plan, path, before, f"{path} is new or changed and not yet settled (it must keep its size "
                                               f"and times for {self.settler.settle_s:g} s)", waiting=True)

    @staticmethod
    def _hold(plan: _Plan, path: str, before: FileIdentity | None, reason: str, waiting: bool = False,
              files: list[tuple[str, FileIdentity]] | None = None) -> None:
        """Hold ``path`` back: a changed file stays the version ``before`` served (in ``files``, default the
        plan's); a new one is left out."""
        if before is not None:
            (plan.files if files is None else files).append((path, before))  # reads of it fail once it is gone
            reason += "; the dataset keeps the version it served before"
        plan.held.append(HeldBack(Path(path), reason, waiting))

    # -- facts ---------------------------------------------------------------------------------------------------

    def _needs_build(self, plan: _Plan, first_look: bool) -> bool:
        if plan.problem is not None or plan.glob is None:
            return False
        content = plan.content(self.root)
        if plan.old is not None and plan.old.content == content:
            return False
        if first_look and plan.stored is not None and plan.stored.content == content \
                and (plan.stored.has_snapshot or plan.stored.problem is not None):
            return False
        return self._descriptor_of(plan) is not None

    def _facts(self, plans: list[_Plan], old: CatalogState | None, headers: Headers) -> dict[str, FileFacts]:
        """Return the facts of the files of every dataset to rebuild (by path): kept ones from the index, the
        others gathered (by helper processes when there are many). A dataset that only gained files gets the
        facts of those and of its last file (an append, :mod:`.appending`); the others' if that fails."""
        facts: dict[str, FileFacts] = {}
        building = [p for p in plans if self._needs_build(p, old is None)]
        whole = []
        for plan in building:
            if not self._appending(plan, old, facts, headers):
                whole.append(plan)
        self._complete_facts(whole, facts, headers)
        return facts

    def _appending(self, plan: _Plan, old: CatalogState | None, facts: dict[str, FileFacts],
                   headers: Headers) -> bool:
        """Set ``plan.appending`` and gather the facts an append needs when files were only added to the dataset
        it served; return whether it is one."""
        previous = _dataset_of(old, plan.old)
        if previous is None or plan.old is None or plan.old.sha != plan.sha or not previous.files \
                or previous.files[-1].identity is None:
            return False
        before = dict(plan.old.files)
        new = [(p, i) for p, i in plan.files if p not in before]
        # a file served before is in plan.files as it was, or changed (fresh: _choose_files), or held as it was
        if not new or len(plan.files) - len(new) != len(before) or any(p in before for p in plan.fresh):
            return False
        last = previous.files[-1]
        sub = _Plan(plan.path, plan.stamp, plan.sha, plan.descriptor, plan.glob,
                    files=[(str(last.path), last.identity), *new], fresh={p for p, _ in new} & plan.fresh,
                    old=plan.old)
        self._complete_facts([sub], facts, headers)
        found = dict(sub.files)
        if found.get(str(last.path)) != last.identity:
            return False  # the last file is no longer what was served: rebuilt whole
        plan.held += sub.held
        plan.fresh |= sub.fresh
        plan.files = [(p, found[p]) if p not in before else (p, i) for p, i in plan.files
                      if p in before or p in found]
        plan.appending = [(p, found[p]) for p, _ in new if p in found]
        return True

    def _complete_facts(self, building: list[_Plan], facts: dict[str, FileFacts], headers: Headers) -> None:
        """Add to ``facts`` those of the files of ``building`` it lacks; hold back the files that cannot be read."""
        wanted = [(path, identity) for plan in building for path, identity in plan.files if path not in facts]
        facts.update(self.index.facts(wanted, headers))
        missing: list[tuple[Path, Prefetch | None]] = []
        for plan in building:
            descriptor = self._descriptor_of(plan)
            prefetch = Prefetch.of(descriptor) if descriptor is not None else None
            missing += [(Path(path), prefetch) for path, _ in plan.files if path not in facts]
        if not missing:
            return
        started = time.monotonic()
        unreadable: list[Unreadable] = []
        for found in gather_many(self.handles, missing, headers, self.processes, self.store_reads):
            if isinstance(found, Unreadable):
                unreadable.append(found)
                self._unreadable[str(found.path)] = found
            else:
                facts[str(found.path)] = found
                self._unreadable.pop(str(found.path), None)
        self.index.keep_unreadable(unreadable)
        log.info("read the headers of %d file(s) in %.1f s (%d process(es))", len(missing),
                 time.monotonic() - started, self.processes if len(missing) > 1 else 1)
        for plan in building:
            files: list[tuple[str, FileIdentity]] = []
            published = dict(plan.old.files) if plan.old is not None else {}
            for path, identity in plan.files:
                found = facts.get(path)
                if found is None:
                    bad = self._unreadable.get(path)
                    why = bad.reason if bad else "it vanished"
                    self._hold(plan, path, published.get(path),
                               f"{path} cannot be opened ({why}); it is tried again once it changes", files=files)
                    continue
                if found.identity != identity:
                    plan.fresh.add(path)  # changed again between the stat and the read: the version read is used
                files.append((path, found.identity))
            plan.files = files

    # -- publishing ------------------------------------------------------------------------------------------

    def _publish(self, plan: _Plan, old: CatalogState | None, facts: dict[str, FileFacts], headers: Headers,
                 changes: list[Change]) -> tuple[GriddedDataset | RemoteDataset, Entry, str] | Problem | None:
        """Return (dataset, entry, problem note) for a plan, or its Problem; changes made are appended."""
        previous = _dataset_of(old, plan.old)
        if plan.problem is not None:
            return self._failed(plan, previous, plan.problem)
        descriptor = plan.descriptor
        if plan.glob is None:
            assert descriptor is not None and descriptor.remote is not None
            keep = old.remotes.get(descriptor.id) if old is not None and plan.old is not None \
                and plan.old.sha == plan.sha else None
            remote = keep if keep is not None else RemoteDataset(descriptor)
            self.index.keep_entry(plan.path, plan.sha, b"", None, None)
            return remote, Entry(plan.path, plan.stamp, plan.sha, descriptor, None, descriptor.id, (), b""), ""
        files = tuple(plan.files)
        if not files and plan.held and all(h.waiting for h in plan.held) and previous is None:
            return None  # a new dataset whose files are all still settling: published once they have
        content = plan.content(self.root)
        entry = Entry(plan.path, plan.stamp, plan.sha, descriptor, plan.glob, None, files, content)
        if plan.old is not None and plan.old.content == content and previous is not None:
            return previous, _with_id(entry, previous.id), ""
        stored = plan.stored
        if old is None and stored is not None and stored.content == content:
            if stored.has_snapshot:
                ds = self.index.load_dataset(plan.path, self.handles)
                if ds is not None:
                    return ds, _with_id(entry, ds.id), stored.problem or ""
            elif stored.problem is not None:
                return Problem(plan.path, stored.problem)
        return self._build(plan, entry, old, previous, facts, headers, changes)

    def _build(self, plan: _Plan, entry: Entry, old: CatalogState | None, previous: GriddedDataset | None,
               facts: dict[str, FileFacts], headers: Headers,
               changes: list[Change]) -> tuple[GriddedDataset, Entry, str] | Problem:
        descriptor = plan.descriptor if plan.descriptor is not None else self._descriptor_of(plan)
        if descriptor is None:
            assert plan.problem is not None
            return Problem(plan.path, plan.problem)
        if old is None and previous is None and plan.stored is not None and plan.stored.has_snapshot:
            previous = self.index.load_dataset(plan.path, self.handles)  # what the index served: to say what changed
        if plan.appending and previous is not None:
            appended = self._append(plan, entry, descriptor, previous, facts, headers, changes)
            if appended is not None:
                return appended
        if any(p not in facts for p, _ in entry.files):  # decided as kept, but what was kept could not be read
            self._complete_facts([plan], facts, headers)
            files = tuple(plan.files)
            entry = Entry(entry.path, entry.stamp, entry.sha, descriptor, entry.glob, None, files,
                          content_digest(plan.sha, files, self.root))
        try:
            if not entry.files:
                raise DescriptorError(f"files glob {descriptor.files_glob!r} matches no file that can be served ("
                                      + "; ".join(h.reason for h in plan.held) + ")" if plan.held
                                      else f"files glob {descriptor.files_glob!r} matches no file", path=str(plan.path))
            known = [facts[p] for p, _ in entry.files]
            reader = FactsReader(self.handles, {f.path: f for f in known})
            ds = GriddedDataset.open(descriptor, self.handles, files=[(f.path, i) for f, (_, i) in
                                                                      zip(known, entry.files)], reader=reader)
        except CatalogError as exc:
            return self._failed(plan, previous, str(exc))
        except Exception as exc:  # noqa: BLE001 - one dataset's files must never stop the others being served
            log.exception("could not open %s", plan.path)
            return self._failed(plan, previous, f"this dataset could not be opened ({type(exc).__name__}: {exc}); "
                                                "the server log has the details — please report it")
        kept = [facts[p] for p, _ in entry.files if p in plan.fresh or facts[p].path in reader.opened]
        self.index.keep_facts([_keeping(f, reader.used.get(f.path, ())) for f in kept], headers, _spans(ds, kept))
        version, bumped = self.index.next_version(ds.id, entry.content)
        ds.version = version
        self.index.keep_entry(plan.path, plan.sha, entry.content, ds, None, plan.glob)
        if bumped:
            if previous is not None and previous.id != ds.id:
                changes.append(self._change(previous.id, None, previous, plan, REMOVED))
                previous = None
            changes.append(self._change(ds.id, ds, previous, plan, CHANGED if previous is not None else ADDED))
        return ds, _with_id(entry, ds.id), ""

    def _append(self, plan: _Plan, entry: Entry, descriptor: Descriptor, previous: GriddedDataset,
                facts: dict[str, FileFacts], headers: Headers,
                changes: list[Change]) -> tuple[GriddedDataset, Entry, str] | None:
        """Return the dataset ``previous`` grown by the files of ``plan.appending`` without a rebuild, or None when
        they are not an append (:func:`~dstp.catalog.appending.extend`)."""
        assert plan.appending is not None
        paths = [str(previous.files[-1].path), *(p for p, _ in plan.appending)]
        if any(p not in facts for p in paths):
            return None
        reader = FactsReader(self.handles, {facts[p].path: facts[p] for p in paths})
        try:
            grown = extend(previous, descriptor, [(facts[p].path, facts[p].identity) for p in paths[1:]], reader,
                           self.handles)
        except Exception:  # noqa: BLE001 - the full build is the reference: it serves or says what is wrong
            log.exception("appending to %s failed; it is rebuilt whole", previous.id)
            return None
        if grown is None:
            return None
        ds, delta = grown
        kept = [facts[p] for p in paths if p in plan.fresh or facts[p].path in reader.opened]
        self.index.keep_facts([_keeping(f, reader.used.get(f.path, ())) for f in kept], headers, _spans(ds, kept))
        version, bumped = self.index.next_version(ds.id, entry.content)
        ds.version = version
        self.index.keep_append(plan.path, plan.sha, entry.content, ds, replace(delta, version=version), plan.glob)
        self._appended[ds.id] = len(delta.files)
        if bumped:
            changes.append(self._change(ds.id, ds, previous, plan, CHANGED, appended=len(delta.files)))
        return ds, _with_id(entry, ds.id), ""

    def _failed(self, plan: _Plan, previous: GriddedDataset | None, message: str) -> Problem | tuple[
            GriddedDataset, Entry, str]:
        """Keep serving the dataset as it was, when it still can be; else return the problem."""
        log.warning("not published: %s: %s", plan.path, message)
        serving = previous if previous is not None and _still_there(previous) else None
        if serving is None:
            self.index.keep_entry(plan.path, plan.sha, plan.content(self.root), None, message)
            return Problem(plan.path, message)
        note = f"{message}; {serving.id} is served as it was (version {serving.version}) until this is fixed"
        self.index.keep_entry(plan.path, plan.sha, plan.content(self.root), None, note)
        files = tuple((str(f.path), f.identity) for f in serving.files if f.identity is not None)
        entry = Entry(plan.path, plan.stamp, plan.sha, plan.descriptor, plan.glob, serving.id, files,
                      content_digest(plan.sha, files, self.root))
        return serving, entry, note

    def _removed(self, path: Path, old: CatalogState | None, stored: StoredEntry | None) -> list[Change]:
        before = old.entries.get(path) if old is not None else None
        previous = _dataset_of(old, before)
        self.index.forget_entry(path)
        dataset_id = previous.id if previous is not None else before.dataset_id if before is not None else \
            stored.dataset if stored is not None else None
        if dataset_id is None:
            return []
        if previous is None and old is None and stored is not None and stored.has_snapshot:
            previous = None  # removed while the server was down: say so, without the files it had
        return [self._change(dataset_id, None, previous, _Plan(path, None, b""), REMOVED)]

    def _change(self, dataset_id: str, new: GriddedDataset | None, previous: GriddedDataset | None, plan: _Plan,
                kind: str, appended: int = 0) -> Change:
        if kind == REMOVED:
            version, _ = self.index.next_version(dataset_id, b"removed:" + plan.sha)
        else:
            assert new is not None
            version = new.version
        descriptor_changed = previous is not None and (plan.old is None or plan.old.sha != plan.sha)
        fields = describe_change(previous, new, self.root, descriptor_changed, appended)
        return self.index.log_change(dataset_id, version, kind, fields, self.wall())

    def _publish_files(self, old: CatalogState | None, datasets: Mapping[str, GriddedDataset]) -> None:
        """Tell the handle cache which version of each file is served now; forget files served no more (of the
        datasets that changed: a look that changed nothing costs nothing here)."""
        previous = dict(old.datasets) if old is not None else {}
        for i, n in self._appended.items():  # grown at its end: only its new files are published
            ds = datasets.get(i)
            if ds is not None and previous.get(i) is not None:
                for f in ds.files[len(ds.files) - n:]:
                    if f.identity is not None:
                        self.handles.publish(f.path, f.identity)
                previous[i] = ds
        changed = [ds for i, ds in datasets.items() if previous.get(i) is not ds]
        dropped = [ds for i, ds in previous.items() if datasets.get(i) is not ds]
        if not changed and not dropped:
            return
        served = {f.path: f.identity for ds in datasets.values() for f in ds.files if f.identity is not None} \
            if dropped else {f.path: f.identity for ds in changed for f in ds.files if f.identity is not None}
        before = {f.path: f.identity for ds in dropped for f in ds.files if f.identity is not None}
        for path, identity in served.items():
            if before.get(path) != identity:
                self.handles.publish(path, identity)
        gone = [p for p in before if p not in served]
        for path in gone:
            self.handles.unpublish(path)
        self.index.forget_files(p for p in gone if str(p) not in self._unreadable)


def _dataset_of(state: CatalogState | None, entry: Entry | None) -> GriddedDataset | None:
    if state is None or entry is None or entry.dataset_id is None:
        return None
    return state.datasets.get(entry.dataset_id)


def _with_id(entry: Entry, dataset_id: str) -> Entry:
    return Entry(entry.path, entry.stamp, entry.sha, entry.descriptor, entry.glob, dataset_id, entry.files,
                 entry.content)


def _keeping(facts: FileFacts, used: Iterable[str]) -> FileFacts:
    """Return ``facts`` with only the values a build read (what the index keeps)."""
    return FileFacts(facts.path, facts.identity, facts.meta, facts.header_key, used_values(facts, used))


def _glob_of(descriptor: Descriptor) -> str | None:
    """Return the glob the index keeps for a descriptor (a store's is marked); None for a remote dataset."""
    if descriptor.remote is not None:
        return None
    glob = store_glob(descriptor.files_store, descriptor.files_glob) if descriptor.files_store is not None \
        else descriptor.files_glob
    return with_ref(glob, descriptor.files_ref) if descriptor.files_ref is not None else glob


def _still_there(ds: GriddedDataset) -> bool:
    """Return whether every file of ``ds`` is still on disk as the version it serves."""
    for f in ds.files:
        if str(f.identity.real if f.identity is not None else "").startswith("store://"):
            continue  # kept by the store as long as it lists that version; reads check it (If-Match)
        try:
            st = os.stat(f.path)
        except OSError:
            return False
        if f.identity is None or not f.identity.same_file(st):
            return False
    return True


def _spans(ds: GriddedDataset, files: list[FileFacts]) -> dict[Path, tuple[str, str]]:
    """Return the first and last aggregation coordinate value of each of ``files``, as text."""
    agg = ds.descriptor.aggregate
    dim = ds.dimensions.get(agg) if agg else None
    coord = dim.coordinate if dim is not None else None
    wanted = {f.path for f in files}
    if coord is None or not wanted:
        return {}
    out = {}
    for f in ds.files:
        if f.path in wanted and f.count:
            ends = list(ends_of(coord.values[f.start:f.start + f.count]))
            if ends:
                out[f.path] = (render(ends[0]), render(ends[-1]))
    return out
