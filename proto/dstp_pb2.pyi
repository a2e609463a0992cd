from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ChangeKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CHANGE_KIND_UNSPECIFIED: _ClassVar[ChangeKind]
    CHANGE_KIND_ADDED: _ClassVar[ChangeKind]
    CHANGE_KIND_CHANGED: _ClassVar[ChangeKind]
    CHANGE_KIND_REMOVED: _ClassVar[ChangeKind]

class ChannelKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CHANNEL_KIND_UNSPECIFIED: _ClassVar[ChannelKind]
    CHANNEL_KIND_GRPC_STREAM: _ClassVar[ChannelKind]
    CHANNEL_KIND_STRIPED_TCP: _ClassVar[ChannelKind]
    CHANNEL_KIND_UDT: _ClassVar[ChannelKind]

class Compression(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    COMPRESSION_UNSPECIFIED: _ClassVar[Compression]
    COMPRESSION_NONE: _ClassVar[Compression]
    COMPRESSION_LZ4_FRAME: _ClassVar[Compression]
    COMPRESSION_ZSTD: _ClassVar[Compression]
CHANGE_KIND_UNSPECIFIED: ChangeKind
CHANGE_KIND_ADDED: ChangeKind
CHANGE_KIND_CHANGED: ChangeKind
CHANGE_KIND_REMOVED: ChangeKind
CHANNEL_KIND_UNSPECIFIED: ChannelKind
CHANNEL_KIND_GRPC_STREAM: ChannelKind
CHANNEL_KIND_STRIPED_TCP: ChannelKind
CHANNEL_KIND_UDT: ChannelKind
COMPRESSION_UNSPECIFIED: Compression
COMPRESSION_NONE: Compression
COMPRESSION_LZ4_FRAME: Compression
COMPRESSION_ZSTD: Compression

class ListDatasetsRequest(_message.Message):
    __slots__ = ("offset", "limit", "search")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    SEARCH_FIELD_NUMBER: _ClassVar[int]
    offset: int
    limit: int
    search: str
    def __init__(self, offset: _Optional[int] = ..., limit: _Optional[int] = ..., search: _Optional[str] = ...) -> None: ...

class ListDatasetsResponse(_message.Message):
    __slots__ = ("datasets", "total", "next_offset", "catalog_version")
    DATASETS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CATALOG_VERSION_FIELD_NUMBER: _ClassVar[int]
    datasets: _containers.RepeatedCompositeFieldContainer[DatasetSummary]
    total: int
    next_offset: int
    catalog_version: int
    def __init__(self, datasets: _Optional[_Iterable[_Union[DatasetSummary, _Mapping]]] = ..., total: _Optional[int] = ..., next_offset: _Optional[int] = ..., catalog_version: _Optional[int] = ...) -> None: ...

class DatasetSummary(_message.Message):
    __slots__ = ("id", "title", "summary", "keywords", "attributes", "default_grid", "default_grid_rows", "time_start", "time_end", "lat_min", "lat_max", "lon_min", "lon_max", "size_bytes", "access_policy", "version")
    ID_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    KEYWORDS_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_GRID_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_GRID_ROWS_FIELD_NUMBER: _ClassVar[int]
    TIME_START_FIELD_NUMBER: _ClassVar[int]
    TIME_END_FIELD_NUMBER: _ClassVar[int]
    LAT_MIN_FIELD_NUMBER: _ClassVar[int]
    LAT_MAX_FIELD_NUMBER: _ClassVar[int]
    LON_MIN_FIELD_NUMBER: _ClassVar[int]
    LON_MAX_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    ACCESS_POLICY_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    id: str
    title: str
    summary: str
    keywords: _containers.RepeatedScalarFieldContainer[str]
    attributes: _containers.RepeatedScalarFieldContainer[str]
    default_grid: _containers.RepeatedScalarFieldContainer[str]
    default_grid_rows: int
    time_start: str
    time_end: str
    lat_min: float
    lat_max: float
    lon_min: float
    lon_max: float
    size_bytes: int
    access_policy: str
    version: int
    def __init__(self, id: _Optional[str] = ..., title: _Optional[str] = ..., summary: _Optional[str] = ..., keywords: _Optional[_Iterable[str]] = ..., attributes: _Optional[_Iterable[str]] = ..., default_grid: _Optional[_Iterable[str]] = ..., default_grid_rows: _Optional[int] = ..., time_start: _Optional[str] = ..., time_end: _Optional[str] = ..., lat_min: _Optional[float] = ..., lat_max: _Optional[float] = ..., lon_min: _Optional[float] = ..., lon_max: _Optional[float] = ..., size_bytes: _Optional[int] = ..., access_policy: _Optional[str] = ..., version: _Optional[int] = ...) -> None: ...

class WatchCatalogRequest(_message.Message):
    __slots__ = ("since", "epoch", "follow")
    SINCE_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    since: int
    epoch: str
    follow: bool
    def __init__(self, since: _Optional[int] = ..., epoch: _Optional[str] = ..., follow: _Optional[bool] = ...) -> None: ...

class FileRename(_message.Message):
    __slots__ = ("old_path", "new_path")
    OLD_PATH_FIELD_NUMBER: _ClassVar[int]
    NEW_PATH_FIELD_NUMBER: _ClassVar[int]
    old_path: str
    new_path: str
    def __init__(self, old_path: _Optional[str] = ..., new_path: _Optional[str] = ...) -> None: ...

class CatalogChange(_message.Message):
    __slots__ = ("seq", "at_unix_ms", "dataset", "version", "kind", "files_added", "files_removed", "files_changed", "files_renamed", "columns", "axis", "first", "last", "descriptor")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    DATASET_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    FILES_ADDED_FIELD_NUMBER: _ClassVar[int]
    FILES_REMOVED_FIELD_NUMBER: _ClassVar[int]
    FILES_CHANGED_FIELD_NUMBER: _ClassVar[int]
    FILES_RENAMED_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    AXIS_FIELD_NUMBER: _ClassVar[int]
    FIRST_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTOR_FIELD_NUMBER: _ClassVar[int]
    seq: int
    at_unix_ms: int
    dataset: str
    version: int
    kind: ChangeKind
    files_added: _containers.RepeatedScalarFieldContainer[str]
    files_removed: _containers.RepeatedScalarFieldContainer[str]
    files_changed: _containers.RepeatedScalarFieldContainer[str]
    files_renamed: _containers.RepeatedCompositeFieldContainer[FileRename]
    columns: _containers.RepeatedScalarFieldContainer[str]
    axis: str
    first: str
    last: str
    descriptor: bool
    def __init__(self, seq: _Optional[int] = ..., at_unix_ms: _Optional[int] = ..., dataset: _Optional[str] = ..., version: _Optional[int] = ..., kind: _Optional[_Union[ChangeKind, str]] = ..., files_added: _Optional[_Iterable[str]] = ..., files_removed: _Optional[_Iterable[str]] = ..., files_changed: _Optional[_Iterable[str]] = ..., files_renamed: _Optional[_Iterable[_Union[FileRename, _Mapping]]] = ..., columns: _Optional[_Iterable[str]] = ..., axis: _Optional[str] = ..., first: _Optional[str] = ..., last: _Optional[str] = ..., descriptor: _Optional[bool] = ...) -> None: ...

class WatchCatalogResponse(_message.Message):
    __slots__ = ("epoch", "version", "complete", "change")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_FIELD_NUMBER: _ClassVar[int]
    CHANGE_FIELD_NUMBER: _ClassVar[int]
    epoch: str
    version: int
    complete: bool
    change: CatalogChange
    def __init__(self, epoch: _Optional[str] = ..., version: _Optional[int] = ..., complete: _Optional[bool] = ..., change: _Optional[_Union[CatalogChange, _Mapping]] = ...) -> None: ...

class DescribeRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class AxisValuesRequest(_message.Message):
    __slots__ = ("dataset", "dimension")
    DATASET_FIELD_NUMBER: _ClassVar[int]
    DIMENSION_FIELD_NUMBER: _ClassVar[int]
    dataset: str
    dimension: str
    def __init__(self, dataset: _Optional[str] = ..., dimension: _Optional[str] = ...) -> None: ...

class AxisValuesResponse(_message.Message):
    __slots__ = ("arrow_ipc",)
    ARROW_IPC_FIELD_NUMBER: _ClassVar[int]
    arrow_ipc: bytes
    def __init__(self, arrow_ipc: _Optional[bytes] = ...) -> None: ...

class KeyValue(_message.Message):
    __slots__ = ("key", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: str
    def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class Dimension(_message.Message):
    __slots__ = ("name", "size", "coordinate", "min", "max", "order", "units", "calendar", "axis")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    COORDINATE_FIELD_NUMBER: _ClassVar[int]
    MIN_FIELD_NUMBER: _ClassVar[int]
    MAX_FIELD_NUMBER: _ClassVar[int]
    ORDER_FIELD_NUMBER: _ClassVar[int]
    UNITS_FIELD_NUMBER: _ClassVar[int]
    CALENDAR_FIELD_NUMBER: _ClassVar[int]
    AXIS_FIELD_NUMBER: _ClassVar[int]
    name: str
    size: int
    coordinate: str
    min: str
    max: str
    order: int
    units: str
    calendar: str
    axis: str
    def __init__(self, name: _Optional[str] = ..., size: _Optional[int] = ..., coordinate: _Optional[str] = ..., min: _Optional[str] = ..., max: _Optional[str] = ..., order: _Optional[int] = ..., units: _Optional[str] = ..., calendar: _Optional[str] = ..., axis: _Optional[str] = ...) -> None: ...

class Column(_message.Message):
    __slots__ = ("name", "variable", "dimensions", "units", "description", "arrow_type", "cf", "packed", "nullable", "coordinate", "missing_from", "role", "note")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VARIABLE_FIELD_NUMBER: _ClassVar[int]
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    UNITS_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    ARROW_TYPE_FIELD_NUMBER: _ClassVar[int]
    CF_FIELD_NUMBER: _ClassVar[int]
    PACKED_FIELD_NUMBER: _ClassVar[int]
    NULLABLE_FIELD_NUMBER: _ClassVar[int]
    COORDINATE_FIELD_NUMBER: _ClassVar[int]
    MISSING_FROM_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    name: str
    variable: str
    dimensions: _containers.RepeatedScalarFieldContainer[str]
    units: str
    description: str
    arrow_type: str
    cf: _containers.RepeatedCompositeFieldContainer[KeyValue]
    packed: bool
    nullable: bool
    coordinate: bool
    missing_from: _containers.RepeatedScalarFieldContainer[str]
    role: str
    note: str
    def __init__(self, name: _Optional[str] = ..., variable: _Optional[str] = ..., dimensions: _Optional[_Iterable[str]] = ..., units: _Optional[str] = ..., description: _Optional[str] = ..., arrow_type: _Optional[str] = ..., cf: _Optional[_Iterable[_Union[KeyValue, _Mapping]]] = ..., packed: _Optional[bool] = ..., nullable: _Optional[bool] = ..., coordinate: _Optional[bool] = ..., missing_from: _Optional[_Iterable[str]] = ..., role: _Optional[str] = ..., note: _Optional[str] = ...) -> None: ...

class GridMapping(_message.Message):
    __slots__ = ("name", "grid_mapping_name", "parameters", "wkt", "proj", "problem", "value", "dtype")
    NAME_FIELD_NUMBER: _ClassVar[int]
    GRID_MAPPING_NAME_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    WKT_FIELD_NUMBER: _ClassVar[int]
    PROJ_FIELD_NUMBER: _ClassVar[int]
    PROBLEM_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    name: str
    grid_mapping_name: str
    parameters: _containers.RepeatedCompositeFieldContainer[KeyValue]
    wkt: str
    proj: str
    problem: str
    value: str
    dtype: str
    def __init__(self, name: _Optional[str] = ..., grid_mapping_name: _Optional[str] = ..., parameters: _Optional[_Iterable[_Union[KeyValue, _Mapping]]] = ..., wkt: _Optional[str] = ..., proj: _Optional[str] = ..., problem: _Optional[str] = ..., value: _Optional[str] = ..., dtype: _Optional[str] = ...) -> None: ...

class DataFile(_message.Message):
    __slots__ = ("name", "size_bytes", "format", "start", "count", "first", "last")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    FIRST_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    name: str
    size_bytes: int
    format: str
    start: int
    count: int
    first: str
    last: str
    def __init__(self, name: _Optional[str] = ..., size_bytes: _Optional[int] = ..., format: _Optional[str] = ..., start: _Optional[int] = ..., count: _Optional[int] = ..., first: _Optional[str] = ..., last: _Optional[str] = ...) -> None: ...

class CoverageRun(_message.Message):
    __slots__ = ("first", "last", "start", "stop")
    FIRST_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    first: str
    last: str
    start: int
    stop: int
    def __init__(self, first: _Optional[str] = ..., last: _Optional[str] = ..., start: _Optional[int] = ..., stop: _Optional[int] = ...) -> None: ...

class CorrelationKey(_message.Message):
    __slots__ = ("name", "column", "standard_name", "units")
    NAME_FIELD_NUMBER: _ClassVar[int]
    COLUMN_FIELD_NUMBER: _ClassVar[int]
    STANDARD_NAME_FIELD_NUMBER: _ClassVar[int]
    UNITS_FIELD_NUMBER: _ClassVar[int]
    name: str
    column: str
    standard_name: str
    units: str
    def __init__(self, name: _Optional[str] = ..., column: _Optional[str] = ..., standard_name: _Optional[str] = ..., units: _Optional[str] = ...) -> None: ...

class DatasetDescription(_message.Message):
    __slots__ = ("summary", "dimensions", "coordinates", "attributes", "files", "correlation_keys", "aggregate_dimension", "global_attributes", "license", "source", "descriptor_xml", "coverage", "warnings", "grid_mappings")
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    COORDINATES_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    CORRELATION_KEYS_FIELD_NUMBER: _ClassVar[int]
    AGGREGATE_DIMENSION_FIELD_NUMBER: _ClassVar[int]
    GLOBAL_ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    LICENSE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTOR_XML_FIELD_NUMBER: _ClassVar[int]
    COVERAGE_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    GRID_MAPPINGS_FIELD_NUMBER: _ClassVar[int]
    summary: DatasetSummary
    dimensions: _containers.RepeatedCompositeFieldContainer[Dimension]
    coordinates: _containers.RepeatedCompositeFieldContainer[Column]
    attributes: _containers.RepeatedCompositeFieldContainer[Column]
    files: _containers.RepeatedCompositeFieldContainer[DataFile]
    correlation_keys: _containers.RepeatedCompositeFieldContainer[CorrelationKey]
    aggregate_dimension: str
    global_attributes: _containers.RepeatedCompositeFieldContainer[KeyValue]
    license: str
    source: str
    descriptor_xml: str
    coverage: _containers.RepeatedCompositeFieldContainer[CoverageRun]
    warnings: _containers.RepeatedScalarFieldContainer[str]
    grid_mappings: _containers.RepeatedCompositeFieldContainer[GridMapping]
    def __init__(self, summary: _Optional[_Union[DatasetSummary, _Mapping]] = ..., dimensions: _Optional[_Iterable[_Union[Dimension, _Mapping]]] = ..., coordinates: _Optional[_Iterable[_Union[Column, _Mapping]]] = ..., attributes: _Optional[_Iterable[_Union[Column, _Mapping]]] = ..., files: _Optional[_Iterable[_Union[DataFile, _Mapping]]] = ..., correlation_keys: _Optional[_Iterable[_Union[CorrelationKey, _Mapping]]] = ..., aggregate_dimension: _Optional[str] = ..., global_attributes: _Optional[_Iterable[_Union[KeyValue, _Mapping]]] = ..., license: _Optional[str] = ..., source: _Optional[str] = ..., descriptor_xml: _Optional[str] = ..., coverage: _Optional[_Iterable[_Union[CoverageRun, _Mapping]]] = ..., warnings: _Optional[_Iterable[str]] = ..., grid_mappings: _Optional[_Iterable[_Union[GridMapping, _Mapping]]] = ...) -> None: ...

class QueryRequest(_message.Message):
    __slots__ = ("sql", "channels", "streams", "compression", "congestion_control", "inline_max_bytes")
    SQL_FIELD_NUMBER: _ClassVar[int]
    CHANNELS_FIELD_NUMBER: _ClassVar[int]
    STREAMS_FIELD_NUMBER: _ClassVar[int]
    COMPRESSION_FIELD_NUMBER: _ClassVar[int]
    CONGESTION_CONTROL_FIELD_NUMBER: _ClassVar[int]
    INLINE_MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    sql: str
    channels: _containers.RepeatedScalarFieldContainer[ChannelKind]
    streams: int
    compression: Compression
    congestion_control: str
    inline_max_bytes: int
    def __init__(self, sql: _Optional[str] = ..., channels: _Optional[_Iterable[_Union[ChannelKind, str]]] = ..., streams: _Optional[int] = ..., compression: _Optional[_Union[Compression, str]] = ..., congestion_control: _Optional[str] = ..., inline_max_bytes: _Optional[int] = ...) -> None: ...

class ChannelOffer(_message.Message):
    __slots__ = ("kind", "ticket", "expires_at_unix_ms", "endpoint", "streams", "compression", "congestion_control", "key", "cipher")
    KIND_FIELD_NUMBER: _ClassVar[int]
    TICKET_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    STREAMS_FIELD_NUMBER: _ClassVar[int]
    COMPRESSION_FIELD_NUMBER: _ClassVar[int]
    CONGESTION_CONTROL_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    CIPHER_FIELD_NUMBER: _ClassVar[int]
    kind: ChannelKind
    ticket: bytes
    expires_at_unix_ms: int
    endpoint: str
    streams: int
    compression: Compression
    congestion_control: str
    key: bytes
    cipher: str
    def __init__(self, kind: _Optional[_Union[ChannelKind, str]] = ..., ticket: _Optional[bytes] = ..., expires_at_unix_ms: _Optional[int] = ..., endpoint: _Optional[str] = ..., streams: _Optional[int] = ..., compression: _Optional[_Union[Compression, str]] = ..., congestion_control: _Optional[str] = ..., key: _Optional[bytes] = ..., cipher: _Optional[str] = ...) -> None: ...

class HyperslabRange(_message.Message):
    __slots__ = ("dimension", "start", "stop", "step")
    DIMENSION_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    dimension: str
    start: int
    stop: int
    step: int
    def __init__(self, dimension: _Optional[str] = ..., start: _Optional[int] = ..., stop: _Optional[int] = ..., step: _Optional[int] = ...) -> None: ...

class QueryResponse(_message.Message):
    __slots__ = ("query_id", "arrow_schema", "scan_rows", "estimated_rows", "estimated_bytes", "offers", "grid", "hyperslab", "sample_seed", "max_rows", "max_bytes", "partitions", "order")
    QUERY_ID_FIELD_NUMBER: _ClassVar[int]
    ARROW_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    SCAN_ROWS_FIELD_NUMBER: _ClassVar[int]
    ESTIMATED_ROWS_FIELD_NUMBER: _ClassVar[int]
    ESTIMATED_BYTES_FIELD_NUMBER: _ClassVar[int]
    OFFERS_FIELD_NUMBER: _ClassVar[int]
    GRID_FIELD_NUMBER: _ClassVar[int]
    HYPERSLAB_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_SEED_FIELD_NUMBER: _ClassVar[int]
    MAX_ROWS_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    ORDER_FIELD_NUMBER: _ClassVar[int]
    query_id: str
    arrow_schema: bytes
    scan_rows: int
    estimated_rows: int
    estimated_bytes: int
    offers: _containers.RepeatedCompositeFieldContainer[ChannelOffer]
    grid: _containers.RepeatedScalarFieldContainer[str]
    hyperslab: _containers.RepeatedCompositeFieldContainer[HyperslabRange]
    sample_seed: int
    max_rows: int
    max_bytes: int
    partitions: _containers.RepeatedCompositeFieldContainer[Partition]
    order: _containers.RepeatedCompositeFieldContainer[OrderKey]
    def __init__(self, query_id: _Optional[str] = ..., arrow_schema: _Optional[bytes] = ..., scan_rows: _Optional[int] = ..., estimated_rows: _Optional[int] = ..., estimated_bytes: _Optional[int] = ..., offers: _Optional[_Iterable[_Union[ChannelOffer, _Mapping]]] = ..., grid: _Optional[_Iterable[str]] = ..., hyperslab: _Optional[_Iterable[_Union[HyperslabRange, _Mapping]]] = ..., sample_seed: _Optional[int] = ..., max_rows: _Optional[int] = ..., max_bytes: _Optional[int] = ..., partitions: _Optional[_Iterable[_Union[Partition, _Mapping]]] = ..., order: _Optional[_Iterable[_Union[OrderKey, _Mapping]]] = ...) -> None: ...

class Partition(_message.Message):
    __slots__ = ("index", "worker", "offer", "rows", "bytes", "hyperslab")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    OFFER_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    HYPERSLAB_FIELD_NUMBER: _ClassVar[int]
    index: int
    worker: str
    offer: ChannelOffer
    rows: int
    bytes: int
    hyperslab: _containers.RepeatedCompositeFieldContainer[HyperslabRange]
    def __init__(self, index: _Optional[int] = ..., worker: _Optional[str] = ..., offer: _Optional[_Union[ChannelOffer, _Mapping]] = ..., rows: _Optional[int] = ..., bytes: _Optional[int] = ..., hyperslab: _Optional[_Iterable[_Union[HyperslabRange, _Mapping]]] = ...) -> None: ...

class OrderKey(_message.Message):
    __slots__ = ("column", "descending", "nulls_first")
    COLUMN_FIELD_NUMBER: _ClassVar[int]
    DESCENDING_FIELD_NUMBER: _ClassVar[int]
    NULLS_FIRST_FIELD_NUMBER: _ClassVar[int]
    column: str
    descending: bool
    nulls_first: bool
    def __init__(self, column: _Optional[str] = ..., descending: _Optional[bool] = ..., nulls_first: _Optional[bool] = ...) -> None: ...

class ResolveRequest(_message.Message):
    __slots__ = ("query_id", "partition")
    QUERY_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    query_id: str
    partition: int
    def __init__(self, query_id: _Optional[str] = ..., partition: _Optional[int] = ...) -> None: ...

class FetchRequest(_message.Message):
    __slots__ = ("ticket", "proof")
    TICKET_FIELD_NUMBER: _ClassVar[int]
    PROOF_FIELD_NUMBER: _ClassVar[int]
    ticket: bytes
    proof: bytes
    def __init__(self, ticket: _Optional[bytes] = ..., proof: _Optional[bytes] = ...) -> None: ...

class FetchSummary(_message.Message):
    __slots__ = ("rows", "bytes", "batches", "truncated", "truncated_reason", "seconds", "hyperslabs_read", "elements_read", "bytes_read")
    ROWS_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_REASON_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    HYPERSLABS_READ_FIELD_NUMBER: _ClassVar[int]
    ELEMENTS_READ_FIELD_NUMBER: _ClassVar[int]
    BYTES_READ_FIELD_NUMBER: _ClassVar[int]
    rows: int
    bytes: int
    batches: int
    truncated: bool
    truncated_reason: str
    seconds: float
    hyperslabs_read: int
    elements_read: int
    bytes_read: int
    def __init__(self, rows: _Optional[int] = ..., bytes: _Optional[int] = ..., batches: _Optional[int] = ..., truncated: _Optional[bool] = ..., truncated_reason: _Optional[str] = ..., seconds: _Optional[float] = ..., hyperslabs_read: _Optional[int] = ..., elements_read: _Optional[int] = ..., bytes_read: _Optional[int] = ...) -> None: ...

class FetchResponse(_message.Message):
    __slots__ = ("ipc_message", "summary", "plan")
    IPC_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    PLAN_FIELD_NUMBER: _ClassVar[int]
    ipc_message: bytes
    summary: FetchSummary
    plan: QueryResponse
    def __init__(self, ipc_message: _Optional[bytes] = ..., summary: _Optional[_Union[FetchSummary, _Mapping]] = ..., plan: _Optional[_Union[QueryResponse, _Mapping]] = ...) -> None: ...

class PingRequest(_message.Message):
    __slots__ = ("payload",)
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    payload: bytes
    def __init__(self, payload: _Optional[bytes] = ...) -> None: ...

class PingResponse(_message.Message):
    __slots__ = ("payload", "server_time_unix_ns")
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    SERVER_TIME_UNIX_NS_FIELD_NUMBER: _ClassVar[int]
    payload: bytes
    server_time_unix_ns: int
    def __init__(self, payload: _Optional[bytes] = ..., server_time_unix_ns: _Optional[int] = ...) -> None: ...

class UsageRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class UsageResponse(_message.Message):
    __slots__ = ("principal", "running", "waiting", "concurrent_limit", "bytes_today", "bytes_per_day", "resets_at_unix_ms")
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    CONCURRENT_LIMIT_FIELD_NUMBER: _ClassVar[int]
    BYTES_TODAY_FIELD_NUMBER: _ClassVar[int]
    BYTES_PER_DAY_FIELD_NUMBER: _ClassVar[int]
    RESETS_AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    principal: str
    running: int
    waiting: int
    concurrent_limit: int
    bytes_today: int
    bytes_per_day: int
    resets_at_unix_ms: int
    def __init__(self, principal: _Optional[str] = ..., running: _Optional[int] = ..., waiting: _Optional[int] = ..., concurrent_limit: _Optional[int] = ..., bytes_today: _Optional[int] = ..., bytes_per_day: _Optional[int] = ..., resets_at_unix_ms: _Optional[int] = ...) -> None: ...

class ByteRange(_message.Message):
    __slots__ = ("offset", "length")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    offset: int
    length: int
    def __init__(self, offset: _Optional[int] = ..., length: _Optional[int] = ...) -> None: ...

class OpenFileRequest(_message.Message):
    __slots__ = ("dataset", "file", "range", "missing", "channels", "streams", "congestion_control", "accept_parts")
    DATASET_FIELD_NUMBER: _ClassVar[int]
    FILE_FIELD_NUMBER: _ClassVar[int]
    RANGE_FIELD_NUMBER: _ClassVar[int]
    MISSING_FIELD_NUMBER: _ClassVar[int]
    CHANNELS_FIELD_NUMBER: _ClassVar[int]
    STREAMS_FIELD_NUMBER: _ClassVar[int]
    CONGESTION_CONTROL_FIELD_NUMBER: _ClassVar[int]
    ACCEPT_PARTS_FIELD_NUMBER: _ClassVar[int]
    dataset: str
    file: str
    range: ByteRange
    missing: _containers.RepeatedCompositeFieldContainer[ByteRange]
    channels: _containers.RepeatedScalarFieldContainer[ChannelKind]
    streams: int
    congestion_control: str
    accept_parts: bool
    def __init__(self, dataset: _Optional[str] = ..., file: _Optional[str] = ..., range: _Optional[_Union[ByteRange, _Mapping]] = ..., missing: _Optional[_Iterable[_Union[ByteRange, _Mapping]]] = ..., channels: _Optional[_Iterable[_Union[ChannelKind, str]]] = ..., streams: _Optional[int] = ..., congestion_control: _Optional[str] = ..., accept_parts: _Optional[bool] = ...) -> None: ...

class OpenFileResponse(_message.Message):
    __slots__ = ("size", "mtime_ns", "range", "crc32c", "block_size", "offers", "parts")
    SIZE_FIELD_NUMBER: _ClassVar[int]
    MTIME_NS_FIELD_NUMBER: _ClassVar[int]
    RANGE_FIELD_NUMBER: _ClassVar[int]
    CRC32C_FIELD_NUMBER: _ClassVar[int]
    BLOCK_SIZE_FIELD_NUMBER: _ClassVar[int]
    OFFERS_FIELD_NUMBER: _ClassVar[int]
    PARTS_FIELD_NUMBER: _ClassVar[int]
    size: int
    mtime_ns: int
    range: ByteRange
    crc32c: int
    block_size: int
    offers: _containers.RepeatedCompositeFieldContainer[ChannelOffer]
    parts: _containers.RepeatedCompositeFieldContainer[FilePart]
    def __init__(self, size: _Optional[int] = ..., mtime_ns: _Optional[int] = ..., range: _Optional[_Union[ByteRange, _Mapping]] = ..., crc32c: _Optional[int] = ..., block_size: _Optional[int] = ..., offers: _Optional[_Iterable[_Union[ChannelOffer, _Mapping]]] = ..., parts: _Optional[_Iterable[_Union[FilePart, _Mapping]]] = ...) -> None: ...

class FilePart(_message.Message):
    __slots__ = ("worker", "ranges", "offer")
    WORKER_FIELD_NUMBER: _ClassVar[int]
    RANGES_FIELD_NUMBER: _ClassVar[int]
    OFFER_FIELD_NUMBER: _ClassVar[int]
    worker: str
    ranges: _containers.RepeatedCompositeFieldContainer[ByteRange]
    offer: ChannelOffer
    def __init__(self, worker: _Optional[str] = ..., ranges: _Optional[_Iterable[_Union[ByteRange, _Mapping]]] = ..., offer: _Optional[_Union[ChannelOffer, _Mapping]] = ...) -> None: ...

class FileChunk(_message.Message):
    __slots__ = ("offset", "data")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    offset: int
    data: bytes
    def __init__(self, offset: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...
