"""The native data path: frames between sockets and memory or files without Python in the byte loop.

``dstp.transport._native`` (C++, ``transport/_native_src/``, built by setup.py
when a compiler is there) computes a frame's CRC-32C and sends it — a file
block by ``sendfile`` from the published file — and receives a payload into
its buffer with its CRC-32C computed as the bytes arrive, every call with the
GIL released (a file block is then written at its place with ``pwrite``). The frames are exactly those of :mod:`dstp.transport.wire.frames`; only
who moves the bytes differs. It is used for plaintext frames on a plain TCP
connection (:class:`~dstp.transport.wire.tcp.TcpConn` itself, not a wrapper:
a connection that wraps another, to inject faults or count bytes, sees every
byte in Python); sealed transfers, UDT and in-memory pipes keep the Python path.

It is opt-in: ``DSTP_NATIVE=1`` in a process's environment switches it on for
that process (server or client). Measured on this 2-core VM (``python -m bench
run --only bulk_native``, three runs), it was ahead of the Python path in two of
three runs, inside the spread that tmpfs page allocation gives every tool here
(docs/transport.md), so the Python path stays the default until a measurement
on a quieter machine says otherwise. The extension's CRC-32C is used either way. Which path a download took is in its summary (``data_path``)
and ``dstp get -v``; the server logs it per stripe at DEBUG level.
"""

from __future__ import annotations

import os
from typing import Any

from dstp.errors import IntegrityError, TransportError

__all__ = ["available", "crc32c", "enabled", "fd_of", "file_handle", "reason", "recv_checked",
           "send_frame"]

_native: Any
_IMPORT_ERROR = ""
try:
    from dstp.transport import _native  # type: ignore[attr-defined,no-redef]
except ImportError as exc:  # built only where a C++ compiler was found
    _native = None
    _IMPORT_ERROR = str(exc)

#: "1" (or "yes", "true", "on") switches the native path on in this process.
ENV = "DSTP_NATIVE"
_ENABLED = _native is not None and os.environ.get(ENV, "0").strip().lower() in ("1", "yes", "true", "on")


def available() -> bool:
    """Return whether the extension was built (it may still be switched off: :func:`enabled`)."""
    return _native is not None


def enabled() -> bool:
    """Return whether this process moves plaintext TCP frames natively."""
    return _ENABLED


def reason() -> str:
    """Return why the native path is on or off, for logs and ``dstp get -v``."""
    if _native is None:
        return f"not built ({_IMPORT_ERROR or 'no extension'}): reinstall dstp with a C++ compiler"
    if not _ENABLED:
        return f"off (opt in with {ENV}=1)"
    return "SSE4.2 CRC-32C" if _native.CRC_HARDWARE else "table CRC-32C (no SSE4.2)"


def fd_of(conn: Any) -> int:
    """Return the socket descriptor the native path may use for ``conn``, or -1 (Python path).

    Only a blocking :class:`~dstp.transport.wire.tcp.TcpConn` qualifies — looked up on its type, so a
    wrapper that forwards attributes to the connection it wraps still sees its own bytes.
    """
    if not _ENABLED:
        return -1
    native_fd = getattr(type(conn), "native_fd", None)
    return native_fd(conn) if native_fd is not None else -1


def crc32c(data: Any, value: int = 0) -> int:
    """Return the CRC-32C of ``data`` continuing from ``value`` (the ``crc32c`` package's values)."""
    return int(_native.crc32c(data, value))


def file_handle(fd: int) -> Any:
    """Return a handle to send the open file ``fd`` from: a descriptor of its own, closed when the handle
    is collected (so a sender inside a frame never meets it closed, or reused for another file)."""
    return _native.FileHandle(fd)


def send_frame(fd: int, kind: int, stripe: int, sequence: int, offset: int, views: list[memoryview],
               max_payload: int, file: Any = None, body_crc: int | None = None) -> int:
    """Send one plaintext frame on socket ``fd``; return the bytes sent.

    ``file`` (a :func:`file_handle`): the payload is that file's bytes at ``offset``; they leave by
    ``sendfile`` (``views`` still give the checksum, unless ``body_crc``, the payload's CRC-32C, is known:
    then the payload is not read at all).
    """
    try:
        return int(_native.send_frame(fd, kind, stripe, sequence, offset, views, max_payload,
                                      file if len(views) == 1 else None, offset,
                                      -1 if body_crc is None else body_crc))
    except OSError as exc:
        raise TransportError(f"data connection lost while sending: {exc.strerror or exc}") from exc


def _checked(header: Any, receive: Any) -> int:
    """Run a native receive of ``header``'s payload, check the frame, return the payload's CRC-32C."""
    try:
        frame_crc, body_crc = receive()
    except EOFError as exc:
        raise TransportError("the data connection closed in the middle of a frame") from exc
    except OSError as exc:
        raise TransportError(f"data connection lost while receiving: {exc.strerror or exc}") from exc
    check(header, frame_crc)
    return int(body_crc)


def recv_checked(fd: int, header: Any, into: memoryview) -> int:
    """Receive ``header``'s payload into ``into`` and check the frame; return the payload's CRC-32C."""
    return _checked(header, lambda: _native.recv_payload(fd, into, header.blank))


def check(header: Any, frame_crc: int) -> None:
    """Raise IntegrityError unless ``frame_crc`` is ``header``'s checksum (the same words as frames.py)."""
    if frame_crc != header.checksum:
        raise IntegrityError(
            f"checksum mismatch in {header.kind.name} frame {header.sequence} on stripe {header.stripe}: "
            "the data was corrupted in transit"
        )
