"""The dstp Python client (installed as ``dstp.client``; ``dstp.connect`` is the entry point).

    Client          the rpcs, a channel policy, the protobuf codec (``_client``, ``_rpc``, ``_policy``, ``_codec``)
    QueryStream     a query's batches as they arrive, then its TransferSummary (``_stream``)
    ChannelPolicy   which data channel, how many stripes, learned per server (``_policy``)
    to_xarray       records back onto their grid (``_xarray``)
    Reconnect       how Client.watch follows the change feed across dropped connections (``_watch``)
"""

from dstp.client._client import Client, connect
from dstp.client._policy import ChannelChoice, ChannelPolicy
from dstp.client._stream import Progress, QueryStream
from dstp.client._watch import Reconnect
from dstp.result_grid import to_xarray
from dstp.transport.client.channels import DataChannel
from dstp.transport.wire.values import ChannelOffer, QueryInfo, TransferSummary

__all__ = ["ChannelChoice", "ChannelOffer", "ChannelPolicy", "Client", "DataChannel", "Progress", "QueryInfo",
           "QueryStream", "Reconnect", "TransferSummary", "connect", "to_xarray"]
