"""The Flight SQL messages dstp's Flight endpoint understands, and the tables of its metadata commands.

Flight SQL (Arrow's ``format/FlightSql.proto``, package
``arrow.flight.protocol.sql``) puts a protobuf ``Any`` in a Flight
descriptor's command, in an action's body or in a ticket. pyarrow ships no
bindings for it, so the few messages used here are declared below from the
specification's field numbers and built with protobuf's own runtime: no
generated module, no parsing by hand. Commands other than these are refused
by the adapter with a message naming what it supports.

    CommandStatementQuery          a SQL query (ADBC's execute)
    CommandPreparedStatementQuery  a "prepared" query: its handle is the SQL text
    CommandGetCatalogs / CommandGetDbSchemas / CommandGetTables / CommandGetTableTypes / CommandGetSqlInfo
    ActionCreatePreparedStatementRequest/Result, ActionClosePreparedStatementRequest
"""

from __future__ import annotations

from typing import Any, Iterable

import pyarrow as pa
from google.protobuf import any_pb2, descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

from dstp.errors import ProtocolError

__all__ = ["CATALOG", "SCHEMA", "MESSAGES", "pack", "sql_info_table", "tables_table", "unpack"]

PACKAGE = "arrow.flight.protocol.sql"
#: The one catalog and schema the datasets are listed under.
CATALOG = "dstp"
SCHEMA = "main"

_T = descriptor_pb2.FieldDescriptorProto
_FIELDS: dict[str, list[tuple[str, int, int, int]]] = {
    # name: [(field, number, type, label)]
    "CommandStatementQuery": [("query", 1, _T.TYPE_STRING, _T.LABEL_OPTIONAL),
                              ("transaction_id", 2, _T.TYPE_BYTES, _T.LABEL_OPTIONAL)],
    "TicketStatementQuery": [("statement_handle", 1, _T.TYPE_BYTES, _T.LABEL_OPTIONAL)],
    "CommandPreparedStatementQuery": [("prepared_statement_handle", 1, _T.TYPE_BYTES, _T.LABEL_OPTIONAL)],
    "CommandGetCatalogs": [],
    "CommandGetDbSchemas": [("catalog", 1, _T.TYPE_STRING, _T.LABEL_OPTIONAL),
                            ("db_schema_filter_pattern", 2, _T.TYPE_STRING, _T.LABEL_OPTIONAL)],
    "CommandGetTables": [("catalog", 1, _T.TYPE_STRING, _T.LABEL_OPTIONAL),
                         ("db_schema_filter_pattern", 2, _T.TYPE_STRING, _T.LABEL_OPTIONAL),
                         ("table_name_filter_pattern", 3, _T.TYPE_STRING, _T.LABEL_OPTIONAL),
                         ("table_types", 4, _T.TYPE_STRING, _T.LABEL_REPEATED),
                         ("include_schema", 5, _T.TYPE_BOOL, _T.LABEL_OPTIONAL)],
    "CommandGetTableTypes": [],
    "CommandGetSqlInfo": [("info", 1, _T.TYPE_UINT32, _T.LABEL_REPEATED)],
    "ActionCreatePreparedStatementRequest": [("query", 1, _T.TYPE_STRING, _T.LABEL_OPTIONAL),
                                             ("transaction_id", 2, _T.TYPE_BYTES, _T.LABEL_OPTIONAL)],
    "ActionCreatePreparedStatementResult": [("prepared_statement_handle", 1, _T.TYPE_BYTES, _T.LABEL_OPTIONAL),
                                            ("dataset_schema", 2, _T.TYPE_BYTES, _T.LABEL_OPTIONAL),
                                            ("parameter_schema", 3, _T.TYPE_BYTES, _T.LABEL_OPTIONAL)],
    "ActionClosePreparedStatementRequest": [("prepared_statement_handle", 1, _T.TYPE_BYTES, _T.LABEL_OPTIONAL)],
}
# proto3 ``optional`` is not needed: every field here has the default presence of proto3.


def _build() -> dict[str, Any]:
    proto = descriptor_pb2.FileDescriptorProto(name="dstp_flight_sql_subset.proto", package=PACKAGE,
                                               syntax="proto3")
    for name, fields in _FIELDS.items():
        message = proto.message_type.add(name=name)
        for field_name, number, kind, label in fields:
            message.field.add(name=field_name, number=number, type=kind, label=label)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{PACKAGE}.{name}"))
            for name in _FIELDS}


#: Message classes by their Flight SQL name.
MESSAGES = _build()


def pack(name: str, **fields: Any) -> bytes:
    """Return the bytes of an ``Any`` holding Flight SQL message ``name`` with ``fields``."""
    holder = any_pb2.Any()
    holder.Pack(MESSAGES[name](**fields), type_url_prefix="type.googleapis.com/")
    return holder.SerializeToString()


def unpack(data: bytes) -> tuple[str, Any] | None:
    """Return (message name, message) of a Flight SQL ``Any``, or None when ``data`` is not one of them.

    The message is None for a Flight SQL message dstp does not know; a known one whose fields do not
    decode raises :class:`~dstp.errors.ProtocolError` saying which.
    """
    holder = any_pb2.Any()
    try:
        holder.ParseFromString(data)
    except Exception:  # noqa: BLE001 - not protobuf at all: plain SQL text
        return None
    prefix = f"type.googleapis.com/{PACKAGE}."
    if not holder.type_url.startswith(prefix):
        return None
    name = holder.type_url[len(prefix):]
    cls = MESSAGES.get(name)
    if cls is None:
        return name, None
    message = cls()
    try:
        holder.Unpack(message)
    except DecodeError as exc:
        # protobuf's own words name field types and encodings, not what the sender can change
        raise ProtocolError(f"the Flight SQL {name} is malformed: its fields do not decode (a string that is "
                            "not UTF-8, or bytes cut short); send it as a Flight SQL client (ADBC) encodes it, "
                            "or put the query in the descriptor's command as plain UTF-8 text") from exc
    return name, message


def _like(pattern: str, value: str) -> bool:
    """Return whether ``value`` matches a SQL LIKE ``pattern`` (``%`` any run, ``_`` one character)."""
    import re

    if not pattern:
        return True
    regex = "".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value, flags=re.DOTALL) is not None


CATALOGS_SCHEMA = pa.schema([pa.field("catalog_name", pa.utf8(), nullable=False)])
SCHEMAS_SCHEMA = pa.schema([pa.field("catalog_name", pa.utf8()), pa.field("db_schema_name", pa.utf8(), nullable=False)])
TABLE_TYPES_SCHEMA = pa.schema([pa.field("table_type", pa.utf8(), nullable=False)])


def tables_schema(include_schema: bool) -> pa.Schema:
    fields = [pa.field("catalog_name", pa.utf8()), pa.field("db_schema_name", pa.utf8()),
              pa.field("table_name", pa.utf8(), nullable=False), pa.field("table_type", pa.utf8(), nullable=False)]
    if include_schema:
        fields.append(pa.field("table_schema", pa.binary(), nullable=False))
    return pa.schema(fields)


def catalogs_table() -> pa.Table:
    return pa.table({"catalog_name": [CATALOG]}, schema=CATALOGS_SCHEMA)


def schemas_table(catalog: str, pattern: str) -> pa.Table:
    rows = [SCHEMA] if (not catalog or catalog == CATALOG) and _like(pattern, SCHEMA) else []
    return pa.table({"catalog_name": [CATALOG] * len(rows), "db_schema_name": rows}, schema=SCHEMAS_SCHEMA)


def table_types_table() -> pa.Table:
    return pa.table({"table_type": ["TABLE"]}, schema=TABLE_TYPES_SCHEMA)


def tables_table(command: Any, datasets: Iterable[tuple[str, pa.Schema]]) -> pa.Table:
    """Return the CommandGetTables answer for ``datasets`` (id, schema of ``select *``)."""
    include = bool(command.include_schema)
    ok_place = (not command.catalog or command.catalog == CATALOG) and _like(command.db_schema_filter_pattern, SCHEMA)
    ok_type = not command.table_types or "TABLE" in command.table_types
    rows = [(name, schema) for name, schema in datasets
            if ok_place and ok_type and _like(command.table_name_filter_pattern, name)]
    columns: dict[str, list[Any]] = {"catalog_name": [CATALOG] * len(rows), "db_schema_name": [SCHEMA] * len(rows),
                                     "table_name": [n for n, _ in rows], "table_type": ["TABLE"] * len(rows)}
    if include:
        columns["table_schema"] = [s.serialize().to_pybytes() for _, s in rows]
    return pa.table(columns, schema=tables_schema(include))


# CommandGetSqlInfo: the value is a dense union; dstp answers the server facts only.
_SQL_INFO_VALUE = pa.dense_union([
    pa.field("string_value", pa.utf8()),
    pa.field("bool_value", pa.bool_()),
    pa.field("bigint_value", pa.int64()),
    pa.field("int32_bitmask", pa.int32()),
    pa.field("string_list", pa.list_(pa.utf8())),
    pa.field("int32_to_int32_list_map", pa.map_(pa.int32(), pa.list_(pa.int32()))),
])
SQL_INFO_SCHEMA = pa.schema([pa.field("info_name", pa.uint32(), nullable=False),
                             pa.field("value", _SQL_INFO_VALUE, nullable=False)])


def sql_info_table(version: str, wanted: Iterable[int]) -> pa.Table:
    """Return the CommandGetSqlInfo answer: server name, version, Arrow version, read-only; no transactions."""
    facts: dict[int, tuple[int, Any]] = {
        0: (0, "dstp"),              # FLIGHT_SQL_SERVER_NAME
        1: (0, version),             # FLIGHT_SQL_SERVER_VERSION
        2: (0, pa.__version__),      # FLIGHT_SQL_SERVER_ARROW_VERSION
        3: (1, True),                # FLIGHT_SQL_SERVER_READ_ONLY
        4: (1, True),                # FLIGHT_SQL_SERVER_SQL
        5: (1, False),               # FLIGHT_SQL_SERVER_SUBSTRAIT
        8: (3, 0),                   # FLIGHT_SQL_SERVER_TRANSACTION: none
        9: (1, True),                # FLIGHT_SQL_SERVER_CANCEL
    }
    ids = [i for i in (list(wanted) or sorted(facts)) if i in facts]
    strings: list[str] = []
    bools: list[bool] = []
    ints: list[int] = []
    types: list[int] = []
    offsets: list[int] = []
    for i in ids:
        code, value = facts[i]
        types.append(code)
        target: list[Any] = strings if code == 0 else bools if code == 1 else ints
        offsets.append(len(target))
        target.append(value)
    children = [pa.array(strings, pa.utf8()), pa.array(bools, pa.bool_()), pa.array([], pa.int64()),
                pa.array(ints, pa.int32()), pa.array([], pa.list_(pa.utf8())),
                pa.array([], pa.map_(pa.int32(), pa.list_(pa.int32())))]
    value = pa.UnionArray.from_dense(pa.array(types, pa.int8()), pa.array(offsets, pa.int32()), children,
                                     [f.name for f in _SQL_INFO_VALUE])
    return pa.Table.from_arrays([pa.array(ids, pa.uint32()), value], schema=SQL_INFO_SCHEMA)
