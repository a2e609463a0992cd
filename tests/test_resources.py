"""Many queries, errors and abandoned streams leave no file descriptors or query slots behind."""

from __future__ import annotations

import os

import dstp


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_no_descriptor_or_slot_leaks(server, client) -> None:
    for _ in range(3):  # warm up: grpc threads, netCDF handle cache, DuckDB
        client.query("select temperature from ccm3 where lat > 80")
    before = _fds()
    for i in range(40):
        client.query("select temperature, time from ccm3 where humidity > 50 and lat > 60")
        try:
            client.query("select nosuch from ccm3")
        except dstp.UnknownColumnError:
            pass
        stream = client.query_batches("select temperature from ccm3")  # abandoned after one batch
        next(iter(stream))
        stream.close()
    after = _fds()
    assert after - before <= 2, f"{after - before} descriptors leaked"
    # every slot came back (the server frees a slot once it sees the cancelled stream)
    assert server.service.wait_idle(timeout=10), "query slots leaked"
    streams = []
    try:
        for _ in range(server.settings.max_concurrent_queries):  # all of them can be taken again
            streams.append(client.query_batches("select temperature from ccm3"))
            next(iter(streams[-1]))
    finally:
        for s in streams:
            s.close()
    assert len(streams) == server.settings.max_concurrent_queries
