"""The one typed settings object for a dstp server.

Every knob has a default and help text here, and nowhere else. Each can be
overridden from the environment as ``DSTP_<NAME>`` (upper case), and the CLI
overrides both. ``docs/settings.md`` lists them all; a test keeps it complete.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

__all__ = ["Settings", "describe_settings"]

ENV_PREFIX = "DSTP_"


def _setting(default: Any, help: str) -> Any:
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True, slots=True)
class Settings:
    """Server configuration; see ``describe_settings()`` for the help of each field."""

    catalog_root: Path | None = _setting(
        None, "Directory scanned for dataset descriptors (*.dstp.xml). None serves the bundled samples."
    )
    host: str = _setting("127.0.0.1", "Address the gRPC control plane and the data channels listen on.")
    port: int = _setting(50051, "gRPC control-plane port (0 picks a free port).")
    http_port: int = _setting(8080, "HTTP port for the browser catalog and the HTTP API (0 picks a free port, -1 disables it).")
    data_port: int = _setting(0, "TCP port of the striped data channel (0 picks a free port, -1 disables it).")
    udt_port: int = _setting(0, "UDP port of the UDT data channel (0 picks a free port, -1 disables it).")
    flight_port: int = _setting(
        -1, "TCP port of the Arrow Flight (and Flight SQL) endpoint (0 picks a free port, -1, the default, "
        "disables it); docs/flight.md."
    )
    query_time_limit_s: float = _setting(600.0, "Longest a query may run, from Query to the last byte, in seconds.")
    max_result_rows: int = _setting(200_000_000, "Rows after which a result is cut off and flagged truncated.")
    max_result_bytes: int = _setting(16 * 2**30, "Arrow bytes after which a result is cut off and flagged truncated.")
    max_concurrent_queries: int = _setting(8, "Queries executing at once; more are refused with RESOURCE_EXHAUSTED.")
    batch_rows: int = _setting(131_072, "Target grid points per record batch read from netCDF.")
    plain_projections: bool = _setting(
        True, "Stream a query that only picks columns (SELECT a, b AS c FROM ds [LIMIT n]) from the scan "
        "without DuckDB; false: DuckDB runs every query."
    )
    scan_threads: int = _setting(1, "Blocks of one scan read and decoded at once on threads, ahead of DuckDB (1: none ahead; more pays only with idle cores).")
    ticket_ttl_s: float = _setting(300.0, "Seconds a data ticket stays valid after Query.")
    duckdb_threads: int = _setting(2, "DuckDB worker threads, shared by all queries.")
    duckdb_memory_limit: str = _setting("1GB", "DuckDB memory limit, shared by all queries (DuckDB size syntax).")
    spill_dir: Path | None = _setting(
        None, "Folder where DuckDB spills a group-by, join or sort that outgrows duckdb_memory_limit "
        "(None: 'spill' in the user's cache folder); each server process uses a folder of its own inside it."
    )
    spill_max_bytes: int = _setting(
        16 * 2**30, "Most bytes DuckDB may spill at once, all queries together; 0 never spills (a query that "
        "outgrows duckdb_memory_limit then fails with RESOURCE_EXHAUSTED)."
    )
    state_dir: Path | None = _setting(
        None, "Folder of the server's state: the catalog index, one SQLite file per catalog root (None: "
        "'catalogs' in the user's state folder, platformdirs, e.g. ~/.local/state/dstp/catalogs); docs/archive.md."
    )
    catalog_index: bool = _setting(
        True, "Keep a catalog index in state_dir, so a restart on an unchanged archive reads no data file and a "
        "change re-reads only the files that changed; false: every start reads every file's header."
    )
    catalog_watch: bool = _setting(
        True, "Watch the catalog folder for changes (inotify, through watchfiles) and publish new, replaced, grown, "
        "removed and renamed files and edited descriptors while serving; without it (or where it fails: network "
        "file systems) the catalog is rescanned every catalog_poll_s."
    )
    catalog_poll_s: float = _setting(
        2.0, "Seconds between stat-only rescans of the catalog when no file watch runs; 0: never (changes are then "
        "published only on SIGHUP or `dstp catalog reload`)."
    )
    catalog_rescan_s: float = _setting(
        300.0, "Seconds between stat-only rescans beside a running file watch (a watch can lose events: an "
        "overflowing inotify queue); 0: never."
    )
    catalog_settle_s: float = _setting(
        1.0, "Seconds a new or changed file must keep its size and times (two looks at least this far apart) "
        "before it is published: a file still being written is held back, never served half."
    )
    webhook_urls: tuple[str, ...] = _setting(
        (), "URLs (http or https) POSTed a JSON body for every change of the catalog (docs/archive.md, webhooks): "
        "which dataset, files, columns and time range, with versions. Only changes of datasets a client without a "
        "token may read are sent. Comma-separated in DSTP_WEBHOOK_URLS."
    )
    webhook_queue: int = _setting(
        1_000, "Changes waiting to be sent, per webhook URL; past this the oldest are dropped (logged, and the next "
        "body says how many were dropped: read GET /changes to catch up)."
    )
    webhook_retries: int = _setting(5, "Times a webhook POST is tried again after a failure (no answer, or not 2xx).")
    webhook_retry_s: float = _setting(
        2.0, "Seconds before the first retry of a failed webhook POST; doubled at each further retry."
    )
    webhook_timeout_s: float = _setting(10.0, "Seconds a webhook receiver has to answer a POST.")
    catalog_build_processes: int = _setting(
        0, "Processes that read file headers in parallel when many files are new (a cold index build); 0: one per "
        "core; 1: in the server process only."
    )
    stores: str = _setting(
        "", "Object stores that descriptors may name (<files store=\"era5\" glob=…/>): a JSON object, or the path "
        "of a file holding one, of store name → {url (s3://bucket/prefix or https://host/path), endpoint, region, "
        "anonymous, access_key_id_env, secret_access_key_env, session_token_env (names of environment variables "
        "holding the credentials, never the credentials), profile (an AWS profile, through boto3), manifest (HTTPS: a "
        "text object listing the keys), "
        "concurrency, coalesce_bytes, list_s}; docs/object-stores.md. Users never see these settings."
    )
    store_header_reads: int = _setting(
        4, "Store objects whose headers a look of the catalog fetches at once (a cold open of a store dataset reads "
        "each new object's header by ranged GETs; one after another, 12 objects 80 ms away took ~5 s). Each one in "
        "flight has an h5py helper process of its own (started for the look: more than a few cost more CPU than they "
        "save on 2 cores). 1: one after another."
    )
    store_cache_bytes: int = _setting(
        8 * 2**30, "Most bytes of whole object copies kept in state_dir/objects: a store's file is fetched whole "
        "once per version to read its header and chunk index (kept in the catalog index), and where its layout "
        "cannot be read by ranges (netCDF-3, other filters); least recently used copies are deleted first."
    )
    store_read_ahead_bytes: int = _setting(
        128 * 2**20, "Most bytes of decoded chunks one scan of files in an object store reads ahead of the block it is "
        "on (0: none): the next blocks' chunks are fetched while one is decoded, as many compressed bytes in flight "
        "as the store's measured latency × rate (docs/object-stores.md, Read-ahead)."
    )
    open_files: int = _setting(32, "netCDF files kept open in the handle cache (one cache for all datasets).")
    chunk_cache_bytes: int = _setting(
        8 * 2**20, "HDF5 chunk cache per open variable (netCDF-C's 64 MiB default would hold gigabytes on long scans)."
    )
    direct_chunks: bool = _setting(
        True, "Read deflate/shuffle-compressed netCDF-4 chunks outside the netCDF lock (dstp.catalog.chunks): "
        "the scan inflates them in parallel, without netCDF-C; the chunks are listed by h5py in a helper process "
        "the server starts (and that ends with it; one that does not answer within 30 s is killed and that read "
        "goes through netCDF-C). false: every read through netCDF-C under its lock."
    )
    decoded_chunk_cache_bytes: int = _setting(
        -1, "Bytes of decoded (inflated) netCDF-4 chunks kept for the next read and the next query, all datasets "
        "together (with direct_chunks). -1: 1/16 of the memory the server may use (the machine's, or its "
        "cgroup's limit), at least 64 MiB and at most 8 GiB. A full scan larger than this keeps what the cache "
        "holds rather than cycling it out (dstp.catalog.chunks)."
    )
    grpc_workers: int = _setting(16, "Threads serving gRPC calls.")
    grpc_max_message_bytes: int = _setting(64 * 2**20, "Largest gRPC message accepted or sent.")
    max_streams: int = _setting(64, "Most parallel TCP streams one transfer may use on the striped channel.")
    window_bytes: int = _setting(
        64 * 2**20, "Bytes a data-channel transfer may have sent but not yet acknowledged (bounds server memory)."
    )
    block_bytes: int = _setting(4 * 2**20, "Block size of bulk file transfers on data channels.")
    cluster_file_min_bytes: int = _setting(
        16 * 2**20, "Smallest download a scale-out coordinator hands to its workers in shares (smaller ones it "
        "sends itself); docs/scale-out.md."
    )
    cluster_reduce_fan_in: int = _setting(
        8, "Pieces of a reduction merged per task on the workers (a tree, as Dask's tree reduction) until "
        "at most this many reach the scale-out coordinator; 0: the coordinator combines every piece."
    )
    max_sql_length: int = _setting(16_384, "Longest query text accepted, in characters.")
    cors_origins: tuple[str, ...] = _setting((), "Origins allowed by CORS on the HTTP API (empty: same origin only).")
    # -- limits that hold (SECURITY.md) --
    admission_wait_s: float = _setting(
        5.0, "Longest a query or download waits for a slot when all are taken (a fair queue per principal); "
        "then RESOURCE_EXHAUSTED with a retry-after."
    )
    max_waiting: int = _setting(64, "Requests that may wait for a slot at once; more are refused at once.")
    quota_concurrent_queries: int = _setting(
        -1, "Slots one principal may hold at once (a token; anonymous requests count as one principal per source "
        "address); -1: half of max_concurrent_queries, rounded up, so no one principal can hold every slot; "
        "0: max_concurrent_queries."
    )
    quota_bytes_per_day: int = _setting(
        0, "Bytes one principal may fetch per UTC day (query results and files); 0: no quota. Counted in "
        "memory, from the server's start."
    )
    stall_timeout_s: float = _setting(
        60.0, "Seconds a result may wait on a reader that takes nothing (gRPC stream, striped, UDT, HTTP) "
        "before it is stopped and its slot given back."
    )
    hello_timeout_s: float = _setting(10.0, "Seconds a data connection has to deliver its whole HELLO.")
    max_pending_per_address: int = _setting(
        16, "Data connections one source address may hold before their HELLO completes; at the limit its "
        "oldest is dropped."
    )
    data_idle_timeout_s: float = _setting(
        120.0, "Seconds a kept data connection (a client's warm stripe between transfers) may wait for its next "
        "HELLO before the server closes it."
    )
    max_idle_data_connections: int = _setting(
        256, "Kept data connections waiting for their next transfer, per data channel; past it the oldest idle "
        "one is closed. 0: close every data connection when its transfer ends."
    )
    max_idle_data_connections_per_address: int = _setting(
        64, "Kept data connections one source address may hold per data channel; past it that address's oldest "
        "idle one is closed."
    )
    max_connections: int = _setting(
        0, "Connections the gRPC door, and the Flight door, each hold at once (gRPC closes one over it as it is "
        "accepted). 0: an eighth of the process's open-file limit (raised to its hard limit at start), at most 4,096, "
        "so no door can take the descriptors of the others and of the files."
    )
    max_connections_per_address: int = _setting(
        64, "Connections one source address may hold on the gRPC, Flight and HTTP doors, each (gRPC and Flight: at "
        "most an eighth of max_connections too): over it, that address's newest idle ones are closed (gRPC, Flight: "
        "within a scan, 0.1 s) or its oldest waiting for a request (HTTP)."
    )
    connection_idle_timeout_s: float = _setting(
        300.0, "Seconds a gRPC or Flight connection may stay open with no call in flight and no byte sent either "
        "way before the server closes it (clients reconnect on their next call)."
    )
    handshake_timeout_s: float = _setting(
        10.0, "Seconds a new gRPC connection has for its TLS handshake and HTTP/2 preface."
    )
    data_max_connections: int = _setting(
        512, "Data connections one data channel (striped, UDT) serves at once that presented a valid ticket; "
        "connections still sending their HELLO are counted apart (data_max_pending), so a flood of them never "
        "takes these."
    )
    data_max_pending: int = _setting(
        256, "Data connections one data channel holds before their HELLO is complete (read by one thread, not one "
        "each); at the limit the oldest of the address holding the most is closed."
    )
    http_header_timeout_s: float = _setting(10.0, "Seconds an HTTP client has to send a request's headers.")
    http_body_timeout_s: float = _setting(30.0, "Seconds an HTTP client has to send a request's body.")
    http_max_body_bytes: int = _setting(
        256 * 2**10, "Largest HTTP request body accepted (POST /query); checked before it is read."
    )
    http_max_connections: int = _setting(
        256, "HTTP connections open at once; at the limit the oldest one still sending its request is dropped "
        "(and requests beyond it get 503)."
    )
    allowed_hosts: tuple[str, ...] = _setting(
        (), "Host header values the HTTP server answers (name or name:port; * for any). Empty: the loopback "
        "names when it listens on loopback, any otherwise — set it on a network (DNS rebinding)."
    )
    nc_max_result_bytes: int = _setting(
        64 * 2**20, "Largest result (Arrow bytes) format=nc assembles in memory; larger ones are refused with a "
        "hint to use Parquet or Arrow."
    )
    map_cache_bytes: int = _setting(
        256 * 2**20, "Memory for maps (tiles, WMS, the map page): half for slices read (values and their "
        "latitudes/longitudes), half for PNGs drawn, each keyed by the dataset's version and dropped least "
        "recently used first (docs/maps.md)."
    )
    audit_log: str = _setting(
        "", "File the audit log (one JSON line per query and download) is appended to; empty: the dstp.audit "
        "logger only, which goes to the server log."
    )
    remote_credentials: Path | None = _setting(
        None, "JSON file of the credentials this server presents to other dstp servers, by name "
        '({"b_reader": {"token": "dstp_…", "tls": true, "ca_file": "b.pem"}}; mode 600): a <remote '
        'credential="b_reader"> dataset is read with that one. None, or a <remote> naming none: the other server '
        "is asked anonymously (never with this process's $DSTP_TOKEN)."
    )
    # -- identity and TLS (docs/security-auth.md) --
    auth_failures_per_minute: int = _setting(
        30, "Failed authentications (a wrong, revoked or expired token) one source address may make per minute; "
        "past it, that address's credentials are refused unread (RESOURCE_EXHAUSTED / HTTP 429 with a retry-after) "
        "until the minute ends. Each failure is logged with its address. 0: no limit."
    )
    allow_anonymous: str = _setting(
        "auto", "Serve requests that carry no token: auto (only while every published dataset is plainly public: "
        "no restricted, registered or embargoed one), true, or false."
    )
    token_store: Path | None = _setting(
        None, "File of the API tokens `dstp token` manages (SHA-256 hashes, never the secrets). None: tokens.json "
        "in the per-user data folder (platformdirs, e.g. ~/.local/share/dstp/tokens.json)."
    )
    oidc_issuer: str = _setting(
        "", "Accept OIDC/JWT bearer tokens from this issuer (its `iss`, e.g. https://login.example.org/realms/x); "
        "empty: API tokens only."
    )
    oidc_audience: str = _setting("", "The `aud` a JWT must carry (empty: the audience is not checked).")
    oidc_jwks_url: str = _setting(
        "", "Where the issuer's signing keys are (JWKS); empty: the jwks_uri of the issuer's "
        "/.well-known/openid-configuration."
    )
    oidc_user_claim: str = _setting("sub", "JWT claim naming the user.")
    oidc_groups_claim: str = _setting("groups", "JWT claim listing the user's groups (a list, or space-separated text).")
    session_ttl_s: float = _setting(
        8 * 3600.0, "Seconds a browser login (the /login cookie) lasts; the token is checked again on every request."
    )
    tls_cert: Path | None = _setting(
        None, "PEM certificate (chain) for TLS on gRPC and HTTP; data channels are then sealed with AES-256-GCM."
    )
    tls_key: Path | None = _setting(None, "PEM private key of tls_cert.")
    tls_self_signed: bool = _setting(
        False, "Development TLS: generate (or reuse) a self-signed certificate for host, localhost and 127.0.0.1 "
        "in the cache folder and print its SHA-256 fingerprint."
    )

    @property
    def tls(self) -> bool:
        """Whether the control plane runs TLS (and the data channels are sealed)."""
        return self.tls_self_signed or self.tls_cert is not None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> "Settings":
        """Return settings from defaults, then ``DSTP_*`` variables, then ``overrides``."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = env.get(ENV_PREFIX + f.name.upper())
            if raw is not None and raw != "":
                values[f.name] = _coerce(f, raw)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    def replace(self, **changes: Any) -> "Settings":
        """Return a copy with ``changes`` applied."""
        return dataclasses.replace(self, **changes)


#: Settings that name a file or folder (their default is None, so the type cannot be told from it).
_PATHS = {"catalog_root", "token_store", "tls_cert", "tls_key", "spill_dir", "state_dir", "remote_credentials"}


def _coerce(f: dataclasses.Field[Any], raw: str) -> Any:
    default = f.default
    try:
        if f.name in _PATHS:
            return Path(raw)
        if isinstance(default, bool):
            return raw.lower() in {"1", "true", "yes", "on"}
        if isinstance(default, int):
            return int(raw)
        if isinstance(default, float):
            return float(raw)
        if isinstance(default, tuple):
            return tuple(part.strip() for part in raw.split(",") if part.strip())
        return raw
    except ValueError as exc:
        raise ValueError(f"{ENV_PREFIX}{f.name.upper()}={raw!r}: expected {type(default).__name__}") from exc


def describe_settings() -> list[tuple[str, str, Any, str]]:
    """Return (name, environment variable, default, help) for every setting."""
    return [
        (f.name, ENV_PREFIX + f.name.upper(), f.default, f.metadata["help"])
        for f in fields(Settings)
    ]


def settings_markdown() -> str:
    """Return docs/settings.md: every setting, its variable, default and help."""
    lines = [
        "# Server settings",
        "",
        "Every setting has a default, can be set in the environment as `DSTP_<NAME>`, and some have a",
        "`dstp serve` flag (flags win over the environment). The source of truth is `dstp/settings.py`;",
        "regenerate this page with `python -m dstp.settings > docs/settings.md`",
        "(`tests/test_settings_docs.py` fails when a setting is missing here). At start the server logs how it",
        "reads files as in effect (`files: …`: the chunk reader or netCDF-C, open files, chunk cache). A crash",
        "inside a native library (netCDF-C, HDF5, DuckDB, Arrow) prints every thread's Python stack to the log",
        "(`Fatal Python error: …`) before the process ends (every `dstp` command and cluster worker): include it",
        "in a bug report.",
        "",
        "| setting | environment | default | meaning |",
        "|---|---|---|---|",
    ]
    for name, env, default, help in describe_settings():
        if default is None:
            shown = "(samples)" if name == "catalog_root" else "(none)"
        elif default == ():
            shown = "(none)"
        elif isinstance(default, bool):
            shown = "true" if default else "false"  # as written in the environment
        elif isinstance(default, int):
            shown = f"{default:,}"
        else:
            shown = str(default)
        lines.append(f"| {name} | `{env}` | {shown} | {help} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(settings_markdown(), end="")
