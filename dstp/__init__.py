"""dstp: query netCDF archives by attribute and get Arrow back, fast.

    import dstp
    c = dstp.connect("127.0.0.1:50051")
    c.datasets()
    table = c.query("select temperature, time from ccm3 where humidity > 50")

``import dstp`` loads only the error tree: the client (gRPC, sockets) is
imported on first use of ``dstp.connect`` and friends, so the catalog, the
query engine and anything that only needs ``dstp.errors`` stay light.
"""

from typing import Any

from dstp.errors import *  # noqa: F403 - the error tree is part of the public API
from dstp.errors import __all__ as _error_names

__version__ = "0.1.0"

#: Names served lazily from :mod:`dstp.client`.
_CLIENT_NAMES = ("Client", "Progress", "QueryInfo", "QueryStream", "connect", "to_xarray")

__all__ = [*_CLIENT_NAMES, "__version__", *_error_names]


def __getattr__(name: str) -> Any:
    if name in _CLIENT_NAMES:
        from dstp import client

        return getattr(client, name)
    raise AttributeError(f"module 'dstp' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
