"""The public API: what `import dstp` offers, and that every name resolves."""

from __future__ import annotations

import dstp
import dstp.catalog
import dstp.client
import dstp.client._codec
import dstp.errors
import dstp.grpc_codec
import dstp.query
import dstp.service
import dstp.transport.wire.values


def test_exports_resolve() -> None:
    for module in (dstp, dstp.catalog, dstp.client, dstp.errors, dstp.query, dstp.service,
                   dstp.transport.wire.values, dstp.grpc_codec, dstp.client._codec):
        for name in module.__all__:
            assert getattr(module, name) is not None, f"{module.__name__}.{name}"


def test_top_level_api() -> None:
    for name in ("connect", "Client", "to_xarray", "DstpError", "QueryError", "TransportError"):
        assert name in dstp.__all__


def test_every_error_has_a_status() -> None:
    import grpc

    def walk(cls):
        yield cls
        for sub in cls.__subclasses__():
            yield from walk(sub)

    for cls in walk(dstp.DstpError):
        assert hasattr(grpc.StatusCode, cls.grpc_status), cls
        assert 400 <= cls.http_status < 600, cls
        assert cls.__name__ in dstp.errors.__doc__, f"draw {cls.__name__} in the error tree docstring"
