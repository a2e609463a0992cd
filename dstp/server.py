"""Server assembly: catalog + service + gRPC control plane + data channels.

``DstpServer(settings).start()`` scans the catalog (reporting, never failing
on, broken datasets), binds the gRPC port and every enabled data channel, and
returns once all of them accept connections. ``stop()`` cancels running
queries and closes everything. The CLI's ``dstp serve`` and the test fixtures
use the same class.

A server that cannot do its job refuses to start, in one line and before it
logs anything: a catalog root that is not a folder raises CatalogError, a
port another process holds raises OSError naming the address. A start that
fails half-way stops what it had started.

Trust is assembled here too (docs/security-auth.md): one
:class:`~dstp.auth.Authenticator` (API tokens, OIDC, the anonymous rule)
for the gRPC interceptor and the HTTP middleware; with ``tls_cert``/``tls_key``
(or ``tls_self_signed``) gRPC and HTTP speak TLS and the data channels seal
their transfers (AES-256-GCM, keyed per ticket over the TLS control plane).
"""

from __future__ import annotations

import errno
import logging
import socket
import threading
import time
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import grpc
import platformdirs

from dstp.auth import Authenticator
from dstp.auth.tls import TlsMaterial, default_names, load_tls, self_signed
from dstp.catalog.index import index_path
from dstp.catalog.live import CatalogWatch
from dstp.catalog.objects import ObjectFiles
from dstp.catalog.registry import Catalog
from dstp.catalog.remote import RemoteSource
from dstp.catalog.stores import load_store_configs, stores_from
from dstp.connections import Warden, door_connection_cap, raise_descriptor_limit
from dstp.errors import CatalogError
from dstp.grpc_app import AuthInterceptor, DstpServicer, add_to_server
from dstp.log_limits import limit_repeated_logs
from dstp.query.execute import warm_up
from dstp.service import ChannelInfo, DstpService, Executor, LocalExecutor
from dstp.service.audit import close_audit_file, open_audit_file
from dstp.settings import Settings
from dstp.transport.server.channel_server import DataChannelServer
from dstp.transport.wire.frames import CIPHERS
from dstp.transport.server.listeners import TcpListener
from dstp.transport.wire.tcp import allowed_congestion_controls

__all__ = ["DstpServer", "catalog_index_file", "default_catalog_root", "scan_catalog", "tls_material"]

log = logging.getLogger("dstp.server")


def default_catalog_root(progress=None) -> Path:  # type: ignore[no-untyped-def]
    """Return the folder of the small samples, generating them on first use."""
    from dstp.samples import ensure_samples

    cache = Path(platformdirs.user_cache_dir("dstp"))
    return ensure_samples(cache, "small", progress)


def catalog_index_file(settings: Settings, root: Path) -> Path | None:
    """Return the catalog index file of ``root`` under ``state_dir`` (None: catalog_index is off)."""
    if not settings.catalog_index:
        return None
    state = settings.state_dir if settings.state_dir is not None else \
        Path(platformdirs.user_state_dir("dstp")) / "catalogs"
    return index_path(state, root)


def scan_catalog(settings: Settings, root: Path, *, clock: Callable[[], float] = time.time,
                 timer: Callable[[], float] = time.monotonic, remote_source: RemoteSource | None = None) -> Catalog:
    """Return the catalog of ``root`` as ``settings`` say (its index, header-reading processes, settling);
    ``remote_source`` is how queries reach the datasets of other servers (None: listed, refused when used)."""
    import os

    processes = settings.catalog_build_processes or os.cpu_count() or 1
    return Catalog.scan(root, open_files=settings.open_files, chunk_cache_bytes=settings.chunk_cache_bytes,
                        direct_chunks=settings.direct_chunks, index=catalog_index_file(settings, root),
                        processes=processes, settle_s=settings.catalog_settle_s, clock=timer, wall=clock,
                        decoded_chunk_cache_bytes=settings.decoded_chunk_cache_bytes,
                        objects=object_files(settings, timer), remote_source=remote_source,
                        store_reads=settings.store_header_reads)


def object_files(settings: Settings, clock: Callable[[], float] = time.monotonic) -> ObjectFiles | None:
    """Return the object stores ``settings.stores`` configures, with their cache in the state folder (None: no
    stores). Raises ValueError naming what is wrong in the configuration (never a credential)."""
    text = settings.stores.strip()
    if not text:
        return None
    if not text.startswith("{"):
        try:
            text = Path(text).expanduser().read_text(encoding="utf-8")
        except OSError as exc:
            raise ValueError(f"stores: cannot read {settings.stores}: {exc.strerror or exc}") from exc
    configs = load_store_configs(text)
    state = settings.state_dir if settings.state_dir is not None else Path(platformdirs.user_state_dir("dstp"))
    return ObjectFiles(stores_from(configs.values()), state / "objects", settings.store_cache_bytes, clock=clock)


def tls_material(settings: Settings) -> TlsMaterial | None:
    """Return the certificate and key the server speaks TLS with, or None for plaintext.

    ``tls_cert``/``tls_key`` are loaded (ValueError naming what is wrong);
    ``tls_self_signed`` makes (or reuses) a development certificate in the
    cache folder for ``host``, localhost and 127.0.0.1.
    """
    if settings.tls_cert is not None or settings.tls_key is not None:
        if settings.tls_cert is None or settings.tls_key is None:
            raise ValueError("TLS needs both a certificate and its key: --tls-cert and --tls-key "
                             "(DSTP_TLS_CERT, DSTP_TLS_KEY)")
        return load_tls(settings.tls_cert, settings.tls_key)
    if settings.tls_self_signed:
        return self_signed(Path(platformdirs.user_cache_dir("dstp")) / "tls", default_names(settings.host))
    return None


@dataclass
class Endpoints:
    """Where a started server listens."""

    grpc: str
    http: str = ""
    data: str = ""
    udt: str = ""
    #: The Arrow Flight endpoint (``host:port``), "" when off (flight_port -1).
    flight: str = ""
    #: SHA-256 fingerprint of the TLS certificate; "" when the server speaks plaintext.
    tls: str = ""


class DstpServer:
    """A running dstp server (use as a context manager, or start()/stop()).

    ``clock`` (wall-clock seconds) is what tickets, tokens, sessions and
    embargoes are measured by, in the service and on the data channels;
    ``timer`` (monotonic seconds) is what the HTTP connection deadlines are
    measured by, so a step of the wall clock never cuts a connection. Tests
    pass either one they can advance.
    """

    def __init__(self, settings: Settings, catalog: Catalog | None = None, *,
                 clock: Callable[[], float] = time.time, timer: Callable[[], float] = time.monotonic,
                 cluster: str = "", local_cluster: int = 0) -> None:
        self.settings = settings
        #: Scale-out (docs/scale-out.md): a Dask scheduler's address, or how many local workers to start.
        self.cluster, self.local_cluster = cluster, local_cluster
        #: The dstp.cluster Coordinator when scaled out, else None.
        self.coordinator: Any = None
        self.catalog = catalog
        self.clock, self.timer = clock, timer
        self.service: DstpService | None = None
        self.endpoints: Endpoints | None = None
        #: Turns each request's credential into a Principal (built at start, from the catalog's policies).
        self.authenticator: Authenticator | None = None
        #: The certificate the server speaks TLS with (None: plaintext).
        self.tls: TlsMaterial | None = None
        self._grpc: grpc.Server | None = None
        self._grpc_warden: Warden | None = None
        #: The process's open-file limit once raised at start, and the connection cap of gRPC and Flight.
        self.descriptor_limit = 0
        self.door_cap = 0
        self._stopped = threading.Event()
        self._extras: list = []  # data channels and the HTTP server, each with stop()
        self._undo: list[Callable[[], None]] = []  # logging set up at start, undone at stop
        #: What keeps the catalog current (None until started, or for a catalog that is not scanned).
        self.watch: CatalogWatch | None = None
        #: What POSTs each change to the webhook_urls (None without any).
        self.webhooks: Any = None

    def start(self) -> Endpoints:
        """Start every listener; return their addresses.

        Raises CatalogError if the catalog root is not a folder, OSError (naming the address) if a
        port is taken; either way nothing is left running.
        """
        s = self.settings
        root: Path | None = None
        if self.catalog is None:
            root = Path(s.catalog_root or default_catalog_root(lambda m: log.info("%s", m)))
            _check_catalog_root(root)
        for what, port, option in (("gRPC", s.port, "--port"), ("HTTP", s.http_port, "--http-port"),
                                   ("the striped data channel", s.data_port, "--data-port")):
            _check_port_free(s.host, port, what, option)
        self.tls = tls_material(s)
        try:
            if root is not None:
                # Datasets of other dstp servers (<remote> descriptors, also ones published later) are reached
                # with the dstp client.
                from dstp.federation import ClientRemoteSource, load_remote_credentials

                remote_source = ClientRemoteSource(load_remote_credentials(s.remote_credentials))
                self._undo.append(remote_source.close)
                self.catalog = scan_catalog(s, root, clock=self.clock, timer=self.timer, remote_source=remote_source)
            return self._start()
        except BaseException:
            self.stop(grace=0)
            raise

    def _start(self) -> Endpoints:
        s, catalog = self.settings, self.catalog
        assert catalog is not None
        for problem in catalog.problems:
            log.warning("not published: %s", problem)
        log.info("catalog %s: %d datasets published, %d skipped", catalog.root, len(catalog),
                 len(catalog.problems))
        log.info("files: %s", catalog.handles.describe())
        if catalog.handles.chunks is not None:
            catalog.handles.chunks.start()
        if catalog.index is not None:  # a scanned catalog: kept current while served (docs/archive.md)
            self.watch = CatalogWatch(catalog, watch=s.catalog_watch, poll_s=s.catalog_poll_s,
                                      rescan_s=s.catalog_rescan_s, clock=self.timer).start()
            self._undo.append(self.watch.stop)
        self.authenticator = Authenticator.from_settings(s, (ds.descriptor for ds in catalog), self.clock)
        executor: Executor = LocalExecutor()
        if self.cluster or self.local_cluster:  # dask lives in dstp/cluster/ only
            from dstp.cluster.coordinator import Coordinator

            settings = s if s.catalog_root is not None else s.replace(catalog_root=catalog.root)
            self.coordinator = executor = Coordinator(settings, address=self.cluster, local_workers=self.local_cluster,
                                                      sealed=self.tls is not None, clock=self.clock).start()
            self._undo.append(self.coordinator.stop)
        # Every collaborator through the constructor: nothing is attached to the service afterwards.
        self.service = DstpService(catalog, s, clock=self.clock, revalidate=self.authenticator.revalidate,
                                   executor=executor)
        if s.webhook_urls:  # every change POSTed to the operator's URLs (dstp/webhooks.py)
            from dstp.webhooks import Webhooks

            self.webhooks = Webhooks(self.service.feed, s.webhook_urls, queue=s.webhook_queue,
                                     retries=s.webhook_retries, retry_s=s.webhook_retry_s,
                                     timeout_s=s.webhook_timeout_s).start()
            self._undo.append(self.webhooks.stop)
        # Limits of the process (SECURITY.md): the audit log's own file, repeated errors rate-limited.
        self._undo.append(limit_repeated_logs())
        if s.audit_log:
            handler = open_audit_file(s.audit_log)
            self._undo.append(lambda: close_audit_file(handler))
        if not self.authenticator.allow_anonymous:
            log.info("requests need a token (allow_anonymous=%s); tokens: %s%s", s.allow_anonymous,
                     self.authenticator.tokens.path if self.authenticator.tokens else "none",
                     f", OIDC issuer {s.oidc_issuer}" if s.oidc_issuer else "")
        warm_up(s)
        self.descriptor_limit = raise_descriptor_limit()
        self.door_cap = door_connection_cap(s.max_connections, self.descriptor_limit)
        self._grpc_warden = door_warden("gRPC", s, self.door_cap, idle_s=0.0)  # gRPC times idle ones out itself
        log.info("open files: limit %d; each of gRPC and Flight holds at most %d connections, %d per address",
                 self.descriptor_limit, self.door_cap, door_per_address_cap(s, self.door_cap))
        self._grpc = grpc.server(
            futures.ThreadPoolExecutor(max_workers=s.grpc_workers, thread_name_prefix="dstp-grpc"),
            options=grpc_options(s, self.door_cap),
            maximum_concurrent_rpcs=grpc_concurrent_rpcs(s),
            interceptors=[AuthInterceptor(self.authenticator, self._grpc_warden)],
        )
        add_to_server(DstpServicer(self.service), self._grpc)
        try:
            if self.tls is not None:
                credentials = grpc.ssl_server_credentials([(self.tls.key_pem, self.tls.cert_pem)])
                port = self._grpc.add_secure_port(f"{s.host}:{s.port}", credentials)
            else:
                port = self._grpc.add_insecure_port(f"{s.host}:{s.port}")
        except RuntimeError:  # taken between the check and now; grpc says only "Failed to bind"
            port = 0
        if port == 0:
            raise OSError(_listen_message(s.host, s.port, "gRPC", "--port", errno.EADDRINUSE))
        self._grpc.start()
        self._grpc_warden.port = port
        self._grpc_warden.start()
        self._undo.append(self._grpc_warden.stop)
        self.endpoints = Endpoints(grpc=f"{s.host}:{port}", tls=self.tls.fingerprint if self.tls else "")
        self.service.register_channel(ChannelInfo("grpc", self.endpoints.grpc))
        self._start_extras()
        log.info("dstp serving gRPC on %s", self.endpoints.grpc)
        return self.endpoints

    def _start_extras(self) -> None:
        """Start the HTTP interface and the data channels that are enabled (port -1 disables one)."""
        s, service, endpoints = self.settings, self.service, self.endpoints
        assert service is not None and endpoints is not None and self.authenticator is not None
        # Sealed transfers when the control plane (which hands out their keys) is encrypted.
        cipher = CIPHERS[0] if self.tls is not None else ""
        if s.http_port >= 0:
            from dstp.http.app import start_http_server

            http = start_http_server(service, s, authenticator=self.authenticator, tls=self.tls, clock=self.clock,
                                     timer=self.timer)
            self._extras.append(http)
            endpoints.http = http.endpoint
        if s.data_port >= 0:
            channel = DataChannelServer(
                "striped", TcpListener(s.host, s.data_port), service.open_source,
                window_bytes=s.window_bytes, clock=self.clock, timer=self.timer, sealed=bool(cipher),
                hello_timeout=s.hello_timeout_s, max_pending_per_address=s.max_pending_per_address,
                idle_timeout=s.data_idle_timeout_s, max_idle_connections=s.max_idle_data_connections,
                max_idle_per_address=s.max_idle_data_connections_per_address,
                max_connections=s.data_max_connections, max_pending=s.data_max_pending,
            )
            channel.start()
            self._extras.append(channel)
            endpoints.data = channel.endpoint
            service.register_channel(ChannelInfo(
                "striped", channel.endpoint, max_streams=s.max_streams,
                congestion_controls=allowed_congestion_controls(), cipher=cipher,
            ))
        if s.udt_port >= 0:
            from dstp.transport.server import udt_listener
            from dstp.transport.wire import udt

            if not udt.available():
                log.warning("UDT channel not offered: %s", udt.unavailable_reason())
            else:
                channel = DataChannelServer(
                    "udt", udt_listener.UdtChannelListener(s.host, s.udt_port), service.open_source,
                    window_bytes=s.window_bytes, clock=self.clock, timer=self.timer, sealed=bool(cipher),
                    hello_timeout=s.hello_timeout_s, max_pending_per_address=s.max_pending_per_address,
                    idle_timeout=s.data_idle_timeout_s, max_idle_connections=s.max_idle_data_connections,
                    max_idle_per_address=s.max_idle_data_connections_per_address,
                    max_connections=s.data_max_connections, max_pending=s.data_max_pending,
                )
                channel.start()
                self._extras.append(channel)
                endpoints.udt = channel.endpoint
                service.register_channel(ChannelInfo("udt", channel.endpoint, cipher=cipher))
        if s.flight_port >= 0:
            from dstp.flight import start_flight_server

            warden = door_warden("Flight", s, self.door_cap, idle_s=s.connection_idle_timeout_s)
            flight = start_flight_server(service, s.host, s.flight_port, authenticate=self.authenticator.authenticate,
                                         tls=self.tls, warden=warden)
            self._extras.append(flight)
            endpoints.flight = flight.endpoint
            # Known to the service (not a data channel: no tickets are offered on it) so pages can link to it.
            service.register_channel(ChannelInfo("flight", flight.endpoint))

    def stop(self, grace: float = 2.0) -> None:
        """Stop accepting, cancel running queries, close files (also after a failed start)."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        if self.service is not None:
            self.service.cancel_all()
        # Every door stops at once, each on its own thread: one that takes long to drain (a Flight call whose
        # reader stopped reading) must not leave the others answering meanwhile (HTTP answered for 80 s after a
        # SIGTERM while Flight drained).
        done = self._grpc.stop(grace) if self._grpc is not None else None
        stoppers = [threading.Thread(target=_stop_quietly, args=(extra,), name=f"dstp-stop-{i}", daemon=True)
                    for i, extra in enumerate(reversed(self._extras))]
        for t in stoppers:
            t.start()
        for t in stoppers:
            t.join(grace + 15)
            if t.is_alive():
                log.warning("a door did not stop within %g s; going on", grace + 15)
        if done is not None:
            done.wait()
        if self.service is not None:
            self.service.close()
        if self.watch is not None:
            self.watch.stop()  # no refresh of a catalog being closed
        if self.catalog is not None:
            self.catalog.close()
        while self._undo:
            self._undo.pop()()

    def reload(self) -> None:
        """Look at the catalog again now and publish what changed (SIGHUP; safe from a signal handler)."""
        if self.watch is not None:
            self.watch.reload()

    def wait(self) -> None:
        """Block until the server stops."""
        if self._grpc is not None:
            self._grpc.wait_for_termination()

    def __enter__(self) -> "DstpServer":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _stop_quietly(extra: Any) -> None:
    try:
        extra.stop()
    except Exception:  # noqa: BLE001 - keep stopping the rest
        log.exception("error while stopping %r", extra)


def grpc_options(s: Settings, cap: int) -> list[tuple[str, Any]]:
    """Return the gRPC server's channel arguments: message sizes, and the connection limits of SECURITY.md."""
    return [
        ("grpc.max_send_message_length", s.grpc_max_message_bytes),
        ("grpc.max_receive_message_length", s.grpc_max_message_bytes),
        ("grpc.so_reuseport", 0),
        # The door's total: a connection over it is closed as it is accepted (the per-address cap: door_warden).
        ("grpc.max_allowed_incoming_connections", cap),
        # A connection without a call for this long gets a GOAWAY (an idle preface-and-SETTINGS flood ends).
        ("grpc.max_connection_idle_ms", int(s.connection_idle_timeout_s * 1000)),
        # The TLS handshake and the HTTP/2 preface must be done by then.
        ("grpc.server_handshake_timeout_ms", int(s.handshake_timeout_s * 1000)),
        # Keepalive enforcement, gRPC's defaults written out: a client pinging more often than every 5 min without
        # a call is sent a GOAWAY after 2 strikes. No max_connection_age: a long Fetch stream must not be cut.
        ("grpc.http2.min_ping_interval_without_data_ms", 300_000),
        ("grpc.http2.max_ping_strikes", 2),
    ]


def grpc_concurrent_rpcs(s: Settings) -> int:
    """Return gRPC's cap on calls at once: room for every slot, every waiter of the admission queue and every
    worker's other call, so a query is queued by admission (max_waiting, admission_wait_s), never refused
    before it ("Concurrent RPC limit exceeded" took 37 % of 64 clients' calls at grpc_workers x 4)."""
    return max(s.grpc_workers * 4, s.max_concurrent_queries + s.max_waiting + s.grpc_workers)


def door_warden(name: str, s: Settings, cap: int, *, idle_s: float) -> Warden:
    """Return the warden of a door whose server has no per-address cap (gRPC, Flight; dstp/connections.py).

    It keeps the door below its total by a margin, so a flood from many addresses, trimmed from the
    addresses holding the most, leaves room for a new client's connection.
    """
    per_address = door_per_address_cap(s, cap)
    margin = max(1, min(cap // 8, per_address))
    return Warden(name, 0, max_connections=max(1, cap - margin), max_per_address=per_address, idle_s=idle_s)


def door_per_address_cap(s: Settings, cap: int) -> int:
    """Return the connections one address may hold on a door of ``cap``: max_connections_per_address, and at
    most an eighth of the cap (a server with few descriptors must not fill from two addresses)."""
    return max(1, min(s.max_connections_per_address, max(4, cap // 8)))


def _check_catalog_root(root: Path) -> None:
    """Raise CatalogError unless ``root`` is a folder a catalog can be read from."""
    if root.is_dir():
        return
    what = "it is a file, not a folder" if root.exists() else "no such folder"
    raise CatalogError(f"cannot serve {root}: {what}; give the folder that holds the datasets "
                       "and their *.dstp.xml descriptors")


def _listen_message(host: str, port: int, what: str, option: str, code: int | None) -> str:
    """Return the one line that says a port is taken (or forbidden), and what to do."""
    where = f"{host}:{port}" + ("" if what == "gRPC" else f" ({what})")
    if code == errno.EACCES:
        return f"cannot listen on {where}: permission denied (ports below 1024 need privileges; use {option})"
    return f"cannot listen on {where}: address already in use (is another dstp server running? use {option})"


def _check_port_free(host: str, port: int, what: str, option: str) -> None:
    """Raise OSError if another process listens on ``host``:``port`` (0 and -1: nothing to check).

    gRPC reports a taken port only as a native log line and a RuntimeError, so
    the port is tried first with a socket bound the way gRPC binds it.
    """
    if port <= 0:
        return
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise OSError(f"cannot listen on {host}:{port}: {exc.strerror} (check --host)") from exc
    for family, kind, proto, _, address in addresses:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
            except OSError as exc:
                if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                    raise OSError(_listen_message(host, port, what, option, exc.errno)) from exc
