"""The dask chunks of one compute, read in a few box queries instead of one query per chunk.

xarray hands a backend one chunk's key at a time (``getter(array, key)`` per task, on dask's worker
threads); nothing in the backend interface says which chunks follow. The dask graph does: a local
scheduler (threads, synchronous, processes) shows every registered :class:`dask.callbacks.Callback`
the graph it is about to run, before it submits any task. :class:`ChunkBatches` is such a callback:

1. ``_start(graph)`` (the computing thread, before any task runs) finds the ``getter`` tasks over a
   dstp variable — in the graph, inside fused ``_execute_subgraph`` tasks, with the array inline or
   behind a reference — and asks xarray's own lazy indexing which backend key each one will read
   (the key xarray's ``explicit_indexing_adapter`` hands the backend; nothing is read meanwhile).
2. Reads of one dataset on the same dimensions, at keys that tile a box exactly (every chunk of a
   regular grid of intervals, no hole, no overlap; dimensions where all chunks agree may carry any
   key — an integer, a stride), are planned as one *box* query for all their variables, at most
   :data:`BOX_BYTES` of values each; larger sets split along their outer dimensions. A box of one
   chunk is left to the chunk's own query.
3. On a worker thread, a chunk's read (:func:`take`) finds its box: the first chunk of a box runs the
   box query (under the backend's per-server query slots), the others of that box wait for it, and
   each gets a copy of exactly its part. A box that fails in any way (refused, cut short, a value
   the backend refuses) hands nothing out: each of its chunks then runs its own query as before, so
   what a user sees — values or the exact refusal — never depends on batching.
4. ``_finish`` drops what the compute did not take (a failed compute, a chunk read differently).

Why this is sound with the threaded scheduler: the plan is complete before the first task is
submitted (``_start`` runs in the scheduler's thread first); worker threads only remove entries under
one lock, and a box's query runs outside that lock (the waiters wait on the box's event, which is set
in a ``finally``). A chunk is served only from a box planned for that very array object and that very
key, and every box value is a slab of the same server query a chunk query would run, so an answer
equals the chunk query's. Values the planner predicted wrongly are simply not asked for: the chunk
reads alone. With dask's distributed scheduler no local callback runs: one query per chunk, as before.
"""

from __future__ import annotations

import logging
import math
import threading
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Iterator, Protocol, Sequence

import numpy as np

__all__ = ["BOX_BYTES", "ChunkBatches", "ChunkRead", "install", "take"]

log = logging.getLogger(__name__)

#: Values (bytes, all variables of the box together) one box query reads at most. A compute over more
#: reads several boxes, up to the backend's query slots at a time.
BOX_BYTES = 64 * 2**20

#: A basic key, normalised: per dimension an ``int`` or a ``(start, stop, step)`` triple.
Key = tuple[Any, ...]


class ChunkRead(Protocol):
    """What the planner needs of a backend array (:class:`dstp.client._backend.DstpBackendArray`)."""

    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def box_group(self) -> Hashable | None:
        """Arrays of one group can be read by one query (same server, dataset, dimensions); None: never."""


#: Reads several arrays at one key with one query: ``{id(array): values}``, an array left out when its
#: values cannot be handed out (its chunks then read alone). Raises for a box that failed as a whole.
BoxReader = Callable[[Sequence[Any], tuple[Any, ...]], dict[int, np.ndarray]]
#: (a dask getter's array argument, its key) → (backend array, backend key), or None.
Resolver = Callable[[Any, Any], "tuple[Any, tuple[Any, ...]] | None"]


def normalise(key: Sequence[Any], shape: Sequence[int]) -> Key:
    """Return a basic key with its slices as concrete ``(start, stop, step)`` triples, hashable."""
    return tuple(k.indices(n) if isinstance(k, slice) else int(k) for k, n in zip(key, shape))


def _as_index(k: Any) -> Any:
    return slice(*k) if isinstance(k, tuple) else k


def _size(k: Any) -> int:
    return len(range(*k)) if isinstance(k, tuple) else 1


# -- boxes: which chunk keys one query reads ------------------------------------------------------------


def _tiling(keys: Sequence[Key]) -> tuple[Key, tuple[int | None, ...]] | None:
    """Return (the box key, per dimension the box start of multi-interval dimensions) when ``keys`` tile a
    box exactly: on each dimension either one key shared by all, or step-1 intervals that follow each
    other without gap or overlap, every combination of them present once. None otherwise."""
    box: list[Any] = []
    starts: list[int | None] = []
    count = 1
    for d in range(len(keys[0])):
        distinct = sorted({k[d] for k in keys}, key=_part_order)
        if len(distinct) == 1:
            box.append(distinct[0])
            starts.append(None)
            continue
        if not all(isinstance(k, tuple) and k[2] == 1 and k[1] > k[0] for k in distinct):
            return None
        for a, b in zip(distinct, distinct[1:]):
            if a[1] != b[0]:
                return None
        box.append((distinct[0][0], distinct[-1][1], 1))
        starts.append(distinct[0][0])
        count *= len(distinct)
    if count != len(keys) or len(set(keys)) != len(keys):
        return None
    return tuple(box), tuple(starts)


def boxes(keys: Sequence[Key], budget: int) -> list[list[Key]]:
    """Return ``keys`` grouped into sets that each tile a box of at most ``budget`` elements (a single key
    may exceed it); split along the outermost dimension where the keys differ, at a middle start."""
    out: list[list[Key]] = []
    stack = [sorted(set(keys), key=_order)]
    while stack:
        group = stack.pop()
        tiled = _tiling(group) if len(group) > 1 else None
        if len(group) == 1 or (tiled is not None and math.prod(_size(k) for k in tiled[0]) <= budget):
            out.append(group)
            continue
        # distinct keys differ on some dimension: both halves of its distinct values are non-empty
        d = next(d for d in range(len(group[0])) if len({k[d] for k in group}) > 1)
        values = sorted({k[d] for k in group}, key=_part_order)
        upper = set(values[len(values) // 2:])
        stack.append([k for k in group if k[d] in upper])
        stack.append([k for k in group if k[d] not in upper])
    return out


def _part_order(k: Any) -> tuple[int, ...]:
    return k if isinstance(k, tuple) else (k,)


def _order(key: Key) -> tuple[Any, ...]:
    return tuple(_part_order(k) for k in key)


class _Box:
    """One box query and the chunks (array, key) it serves, each once."""

    def __init__(self, arrays: Sequence[Any], key: Key, starts: tuple[int | None, ...],
                 members: Sequence[tuple[Any, Key]], read: BoxReader) -> None:
        self.arrays = tuple(arrays)
        self.key = key
        self.starts = starts
        self.read = read
        self.waiting = {(id(a), k) for a, k in members}
        self._lock = threading.Lock()
        self._started = False
        self._done = threading.Event()
        self._values: dict[int, np.ndarray] = {}

    def take(self, array: Any, key: Key) -> np.ndarray | None:
        """Return a copy of ``array``'s values at ``key`` from the box (reading it first if no other chunk
        has); None when the box could not serve it (then the chunk reads alone)."""
        with self._lock:
            mine = not self._started
            self._started = True
        if mine:
            try:
                self._values = self.read(self.arrays, tuple(_as_index(k) for k in self.key))
            except Exception as exc:  # the chunks read alone and meet any real error themselves
                log.debug("a box of %d chunks failed (%s); its chunks read alone", len(self.waiting), exc)
                self._values = {}
            finally:
                self._done.set()
        else:
            self._done.wait()
        values = self._values.get(id(array))
        with self._lock:
            self.waiting.discard((id(array), key))
            if not self.waiting:
                self._values = {}  # every chunk has its copy: the box's memory goes
        if values is None:
            return None
        part = tuple(slice(k[0] - s, k[1] - s) if s is not None else slice(None)
                     for k, s in zip(key, self.starts) if isinstance(k, tuple))
        return np.array(values[part], copy=True)


# -- the registry of planned boxes, filled by a compute's start, taken from by its tasks ----------------

_pending: dict[tuple[int, Key], list[_Box]] = defaultdict(list)
_pending_lock = threading.Lock()


def take(array: Any, key: Sequence[Any]) -> np.ndarray | None:
    """Return ``array``'s values at the basic ``key`` if a running compute planned them in a box, else None."""
    if not _pending:
        return None
    wanted = normalise(key, array.shape)
    with _pending_lock:
        found = _pending.get((id(array), wanted))
        if not found:
            return None
        box = found.pop(0)
        if not found:
            del _pending[(id(array), wanted)]
    return box.take(array, wanted)


# -- finding the chunk reads of a graph ------------------------------------------------------------------


_predicting = threading.local()


class WouldRead(Exception):
    """Raised by a backend read while the planner predicts keys: that chunk is not planned."""


def predicting() -> bool:
    """Return whether this thread is predicting keys (a backend read now would be a real read: refuse)."""
    return getattr(_predicting, "on", False)


def _getter_calls(graph: dict[Any, Any]) -> Iterator[tuple[Any, Any, dict[Any, Any]]]:
    """Yield (array argument, key argument, the graph they refer into) of every dask ``getter`` task."""
    from dask._task_spec import Task, _execute_subgraph
    from dask.array.core import getter, getter_inline, getter_nofancy

    getters = (getter, getter_inline, getter_nofancy)
    stack: list[tuple[Any, dict[Any, Any]]] = [(node, graph) for node in graph.values()]
    while stack:
        node, scope = stack.pop()
        if not isinstance(node, Task):
            continue
        if node.func in getters and len(node.args) >= 2:
            yield node.args[0], node.args[1], scope
            continue
        if node.func is _execute_subgraph and len(node.args) >= 3 and isinstance(node.args[0], dict):
            # _execute_subgraph(inner graph, out key, in keys, *their values): a fused (blockwise) task
            inner = {**scope, **node.args[0]}
            inner.update({k: _Literal(_value(v, scope)) for k, v in zip(node.args[2], node.args[3:])})
            stack.extend((n, inner) for n in node.args[0].values())
            continue
        stack.extend((a, scope) for a in node.args if isinstance(a, Task))


@dataclass(frozen=True, slots=True)
class _Literal:
    """A value bound to a fused task's input key (resolved in the outer graph)."""

    value: Any


def _value(argument: Any, scope: dict[Any, Any]) -> Any:
    """Return the literal a task argument stands for (a DataNode's value, a reference's DataNode), else None."""
    from dask._task_spec import Alias, DataNode, TaskRef

    for _ in range(4):
        if isinstance(argument, (DataNode, _Literal)):
            return argument.value
        if isinstance(argument, (TaskRef, Alias)):
            argument = scope.get(argument.key if isinstance(argument, TaskRef) else argument.target)
            continue
        return argument
    return None


def chunk_reads(graph: dict[Any, Any], resolve: Resolver) -> list[tuple[Any, Key]]:
    """Return (backend array, normalised backend key) of every chunk read of ``graph`` that ``resolve`` knows."""
    out = []
    _predicting.on = True
    try:
        for array_arg, key_arg, scope in _getter_calls(graph):
            key = _value(key_arg, scope)
            if not isinstance(key, tuple) or any(k is None for k in key):
                continue  # dask's getter rewrites keys with new axes: left to the chunk's own query
            try:
                found = resolve(_value(array_arg, scope), key)
            except (WouldRead, TypeError, ValueError, IndexError, NotImplementedError):
                continue
            if found is not None:
                array, backend_key = found
                out.append((array, normalise(backend_key, array.shape)))
    finally:
        _predicting.on = False
    return out


def plan(reads: Sequence[tuple[Any, Key]], read: BoxReader, budget_bytes: int | None = None) -> list[_Box]:
    """Return the boxes of two chunks or more that serve ``reads``, grouped by array group and variables;
    each box at most ``budget_bytes`` of values (default :data:`BOX_BYTES`) unless it is one chunk."""
    budget_bytes = BOX_BYTES if budget_bytes is None else budget_bytes
    by_group: dict[Hashable, dict[Key, dict[int, Any]]] = defaultdict(lambda: defaultdict(dict))
    for array, key in reads:
        group = array.box_group
        if group is not None and all(_size(k) for k in key):
            by_group[group][key][id(array)] = array
    out = []
    for keys in by_group.values():
        by_variables: dict[tuple[int, ...], list[Key]] = defaultdict(list)
        arrays: dict[tuple[int, ...], list[Any]] = {}
        for key, found in keys.items():
            ids = tuple(sorted(found))
            by_variables[ids].append(key)
            arrays[ids] = [found[i] for i in ids]
        for ids, members in by_variables.items():
            if len(members) < 2:
                continue
            chosen = arrays[ids]
            budget = max(1, budget_bytes // sum(np.dtype(a.dtype).itemsize for a in chosen))
            for group_keys in boxes(members, budget):
                tiled = _tiling(group_keys) if len(group_keys) > 1 else None
                if tiled is None:
                    continue
                out.append(_Box(chosen, tiled[0], tiled[1], [(a, k) for k in group_keys for a in chosen], read))
    return out


# -- the dask callback ------------------------------------------------------------------------------------


class ChunkBatches:
    """The local schedulers' callback that plans each compute's boxes (dask's ``Callback`` protocol)."""

    def __init__(self, resolve: Resolver, read: BoxReader, alive: Callable[[], bool]) -> None:
        self.resolve = resolve
        self.read = read
        self.alive = alive
        self._computes: dict[int, list[tuple[tuple[int, Key], _Box]]] = {}
        self._lock = threading.Lock()

    def callbacks(self) -> tuple[Callable[..., None] | None, ...]:
        """Return dask's callback tuple (start, start_state, pretask, posttask, finish)."""
        return (self._start, None, None, None, self._finish)

    def _start(self, graph: Any) -> None:
        if not self.alive() or not isinstance(graph, dict):
            return
        try:
            planned = plan(chunk_reads(graph, self.resolve), self.read)
        except Exception as exc:  # never fail a compute for a plan: its chunks read alone
            log.debug("no boxes planned for a dask compute: %s", exc)
            return
        if not planned:
            return
        entries = [((i, k), box) for box in planned for (i, k) in box.waiting]
        with _pending_lock:
            for entry, box in entries:
                _pending[entry].append(box)
        with self._lock:
            self._computes[id(graph)] = entries

    def _finish(self, graph: Any, state: Any, failed: Any) -> None:
        with self._lock:
            entries = self._computes.pop(id(graph), None)
        if not entries:
            return
        with _pending_lock:
            for entry, box in entries:
                found = _pending.get(entry)
                if found and box in found:
                    found.remove(box)
                    if not found:
                        del _pending[entry]


_installed: ChunkBatches | None = None
_install_lock = threading.Lock()


def install(resolve: Resolver, read: BoxReader, alive: Callable[[], bool]) -> None:
    """Register the callback with dask's local schedulers, once per process (again if a concurrent compute's
    swap of dask's global callbacks dropped it); nothing without dask."""
    global _installed
    try:
        from dask.callbacks import Callback
    except ImportError:
        return
    with _install_lock:
        if _installed is None:
            _installed = ChunkBatches(resolve, read, alive)
        callbacks = _installed.callbacks()
        if callbacks not in Callback.active:
            Callback.active.add(callbacks)
