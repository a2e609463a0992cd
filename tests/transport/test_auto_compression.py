"""``auto`` compression: the policy's cost model picks none / LZ4 / zstd from the path it measured.

The path is injected through the policy's public seams — the Ping function it is built with (RTT)
and the tuner's channel records (bandwidth a data channel achieved) — so a 110 ms / 1 Gb/s path
needs no WAN. One real loopback server checks that every codec gives the same records, and that
the client's choice reaches the transfer summary.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import dstp
from dstp.client._policy import CODECS, ChannelPolicy, estimate_seconds
from dstp.transport.client.tuning import AutoTuner

KEY = "server:1"
WAN_RTT = 0.110
MiB = 2**20


def _policy(tmp_path: Path, rtt_s: float, measured_bps: float | None = None) -> ChannelPolicy:
    tuner = AutoTuner(tmp_path / "tuning.json")
    if measured_bps is not None:  # a striped transfer of 128 MiB that ran at measured_bps on this path
        nbytes = 128 * MiB
        tuner.observe(KEY, "striped", nbytes, nbytes * 8 / measured_bps, rtt_s, 0.0)
    return ChannelPolicy(KEY, lambda: rtt_s, tuner, keep_connections=False)


def _teach_wan(policy: ChannelPolicy, bps: float = 1e9) -> None:
    """Make ``policy`` believe its server is across a 110 ms path that moved ``bps``."""
    for _ in range(3):
        policy.observe_rtt(WAN_RTT)
    nbytes = 128 * MiB
    policy.tuner.observe(policy.key, "striped", nbytes, nbytes * 8 / bps, WAN_RTT, 0.0)


def test_loopback_never_compresses(tmp_path) -> None:
    choice = _policy(tmp_path, 50e-6).choose("auto", compression="auto")
    assert choice.compression == "none"


def test_a_fast_measured_path_never_compresses(tmp_path) -> None:
    # a loopback query result moved at 3 Gb/s: the scan bounded it, not the wire; a codec only costs CPU
    for bps in (3e9, 10e9, 40e9):
        assert _policy(tmp_path, 60e-6, bps).choose("auto", compression="auto").compression == "none", bps


def test_a_1_gbps_wan_path_compresses_and_says_so(tmp_path) -> None:
    policy = _policy(tmp_path, WAN_RTT, 1e9)
    choice = policy.choose("auto", compression="auto")
    assert choice.compression in ("lz4", "zstd")
    assert "1 Gb/s measured" in choice.compression_reason and "est." in choice.compression_reason
    picked = policy.pick(choice, {"grpc", "striped"}, 256 * MiB)
    assert picked.transport == "striped" and picked.compression == choice.compression
    assert f", {choice.compression} (path 1 Gb/s" in picked.reason and "s raw)" in picked.reason


def test_an_unmeasured_long_path_is_assumed_at_1_gbps(tmp_path) -> None:
    choice = _policy(tmp_path, WAN_RTT).choose("auto", compression="auto")
    assert choice.compression != "none" and "1 Gb/s assumed" in choice.compression_reason


@pytest.mark.parametrize("window_mib", [3, 4])
def test_a_long_path_that_one_streams_window_cannot_fill_takes_the_stronger_codec(tmp_path, window_mib) -> None:
    """Results under 32 MiB ride the gRPC stream, one TCP connection: across 110 ms its autotuned window
    (3 MiB with stock buffers) carries 229 Mb/s, not the link's 1 Gb/s, and fewer bytes beat a faster codec
    (measured there: 1 M records 0.195 s with zstd, 0.241 s with LZ4). Across 20 ms the window fills 1 Gb/s."""
    def policy(rtt: float) -> ChannelPolicy:
        tuner = AutoTuner(tmp_path / f"{rtt}.json")
        tuner.observe(KEY, "striped", 128 * MiB, 128 * MiB * 8 / 1e9, rtt, 0.0)
        return ChannelPolicy(KEY, lambda: rtt, tuner, keep_connections=False, window_bytes=window_mib * MiB)

    far = policy(WAN_RTT).choose("auto", compression="auto")
    stream = window_mib * MiB * 8 / WAN_RTT
    assert far.compression == "zstd"
    assert f"one TCP stream {stream / 1e6:.3g} Mb/s: {window_mib} MiB window per 110 ms" in far.compression_reason
    near = policy(0.020).choose("auto", compression="auto")
    assert near.compression == "lz4" and "one TCP stream" not in near.compression_reason


def test_a_slow_path_takes_the_stronger_codec(tmp_path) -> None:
    assert _policy(tmp_path, WAN_RTT, 50e6).choose("auto", compression="auto").compression == "zstd"


def test_a_measurement_from_another_path_does_not_count(tmp_path) -> None:
    # 1 Gb/s measured at 110 ms; the path is now a LAN: the old figure is ignored
    policy = _policy(tmp_path, 0.0002)
    policy.tuner.observe(KEY, "striped", 128 * MiB, 128 * MiB * 8 / 1e9, WAN_RTT, 0.0)
    assert policy.choose("auto", compression="auto").compression == "none"


@pytest.mark.parametrize("asked", ["none", "lz4", "zstd"])
@pytest.mark.parametrize("transport", ["auto", "striped", "grpc"])
def test_a_compression_asked_for_is_never_overridden(tmp_path, asked, transport) -> None:
    policy = _policy(tmp_path, WAN_RTT, 1e9)  # a path where the model would compress
    choice = policy.choose(transport, compression=asked)
    assert choice.compression == asked
    if transport == "auto":
        assert policy.pick(choice, {"grpc", "striped"}, 256 * MiB).compression == asked


def test_the_model_scales_with_size_and_favours_raw_when_the_wire_is_faster_than_the_codec() -> None:
    for codec in CODECS:
        small, big = (estimate_seconds(codec, n, 1e9, WAN_RTT) for n in (MiB, 64 * MiB))
        assert WAN_RTT < small < big
    assert estimate_seconds("lz4", 64 * MiB, 1e9, WAN_RTT) < estimate_seconds("none", 64 * MiB, 1e9, WAN_RTT)
    assert estimate_seconds("none", 64 * MiB, 40e9, 0.0) < estimate_seconds("lz4", 64 * MiB, 40e9, 0.0)


# -- a real server on loopback ------------------------------------------------------------

SQL = "select time, lat, lon, temperature, humidity from ccm3"


@pytest.mark.parametrize("transport", ["grpc", "striped"])
def test_every_codec_gives_the_same_records(data_client, transport) -> None:
    reference = data_client.query(SQL)
    for codec in CODECS:
        table = data_client.query(SQL, transport=transport, streams=2, compression=codec)
        assert table.equals(reference) and table.schema.equals(reference.schema, check_metadata=True), codec


def test_auto_on_a_wan_path_compresses_the_query_and_the_summary_shows_it(data_client: dstp.Client) -> None:
    reference = data_client.query(SQL)
    _teach_wan(data_client.policy)
    table = data_client.query(SQL, transport="auto")
    assert table.equals(reference)
    summary = data_client.last_summary
    assert summary is not None and summary.rows == reference.num_rows
    assert "(path 1 Gb/s measured" in summary.choice and "est." in summary.choice
    assert "lz4" in summary.choice or "zstd" in summary.choice
    assert summary.wire_bytes < reference.nbytes  # compressed on the wire


def test_auto_keeps_an_explicit_none_on_a_wan_path(data_client: dstp.Client) -> None:
    reference = data_client.query(SQL)
    _teach_wan(data_client.policy)
    table = data_client.query(SQL, transport="auto", compression="none")
    assert table.equals(reference)
    summary = data_client.last_summary
    assert summary is not None and "lz4" not in summary.choice and "zstd" not in summary.choice
    assert summary.wire_bytes >= reference.nbytes


def test_auto_on_loopback_stays_raw(data_client: dstp.Client) -> None:
    reference = data_client.query(SQL)
    for _ in range(3):  # a loopback RTT, not whatever a Ping takes on a loaded test machine
        data_client.policy.observe_rtt(100e-6)
    data_client.query(SQL, transport="auto")
    summary = data_client.last_summary
    assert summary is not None and "lz4" not in summary.choice and "zstd" not in summary.choice
    assert summary.wire_bytes >= reference.nbytes
