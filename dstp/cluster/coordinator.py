"""The coordinator: the cluster executor (:class:`~dstp.service.executor.Executor`) of a dstp server whose
select-where queries run as partitions on Dask workers.

The server assembly hands it to the service's constructor; every door reaches it through the service
(``service.executor``), none subclasses anything for it. It keeps everything a single server's control plane does — gRPC, HTTP,
tokens and access policy, admission, the audit log — and changes one answer:
``Query`` for a query that can be partitioned (:func:`~.partitions.why_not_partitioned`)
and a client that accepts the striped channel. That query is planned and
checked here (the principal's catalog: a hidden dataset is not found), cut
into one piece per worker, and each piece submitted as a Dask task pinned to
a worker (``allow_other_workers``: Dask moves it when that worker dies). The
answer lists one partition per piece: the worker, its data endpoint, a ticket
and key of that worker's, and the rows it holds. When the result is surely
within the result limits the pieces are *streamed*: each task publishes its
ticket (a Dask event) before computing, Query answers once every piece has
one (rows -1), and the workers send while they compute.

Everything else — LIMIT, aggregates and reductions, joins, sampling, Run (the
one-round-trip gRPC path; asked with ``inline_max_bytes``, a partitionable
query whose result may exceed it gets the same partitions as from Query),
HTTP, Flight, files — the coordinator answers itself from its own catalog, as
a single server would (docs/scale-out.md says why). So does a partitioned
query whose total exceeds ``max_result_rows`` or ``max_result_bytes``: a
single server cuts such a result in grid (or ORDER BY) order, and running it
here is the one way to give exactly that answer.

``Resolve(query, partition)`` re-finds a partition after a failed fetch: a
fresh ticket from the worker that holds it, or — worker gone, or the result
no longer held — the piece run again on another worker.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa

from dstp.auth import Principal
from dstp.cluster.locality import Placement, file_fingerprint, place_by_files, uses_locality
from dstp.cluster.partitions import (
    DatasetIdentity,
    PartitionSpec,
    identities,
    identity_of,
    order_keys,
    plan_partitions,
    why_not_partitioned,
    within_limits,
)
from dstp.cluster.reduce import split_reduction
from dstp.cluster.worker import (
    FileShare,
    PartitionResult,
    adopt_dataset,
    dataset_identities,
    merge_partials,
    node_report,
    open_file_shares,
    published,
    reissue,
    run_partial,
    run_partition,
)
from dstp.catalog.netcdf4_ import ReadStats
from dstp.errors import CancelledError, CatalogError, DstpError, NotFoundError, QueryTimeoutError, TransportError
from dstp.query.execute import Combine, PreparedQuery
from dstp.service import DstpService
from dstp.service.files import FileHandle
from dstp.service.queries import row_bytes
from dstp.settings import Settings
from dstp.transport.wire.values import ChannelOffer, FilePartInfo, OrderKeyInfo, PartitionInfo, QueryInfo
from dstp.transport.wire.ranges import split_ranges

__all__ = ["ClusterQuery", "Coordinator"]

#: Shares of a download from the workers are multiples of this many bytes (but the last).
SHARE_ALIGN = 64 * 2**10

log = logging.getLogger("dstp.cluster")

#: How long the end-of-query callback waits for a finished partition task's counts (seconds).
RESULT_WAIT_S = 30.0

#: Stripes per partition transfer when the client leaves it to the server (partitions already run in parallel).
DEFAULT_STREAMS = 2


@dataclass
class ClusterQuery:
    """A partitioned query the coordinator remembers until its tickets expire (for Resolve)."""

    query_id: str
    sql: str
    principal: Principal
    specs: tuple[PartitionSpec, ...]
    results: list[PartitionResult]
    compression: str
    expires_at: float
    #: Stripes granted per partition transfer.
    streams: int = 1
    #: The data channel its partitions are offered on: "striped" or "udt".
    kind: str = "striped"
    #: The datasets' identities the pieces were cut against (a rerun is checked against the same).
    expect: tuple[DatasetIdentity, ...] = ()
    #: Per partition, the workers that hold every file it reads (empty: any worker whose copy is the coordinator's).
    holders: tuple[tuple[str, ...], ...] = ()
    #: Streamed: each partition's running Dask task (None once it has finished), else empty.
    futures: list[Any] = field(default_factory=list)
    #: Generation of the published ticket behind ``results[i]`` (streamed partitions; see Coordinator).
    generations: list[int] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class Coordinator:
    """Connects to a Dask cluster (or starts a LocalCluster) and runs partitions there: the cluster executor."""

    #: Queries may be answered as partitions fetched from the workers (dstp.service.executor.Executor).
    partitioned = True

    def __init__(self, settings: Settings, *, address: str = "", local_workers: int = 0, sealed: bool = False,
                 clock: Any = time.time) -> None:
        if bool(address) == bool(local_workers):
            raise ValueError("give the scheduler's address (--cluster tcp://HOST:8786) or a number of local "
                             "workers (--local-cluster N), not both")
        self.settings = settings
        self.address = address
        self.local_workers = local_workers
        self.sealed = sealed
        self.clock = clock
        self.client: Any = None
        self.cluster: Any = None
        self._queries: dict[str, ClusterQuery] = {}
        self._lock = threading.Lock()
        #: Where each streamed partition task published its ticket (the latest run of each label wins), with
        #: a generation that grows with every publication; ``_arrived`` is notified on each, and whenever a
        #: partition task ends.
        self._topic = f"dstp-partitions-{uuid.uuid4().hex}"
        self._published: dict[str, tuple[int, PartitionResult]] = {}
        self._generation = 0
        self._arrived = threading.Condition()
        #: Each worker's identity of the datasets asked about so far (a worker scans its catalog once).
        self._identities: dict[str, dict[str, str]] = {}
        #: Each worker's UDT endpoint ("" if it runs none), asked once per worker (:meth:`udt_workers`).
        self._udt: dict[str, str] = {}
        #: The files each worker whose copy differs holds of a dataset, by (dataset, identity digest),
        #: asked once per worker (:meth:`holdings`); and the coordinator's fingerprints of those files.
        self._held: dict[str, dict[tuple[str, str], frozenset[int]]] = {}
        self._fingerprints: dict[tuple[str, str], list[str]] = {}

    def start(self) -> "Coordinator":
        """Connect, register the worker plugin (every worker, and each that joins later), wait for one worker."""
        from distributed import Client, LocalCluster

        from dstp.cluster.plugin import DstpWorkerPlugin

        if self.local_workers:
            import dask

            # Dask's nanny starts workers with MALLOC_TRIM_THRESHOLD_=65536, which made a partition's scan
            # ~1.4x slower (numpy/Arrow buffers given back and taken again on every batch); dstp's own
            # workers keep glibc's default (docs/scale-out.md says how to do the same for `dask worker`).
            with dask.config.set({"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}):
                self.cluster = LocalCluster(n_workers=self.local_workers, threads_per_worker=1, processes=True,
                                            host="127.0.0.1", dashboard_address=None, silence_logs=logging.WARNING)
            self.client = Client(self.cluster)
        else:
            self.client = Client(self.address, timeout=30)
        try:
            self.client.register_plugin(DstpWorkerPlugin(self.settings, sealed=self.sealed))
            self.client.subscribe_topic(self._topic, self._on_published)
            self.client.wait_for_workers(1, timeout=60)
        except BaseException:
            self.stop()
            raise
        log.info("dstp coordinator on Dask scheduler %s with %d workers", self.client.scheduler.address,
                 len(self.workers()))
        return self

    @property
    def scheduler_address(self) -> str:
        return str(self.client.scheduler.address)

    def workers(self) -> list[str]:
        """Return the addresses of the live workers, sorted, as the scheduler knows them now.

        Asked of the scheduler directly: ``Client.scheduler_info(n_workers=-1)`` fetches into a cache
        that the client's periodic refresh (every 2 s, fetching no workers) can overwrite before it is
        read, and then returned no workers at all (32 of 500 calls with a 5 ms refresh) — a reduction
        then failed with "no cluster worker ... is alive" in a CI run.
        """
        return sorted(self.client.sync(self.client.scheduler.identity, n_workers=-1)["workers"])

    def reports(self) -> dict[str, dict[str, Any]]:
        """Return each worker's node report: its data endpoint, Arrow bytes sent, partitions held, pieces reduced."""
        return dict(self.client.run(node_report, on_error="return"))

    def stop(self) -> None:
        if self.client is not None:
            try:
                self.client.close()
            except Exception:  # noqa: BLE001 - closing anyway
                log.exception("closing the Dask client")
            self.client = None
        if self.cluster is not None:
            self.cluster.close()
            self.cluster = None

    # -- queries ------------------------------------------------------------------------------

    def eligible(self, workers: list[str], expect: tuple[DatasetIdentity, ...]) -> list[str]:
        """Return the workers whose copies of the datasets are the coordinator's (``expect``); ask each
        worker once per dataset, and log the ones left out."""
        names = [i.dataset for i in expect]
        with self._lock:
            for gone in set(self._identities) - set(workers):
                del self._identities[gone]
            unknown = [w for w in workers if any(n not in self._identities.get(w, {}) for n in names)]
        if unknown:
            found = self.client.run(dataset_identities, names, workers=unknown, on_error="return")
            with self._lock:
                for w, ids in found.items():
                    if isinstance(ids, dict):
                        self._identities.setdefault(w, {}).update(ids)
                        for i in expect:
                            if ids.get(i.dataset) != i.digest:
                                log.warning("cluster worker %s: its copy of %r differs from the coordinator's (or "
                                            "it does not serve it); it runs only pieces whose files it holds",
                                            w, i.dataset)
        with self._lock:
            return [w for w in workers if all(self._identities.get(w, {}).get(i.dataset) == i.digest for i in expect)]

    def holdings(self, workers: list[str], ds: Any) -> dict[str, frozenset[int]]:
        """Return, per worker of ``workers`` holding any file of dataset ``ds`` (the coordinator's), the
        indices of the files it holds: all of them where its copy is the coordinator's; for any other
        worker, those it has under the same path with the same size and fingerprint (it is sent the
        dataset once and answers, :func:`~.worker.adopt_dataset`)."""
        ident = identity_of(ds)
        every = frozenset(range(len(ds.files)))
        full = self.eligible(workers, (ident,))
        out = {w: every for w in full}
        if not uses_locality(ds):
            return out
        key = (ds.id, ident.digest)
        with self._lock:
            for gone in set(self._held) - set(workers):
                del self._held[gone]
            ask = [w for w in workers if w not in out and key not in self._held.get(w, {})]
        if ask:
            import pickle

            blob = pickle.dumps(dataclasses.replace(ds, handles=None))
            found = self.client.run(adopt_dataset, blob, str(self.catalog_root), self._prints(ds, key),
                                    workers=ask, on_error="return")
            with self._lock:
                for w, held in found.items():
                    if isinstance(held, list):
                        self._held.setdefault(w, {})[key] = frozenset(k for k, ok in enumerate(held) if ok)
                        log.info("cluster worker %s holds %d of the %d files of %r (the rest are read by others)",
                                 w, sum(held), len(held), ds.id)
                    else:
                        log.warning("cluster worker %s could not say which files of %r it holds: %s", w, ds.id, held)
        with self._lock:
            for w in workers:
                held = self._held.get(w, {}).get(key)
                if w not in out and held:
                    out[w] = held
        return out

    @property
    def catalog_root(self) -> Path:
        root = self.settings.catalog_root
        assert root is not None, "a coordinator serves a catalog root"
        return Path(root).resolve()

    def _prints(self, ds: Any, key: tuple[str, str]) -> list[str]:
        """Return the fingerprints of the coordinator's files of ``ds`` (computed once per identity)."""
        with self._lock:
            known = self._fingerprints.get(key)
        if known is None:
            coordinate = ds.dimensions[ds.descriptor.aggregate].coordinate
            variable = coordinate.spec.variable if coordinate is not None else None
            known = [file_fingerprint(ds.handles, f.path, variable) for f in ds.files]
            with self._lock:
                self._fingerprints[key] = known
        return known

    def placements(self, prepared: PreparedQuery, workers: list[str]) -> tuple[tuple[Placement, ...], bool] | str:
        """Return the query's pieces with the workers each may run on, and whether those are pinned by
        the coordinator (every worker holds every file: one piece each, Dask may move a piece when its
        worker dies) rather than by the files (Dask picks among the holders, and only among them);
        or why no worker can run it."""
        expect = identities(prepared)
        full = self.eligible(workers, expect)
        holdings = self.holdings(workers, prepared.plan.scans[0].dataset) if len(full) < len(workers) else {}
        if len(holdings) > len(full):
            placed = place_by_files(prepared, holdings)
            if not isinstance(placed, str):
                return placed, False
            if not full:
                return placed
            log.info("pieces not placed by file (%s); run by the %d workers that hold every file", placed, len(full))
        if not full:
            return "no cluster worker holds the coordinator's copy of its dataset, or any of its files"
        specs = plan_partitions(prepared, len(full))
        return tuple(Placement(spec, (full[spec.index % len(full)],)) for spec in specs), True

    def udt_workers(self, workers: list[str]) -> list[str]:
        """Return the workers that run a UDT data channel (each asked once, for its life)."""
        with self._lock:
            for gone in set(self._udt) - set(workers):
                del self._udt[gone]
            unknown = [w for w in workers if w not in self._udt]
        if unknown:
            found = self.client.run(node_report, workers=unknown, on_error="return")
            with self._lock:
                for w, report in found.items():
                    if isinstance(report, dict) and report.get("running"):
                        self._udt[w] = report.get("udt_endpoint", "")
        with self._lock:
            return [w for w in workers if self._udt.get(w)]

    def _gather(self, futures: list[Any], what: str) -> list[Any]:
        """Return the futures' results within the query time limit; typed errors pass, the rest is clear."""
        from distributed import wait
        from distributed.client import FutureCancelledError
        from distributed.scheduler import KilledWorker

        limit = self.settings.query_time_limit_s
        try:
            done = wait(futures, timeout=limit)
            if done.not_done:
                raise TransportError(f"the cluster did not finish {what} within {limit:g} s "
                                     f"({len(done.not_done)} of {len(futures)} partitions outstanding); "
                                     "is any worker alive?")
            return list(self.client.gather(futures))
        except DstpError:
            raise
        except (KilledWorker, FutureCancelledError) as exc:
            raise TransportError(f"cluster workers kept dying while running {what} ({exc}); the query did not "
                                 "complete — run it again") from exc
        finally:
            for f in futures:
                f.release()

    def _on_published(self, event: tuple[float, dict[str, Any]]) -> None:
        """A streaming partition task has its ticket (Dask event, on the client's loop): remember it."""
        result = published(event[1])
        with self._arrived:
            self._generation += 1
            self._published[result.label] = (self._generation, result)
            self._arrived.notify_all()

    def _ended(self, future: Any) -> None:
        with self._arrived:
            self._arrived.notify_all()

    def _submit(self, label: str, sql: str, spec: PartitionSpec, compression: str, workers: list[str],
                key: str, publish: bool, expect: tuple[DatasetIdentity, ...], loose: bool = True) -> Any:
        """Submit piece ``spec`` to one of ``workers`` (``loose``: or any other, when they die)."""
        future = self.client.submit(run_partition, label, sql, spec, compression, self._topic if publish else "",
                                    expect, key=key, workers=workers, allow_other_workers=loose, pure=False)
        future.add_done_callback(self._ended)
        return future

    def _await_published(self, labels: list[str], futures: list[Any], after: list[int],
                         what: str) -> list[tuple[int, PartitionResult]]:
        """Return, per label, the first ticket published after generation ``after[i]`` — waiting within the
        query time limit; a task that fails first (workers kept dying, the query failed) raises."""
        deadline = time.monotonic() + self.settings.query_time_limit_s
        with self._arrived:
            while True:
                got = [self._published.get(label) for label in labels]
                if all(g is not None and g[0] > a for g, a in zip(got, after)):
                    return [g for g in got if g is not None]
                failed = [f for f in futures if f.status in ("error", "cancelled")]
                remaining = deadline - time.monotonic()
                if failed or remaining <= 0:
                    break
                self._arrived.wait(remaining)
        if failed:
            self._gather(failed, what)  # raises the task's error, typed
        outstanding = sum(1 for g, a in zip(got, after) if g is None or g[0] <= a)
        raise TransportError(f"the cluster did not start {what} within {self.settings.query_time_limit_s:g} s "
                             f"({outstanding} of {len(labels)} partitions outstanding); is any worker alive?")

    def partitions(self, service: DstpService, sql: str, principal: Principal, compression: str,
                   streams: int = 0, kind: str = "striped") -> QueryInfo | None:
        """Run ``sql`` as partitions on the workers and return the answer listing them; None when the
        coordinator must answer it itself (not partitionable, no worker, or over a result limit).

        A query whose result is surely within the result limits (:func:`~.partitions.within_limits`) is
        *streamed*: Query answers as soon as every partition task has its ticket, and each worker sends
        its piece while computing it (rows and bytes -1 in the answer). Any other is computed first, and
        answered by the coordinator itself when its total is over a limit. ``kind``: the workers' data
        channel the partitions are offered on ("striped", or "udt": only workers that run one).
        """
        prepared = service.queries.prepare(sql, principal)
        reason = why_not_partitioned(prepared)
        workers = self.workers()
        if not reason and not workers:
            reason = "no cluster worker is alive"
        expect = identities(prepared)
        if not reason and kind == "udt":
            workers = self.udt_workers(workers)
            if not workers:
                reason = "no cluster worker runs a UDT data channel"
        placed = self.placements(prepared, workers) if not reason else reason
        if isinstance(placed, str):
            log.info("answered by the coordinator, not partitioned: %s — %s", placed, sql.strip()[:120])
            return None
        pieces, pinned = placed
        query_id = service.offers.label("q")
        label = f"{query_id}-{uuid.uuid4().hex[:8]}"
        specs = tuple(p.spec for p in pieces)
        labels = [f"{label}.p{s.index}" for s in specs]
        s = self.settings
        stream = within_limits(prepared, s.max_result_rows, s.max_result_bytes)
        slot = service.admission.acquire(principal.share_key, "queries", query_id)
        futures: list[Any] = []
        try:
            futures = [self._submit(labels[i], sql, p.spec, compression, list(p.workers),
                                    f"dstp-{label}-p{p.spec.index}", stream, expect, loose=pinned)
                       for i, p in enumerate(pieces)]
            if stream:
                found = self._await_published(labels, futures, [0] * len(labels), f"query {query_id}")
                results = [r for _, r in found]
            else:
                results = self._gather(futures, f"query {query_id}")
        except BaseException:
            slot.release()
            for f in futures:
                f.release()
            self._forget(labels)
            raise
        if not stream:
            slot.release()
        rows, nbytes = sum(r.rows for r in results), sum(r.bytes for r in results)
        if not stream and (rows > s.max_result_rows or nbytes > s.max_result_bytes or any(r.truncated for r in results)):
            log.info("query %s: %d rows / %d bytes over the result limits; the coordinator answers it", query_id,
                     rows, nbytes)
            return None
        cq = ClusterQuery(query_id, sql, principal, specs, results, compression,
                          self.clock() + s.ticket_ttl_s, streams=min(s.max_streams, streams or DEFAULT_STREAMS),
                          expect=expect, kind=kind, holders=() if pinned else tuple(p.workers for p in pieces))
        if stream:
            cq.futures = futures
            cq.generations = [g for g, _ in found]
        with self._lock:
            now = self.clock()
            for stale in [k for k, q in self._queries.items() if q.expires_at < now]:
                self._forget([r.label for r in self._queries.pop(stale).results])
            self._queries[query_id] = cq
        audit: dict[str, Any] = dict(principal=principal.name, credential=principal.key, channel="cluster",
                                     datasets=prepared.query.dataset_ids, sql=sql)
        if stream:
            self._when_computed(service, cq, slot, audit)
        else:
            service.audit.record("query", query_id, outcome="ok", rows=rows, sent=nbytes,
                                 seconds=sum(r.seconds for r in results), **audit)
        log.info("query %s partitioned into %d pieces on %d workers%s", query_id, len(specs),
                 len({r.worker for r in results}), ", streamed" if stream else f": {rows} rows")
        return _answer(prepared, query_id, [self._partition(prepared, r, cq) for r in results], stream)

    def prepare(self, prepared: PreparedQuery) -> PreparedQuery:
        """Return how ``prepared`` runs (the service asks for every prepared query): a reduction that splits (:mod:`.reduce`) gets a
        :class:`Combine` — its pieces reduced on the workers when it runs, combined here; anything else,
        or when no worker holds the coordinator's copy, is returned as it is."""
        if not prepared.query.aggregated:
            return prepared
        sql = prepared.query.sql
        split = split_reduction(prepared, self.settings)
        if isinstance(split, str):
            log.info("reduced on the coordinator, not on workers: %s — %s", split, sql.strip()[:120])
            return prepared
        expect = identities(prepared)
        placed = self.placements(prepared, self.workers())
        if isinstance(placed, str):
            log.info("reduced on the coordinator: %s — %s", placed, sql.strip()[:120])
            return prepared
        specs = tuple(p.spec for p in placed[0])

        def partials(cancel: threading.Event, deadline: float, stats: ReadStats) -> pa.Table:
            again = self.placements(prepared, self.workers())
            if isinstance(again, str):
                raise TransportError(f"no cluster worker holding this query's data is alive to reduce its pieces "
                                     f"({again}); run it again")
            pieces, pinned = again
            label = uuid.uuid4().hex[:8]
            futures = [self.client.submit(run_partial, sql, p.spec, split.partial_sql, expect,
                                          key=f"dstp-reduce-{label}-p{p.spec.index}", workers=list(p.workers),
                                          allow_other_workers=pinned, pure=False) for p in pieces]
            tops = self._tree(futures, split.merge_sql, label)
            self._wait_all([*futures, *tops], cancel, deadline)
            results = self._gather(tops, f"the pieces of a reduction ({len(specs)})")
            tables = []
            for ipc, hyperslabs, elements, nbytes in results:
                tables.append(pa.ipc.open_stream(ipc).read_all())
                stats.hyperslabs += hyperslabs
                stats.elements += elements
                stats.bytes += nbytes
            log.info("reduction %s: %d pieces on %d workers, %d partial rows", label, len(pieces),
                     len({w for p in pieces for w in p.workers}), sum(t.num_rows for t in tables))
            return pa.concat_tables(tables) if tables else split.partial_schema.empty_table()

        return dataclasses.replace(prepared, combine=Combine(split.combine_sql, partials, len(specs)))

    def _tree(self, pieces: list[Any], merge_sql: str, label: str) -> list[Any]:
        """Return the futures the coordinator combines: ``pieces`` merged on the workers, at most
        ``cluster_reduce_fan_in`` per task and level, until that many remain (Dask places each merge by
        its inputs' locality); ``pieces`` themselves when there is no merge statement or few pieces."""
        fan_in = self.settings.cluster_reduce_fan_in
        if not merge_sql or fan_in < 2:
            return pieces
        level = 0
        while len(pieces) > fan_in:
            groups = [pieces[i:i + fan_in] for i in range(0, len(pieces), fan_in)]
            pieces = [g[0] if len(g) == 1 else
                      self.client.submit(merge_partials, merge_sql, *g, key=f"dstp-merge-{label}-l{level}-{k}",
                                         pure=False)
                      for k, g in enumerate(groups)]
            level += 1
        return pieces

    def _wait_all(self, futures: list[Any], cancel: threading.Event, deadline: float) -> None:
        """Return once every future has finished; raise when the query is cancelled or out of time first."""
        from distributed import wait

        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                for f in futures:
                    f.cancel()
                raise QueryTimeoutError(f"the query ran longer than {self.settings.query_time_limit_s:g} s and was "
                                        "stopped; narrow it with WHERE on coordinates, stride() or tablesample")
            if cancel.is_set():
                for f in futures:
                    f.cancel()
                raise CancelledError("the query was cancelled")
            try:
                wait(futures, timeout=min(0.25, remaining))
                return
            except TimeoutError:
                continue

    def _forget(self, labels: list[str]) -> None:
        with self._arrived:
            for label in labels:
                self._published.pop(label, None)

    def _when_computed(self, service: DstpService, cq: ClusterQuery, slot: Any, audit: dict[str, Any]) -> None:
        """Once every streamed partition task has ended: give back the admission slot, release the futures,
        and audit the query with its real counts (or its failure).

        The slot is held at most ``query_time_limit_s``: if the scheduler has not reported every task's end
        by then (a task stuck, or its report lost), the tasks are cancelled, the slot is given back and the
        query is audited as timed out — the coordinator never stays full on the cluster's say-so."""
        futures = list(cq.futures)
        remaining = [len(futures)]
        lock = threading.Lock()
        settled = [False]

        def settle() -> bool:
            """Return True for the one caller that gives the slot back."""
            with lock:
                if settled[0]:
                    return False
                settled[0] = True
            slot.release()
            timer.cancel()
            return True

        def ended(future: Any) -> None:
            with lock:
                remaining[0] -= 1
                if remaining[0]:
                    return
            if not settle():
                return
            try:
                # Bounded: the results come through the Dask client's event loop, which a server stopping
                # now closes; an unbounded wait would then never end and hold the process at exit.
                done = [f.result(timeout=RESULT_WAIT_S) for f in futures]
            except BaseException as exc:  # noqa: BLE001 - audited; the client sees its own error
                log.info("query %s: a partition task failed: %s", cq.query_id, exc)
                service.audit.record("query", cq.query_id, outcome="error", **audit)
            else:
                service.audit.record("query", cq.query_id, outcome="ok", rows=sum(r.rows for r in done),
                                     sent=sum(r.bytes for r in done), seconds=sum(r.seconds for r in done), **audit)
            with cq.lock:
                for i, f in enumerate(cq.futures):
                    if f is not None and f.done():
                        cq.futures[i] = None
                        f.release()

        def overdue() -> None:
            if not settle():
                return
            limit = self.settings.query_time_limit_s
            log.warning("query %s: its partition tasks had not all ended %g s after Query; they are cancelled and "
                        "its admission slot is given back", cq.query_id, limit)
            service.audit.record("query", cq.query_id, outcome="timeout", **audit)
            with cq.lock:
                for i, f in enumerate(cq.futures):
                    if f is not None:
                        cq.futures[i] = None
                        f.cancel()
                        f.release()

        timer = self.start_timer(self.settings.query_time_limit_s, overdue)
        for future in futures:
            future.add_done_callback(ended)

    @staticmethod
    def start_timer(seconds: float, action: Callable[[], None]) -> Any:
        """Run ``action`` once after ``seconds`` on a daemon thread; return what ``cancel()`` stops
        (a seam: tests replace it to fire the action themselves)."""
        timer = threading.Timer(seconds, action)
        timer.daemon = True
        timer.start()
        return timer

    def _partition(self, prepared: PreparedQuery, r: PartitionResult, cq: ClusterQuery) -> PartitionInfo:
        h = prepared.plan.hyperslab
        first = h.ranges[0][r.start:r.stop]
        hyperslab = {**h.as_dict(), h.dims[0]: (first.start, first.stop, first.step)}
        if cq.kind == "udt":
            if not r.udt_endpoint:
                raise TransportError(f"partition {r.index} of query {cq.query_id} is held by cluster worker "
                                     f"{r.worker}, which runs no UDT data channel; run the query with "
                                     "transport='striped'")
            offer = ChannelOffer("udt", r.ticket, r.expires_at_unix_ms, r.udt_endpoint, 1, r.compression, "",
                                 r.key, r.cipher)
        else:
            offer = ChannelOffer("striped", r.ticket, r.expires_at_unix_ms, r.endpoint, cq.streams,
                                 r.compression, "", r.key, r.cipher)
        return PartitionInfo(r.index, r.worker, offer, r.rows, r.bytes, hyperslab)

    def resolve(self, service: DstpService, query_id: str, index: int, principal: Principal) -> PartitionInfo:
        """Return where partition ``index`` of ``query_id`` can be fetched now, with a fresh ticket."""
        with self._lock:
            cq = self._queries.get(query_id)
        if cq is None or cq.principal.key != principal.key or cq.expires_at < self.clock():
            raise NotFoundError(f"no partitioned query {query_id!r} of yours is known here (it expired, or the "
                                "coordinator restarted); run the query again")
        if not 0 <= index < len(cq.specs):
            raise NotFoundError(f"query {query_id} has partitions 0 to {len(cq.specs) - 1}, not {index}")
        spec = cq.specs[index]
        prepared = service.queries.prepare(cq.sql, principal)
        what = f"partition {index} of query {query_id}"
        with cq.lock:
            old = cq.results[index]
            live = self.workers()
            if not live:
                raise TransportError(f"no cluster worker is alive to run {what} again")
            if old.worker in live:  # it still holds the result (or is still computing it): a fresh ticket
                again = self.client.run(reissue, old.label, spec, cq.compression, workers=[old.worker],
                                        on_error="return").get(old.worker)
                if isinstance(again, PartitionResult):
                    cq.results[index] = again
                    return self._partition(prepared, again, cq)
            holders = [w for w in cq.holders[index] if w in live] if cq.holders else None
            if holders == []:
                raise TransportError(f"no live cluster worker holds the files {what} reads (its holders "
                                     f"{', '.join(cq.holders[index])} are gone); run the query again")
            running = cq.futures[index] if cq.futures else None
            if running is not None and not running.done():
                # Dask runs the task again elsewhere when its worker died: wait for that run's ticket.
                log.info("query %s: partition %d lost with %s; waiting for its task to run again", query_id, index,
                         old.worker)
                after = cq.generations[index]
                generation, again = self._await_published([old.label], [running], [after], what)[0]
            else:
                live = holders if holders is not None else self.eligible(live, cq.expect)
                if not live:
                    raise CatalogError(f"no cluster worker holds the coordinator's copy of the data to run {what} "
                                       "again")
                others = [w for w in live if w != old.worker] or live
                log.info("query %s: partition %d lost with %s; running it again", query_id, index, old.worker)
                with self._arrived:
                    after = self._published.get(old.label, (0, old))[0]
                future = self._submit(old.label, cq.sql, spec, cq.compression, others,
                                      f"dstp-{old.label}-r{uuid.uuid4().hex[:6]}", publish=True,
                                      expect=cq.expect, loose=holders is None)
                try:
                    generation, again = self._await_published([old.label], [future], [after], what)[0]
                except BaseException:
                    future.release()
                    raise
                if cq.futures:
                    cq.futures[index] = future
                future.add_done_callback(lambda f: f.release())
            if cq.generations:
                cq.generations[index] = generation
            cq.results[index] = again
            return self._partition(prepared, again, cq)

    # -- files ------------------------------------------------------------------------------

    def file_parts(self, service: DstpService, handle: FileHandle, streams: int, congestion_control: str,
                   principal: Principal) -> list[FilePartInfo]:
        """Cut what a download still misses into one share per worker that holds the coordinator's copy
        of the file's dataset, each with a ticket on that worker's data channel; [] when the coordinator
        sends it itself (smaller than ``cluster_file_min_bytes``, no such worker, a worker failed to
        answer). The client checks the whole range against the coordinator's CRC-32C in the end."""
        f = handle.request
        wanted = sum(n for _, n in f.missing)
        if not f.dataset_id or wanted < max(1, self.settings.cluster_file_min_bytes):
            return []
        catalog = service.catalog
        ds = catalog.get(f.dataset_id)
        expect = identity_of(ds)
        k = next((i for i, file in enumerate(ds.files) if file.path == f.path), -1)
        workers = [w for w, held in self.holdings(self.workers(), ds).items() if k in held]
        if not workers:
            return []
        name = str(f.path.relative_to(catalog.root))
        # Equal shares in multiples of 64 KiB (not of the block size: a file of a few 4 MiB blocks would be
        # split unevenly — 8 + 4 MiB from two workers instead of 6 + 6).
        shares = dict(zip(workers, split_ranges(f.missing, len(workers), min(handle.block_size, SHARE_ALIGN))))
        found = self.client.run(open_file_shares, f.dataset_id, name, f.size, shares, expect, congestion_control,
                                handle.block_size, workers=list(shares), on_error="return")
        failed = {w: r for w, r in found.items() if not isinstance(r, FileShare)}
        if failed or set(found) != set(shares):
            log.warning("file %s/%s sent by the coordinator itself: workers did not take their shares (%s)",
                        f.dataset_id, name, "; ".join(f"{w}: {r}" for w, r in failed.items()) or "no answer")
            return []
        granted = max(1, min(streams or DEFAULT_STREAMS, self.settings.max_streams))
        parts = [FilePartInfo(r.worker, r.ranges, ChannelOffer("striped", r.ticket, r.expires_at_unix_ms, r.endpoint,
                                                               granted, "none", r.congestion_control, r.key, r.cipher))
                 for r in (found[w] for w in shares)]
        service.audit.record("file", handle.file_id, principal=principal.name, credential=principal.key,
                             channel="cluster", datasets=(f.dataset_id,), outcome="handed_to_workers", file=f.path.name,
                             range=f"{f.offset}+{f.length}", workers=[p.worker for p in parts])
        log.info("file %s: %s/%s, %d bytes in %d shares, one per worker", handle.file_id, f.dataset_id, name,
                 wanted, len(parts))
        return parts


def _answer(prepared: PreparedQuery, query_id: str, partitions: list[PartitionInfo], streamed: bool) -> QueryInfo:
    keys = order_keys(prepared) or ()
    if streamed:  # not computed yet: the single server's estimates
        rows, nbytes = prepared.estimated_rows(), -1
        if rows >= 0:
            nbytes = rows * row_bytes(prepared.schema)
        most_rows = prepared.plan.max_rows()
        most_bytes = nbytes if nbytes >= 0 else most_rows * row_bytes(prepared.schema)
    else:
        rows, nbytes = sum(p.rows for p in partitions), sum(p.bytes for p in partitions)
        most_rows, most_bytes = rows, nbytes
    return QueryInfo(
        query_id=query_id, schema=prepared.schema, scan_rows=prepared.scan_rows, estimated_rows=rows,
        estimated_bytes=nbytes, grid=tuple(prepared.plan.grid),
        hyperslab=prepared.plan.hyperslab.as_dict(), offers=(), sample_seed=None, max_rows=most_rows,
        max_bytes=most_bytes, partitions=tuple(partitions),
        order=tuple(OrderKeyInfo(k.column, k.descending, k.nulls_first) for k in keys),
    )
