"""Execution: DuckDB over the scans of a query, with limits, timeouts, cancellation and spilling.

All queries of a process share one in-memory DuckDB database, configured
before anything runs: no file system or network access, no extension loading,
a memory limit, a thread count, and a size-capped spill folder of its own
(``spill_dir``/``spill_max_bytes``), so a group-by, join or sort bigger than
``duckdb_memory_limit`` spills to disk instead of failing (DuckDB writes its
temporary files even with external access off); then the configuration is
locked and the calendar macros (:mod:`._calendar`) are created. Each query
runs on its own cursor.

Every dataset reference of the plan is registered under its own table name:
a local one as a :class:`~.scan.ReplayableScan` over its hyperslab, a remote
one as a :class:`~.remote.RemoteScan` of the query to its server. A matchup is
staged first: its left records are computed and held, each gets the index of
its nearest grid point along every key (:func:`~.matchup.stage_left`), and the
right side is scanned over the index box they need only. Then the SQL runs,
and its results stream out batch by batch, so the first batch leaves before
the scans end.

Limits: a result stops at ``max_result_rows`` or ``max_result_bytes`` with
``truncated`` set in its summary; a query that outlives ``query_time_limit_s``
is interrupted (QueryTimeoutError) — planning included: typing the SQL over
empty scans runs under the same deadline (:mod:`._deadline`, issue 13: a big
expression kept DuckDB typing for minutes outside every limit); ``cancel`` interrupts it on demand
(client gone, server stopping).
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import math
import os
import re
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import duckdb
import numpy as np
import pyarrow as pa
import sqlglot
import sqlglot.errors
from sqlglot import exp

from dstp.catalog.gridmapping import grid_mapping_names
from dstp.catalog.netcdf4_ import ReadStats
from dstp.catalog.registry import Catalog
from dstp.errors import (
    CancelledError,
    DstpError,
    LimitExceededError,
    QueryError,
    QueryTimeoutError,
    ServerError,
)
from dstp.query._calendar import install_macros
from dstp.query._watch import WATCHDOG, Watched
from dstp.query._deadline import Watchdog, planning_timeout
from dstp.query._pushdown import Hyperslab
from dstp.query._expressions import sql_string
from dstp.query._text import spell_types
from dstp.query.matchup import Axis, MatchupSpec, index_column, stage_left
from dstp.query.parse import ValidatedQuery, validate_query
from dstp.query.plan import QueryPlan, ScanPlan, literal, plan_query, remote_sql
from dstp.query.remote import RemoteCounter, RemoteScan, remote_schema
from dstp.query.scan import GridScan, ReplayableScan
from dstp.settings import Settings

__all__ = ["PARTIALS", "Combine", "PreparedQuery", "QueryExecution", "QuerySummary", "prepare_query", "sql_schema",
           "spill_folder"]

#: The table a :class:`Combine` registers its partial results as.
PARTIALS = "__dstp_partials"


@dataclass(frozen=True, slots=True)
class Combine:
    """A reduction computed elsewhere in pieces: ``partials(cancel, deadline, stats)`` returns the pieces'
    partial aggregates as one table (read statistics added to ``stats``), and ``sql`` combines them
    (DuckDB SQL over :data:`PARTIALS`) into the query's result, in its schema."""

    sql: str
    partials: Callable[[threading.Event, float, ReadStats], pa.Table]
    #: How many pieces, for the log.
    pieces: int = 0


@dataclass(frozen=True, slots=True)
class PreparedQuery:
    """A planned query with its result schema; nothing has been read yet."""

    plan: QueryPlan
    schema: pa.Schema
    #: Set when the reduction runs as partial aggregates elsewhere (a scale-out coordinator's workers).
    combine: Combine | None = None

    @property
    def query(self) -> ValidatedQuery:
        return self.plan.query

    @property
    def scan_rows(self) -> int:
        return self.plan.scan_rows()

    def estimated_rows(self) -> int:
        return self.plan.estimated_rows()


@dataclass(slots=True)
class QuerySummary:
    """What a finished (or stopped) execution produced and read."""

    rows: int = 0
    bytes: int = 0
    batches: int = 0
    truncated: bool = False
    truncated_reason: str = ""
    seconds: float = 0.0
    stats: ReadStats = field(default_factory=ReadStats)
    #: Bytes and records that arrived from remote servers (federated queries).
    remote_bytes: int = 0
    remote_rows: int = 0


_DATABASES: dict[tuple[Any, ...], duckdb.DuckDBPyConnection] = {}
_DATABASES_LOCK = threading.Lock()


def spill_folder(settings: Settings) -> Path:
    """Return this process's spill folder: ``spill_dir`` (else the user cache's ``spill``), then the pid."""
    if settings.spill_dir is not None:
        base = Path(settings.spill_dir)
    else:
        import platformdirs

        base = Path(platformdirs.user_cache_dir("dstp")) / "spill"
    return base / f"process-{os.getpid()}"


#: Lock files of the spill folders this process owns, held open (and flock'ed) while it lives.
_SPILL_LOCKS: list[Any] = []


def _claim_spill_folder(spill: Path) -> None:
    """Create this process's spill folder, held by an flock on its ``.lock`` while the process lives, and remove
    the folders other processes left (a process killed, or whose DuckDB wrote its folder again at exit): a
    folder whose lock nobody holds, or without a lock whose process is gone."""
    import fcntl

    spill.mkdir(parents=True, exist_ok=True)
    lock = open(spill / ".lock", "w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    _SPILL_LOCKS.append(lock)
    atexit.register(lock.close)
    for other in spill.parent.glob("process-*"):
        if other == spill or not other.is_dir():
            continue
        try:
            with open(other / ".lock") as held:
                try:
                    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # its process runs
        except FileNotFoundError:  # left by a dstp before these locks: its process id says whether it runs
            pid = other.name.removeprefix("process-")
            if not pid.isdigit() or _running(int(pid)):
                continue
        except OSError:
            continue
        shutil.rmtree(other, ignore_errors=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _connect(settings: Settings) -> duckdb.DuckDBPyConnection:
    """Return a fresh connection (cursor) to the process's sandboxed DuckDB database.

    One in-memory database per configuration is shared by every query of the
    process, so ``duckdb_memory_limit``, ``duckdb_threads`` and the spill cap
    bound them together (and opening it, ~20 ms, is paid once); each query runs
    on its own cursor — a separate connection with its own registered scans and
    its own interrupt.
    """
    spill = spill_folder(settings) if settings.spill_max_bytes > 0 else None
    key = (max(1, settings.duckdb_threads), settings.duckdb_memory_limit, str(spill), settings.spill_max_bytes)
    with _DATABASES_LOCK:
        database = _DATABASES.get(key)
        if database is None:
            config: dict[str, Any] = {
                "threads": key[0],
                "memory_limit": key[1],
                "enable_external_access": False,
                "autoinstall_known_extensions": False,
                "autoload_known_extensions": False,
                "temp_directory": "",
            }
            if spill is not None:
                _claim_spill_folder(spill)
                atexit.register(shutil.rmtree, spill, True)
                config["temp_directory"] = str(spill)
                config["max_temp_directory_size"] = f"{settings.spill_max_bytes}B"
            database = duckdb.connect(config=config)
            database.execute("SET lock_configuration = true")
            install_macros(database)
            _DATABASES[key] = database
        return database.cursor()


def warm_up(settings: Settings) -> None:
    """Open the shared DuckDB database now, so the first query does not pay for it."""
    _connect(settings).close()


_DUCK_PREFIX = re.compile(r"^[A-Z][A-Za-z ]* Error: ")
# DuckDB's internal type names in its messages, as its SQL spells them.
_DUCK_TYPES = {"BOOL": "BOOLEAN", "INT8": "TINYINT", "INT16": "SMALLINT", "INT32": "INTEGER", "INT64": "BIGINT",
               "INT128": "HUGEINT", "UINT8": "UTINYINT", "UINT16": "USMALLINT", "UINT32": "UINTEGER",
               "UINT64": "UBIGINT", "UINT128": "UHUGEINT"}
_DUCK_TYPE_NAMES = re.compile(r"\b(" + "|".join(_DUCK_TYPES) + r")\b")
# 128-bit integers the query did not name (a sum of big integers) are said in words.
_WIDE_TYPES = {"HUGEINT": "128-bit integer", "UHUGEINT": "unsigned 128-bit integer"}
_WIDE_TYPE_NAMES = re.compile(r"\b(" + "|".join(_WIDE_TYPES) + r")\b")
_INTERNAL = re.compile(r'"?__dstp_(scan|mleft|mright)_(\d+)"?')
_MACRO = re.compile(r"__dstp_\w+", re.IGNORECASE)


def _query_error_from_duckdb(exc: Exception, q: ValidatedQuery) -> DstpError:
    text = str(exc).split("\n")[0].split(". Detail: Python exception")[0]  # never a Python traceback
    text = _DUCK_PREFIX.sub("", text)
    by_index = {r.index: r.dataset.id for r in q.references}
    text = _INTERNAL.sub(lambda m: by_index.get(int(m[2]), "a dataset") if m[1] == "scan" else "the matchup", text)
    text = _MACRO.sub("a dstp time function", text).replace('"l.', '"').replace('"r.', '"')
    text = text.replace("INTEGER_LITERAL", "a number").replace("VARCHAR", "text").replace("STRING_LITERAL", "text")
    text = _DUCK_TYPE_NAMES.sub(lambda m: _DUCK_TYPES[m.group(1)], text)
    text = spell_types(text, q.sql)  # a type the query names, as it names it
    text = _WIDE_TYPE_NAMES.sub(lambda m: _WIDE_TYPES[m.group(1)], text)
    if isinstance(exc, duckdb.OutOfMemoryException) or "Out of Memory" in text or "temp_directory" in text:
        return LimitExceededError(
            f"the query needs more memory and spill space than a query may use ({text}); narrow it with WHERE, "
            "fewer groups, or LIMIT"
        )
    unreadable = _UNREADABLE_TEXT.search(text)
    if unreadable is not None:
        placed = _text_at(q.sql, unreadable.group(1), unreadable.group(2))
        if placed is not None:
            return placed
    return QueryError(f"{text} — in: {q.sql.strip()}")


# DuckDB's cast error for a string literal it cannot read as the type around it (types already in SQL words).
_UNREADABLE_TEXT = re.compile(r"Could not convert string '(.*)' to ([A-Za-z][\w -]*?)(?:$|[.;:,(])")


def _text_at(sql: str, value: str, kind: str) -> QueryError | None:
    """Return the error for a string literal of ``sql`` DuckDB could not read as ``kind``, with a caret under
    it; None when the query has no such literal (DuckDB's text then stands as it is)."""
    from sqlglot.dialects.dialect import Dialect
    from sqlglot.tokens import TokenType

    try:
        tokens = Dialect.get_or_raise("duckdb").tokenize(sql)
    except Exception:  # noqa: BLE001 - the query tokenized once; if not now, say it without a caret
        return None
    token = next((t for t in tokens if t.token_type == TokenType.STRING and t.text == value), None)
    if token is None:
        return None
    kind = kind.strip()
    numeric = kind.upper() in _NUMBER_TYPES or kind.lower().startswith(("decimal", "128-bit", "unsigned"))
    what = "a number" if numeric else f"a value of type {kind}"
    return QueryError(f"{sql_string(value)} is not {what}, which this part of the query needs ({kind}); write "
                      + ("a number without quotes" if numeric else f"a {kind.lower()} value"),
                      sql=sql, line=token.line, column=token.col, token=sql[token.start: token.end + 1])


_NUMBER_TYPES = {"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "FLOAT", "DOUBLE", "REAL", "UTINYINT", "USMALLINT",
                 "UINTEGER", "UBIGINT"}


# -- schemas ---------------------------------------------------------------------------------

def _scan_schema(scan: ScanPlan) -> pa.Schema:
    if scan.ref.remote:
        return remote_schema(scan.dataset, scan.columns)
    return GridScan(scan.dataset, scan.hyperslab, scan.columns).schema


def _empty(schema: pa.Schema) -> pa.RecordBatchReader:
    return pa.RecordBatchReader.from_batches(schema, iter([]))


_PLAIN: collections.OrderedDict[int, tuple[QueryPlan, pa.Schema, tuple[tuple[str, ...], int | None] | None]] = \
    collections.OrderedDict()
_PLAIN_LOCK = threading.Lock()


def _plain_projection_of(plan: QueryPlan, schema: pa.Schema) -> tuple[tuple[str, ...], int | None] | None:
    """Return :func:`plain_projection` of ``plan``, once per plan object: a plan reused for an equal query
    (dstp/service/prepared.py) is not parsed again at each run (~0.9 ms). Kept by identity, with the plan."""
    with _PLAIN_LOCK:
        kept = _PLAIN.get(id(plan))
    if kept is not None and kept[0] is plan and kept[1] is schema:
        return kept[2]
    found = plain_projection(plan, schema)
    with _PLAIN_LOCK:
        _PLAIN[id(plan)] = (plan, schema, found)
        while len(_PLAIN) > SCHEMA_CACHE_SIZE:
            _PLAIN.popitem(last=False)
    return found


def plain_projection(plan: QueryPlan, schema: pa.Schema) -> tuple[tuple[str, ...], int | None] | None:
    """Return (the scan column of each result column, the LIMIT) when the SQL only picks scan columns.

    ``SELECT t.a AS x, t.b AS y FROM <scan> AS t [LIMIT n]`` over one local scan — no WHERE, grouping,
    ordering, DISTINCT, joins or offset — returns the scan's records as they come, renamed and cut at
    the limit; DuckDB would only copy them into its vectors and back into Arrow (8 % of the server's
    CPU on a 1.1 GB result). None for anything else, or when a result type is not the scan column's
    exact type: DuckDB runs those.
    """
    if len(plan.scans) != 1 or plan.matchups:
        return None
    scan = plan.scans[0]
    if scan.ref.remote or scan.ref.role == "right":
        return None
    try:
        tree = sqlglot.parse_one(plan.sql, read="duckdb")
    except sqlglot.errors.ParseError:
        return None
    if not isinstance(tree, exp.Select) or set(k for k, v in tree.args.items() if v) - {"expressions", "from_", "limit"}:
        return None
    source = tree.args["from_"].this
    if not isinstance(source, exp.Table) or source.name != scan.table or source.args.get("joins"):
        return None
    alias = source.alias or source.name
    limit: int | None = None
    if tree.args.get("limit") is not None:
        value = tree.args["limit"].expression
        if not isinstance(value, exp.Literal) or value.is_string or not value.this.isdigit():
            return None
        limit = int(value.this)
    scan_types = dict(zip(scan.columns, _scan_schema(scan).types))
    picked = []
    for item, field in zip(tree.expressions, schema):
        column = item.this if isinstance(item, exp.Alias) else item
        if not isinstance(column, exp.Column) or column.table not in ("", alias) or item.alias_or_name != field.name:
            return None
        if scan_types.get(column.name) != field.type:
            return None
        picked.append(column.name)
    if len(picked) != len(schema) or len(tree.expressions) != len(schema):
        return None
    return tuple(picked), limit


def _matchup_schemas(con: duckdb.DuckDBPyConnection, m: MatchupSpec,
                     right: ScanPlan) -> tuple[pa.Schema, pa.Schema]:
    left = con.sql(m.left_sql).to_arrow_table().schema
    for key in m.keys:
        left = left.append(pa.field(index_column(key.dimension), pa.int64()))
    return left, _scan_schema(right)


def sql_schema(plan: QueryPlan, settings: Settings, sql: str, tables: Mapping[str, pa.Schema] | None = None) -> pa.Schema:
    """Return the bare Arrow schema of ``sql`` run over empty scans of ``plan`` (and empty ``tables``);
    DuckDB's error (as a QueryError) when it does not bind."""
    con = _connect(settings)
    try:
        for scan in plan.scans:
            con.register(scan.table, _empty(_scan_schema(scan)))
        for name, schema in (tables or {}).items():
            con.register(name, _empty(schema))
        return con.sql(sql).to_arrow_table().schema
    except duckdb.Error as exc:
        raise _query_error_from_duckdb(exc, plan.query) from exc
    finally:
        con.close()


#: Bare result schemas DuckDB gave, by (generated SQL, each scan's table and schema): binding the same
#: SQL over tables of the same schemas gives the same types, so a repeated query skips DuckDB's bind
#: (~3 ms of the ~13 ms a 10 k-record query costs the server). Least recently used entries go first.
SCHEMA_CACHE_SIZE = 512
_SCHEMAS: collections.OrderedDict[tuple[Any, ...], pa.Schema] = collections.OrderedDict()
_SCHEMAS_LOCK = threading.Lock()


def _schema_key(plan: QueryPlan) -> tuple[Any, ...] | None:
    """Return the cache key of ``plan``'s bare result schema, or None (matchups stage tables first: not cached)."""
    if plan.matchups:
        return None
    # Serialized, so field metadata counts too (pyarrow's Schema equality ignores it).
    return (plan.sql, tuple((scan.table, _scan_schema(scan).serialize().to_pybytes()) for scan in plan.scans))


def _result_schema(plan: QueryPlan, settings: Settings, deadline: float = math.inf,
                   cancel: threading.Event | None = None) -> pa.Schema:
    """Return the result schema by running the generated SQL over empty scans, stopped at ``deadline``."""
    if time.monotonic() > deadline:
        raise planning_timeout(settings.query_time_limit_s)
    key = _schema_key(plan)
    if key is not None:
        with _SCHEMAS_LOCK:
            cached = _SCHEMAS.get(key)
            if cached is not None:
                _SCHEMAS.move_to_end(key)
        if cached is not None:
            return _annotate(cached, plan)
    schema = _bind_schema(plan, settings, deadline, cancel)
    if key is not None:
        with _SCHEMAS_LOCK:
            _SCHEMAS[key] = schema
            while len(_SCHEMAS) > SCHEMA_CACHE_SIZE:
                _SCHEMAS.popitem(last=False)
    return _annotate(schema, plan)


def _bind_schema(plan: QueryPlan, settings: Settings, deadline: float, cancel: threading.Event | None) -> pa.Schema:
    """Return DuckDB's bare schema of the generated SQL over empty scans, stopped at ``deadline``."""
    con = _connect(settings)
    guard = Watchdog(con, deadline, cancel or threading.Event())
    guard.__enter__()
    try:
        scans = {s.ref.index: s for s in plan.scans}
        for scan in plan.scans:
            con.register(scan.table, _empty(_scan_schema(scan)))
        for m in plan.matchups:
            left, right = _matchup_schemas(con, m, scans[m.right.index])
            con.register(m.left_table, _empty(left))
            con.register(m.right_table, _empty(right))
        schema = con.sql(plan.sql).to_arrow_table().schema
    except duckdb.Error as exc:
        if guard.timed_out:
            raise planning_timeout(settings.query_time_limit_s) from exc
        if guard.cancel.is_set():
            raise CancelledError("the query was cancelled") from exc
        raise _query_error_from_duckdb(exc, plan.query) from exc
    finally:
        guard.__exit__()
        con.close()
    if time.monotonic() > deadline:
        raise planning_timeout(settings.query_time_limit_s)
    return schema


def _annotate(schema: pa.Schema, plan: QueryPlan) -> pa.Schema:
    """Return ``schema`` with units, CF attributes and calendars on its fields, the plan in its metadata."""
    q = plan.query
    fields = []
    mappings: dict[str, str] = {}
    for f, out, meta in zip(schema, q.outputs, q.output_metas or [None] * len(q.outputs)):
        field_meta: dict[str, str] = {}
        origin = meta.origin if meta is not None else None
        bare = isinstance(out.this, exp.Column)
        if origin is not None and not origin[0].remote:
            field_meta = _column_metadata(origin[0].dataset, origin[1], bare, mappings)
        elif meta is not None and meta.calendar:
            field_meta = {"calendar": meta.calendar}
        fields.append(f.with_metadata(field_meta) if field_meta else f)
    ids = q.dataset_ids
    if q.simple or (len(q.references) == 1 and not q.aggregated and not q.matchups
                    and isinstance(q.tree, exp.Select) and not q.tree.args.get("distinct")):
        grid = " ".join(plan.grid)
    else:
        grid = " ".join(q.group_keys)
    # The version of each dataset the query was planned on, in the order of dstp:datasets ("-": a remote one).
    versions = {r.dataset.id: "-" if r.remote else str(getattr(r.dataset, "version", 0)) for r in q.references}
    metadata = {"dstp:dataset": ids[0], "dstp:datasets": " ".join(ids), "dstp:grid": grid, "dstp:sql": q.sql,
                "dstp:plan": plan.explain_json(), "dstp:version": " ".join(versions[i] for i in ids)}
    for gm, wkt in mappings.items():
        # The CRS of the grid mapping the selected columns name (CF grid_mapping), as WKT 2.
        metadata[f"dstp:crs_wkt:{gm}"] = wkt
    return pa.schema(fields, metadata=metadata)


def _column_metadata(ds: Any, name: str, bare: bool, mappings: dict[str, str]) -> dict[str, str]:
    meta: dict[str, str] = {}
    readable = ds.readable(name)
    if readable is not None:
        a = readable
        meta = {k: str(v) for k, v in a.spec.cf
                if k in ("standard_name", "long_name", "cell_methods", "grid_mapping", "coordinates")}
        if a.spec.units and a.decoding.time_units is None:
            meta["units"] = a.spec.units
        if a.decoding.calendar:
            meta["calendar"] = a.decoding.calendar
        if not bare:
            return {k: v for k, v in meta.items() if k in ("standard_name", "long_name", "units", "calendar")}
        meta["dstp:dimensions"] = " ".join(a.dimensions)
        if a.role != "data":
            meta["dstp:role"] = a.role
            if a.note:
                meta["dstp:note"] = a.note
        for gm in grid_mapping_names(meta.get("grid_mapping")):
            if gm in ds.grid_mappings:
                mappings[gm] = ds.grid_mappings[gm].wkt
    elif name in ds.coordinates:
        c = ds.coordinates[name]
        meta = {k: str(v) for k, v in c.spec.cf if k in ("standard_name", "long_name", "positive")}
        if c.spec.units and c.decoding.time_units is None:
            meta["units"] = c.spec.units
        if c.decoding.calendar:
            meta["calendar"] = c.decoding.calendar
        if bare:
            meta["dstp:dimension"] = c.dimension or ""
    return meta


def prepare_query(sql: str, catalog: Catalog, settings: Settings, *, started: float | None = None,
                  cancel: threading.Event | None = None) -> PreparedQuery:
    """Validate, plan and type a query; raise a typed QueryError for anything wrong.

    Planning counts against ``query_time_limit_s`` from ``started`` (``time.monotonic()``; default: now):
    QueryTimeoutError once it is over, CancelledError if ``cancel`` is set meanwhile.
    """
    deadline = (time.monotonic() if started is None else started) + settings.query_time_limit_s
    query = validate_query(sql, catalog, max_length=settings.max_sql_length)
    plan = plan_query(query)
    return PreparedQuery(plan, _result_schema(plan, settings, deadline, cancel))


# -- running ---------------------------------------------------------------------------------

class QueryExecution:
    """One run of a prepared query: iterate ``batches()``, then read ``summary``."""

    def __init__(
        self,
        prepared: PreparedQuery,
        settings: Settings,
        cancel: threading.Event | None = None,
        *,
        started: float | None = None,
    ) -> None:
        self.prepared = prepared
        self.settings = settings
        self.cancel = cancel or threading.Event()
        self.summary = QuerySummary()
        #: When the time limit started counting (``time.monotonic()``): at planning for a query run at once
        #: (its planning counts too), else when the execution starts.
        self.started = started
        self._watched: Watched | None = None
        self._sources: list[ReplayableScan | RemoteScan] = []
        self._remote = RemoteCounter()

    def _local(self, scan: ScanPlan, hyperslab: Hyperslab | None = None) -> ReplayableScan:
        settings, summary = self.settings, self.summary
        h = hyperslab if hyperslab is not None else scan.hyperslab

        def open_scan() -> GridScan:
            return GridScan(scan.dataset, h, scan.columns, batch_rows=settings.batch_rows,
                            sampling=scan.ref.sampling, stats=summary.stats, cancel=self.cancel,
                            threads=settings.scan_threads, read_ahead_bytes=settings.store_read_ahead_bytes)

        replayable = ReplayableScan(open_scan, GridScan(scan.dataset, h, scan.columns).schema)
        self._sources.append(replayable)
        return replayable

    def _register(self, con: duckdb.DuckDBPyConnection) -> None:
        for scan in self.prepared.plan.scans:
            if scan.ref.role == "right":
                continue
            if scan.ref.remote:
                assert scan.remote_sql is not None
                source = RemoteScan(scan.dataset, scan.remote_sql, remote_schema(scan.dataset, scan.columns),
                                    self._remote, self.cancel)
                self._sources.append(source)
                con.register(scan.table, source)
            else:
                con.register(scan.table, self._local(scan))

    def _stage(self, con: duckdb.DuckDBPyConnection, m: MatchupSpec) -> None:
        """Compute the left records of a matchup and the grid points they need; register both."""
        plan = self.prepared.plan
        right = next(s for s in plan.scans if s.ref is m.right)
        left = con.sql(m.left_sql).to_arrow_table()
        ds = right.dataset
        axes: dict[str, Axis] = {}
        from dstp.query._scope import column_meta

        for key in m.keys:
            values = ds.coordinate_values(key.right) if right.ref.remote else ds.coordinates[key.right].values
            axes[key.dimension] = Axis(np.asarray(values), column_meta(ds, key.right, right.ref))
        indices, box = stage_left(m, left, axes)
        for key in m.keys:
            left = left.append_column(index_column(key.dimension), pa.array(indices[key.dimension], pa.int64()))
        con.register(m.left_table, left)
        ranges = dict(zip(right.hyperslab.dims, right.hyperslab.ranges))
        for dim, r in box.items():
            current = ranges[dim]
            ranges[dim] = range(max(current.start, r.start), max(max(current.start, r.start), min(current.stop, r.stop)))
        hyperslab = Hyperslab(right.grid, tuple(ranges[d] for d in right.grid))
        if right.ref.remote:
            conditions = list(m.right_pushdown)
            empty = any(len(r) == 0 for r in box.values())
            for key in m.keys:
                values = axes[key.dimension].values[ranges[key.dimension]]
                if values.size:
                    conditions.append(exp.Between(this=exp.column(key.right, quoted=True),
                                                  low=literal(values.min()), high=literal(values.max())))
            sql = remote_sql(right.ref, conditions, tuple(c for c in right.columns if not c.startswith("__dstp")))
            index_axes = {k.dimension: (k.right, axes[k.dimension].values) for k in m.keys}
            source: RemoteScan | ReplayableScan = RemoteScan(
                ds, sql, remote_schema(ds, right.columns), self._remote, self.cancel, index_axes)
            if empty:
                con.register(m.right_table, _empty(remote_schema(ds, right.columns)))
                return
            self._sources.append(source)
        else:
            source = self._local(right, hyperslab)
        con.register(m.right_table, source)

    def batches(self) -> Iterator[pa.RecordBatch]:
        """Yield the result batches with the result schema; fill ``summary`` as they go."""
        plan, settings, summary = self.prepared.plan, self.settings, self.summary
        started = time.monotonic() if self.started is None else self.started
        con = _connect(settings)
        self._watched = WATCHDOG.watch(con, started + settings.query_time_limit_s, self.cancel)
        try:
            schema = self.prepared.schema
            combine = self.prepared.combine
            plain = _plain_projection_of(plan, schema) if settings.plain_projections and combine is None else None
            if combine is not None:
                partials = combine.partials(self.cancel, started + settings.query_time_limit_s, summary.stats)
                con.register(PARTIALS, partials)
                reader = con.sql(combine.sql).to_arrow_reader(settings.batch_rows)
            elif plain is not None:
                reader = self._projected(*plain)
            else:
                self._register(con)
                for m in plan.matchups:
                    self._stage(con, m)
                reader = con.sql(plan.sql).to_arrow_reader(settings.batch_rows)
            for batch in reader:
                if batch.num_rows == 0:
                    continue
                batch = pa.RecordBatch.from_arrays(batch.columns, schema=schema)
                room = settings.max_result_rows - summary.rows
                if batch.num_rows > room:
                    batch = batch.slice(0, room)
                    summary.truncated = True
                    summary.truncated_reason = f"result cut at max_result_rows={settings.max_result_rows}"
                size = batch.nbytes
                if summary.bytes + size > settings.max_result_bytes:
                    summary.truncated = True
                    summary.truncated_reason = f"result cut at max_result_bytes={settings.max_result_bytes}"
                    break
                summary.rows += batch.num_rows
                summary.bytes += size
                summary.batches += 1
                if batch.num_rows:
                    yield batch
                if summary.truncated:
                    break
        except (duckdb.Error, pa.ArrowException, OSError) as exc:
            # Once DuckDB streams, its errors reach us through the Arrow reader as OSError.
            raise self._translate(exc) from self._cause(exc)
        except DstpError:
            raise
        finally:
            WATCHDOG.release(self._watched)  # after it, never an interrupt on the closed cursor (nanobind: leaked)
            summary.seconds = time.monotonic() - started
            summary.remote_bytes, summary.remote_rows = self._remote.bytes, self._remote.rows
            try:
                con.close()
            except duckdb.Error:
                pass

    def _projected(self, columns: tuple[str, ...], limit: int | None) -> Iterator[pa.RecordBatch]:
        """Yield the scan's records, only ``columns`` (in the result's order), stopping at ``limit``."""
        scan = self.prepared.plan.scans[0]
        source = self._local(scan)
        if limit == 0:
            return
        left = limit
        try:
            with contextlib.closing(source.open().batches()) as batches:  # closed early at the limit
                for batch in batches:
                    picked = pa.RecordBatch.from_arrays([batch.column(name) for name in columns],
                                                        names=list(columns))
                    if left is not None and picked.num_rows >= left:
                        yield picked.slice(0, left)
                        return
                    if left is not None:
                        left -= picked.num_rows
                    yield picked
        except Exception as exc:
            # As from DuckDB: a file's own error as it is; a cancel by the watchdog as the time-out it is.
            if isinstance(exc, DstpError) and not isinstance(exc, CancelledError):
                raise
            raise self._translate(exc) from self._cause(exc)

    def _cause(self, exc: Exception) -> BaseException:
        """Return the root of ``exc``: the error a scan source met (DuckDB only relays it), else ``exc``."""
        return next((s.error for s in self._sources if s.error is not None), exc)

    def _translate(self, exc: Exception) -> DstpError:
        error = next((s.error for s in self._sources if s.error is not None), None)
        if error is not None and isinstance(error, DstpError) and not isinstance(error, CancelledError):
            return error
        if self._watched is not None and self._watched.timed_out:
            return QueryTimeoutError(
                f"the query ran longer than {self.settings.query_time_limit_s:g} s and was stopped; "
                "narrow it with WHERE on coordinates, stride() or tablesample"
            )
        if self.cancel.is_set() or isinstance(exc, duckdb.InterruptException):
            return CancelledError("the query was cancelled")
        if "INTERRUPT" in str(exc):
            return CancelledError("the query was cancelled")
        if isinstance(error, Exception):
            return ServerError("reading the data failed")
        if not isinstance(exc, duckdb.Error) and not _DUCK_PREFIX.match(str(exc)):
            # DuckDB's own errors raised mid-stream arrive through the Arrow reader as OSError.
            return ServerError("the query failed while streaming its result")
        return _query_error_from_duckdb(exc, self.prepared.query)


