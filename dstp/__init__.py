"""dstp: query gridded netCDF datasets by attribute and get Arrow back, fast.

    import dstp
    c = dstp.connect("127.0.0.1:50051")
    c.datasets()
    table = c.query("select temperature, time from ccm3 where humidity > 50")
"""

from dstp.errors import *  # noqa: F403 - the error tree is part of the public API
from dstp.errors import __all__ as _error_names
from dstp.client import Client, Progress, QueryInfo, QueryStream, connect, to_xarray

__version__ = "0.1.0"

__all__ = [
    "Client",
    "Progress",
    "QueryInfo",
    "QueryStream",
    "__version__",
    "connect",
    "to_xarray",
    *_error_names,
]
