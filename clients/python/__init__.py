"""The dstp Python client (installed as ``dstp.client``; ``dstp.connect`` is the entry point)."""

from dstp.client._client import Client, Progress, QueryInfo, QueryStream, connect
from dstp.client._xarray import to_xarray

__all__ = ["Client", "Progress", "QueryInfo", "QueryStream", "connect", "to_xarray"]
