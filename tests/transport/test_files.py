"""Bulk file access: whole files and ranges, in place, verified, resumable, confined to the catalog."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import dstp
from dstp.transport.client.files import STATE_SUFFIX
from dstp.transport.wire.crc import crc32c_of_file
from dstp.transport.wire.ranges import merge_ranges, split_ranges, subtract_ranges

NAME = "ccm3_1990-01.nc"


def _source(catalog_root: Path) -> Path:
    return catalog_root / "ccm3" / NAME


@pytest.mark.parametrize("transport, streams", [("striped", 1), ("striped", 5), ("grpc", 0), ("auto", 0), ("udt", 0)])
def test_whole_file(data_client, catalog_root, tmp_path, transport, streams) -> None:
    out = tmp_path / "copy.nc"
    summary = data_client.get("ccm3", NAME, out, transport=transport, streams=streams)
    assert out.read_bytes() == _source(catalog_root).read_bytes()
    assert summary["bytes"] == out.stat().st_size and summary["resumed_from"] == 0
    assert transport == "auto" or summary["transport"] == transport  # UDT (loopback: MSS 32000) did carry it
    assert not (tmp_path / ("copy.nc" + STATE_SUFFIX)).exists()


@pytest.mark.parametrize("offset, length", [(0, 1), (1000, 300_000), (12345, -1), (0, 0)])
def test_byte_range(data_client, catalog_root, tmp_path, offset, length) -> None:
    out = tmp_path / "part.bin"
    data_client.get("ccm3", NAME, out, offset=offset, length=length, transport="striped", streams=3)
    src = _source(catalog_root).read_bytes()
    want = src[offset:] if length < 0 else src[offset:offset + length]
    assert out.read_bytes() == want


@pytest.mark.parametrize("transport, streams", [("striped", 1), ("udt", 0)])
def test_interrupted_download_resumes_where_it_stopped(data_client, catalog_root, tmp_path, transport,
                                                       streams) -> None:
    out = tmp_path / "resume.nc"
    reports = []

    def interrupt(progress):
        reports.append(progress.bytes)
        if len(reports) == 1:
            raise KeyboardInterrupt  # the user pressed Ctrl-C mid-transfer

    with pytest.raises(KeyboardInterrupt):
        data_client.get("ccm3", NAME, out, transport=transport, streams=streams, progress=interrupt)
    state = tmp_path / ("resume.nc" + STATE_SUFFIX)
    assert state.exists()
    assert not out.exists()  # nothing at the output's name that could pass for the whole file
    summary = data_client.get("ccm3", NAME, out, transport=transport, streams=streams and 2)
    size = _source(catalog_root).stat().st_size
    assert 0 < summary["resumed_from"] < size
    assert summary["bytes"] == size - summary["resumed_from"]
    assert out.read_bytes() == _source(catalog_root).read_bytes()
    assert not state.exists()


def test_resume_restarts_when_the_server_file_changed(data_client, data_server, catalog_root, tmp_path) -> None:
    out = tmp_path / "changed.nc"
    out.write_bytes(b"\0" * _source(catalog_root).stat().st_size)
    (tmp_path / ("changed.nc" + STATE_SUFFIX)).write_text(
        '{"dataset": "ccm3", "file": "ccm3_1990-01.nc", "size": 1, "mtime_ns": 1, "offset": 0, '
        '"length": 1, "crc32c": 1, "done": [[0, 1000000]]}')
    summary = data_client.get("ccm3", NAME, out, transport="striped", streams=2)
    assert summary["resumed_from"] == 0
    assert out.read_bytes() == _source(catalog_root).read_bytes()


def test_corrupted_output_is_caught_by_the_final_checksum(data_client, catalog_root, tmp_path) -> None:
    out = tmp_path / "bad.nc"
    data_client.get("ccm3", NAME, out, transport="striped", streams=1)
    size = out.stat().st_size
    # pretend an earlier attempt finished everything but one block, whose bytes on disk are wrong
    with open(out, "r+b") as f:
        f.seek(100)
        f.write(b"garbage")
    from dstp.transport.client.files import RemoteFile

    st = _source(catalog_root).stat()
    (tmp_path / ("bad.nc" + STATE_SUFFIX)).write_text(__import__("json").dumps({
        "dataset": "ccm3", "file": NAME, "size": size, "mtime_ns": st.st_mtime_ns, "offset": 0, "length": size,
        "crc32c": crc32c_of_file(_source(catalog_root)), "done": [[0, size - 10]]}))
    with pytest.raises(dstp.IntegrityError, match="CRC-32C"):
        data_client.get("ccm3", NAME, out, transport="striped", streams=1)
    assert not (tmp_path / ("bad.nc" + STATE_SUFFIX)).exists()
    del RemoteFile


@pytest.mark.parametrize("name", ["../../etc/passwd", "/etc/passwd", "ocean_2000-01.nc", "ccm3.dstp.xml",
                                  "../ocean/ocean_2000-01.nc"])
def test_only_published_files(data_client, tmp_path, name) -> None:
    with pytest.raises(dstp.FileNotPublishedError):
        data_client.get("ccm3", name, tmp_path / "x", transport="grpc")
    assert not (tmp_path / "x").exists()


def test_range_outside_the_file(data_client, tmp_path) -> None:
    with pytest.raises(dstp.QueryError, match="outside"):
        data_client.get("ccm3", NAME, tmp_path / "x", offset=10**12, transport="grpc")


def test_range_arithmetic() -> None:
    assert merge_ranges([(5, 10), (0, 3), (3, 5), (20, 20)]) == [(0, 10)]
    assert subtract_ranges((0, 100), [(10, 20), (15, 30), (90, 200)]) == [(0, 10), (30, 90)]
    assert subtract_ranges((0, 10), []) == [(0, 10)]


@given(st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 10**5)), max_size=6), st.integers(1, 8),
       st.sampled_from([1, 7, 4096, 65536]))
def test_shares_cover_the_ranges_exactly_in_whole_blocks(raw, shares, align) -> None:
    # Disjoint, sorted ranges, as a download's missing parts are.
    ranges = [(s, e - s) for s, e in merge_ranges((o, o + n) for o, n in raw)]
    cut = split_ranges(ranges, shares, align)
    total = sum(n for _, n in ranges)
    assert len(cut) <= shares and (cut == []) == (total == 0)
    assert all(share and all(n > 0 for _, n in share) for share in cut)
    pieces = [piece for share in cut for piece in share]
    assert merge_ranges((o, o + n) for o, n in pieces) == merge_ranges((o, o + n) for o, n in ranges)
    assert sum(n for _, n in pieces) == total  # no byte twice
    assert all(sum(n for _, n in share) % align == 0 for share in cut[:-1])
    if cut:  # about equal: no share holds more than an even split rounded up to a block
        assert max(sum(n for _, n in share) for share in cut) <= -(-(-(-total // shares)) // align) * align


def test_crc32c_of_file_matches_the_library(tmp_path) -> None:
    import crc32c

    data = os.urandom(3 * 2**20 + 17)
    path = tmp_path / "r.bin"
    path.write_bytes(data)
    assert crc32c_of_file(path) == crc32c.crc32c(data)
    assert crc32c_of_file(path, 100, 1000) == crc32c.crc32c(data[100:1100])
