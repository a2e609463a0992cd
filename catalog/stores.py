"""Where a dataset's bytes live: local disk, an S3-compatible object store, or an HTTP(S) server with ranges.

One small contract (:class:`Store`): list the objects under a prefix, say one object's version, read byte
ranges of one version, fetch one version whole. Two implementations: :class:`LocalStore` (a folder) and
:class:`ObjectStore` (``s3://bucket/prefix`` on any S3-compatible endpoint, ``https://host/path``), both
run through one conformance suite (``tests/catalog/test_stores.py``).

:class:`ObjectStore` is built on obstore (the Python binding of the Rust ``object_store`` crate that
DataFusion and Delta readers use): requests are signed and retried with backoff there, ranged GETs carry
``If-Match``, its calls release the GIL (the scan threads fetch in parallel), and one client serves S3 and HTTP.
On the loopback S3 server a 1 MiB ranged read and a listing of 1,000 objects cost about the same as with
fsspec/s3fs (``bench/stores.py`` measures both; figures in ``docs/object-stores.md``).

Stores are configured by the operator (``stores`` setting: endpoint, region, anonymous, the *names* of the
environment variables that hold credentials) and named by descriptors (``<files store="era5"
glob="reanalysis/*.nc"/>``). Nothing a user sees carries a credential or an endpoint with one: a store is
called by its name and its URL as configured (which may hold no user name or password — refused at load),
and every lower-library message is replaced by one of ours (:func:`_failure`).

Every object has a *version*: its ETag, size and last-modified time. A read names the version it expects
and is refused (:class:`~dstp.errors.DataFileError`, "replaced") when the store holds another: ranged
reads send ``If-Match`` and check the answer's ETag, so bytes of two versions are never mixed.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence
from urllib.parse import urlsplit

from dstp.errors import DataFileError, StoreUnavailableError

__all__ = ["LinkMeter", "LocalStore", "ObjectStore", "ObjectVersion", "Store", "StoreConfig", "coalesce",
           "load_store_configs", "open_store", "stores_from"]


@dataclass(frozen=True, slots=True)
class ObjectVersion:
    """One version of one object: its key below the store's prefix, size, ETag and last-modified time (ns)."""

    key: str
    size: int
    etag: str
    mtime_ns: int

    def token(self) -> int:
        """Return a 63-bit number naming this version (the ETag's, else size and time's): the catalog's inode."""
        text = self.etag or f"{self.size}:{self.mtime_ns}"
        return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") >> 1


@dataclass(frozen=True, slots=True)
class StoreConfig:
    """One store as the operator configures it (``stores`` setting); see docs/object-stores.md."""

    name: str
    #: ``s3://bucket/prefix``, ``https://host/path``, ``http://…`` (loopback and tests), or a local folder.
    url: str
    #: S3 endpoint (MinIO, Ceph, GCS interop, a test server); None: AWS.
    endpoint: str | None = None
    region: str | None = None
    #: Public bucket or server: requests are not signed.
    anonymous: bool = False
    #: Names of the environment variables holding the credentials (never the credentials themselves).
    access_key_id_env: str | None = None
    secret_access_key_env: str | None = None
    session_token_env: str | None = None
    #: An AWS profile (``~/.aws/config``, ``~/.aws/credentials``: keys, SSO, assumed roles) read through boto3.
    profile: str | None = None
    #: HTTP(S) stores, which cannot list: a text object below the URL naming one object key per line.
    manifest: str | None = None
    #: Ranged requests in flight at once to this store (all reads together). 64: at 80 ms each request costs a
    #: connection's round trips and slow start, and 16 at once left a year's point series 5 rounds long.
    concurrency: int = 64
    #: Ranges closer than this are fetched as one request (bytes).
    coalesce_bytes: int = 1 << 20
    #: Seconds a listing is reused before the store is listed again (there is no change notification).
    list_s: float = 60.0

    @property
    def scheme(self) -> str:
        return urlsplit(self.url).scheme or "file"

    def where(self) -> str:
        """Return how messages name this store: its name and URL, which never hold a credential."""
        return f"store {self.name!r} ({self.url})"


def load_store_configs(text: str) -> dict[str, StoreConfig]:
    """Return the stores a JSON object ``{"name": {"url": …, …}}`` configures; raise ValueError naming the fault."""
    if not text.strip():
        return {}
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"stores: not JSON ({exc.msg} at line {exc.lineno})") from exc
    if not isinstance(raw, dict):
        raise ValueError("stores: expected a JSON object of store name → settings")
    known = set(StoreConfig.__dataclass_fields__) - {"name"}
    out = {}
    for name, entry in raw.items():
        if not isinstance(entry, dict) or "url" not in entry:
            raise ValueError(f"stores: {name!r} needs at least a \"url\"")
        unknown = set(entry) - known
        if unknown:
            raise ValueError(f"stores: {name!r} has unknown setting(s) {sorted(unknown)}; known: {sorted(known)}")
        parts = urlsplit(str(entry["url"]))
        if parts.username or parts.password or parts.query:
            raise ValueError(f"stores: the url of {name!r} may not hold a user, password or query; name the "
                             "environment variables that hold credentials instead (access_key_id_env, …)")
        out[name] = StoreConfig(name=name, **entry)
    return out


#: Bytes a scan's read-ahead keeps in flight to a store before its path is measured, and at least: a request of
#: 512 KiB for each of the store's default ``concurrency`` (64). Smaller, the first rounds were the window's, not
#: the path's: a year of ERA5-like chunks at 80 ms took 3.8 s from an 8 MiB start, 2.3 s from 32 MiB.
WINDOW_FLOOR = 32 * 2**20


class LinkMeter:
    """The path to one store as its GETs measured it: latency, how long a GET takes, the rate delivered.

    ``latency_s`` is the least time from sending a GET to its first byte (the minimum, as BBR takes it: queueing
    only adds); ``get_s`` how long GETs take from sent to last byte, lately (a moving average: their round trips
    and TCP's slow start — what a byte asked for waits); ``rate_Bps`` the most bytes per second the store
    delivered while GETs were in flight, all together (they share the path): the bytes since it last had none in
    flight over the time since, once that is at least two latencies.
    :meth:`window` is what a read-ahead keeps in flight: twice rate × delay, the bandwidth-delay product with room
    to grow. The rate measured is capped by the window that measured it (Little's law: in flight = rate × time in
    flight), so each busy round lets the next keep twice as much in flight, as TCP's slow start does, until the
    path — not the window — sets the rate; then the window stays at twice what the path carries.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self.latency_s: float | None = None
        self.get_s: float | None = None
        self.rate_Bps = 0.0
        self._in_flight = 0
        self._busy_since = 0.0
        self._busy_bytes = 0

    def started(self) -> float:
        """Note a GET sent; return its start time (for :meth:`first_byte` and :meth:`done`)."""
        now = self._clock()
        with self._lock:
            if self._in_flight == 0:
                self._busy_since, self._busy_bytes = now, 0
            self._in_flight += 1
        return now

    def first_byte(self, started: float) -> None:
        """Note that the answer of the GET sent at ``started`` began to arrive."""
        waited = self._clock() - started
        with self._lock:
            self.latency_s = waited if self.latency_s is None else min(self.latency_s, waited)

    def done(self, started: float, nbytes: int) -> None:
        """Note that the GET sent at ``started`` ended (``nbytes`` delivered; 0 if it failed)."""
        now = self._clock()
        with self._lock:
            self._in_flight -= 1
            if nbytes:
                took = now - started
                self.get_s = took if self.get_s is None else 0.8 * self.get_s + 0.2 * took
            self._busy_bytes += nbytes
            span = now - self._busy_since
            if self.latency_s is not None and span > 0 and span >= 2 * self.latency_s:
                self.rate_Bps = max(self.rate_Bps, self._busy_bytes / span)

    def window(self) -> int:
        """Return the bytes a read-ahead keeps in flight: 2 × rate × time a GET takes, at least
        :data:`WINDOW_FLOOR`."""
        with self._lock:
            if self.get_s is None:
                return WINDOW_FLOOR
            return max(WINDOW_FLOOR, int(2 * self.get_s * self.rate_Bps))


class Store(Protocol):
    """Where the objects of one configured store are read from."""

    config: StoreConfig
    #: The path's latency and rate, measured from the GETs (a read-ahead sizes what it keeps in flight by it).
    link: LinkMeter

    def list_objects(self, pattern: str) -> list[ObjectVersion]:
        """Return the objects whose key matches the glob ``pattern`` (``**`` crosses folders), by key."""

    def list_zarr(self, pattern: str) -> list[ObjectVersion]:
        """Return the Zarr stores (folders of objects) whose key matches ``pattern``, each as one version."""

    def zarr_group(self, key: str) -> Any:
        """Return the Zarr group at ``key``, opened read-only with zarr-python."""

    def head(self, key: str) -> ObjectVersion:
        """Return the version ``key`` has now; raise DataFileError when it is gone."""

    def read_ranges(self, version: ObjectVersion, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """Return the bytes [start, end) of each range of that version; raise DataFileError if it was replaced."""

    def fetch(self, version: ObjectVersion, dest: Path) -> None:
        """Write that version whole to ``dest``; raise DataFileError if it was replaced."""


@dataclass(slots=True)
class StoreStats:
    """Requests and bytes a store answered, for the benchmarks and the tests (GETs on a warm start: none)."""

    lists: int = 0
    heads: int = 0
    gets: int = 0
    bytes: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, *, lists: int = 0, heads: int = 0, gets: int = 0, nbytes: int = 0) -> None:
        with self.lock:
            self.lists += lists
            self.heads += heads
            self.gets += gets
            self.bytes += nbytes


def _matcher(pattern: str) -> re.Pattern[str]:
    """Return a regex for a glob whose ``*`` and ``?`` stay within a folder and ``**/`` crosses folders."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[":
            j = pattern.find("]", i + 1)
            if j < 0:
                out.append(re.escape(pattern[i]))
                i += 1
            else:
                out.append(fnmatch.translate(pattern[i:j + 1])[4:-3])
                i = j + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def _literal_prefix(pattern: str) -> str:
    """Return the folder part of ``pattern`` before its first wildcard (what a listing can start from)."""
    cut = min([i for i in (pattern.find(c) for c in "*?[") if i >= 0], default=len(pattern))
    head = pattern[:cut]
    return head[:head.rfind("/") + 1]


def zarr_versions(objects: Iterable[ObjectVersion], pattern: str) -> list[ObjectVersion]:
    """Return one version per Zarr store among ``objects``: a folder whose name matches ``pattern`` (which ends in
    ``.zarr``). Its size is the sum of its objects', its ETag a digest of every object's key and ETag — any chunk
    rewritten makes a new version — and its time the latest."""
    match = _matcher(pattern)
    depth = pattern.count("/") + 1 if "**" not in pattern else None
    groups: dict[str, list[ObjectVersion]] = {}
    for obj in objects:
        parts = obj.key.split("/")
        for n in ([depth] if depth is not None else range(1, len(parts))):
            root = "/".join(parts[:n])
            if n < len(parts) and match.match(root):
                groups.setdefault(root, []).append(obj)
                break
    out = []
    for root, members in sorted(groups.items()):
        if not any(m.key.rsplit("/", 1)[-1] in ("zarr.json", ".zgroup") and m.key.count("/") == root.count("/") + 1
                   for m in members):
            continue  # no group metadata at its top: not a Zarr group
        digest = hashlib.sha256("\n".join(f"{m.key}\0{m.etag}" for m in sorted(members, key=lambda m: m.key))
                                .encode()).hexdigest()
        out.append(ObjectVersion(root, sum(m.size for m in members), digest, max(m.mtime_ns for m in members)))
    return out


#: Most bytes of gaps one read fetches, as a share of the bytes it needs (issue 36: fetched ≤ 1.25 × needed).
WASTE = 0.25


def coalesce(ranges: Sequence[tuple[int, int]], gap: int, at_most: int | None = None,
             waste: float | None = None) -> list[tuple[int, int]]:
    """Return ``ranges`` merged where they touch or lie less than ``gap`` bytes apart, in order.

    Ranges that touch or overlap are always one. With ``waste``, ranges apart are merged the closest first (never
    across more than ``gap``) while the gaps' bytes stay within ``waste`` × the bytes the ranges need: fewer
    requests, and never more than that share of bytes nobody asked for. Without it, with ``at_most`` (the requests
    one read may have in flight), ranges apart are merged only while there are more than ``at_most``; with
    neither, every gap up to ``gap`` is merged."""
    merged: list[list[int]] = []
    for start, end in sorted(ranges):
        if merged and start - merged[-1][1] <= 0:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    budget = float("inf") if waste is None else waste * sum(e - s for s, e in merged)
    count, spent, join = len(merged), 0, set()
    for g, i in sorted((merged[i + 1][0] - merged[i][1], i) for i in range(len(merged) - 1)):
        if g > gap or spent + g > budget or (waste is None and at_most is not None and count <= max(1, at_most)):
            break
        join.add(i)
        spent += g
        count -= 1
    out: list[list[int]] = []
    for i, span in enumerate(merged):
        if i > 0 and i - 1 in join:
            out[-1][1] = max(out[-1][1], span[1])
        else:
            out.append(list(span))
    return [(s, e) for s, e in out]


class LocalStore:
    """A folder on this machine as a store (the conformance suite's reference, and ``file://`` stores)."""

    def __init__(self, config: StoreConfig) -> None:
        self.config = config
        self.root = Path(urlsplit(config.url).path if config.url.startswith("file:") else config.url)
        self.stats = StoreStats()
        self.link = LinkMeter()  # never measured: a disk's reads are not a path's round trips

    def _version(self, key: str, st: os.stat_result) -> ObjectVersion:
        return ObjectVersion(key, st.st_size, f"{st.st_ino:x}-{st.st_size:x}-{st.st_mtime_ns:x}", st.st_mtime_ns)

    def list_objects(self, pattern: str) -> list[ObjectVersion]:
        match = _matcher(pattern)
        base = self.root / _literal_prefix(pattern)
        self.stats.add(lists=1)
        out = []
        for folder, _, names in os.walk(base):
            for name in names:
                full = Path(folder, name)
                key = full.relative_to(self.root).as_posix()
                if match.match(key):
                    out.append(self._version(key, full.stat()))
        return sorted(out, key=lambda v: v.key)

    def list_zarr(self, pattern: str) -> list[ObjectVersion]:
        """Return the Zarr stores whose folder matches ``pattern`` (:func:`zarr_versions`)."""
        base = self.root / _literal_prefix(pattern)
        found = [self._version(Path(folder, n).relative_to(self.root).as_posix(), Path(folder, n).stat())
                 for folder, _, names in os.walk(base) for n in names]
        return zarr_versions(found, pattern)

    def zarr_group(self, key: str) -> Any:
        import zarr
        import zarr.storage

        return zarr.open_group(zarr.storage.LocalStore(self.root, read_only=True), path=key, mode="r")

    def head(self, key: str) -> ObjectVersion:
        self.stats.add(heads=1)
        try:
            return self._version(key, (self.root / key).stat())
        except FileNotFoundError as exc:
            raise DataFileError(f"{key} is no longer in {self.config.where()}") from exc

    def read_ranges(self, version: ObjectVersion, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        with open(self.root / version.key, "rb") as f:
            if self._version(version.key, os.fstat(f.fileno())) != version:
                raise _replaced(self.config, version.key)
            out = []
            for start, end in ranges:
                f.seek(start)
                out.append(f.read(end - start))
        self.stats.add(gets=len(ranges), nbytes=sum(len(b) for b in out))
        return out

    def fetch(self, version: ObjectVersion, dest: Path) -> None:
        (data,) = self.read_ranges(version, [(0, version.size)])
        dest.write_bytes(data)


def _replaced(config: StoreConfig, key: str) -> DataFileError:
    return DataFileError(f"{key} in {config.where()} was replaced after the catalog published it; this version is "
                         "not served — the catalog publishes the new one at its next listing (or `dstp catalog "
                         "reload`); run the query again then")


def _failure(config: StoreConfig, key: str, exc: BaseException) -> DataFileError:
    """Return the error a user sees for a failed request: the store's name and our words, never the library's
    message (which may quote a signed URL or a header)."""
    kind = type(exc).__name__
    if kind in ("NotFoundError", "FileNotFoundError"):
        return DataFileError(f"{key or 'the listing'} is no longer in {config.where()}")
    if kind == "PreconditionError":
        return _replaced(config, key)
    text = str(exc)
    status = re.search(r"status(?: code)?[:=]?\s*(\d{3})\b", text)
    if kind in ("PermissionDeniedError", "UnauthenticatedError") or (status and status.group(1) in ("401", "403")):
        why, advice = "refused access (HTTP 403)", "check its credentials and the bucket's policy in the server's settings"
    elif status is not None:
        why, advice = f"answered HTTP {status.group(1)} after retries", "try again later"
    else:
        why, advice = "cannot be reached", "connection refused, timed out or failed; check its endpoint"
    what = f" reading {key}" if key else " listing its objects"
    return StoreUnavailableError(f"{config.where()} {why}{what} ({advice}); the other datasets are served as usual")


def _secret(config: StoreConfig, env: str | None) -> str | None:
    if env is None:
        return None
    value = os.environ.get(env)
    if value is None:
        raise ValueError(f"stores: {config.name!r} names the environment variable {env}, which is not set")
    return value


def _profile(config: StoreConfig) -> Any:
    """Return a credential provider for an AWS profile (refreshed before expiry: SSO and assumed roles)."""
    try:
        import boto3
        from obstore.auth.boto3 import Boto3CredentialProvider
    except ImportError as exc:
        raise ValueError(f"stores: {config.name!r} names an AWS profile; that needs boto3 installed") from exc
    try:
        return Boto3CredentialProvider(boto3.Session(profile_name=config.profile))
    except Exception as exc:  # noqa: BLE001 - botocore's ProfileNotFound and friends
        raise ValueError(f"stores: {config.name!r}: AWS profile {config.profile!r} cannot be used "
                         f"({type(exc).__name__})") from None


class ObjectStore:
    """An S3-compatible bucket or an HTTP(S) server, read through obstore."""

    def __init__(self, config: StoreConfig) -> None:
        from obstore.store import HTTPStore, S3Store

        self.config = config
        self.stats = StoreStats()
        self.link = LinkMeter()
        parts = urlsplit(config.url)
        options: Any = {"allow_http": True} if (config.endpoint or config.url).startswith("http:") else {}
        self.prefix = parts.path.strip("/")
        self._inner: Any
        if parts.scheme == "s3":
            kwargs: dict[str, Any] = {"client_options": options, "retry_config": _RETRY}
            if config.endpoint:
                kwargs["endpoint"] = config.endpoint
            if config.region:
                kwargs["region"] = config.region
            if config.anonymous:
                kwargs["skip_signature"] = True
            if config.profile is not None:
                kwargs["credential_provider"] = _profile(config)
            for key, env in (("access_key_id", config.access_key_id_env),
                             ("secret_access_key", config.secret_access_key_env),
                             ("session_token", config.session_token_env)):
                value = _secret(config, env)
                if value is not None:
                    kwargs[key] = value
            self._inner = S3Store(parts.netloc, prefix=self.prefix or None, **kwargs)
            self._listable = True
        elif parts.scheme in ("http", "https"):
            self._inner = HTTPStore.from_url(config.url.rstrip("/") + "/", client_options=options,
                                             retry_config=_RETRY)
            self._listable = False
        else:
            raise ValueError(f"stores: {config.name!r} has url scheme {parts.scheme!r}; use s3://, https:// or a "
                             "local folder")
        self._pool = ThreadPoolExecutor(max(1, config.concurrency), thread_name_prefix=f"dstp-store-{config.name}")

    @staticmethod
    def _version(key: str, meta: Mapping[str, Any]) -> ObjectVersion:
        modified = meta.get("last_modified")
        ns = int(modified.timestamp() * 1e9) if isinstance(modified, datetime) else 0
        return ObjectVersion(key, int(meta["size"]), str(meta.get("e_tag") or "").strip('"'), ns)

    def list_objects(self, pattern: str) -> list[ObjectVersion]:
        import obstore

        match = _matcher(pattern)
        if not self._listable:
            return self._manifest(pattern, match)
        start = _literal_prefix(pattern)
        try:
            found = []
            for batch in obstore.list(self._inner, start.rstrip("/") or None, chunk_size=1000):
                self.stats.add(lists=1)
                found += [self._version(meta["path"], meta) for meta in batch if match.match(meta["path"])]
        except Exception as exc:  # noqa: BLE001 - obstore raises its own tree and builtins; all become ours
            raise _failure(self.config, "", exc) from None
        return sorted(found, key=lambda v: v.key)

    def list_zarr(self, pattern: str) -> list[ObjectVersion]:
        """Return the Zarr stores whose folder matches ``pattern`` (:func:`zarr_versions`); S3 stores only."""
        if not self._listable:
            raise DataFileError(f"{self.config.where()} cannot list objects, and a Zarr store is many: publish Zarr "
                                "from an S3-compatible store")
        import obstore

        start = _literal_prefix(pattern)
        try:
            found = []
            for batch in obstore.list(self._inner, start.rstrip("/") or None, chunk_size=1000):
                self.stats.add(lists=1)
                found += [self._version(meta["path"], meta) for meta in batch]
        except Exception as exc:  # noqa: BLE001
            raise _failure(self.config, "", exc) from None
        return zarr_versions(found, pattern)

    def zarr_group(self, key: str) -> Any:
        import zarr
        import zarr.storage

        return zarr.open_group(zarr.storage.ObjectStore(self._inner, read_only=True), path=key, mode="r")

    def _manifest(self, pattern: str, match: re.Pattern[str]) -> list[ObjectVersion]:
        """List an HTTP(S) store: the keys its manifest names (or the pattern itself, if it names one object)."""
        if self.config.manifest is None:
            if any(c in pattern for c in "*?["):
                raise DataFileError(f"{self.config.where()} cannot list objects: configure its \"manifest\" (a text "
                                    f"object naming one key per line) to publish {pattern!r}")
            keys = [pattern]
        else:
            text = self._get(self.config.manifest, None).decode("utf-8", "replace")
            keys = sorted({k.strip() for k in text.splitlines() if k.strip() and match.match(k.strip())})
        return list(self._pool.map(self.head, keys))

    def head(self, key: str) -> ObjectVersion:
        import obstore

        self.stats.add(heads=1)
        try:
            return self._version(key, obstore.head(self._inner, key))
        except Exception as exc:  # noqa: BLE001
            raise _failure(self.config, key, exc) from None

    def _get(self, key: str, version: ObjectVersion | None, span: tuple[int, int] | None = None) -> bytes:
        import obstore

        options: Any = {}
        if span is not None:
            options["range"] = span
        if version is not None and version.etag and self._listable:
            options["if_match"] = f'"{version.etag}"'
        started, data = self.link.started(), b""
        try:
            result = obstore.get(self._inner, key, options=options)  # returns once the answer's head arrived
            self.link.first_byte(started)
            if version is not None:
                seen = self._version(key, result.meta)
                if (seen.etag and version.etag and seen.etag != version.etag) or seen.size != version.size:
                    raise _replaced(self.config, key)
            data = bytes(result.bytes())
        except DataFileError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise _failure(self.config, key, exc) from None
        finally:
            self.link.done(started, len(data))
        self.stats.add(gets=1, nbytes=len(data))
        return data

    def _gap(self) -> int:
        """Return the widest gap worth fetching to save a request: what the path carries in one latency (a request
        costs about that), at least 64 KiB and at most ``coalesce_bytes``; ``coalesce_bytes`` until measured."""
        link = self.link
        if link.latency_s is None or not link.rate_Bps:
            return self.config.coalesce_bytes
        return min(self.config.coalesce_bytes, max(64 * 2**10, int(link.latency_s * link.rate_Bps)))

    def read_ranges(self, version: ObjectVersion, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        spans = coalesce([r for r in ranges if r[1] > r[0]], self._gap(), waste=WASTE)  # an empty range: no request
        fetched = dict(zip(spans, self._pool.map(lambda s: self._get(version.key, version, s), spans)))
        out = []
        for start, end in ranges:
            if end <= start:
                out.append(b"")
                continue
            for (s, e), data in fetched.items():
                if s <= start and end <= e:
                    piece = data[start - s:end - s]
                    if len(piece) != end - start:
                        raise DataFileError(f"{version.key} in {self.config.where()} ends at byte {s + len(data)}, "
                                            f"inside a range its index names ({start}–{end})")
                    out.append(piece)
                    break
        return out

    def fetch(self, version: ObjectVersion, dest: Path) -> None:
        data = self._get(version.key, version)
        if len(data) != version.size:
            raise DataFileError(f"{version.key} in {self.config.where()} came short: {len(data)} of {version.size} "
                                "bytes")
        dest.write_bytes(data)

    def close(self) -> None:
        self._pool.shutdown(wait=False)


def _retry_config() -> dict[str, Any]:
    from datetime import timedelta

    return {"max_retries": 3, "retry_timeout": timedelta(seconds=20),
            "backoff": {"init_backoff": timedelta(milliseconds=100), "max_backoff": timedelta(seconds=5), "base": 2}}


_RETRY: Any = _retry_config()


def open_store(config: StoreConfig) -> Store:
    """Return the store ``config`` describes."""
    if config.scheme == "file" or "://" not in config.url:
        return LocalStore(config)
    return ObjectStore(config)


def stores_from(configs: Iterable[StoreConfig]) -> dict[str, Store]:
    """Return each configured store, opened, by name."""
    return {c.name: open_store(c) for c in configs}
