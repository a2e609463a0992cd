"""Results stream: the first batch reaches the client while the server is still scanning."""

from __future__ import annotations


def test_first_batch_arrives_before_the_scan_ends(server, client) -> None:
    stream = client.query_batches("select time, lev, lat, lon, temperature, humidity, cloud from ccm3")
    batches = iter(stream)
    first = next(batches)
    assert first.num_rows > 0
    # the server is still executing this query: it has not finished reading the files
    assert server.service.running(), "the whole result was produced before the first batch arrived"
    rest = sum(b.num_rows for b in batches)
    assert first.num_rows + rest == 12 * 8 * 32 * 64
    assert stream.summary["rows"] == first.num_rows + rest
    assert not server.service.running()


def test_abandoned_stream_stops_the_scan(server, client) -> None:
    stream = client.query_batches("select temperature from ccm3")
    next(iter(stream))
    stream.close()
    assert server.service.wait_idle(timeout=10) and not server.service.running(), \
        "the server kept scanning for a client that left"
    assert client.query("select temperature from ccm3 limit 1").num_rows == 1
