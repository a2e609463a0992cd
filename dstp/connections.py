"""Connections of the doors: the process's descriptor limit, and caps per source address where a door has none.

Every door holds a connection cap, a cap per source address and an idle or
handshake timeout (SECURITY.md, "Connections"). HTTP (``dstp/http/limits.py``)
and the data channels (``transport/server/channel_server.py``) enforce theirs where
they accept. gRPC's core has a total cap (``grpc.max_allowed_incoming_connections``:
a connection over it is closed as it is accepted), an idle timeout and a
handshake timeout, but nothing per address; Arrow Flight exposes none of these
from Python. :class:`Warden` fills the gap without standing in the data path:
it looks at the process's own sockets on a door's port (``/proc/self/fd`` and
``/proc/self/net/tcp*``, Linux) a few times a second and shuts down, from the
oldest idle first, the connections of an address over its cap, the
connections beyond the door's total, and (for a door that has no idle timeout
of its own) those idle past the timeout. A connection with a call in flight
(``Warden.calls``, counted by the door's handlers per peer) is never touched.
Shutting a socket down makes the door's own poller see it close; the
descriptor is the door's to release.

:func:`raise_descriptor_limit` raises the soft ``RLIMIT_NOFILE`` to the hard
limit at start, and :func:`door_connection_cap` sizes a door's total from it,
so no door can take the descriptors the others and the files need.
"""

from __future__ import annotations

import collections
import logging
import os
import socket
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

__all__ = ["Warden", "door_connection_cap", "door_connections", "peer_address", "raise_descriptor_limit"]

log = logging.getLogger("dstp.server")

#: Of the descriptor limit, the share one door may hold, and the most any door holds.
DOOR_SHARE, DOOR_MAX = 8, 4096


def peer_address(peer: str) -> str:
    """Return the address in a gRPC peer (``ipv4:127.0.0.1:5000``, ``ipv6:[::1]:5000``, ``ipv6:%5B::1%5D:5000``)."""
    kind, _, rest = peer.partition(":")
    if kind not in ("ipv4", "ipv6"):
        return peer
    rest = rest.replace("%5B", "[").replace("%5D", "]")
    if rest.startswith("["):
        return rest[1:rest.find("]")]
    return rest.rsplit(":", 1)[0]


def raise_descriptor_limit() -> int:
    """Raise the soft limit of open files to the hard limit where the OS allows; return the soft limit now."""
    try:
        import resource
    except ImportError:  # not POSIX
        return 0
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open-file limit from %d to %d: %s", soft, target, exc)
    return int(soft) if soft != resource.RLIM_INFINITY else 1 << 20


def door_connection_cap(configured: int, descriptor_limit: int) -> int:
    """Return a door's connection cap: ``configured``, or (0) a share of the descriptor limit."""
    if configured > 0:
        return configured
    if descriptor_limit <= 0:
        return DOOR_MAX
    return max(16, min(DOOR_MAX, descriptor_limit // DOOR_SHARE))


# -- the warden ---------------------------------------------------------------------------------------

#: TCP_INFO: ``tcpi_last_data_recv`` and ``tcpi_last_data_sent`` (milliseconds), at their offsets in struct tcp_info.
_TCP_INFO_BYTES = 104
_LAST_DATA_SENT, _LAST_DATA_RECV = struct.Struct("=I"), struct.Struct("=I")
_LAST_DATA_SENT_AT, _LAST_DATA_RECV_AT = 44, 52
_ESTABLISHED = "01"
#: How soon the warden looks again after it had to close connections (seconds).
FLOODED_INTERVAL_S = 0.02
#: A connection that sent or received a byte this recently (ms) is at work, call or not.
ACTIVE_MS = 1000.0


@dataclass(frozen=True, slots=True)
class _Connection:
    inode: int
    address: str
    port: int


def _hex_address(raw: str) -> tuple[str, int]:
    """Return (address, port) of a /proc/net/tcp field (``0100007F:1F90``; IPv6 in four little-endian words)."""
    host, port = raw.split(":")
    data = bytes.fromhex(host)
    if len(data) == 4:
        return socket.inet_ntop(socket.AF_INET, data[::-1]), int(port, 16)
    words = b"".join(data[i:i + 4][::-1] for i in range(0, 16, 4))
    address = socket.inet_ntop(socket.AF_INET6, words)
    if address.startswith("::ffff:") and "." in address:
        address = address[7:]
    return address, int(port, 16)


def _connections_on(port: int, tables: Iterable[Path]) -> list[_Connection]:
    """Return the established connections whose local port is ``port``, from /proc/net/tcp tables."""
    found = []
    suffix = f":{port:04X}"
    for table in tables:
        try:
            lines = table.read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            head = line.split(None, 4)  # sl, local, remote, st, rest: most lines end here (a flood's are many)
            if len(head) < 5 or head[3] != _ESTABLISHED or not head[1].endswith(suffix):
                continue
            fields = line.split()
            if len(fields) < 10 or fields[9] == "0":  # inode 0: still in the kernel's accept queue
                continue
            remote = _hex_address(fields[2])
            found.append(_Connection(int(fields[9]), remote[0], remote[1]))
    return found


def door_connections(port: int) -> list[tuple[str, int]]:
    """Return (address, port) of each accepted connection on local ``port`` in this network namespace."""
    return [(c.address, c.port) for c in _connections_on(port, [Path("/proc/self/net/tcp"),
                                                                Path("/proc/self/net/tcp6")])]


def _descriptor_count() -> int:
    """Return how many descriptors the process holds (an upper bound on any door's connections)."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 1 << 30  # unknown: look at the table


def _socket_descriptors() -> dict[int, int]:
    """Return socket inode -> descriptor of this process."""
    found = {}
    fds = Path("/proc/self/fd")
    try:
        names = os.listdir(fds)
    except OSError:
        return {}
    for name in names:
        try:
            target = os.readlink(fds / name)
        except OSError:
            continue
        if target.startswith("socket:["):
            found[int(target[8:-1])] = int(name)
    return found


class Warden:
    """Keeps one door's connections within a total, a cap per address and (optionally) an idle timeout.

    ``port`` is the door's listening port. ``calls`` counts the calls in flight per peer (``address:port``
    as the door reports it, see :meth:`call`); such a connection is busy and never shut down. ``idle_s`` 0
    leaves idleness to the door. ``timer`` gives monotonic seconds (the scan's pace is real time).
    """

    def __init__(self, name: str, port: int, *, max_connections: int, max_per_address: int, idle_s: float = 0.0,
                 interval_s: float = 0.1, timer: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self.port = port
        self.max_connections = max_connections
        self.max_per_address = max_per_address
        self.idle_s = idle_s
        self.interval_s = interval_s
        self.timer = timer
        self._lock = threading.Lock()
        self.calls: collections.Counter[tuple[str, int]] = collections.Counter()
        self._called: set[tuple[str, int]] = set()  # connections that carried a call, while they are open
        self._first_seen: dict[int, float] = {}  # inode -> when a scan first saw it
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: Connections shut down: over an address's cap, over the total, idle.
        self.over_address = 0
        self.over_total = 0
        self.idle_closed = 0
        #: How many scans have run (a test waits for scans instead of sleeping).
        self.scans = 0
        self.available = Path("/proc/self/net/tcp").exists()

    def call(self, peer: str) -> "_Call":
        """Return a context manager counting a call of ``peer`` (a gRPC peer string) while it runs."""
        return _Call(self, _peer_key(peer))

    def start(self) -> "Warden":
        if not self.available:
            log.warning("%s: no per-address connection cap on this OS (it needs Linux's /proc)", self.name)
            return self
        self._thread = threading.Thread(target=self._run, name=f"dstp-warden-{self.name}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)

    def _run(self) -> None:
        wait = self.interval_s
        last_full = self.timer()
        while not self._stop.wait(wait):
            # While the process holds no more descriptors than one address may, no cap can be exceeded: skip
            # reading the TCP table (the whole namespace's, a few MB on a busy host) until the count says so,
            # or until an idle timeout is due a look.
            if _descriptor_count() <= min(self.max_per_address, self.max_connections) and \
                    (self.idle_s <= 0 or self.timer() - last_full < self.idle_s / 4):
                continue
            last_full = self.timer()
            try:
                closed = self.scan()
            except Exception:  # noqa: BLE001 - the door goes on; the log says why the cap did not act
                log.exception("%s: connection scan failed", self.name)
                closed = 0
            # Under a flood that reopens what is closed, look again soon: the door's total fills between scans.
            wait = FLOODED_INTERVAL_S if closed else self.interval_s

    def scan(self) -> int:
        """Look at the door's connections once and shut down those over a cap or idle; return how many."""
        self.scans += 1
        connections = _connections_on(self.port, [Path("/proc/self/net/tcp"), Path("/proc/self/net/tcp6")])
        now = self.timer()
        self._first_seen = {c.inode: self._first_seen.get(c.inode, now) for c in connections}
        by_address = collections.Counter(c.address for c in connections)
        crowded = any(n > self.max_per_address for n in by_address.values()) \
            or len(connections) > self.max_connections
        with self._lock:
            busy = {key for key, n in self.calls.items() if n > 0}
            self._called &= {(c.address, c.port) for c in connections}
            called = set(self._called)
        if not crowded and self.idle_s <= 0:
            return 0
        descriptors = _socket_descriptors()
        # Spare: a connection that never carried a call (the flood's kind: a preface and nothing) goes first,
        # the newest first; then those whose calls ended and that moved no byte lately (a Flight stream outlives
        # its handler's call), the longest idle first. A connection with a call in flight is never spare.
        idle_ms = {c.inode: _idle_ms(descriptors.get(c.inode), c.inode) for c in connections
                   if (c.address, c.port) in called and (c.address, c.port) not in busy}
        never = [c for c in connections if (c.address, c.port) not in called]
        never.sort(key=lambda c: (-self._first_seen[c.inode], -c.inode))
        quiet = [c for c in connections if idle_ms.get(c.inode, 0.0) >= ACTIVE_MS]
        quiet.sort(key=lambda c: -idle_ms[c.inode])
        spare = never + quiet
        doomed: dict[int, str] = {}
        over = {a: n - self.max_per_address for a, n in by_address.items() if n > self.max_per_address}
        for c in spare:
            if over.get(c.address, 0) > 0:
                over[c.address] -= 1
                doomed[c.inode] = "address"
        excess = len(connections) - len(doomed) - self.max_connections
        if excess > 0:  # then the spare ones of the addresses holding the most
            rest = [c for c in spare if c.inode not in doomed]
            rest.sort(key=lambda c: -by_address[c.address])  # stable: keeps the order of spare among equals
            for c in rest[:excess]:
                doomed[c.inode] = "total"
        if self.idle_s > 0:
            for c in spare:
                if c.inode not in doomed and now - self._first_seen[c.inode] > self.idle_s \
                        and idle_ms.get(c.inode, self.idle_s * 1000 + 1) > self.idle_s * 1000:
                    doomed[c.inode] = "idle"
        closed = collections.Counter(why for inode, why in doomed.items()
                                     if _shut_down(descriptors.get(inode), inode))
        self.over_address += closed["address"]
        self.over_total += closed["total"]
        self.idle_closed += closed["idle"]
        if closed:
            log.info("%s: closed %d connections over an address's cap of %d, %d over the total of %d, %d idle "
                     "past %g s", self.name, closed["address"], self.max_per_address, closed["total"],
                     self.max_connections, closed["idle"], self.idle_s)
        return sum(closed.values())


    def shut_all(self) -> int:
        """Shut down every connection of the door (a server stopping whose calls would not end); return how many."""
        connections = _connections_on(self.port, [Path("/proc/self/net/tcp"), Path("/proc/self/net/tcp6")])
        descriptors = _socket_descriptors()
        return sum(_shut_down(descriptors.get(c.inode), c.inode) for c in connections)


def _peer_key(peer: str) -> tuple[str, int]:
    address = peer_address(peer)
    try:
        port = int(peer.rsplit(":", 1)[1])
    except (IndexError, ValueError):
        port = 0
    return address, port


class _Call:
    def __init__(self, warden: Warden, key: tuple[str, int]) -> None:
        self.warden, self.key = warden, key

    def __enter__(self) -> None:
        with self.warden._lock:
            self.warden.calls[self.key] += 1
            self.warden._called.add(self.key)

    def __exit__(self, *exc: object) -> None:
        with self.warden._lock:
            self.warden.calls[self.key] -= 1
            if self.warden.calls[self.key] <= 0:
                del self.warden.calls[self.key]


def _dup_if_same(fd: int | None, inode: int) -> socket.socket | None:
    """Return a duplicate of descriptor ``fd`` if it is still the socket ``inode`` (it may have been reused)."""
    if fd is None:
        return None
    try:
        copy = os.dup(fd)
    except OSError:
        return None
    try:
        if os.fstat(copy).st_ino != inode:
            os.close(copy)
            return None
        return socket.socket(fileno=copy)
    except OSError:
        os.close(copy)
        return None


def _idle_ms(fd: int | None, inode: int) -> float:
    """Return for how long (ms) socket ``inode`` has neither received nor sent data; 0 if it cannot be told."""
    sock = _dup_if_same(fd, inode)
    if sock is None:
        return 0.0
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_BYTES)
        sent = _LAST_DATA_SENT.unpack_from(info, _LAST_DATA_SENT_AT)[0]
        received = _LAST_DATA_RECV.unpack_from(info, _LAST_DATA_RECV_AT)[0]
        return float(min(sent, received))
    except OSError:
        return 0.0
    finally:
        sock.close()  # the duplicate only: the door's descriptor stays open


def _shut_down(fd: int | None, inode: int) -> bool:
    """Shut socket ``inode`` down (both ways) through a duplicate of ``fd``; return whether it was."""
    sock = _dup_if_same(fd, inode)
    if sock is None:
        return False
    try:
        sock.shutdown(socket.SHUT_RDWR)  # the door's poller sees the end and releases its own descriptor
        return True
    except OSError:
        return False
    finally:
        sock.close()
