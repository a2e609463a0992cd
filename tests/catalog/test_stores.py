"""One conformance suite over every store: a local folder, moto's S3 server, an HTTP server with ranges.

Each store holds the same objects; every answer is checked against the bytes of the files on disk.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import pytest

from dstp.catalog.stores import (WINDOW_FLOOR, LinkMeter, ObjectVersion, Store, StoreConfig, coalesce,
                                 load_store_configs, open_store)
from dstp.errors import DataFileError, StoreUnavailableError
from store_servers import RangeHTTPServer, S3Server

KEYS = ["a/one.nc", "a/two.nc", "a/sub/three.nc", "b/four.txt"]


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("objects")
    for i, key in enumerate(KEYS):
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(os.urandom(1000 + 997 * i))
    (root / "manifest.txt").write_text("\n".join(KEYS) + "\n")
    return root


@pytest.fixture(scope="module")
def s3(tree: Path) -> Iterator[S3Server]:
    server = S3Server()
    server.client().create_bucket(Bucket="objects")
    server.upload_tree("objects", tree, "pre/fix", "*")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def http(tree: Path) -> Iterator[RangeHTTPServer]:
    server = RangeHTTPServer(tree)
    yield server
    server.stop()


def s3_config(server: S3Server, **over: object) -> StoreConfig:
    os.environ["TEST_S3_KEY"], os.environ["TEST_S3_SECRET"] = server.access_key, server.secret_key
    settings = {"url": "s3://objects/pre/fix", "endpoint": server.endpoint, "region": "us-east-1",
                "access_key_id_env": "TEST_S3_KEY", "secret_access_key_env": "TEST_S3_SECRET", **over}
    return StoreConfig(name="era5", **settings)  # type: ignore[arg-type]


@pytest.fixture(params=["local", "s3", "http"])
def store(request: pytest.FixtureRequest, tree: Path) -> Store:
    if request.param == "local":
        return open_store(StoreConfig("era5", str(tree)))
    if request.param == "s3":
        return open_store(s3_config(request.getfixturevalue("s3")))
    server = request.getfixturevalue("http")
    return open_store(StoreConfig("era5", server.url + "/", manifest="manifest.txt"))


@pytest.mark.parametrize("pattern, expected", [
    ("a/*.nc", ["a/one.nc", "a/two.nc"]),
    ("a/**/*.nc", ["a/one.nc", "a/sub/three.nc", "a/two.nc"]),
    ("b/**/*.txt", ["b/four.txt"]),
    ("**/f*.txt", ["b/four.txt"]),
    ("a/t?o.nc", ["a/two.nc"]),
    ("c/*.nc", []),
])
def test_list_matches_the_glob(store: Store, tree: Path, pattern: str, expected: list[str]) -> None:
    found = store.list_objects(pattern)
    assert [v.key for v in found] == expected
    assert [v.size for v in found] == [(tree / k).stat().st_size for k in expected]
    assert all(v.etag for v in found)


def test_ranged_reads_equal_the_file(store: Store, tree: Path) -> None:
    version = store.head("a/sub/three.nc")
    data = (tree / "a/sub/three.nc").read_bytes()
    ranges = [(0, 10), (5, 200), (1500, len(data)), (300, 301), (2000, 2000 + 7)]
    assert store.read_ranges(version, ranges) == [data[s:e] for s, e in ranges]


def test_fetch_equals_the_file(store: Store, tree: Path, tmp_path: Path) -> None:
    version = store.list_objects("a/two.nc")[0]
    store.fetch(version, tmp_path / "copy")
    assert (tmp_path / "copy").read_bytes() == (tree / "a/two.nc").read_bytes()


def test_a_missing_object_is_named(store: Store) -> None:
    with pytest.raises(DataFileError, match="nope.nc"):
        store.head("a/nope.nc")


def test_coalesce_merges_near_ranges() -> None:
    ranges = [(100, 200), (0, 50), (60, 90), (500, 600)]
    assert coalesce(ranges, 10) == [(0, 200), (500, 600)]
    assert coalesce(ranges, 9) == [(0, 50), (60, 90), (100, 200), (500, 600)]
    assert coalesce([(0, 10), (5, 8)], 0) == [(0, 10)]


def test_ranges_apart_are_merged_only_beyond_the_requests_in_flight() -> None:
    """A point series reads one chunk in four: with no more ranges than requests in flight each is fetched alone
    (the gaps' bytes are not fetched); beyond, the closest are merged first, never across more than the gap."""
    ranges = [(0, 10), (100, 110), (130, 140), (1000, 1010), (1010, 1020)]
    assert coalesce(ranges, 1 << 20, at_most=4) == [(0, 10), (100, 110), (130, 140), (1000, 1020)]
    assert coalesce(ranges, 1 << 20, at_most=3) == [(0, 10), (100, 140), (1000, 1020)]
    assert coalesce(ranges, 1 << 20, at_most=1) == [(0, 1020)]
    assert coalesce(ranges, 50, at_most=1) == [(0, 10), (100, 140), (1000, 1020)]  # gaps over 50 stay


def test_gaps_are_fetched_only_within_a_quarter_of_the_bytes_needed() -> None:
    """Issue 36: bytes fetched ≤ 1.25 × the chunks needed. Four 100-byte chunks with gaps of 10, 20 and 300: the
    two small gaps (30 bytes, 7.5 %) are fetched to save two requests; the 300-byte one is not."""
    ranges = [(0, 100), (110, 210), (230, 330), (630, 730)]
    assert coalesce(ranges, 1 << 20, waste=0.25) == [(0, 330), (630, 730)]
    assert coalesce(ranges, 15, waste=0.25) == [(0, 210), (230, 330), (630, 730)]  # never across more than gap
    # a point series: one chunk in four, the gaps three chunks long: each fetched alone
    assert coalesce([(k * 400, k * 400 + 100) for k in range(6)], 1 << 20, waste=0.25) == \
        [(k * 400, k * 400 + 100) for k in range(6)]


def test_the_link_window_grows_with_what_the_path_delivers() -> None:
    """Before any GET: the floor. Then 2 × rate × GET time: each round that delivers what its window allowed lets
    the next keep twice as much in flight; a path that delivers no more keeps the window where it is."""
    now = [0.0]
    link = LinkMeter(clock=lambda: now[0])
    assert link.window() == WINDOW_FLOOR
    window, rtt = WINDOW_FLOOR, 0.08
    for _ in range(3):  # a path with room: a window's bytes arrive in one round of 4 RTTs (slow start)
        starts = [link.started() for _ in range(16)]
        now[0] += rtt
        for s in starts:
            link.first_byte(s)
        now[0] += 3 * rtt
        for s in starts:
            link.done(s, window // 16)
        assert link.window() == pytest.approx(2 * window, rel=0.01)
        window = link.window()
    assert link.latency_s == pytest.approx(rtt)
    capped = link.window()
    starts = [link.started() for _ in range(16)]  # a round that delivers less: the window does not shrink below
    now[0] += 8 * rtt
    for s in starts:
        link.first_byte(s)
        link.done(s, WINDOW_FLOOR // 16)
    assert link.window() >= WINDOW_FLOOR and link.rate_Bps == pytest.approx(capped / 2 / (4 * rtt), rel=0.01)


def test_a_replaced_s3_object_is_refused_not_mixed(s3: S3Server, tree: Path) -> None:
    store = open_store(s3_config(s3))
    before = store.head("b/four.txt")
    s3.client().put_object(Bucket="objects", Key="pre/fix/b/four.txt", Body=b"x" * before.size)
    after = store.head("b/four.txt")
    assert after.etag != before.etag and after.token() != before.token()
    with pytest.raises(DataFileError, match="was replaced"):
        store.read_ranges(before, [(0, 10)])
    assert store.read_ranges(after, [(0, 4)]) == [b"xxxx"]
    s3.client().upload_file(str(tree / "b/four.txt"), "objects", "pre/fix/b/four.txt")


def test_wrong_credentials_name_the_store_not_the_secret(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_S3_WRONG", s3.secret_key[:-4] + "abcd")
    store = open_store(s3_config(s3, secret_access_key_env="TEST_S3_WRONG"))
    with pytest.raises(StoreUnavailableError) as caught:
        store.list_objects("a/*.nc")
    message = str(caught.value)
    assert "store 'era5' (s3://objects/pre/fix) refused access (HTTP 403)" in message
    assert s3.secret_key not in message and s3.access_key not in message and s3.secret_key[:-4] not in message


def test_an_unreachable_store_names_itself(s3: S3Server) -> None:
    from store_servers import free_port

    store = open_store(s3_config(s3, endpoint=f"http://127.0.0.1:{free_port()}"))
    with pytest.raises(StoreUnavailableError, match=r"store 'era5' \(s3://objects/pre/fix\) cannot be reached"):
        store.head("a/one.nc")


def test_config_refuses_credentials_in_the_url() -> None:
    with pytest.raises(ValueError, match="may not hold a user, password"):
        load_store_configs('{"x": {"url": "https://me:pw@host/data"}}')
    with pytest.raises(ValueError, match="unknown setting"):
        load_store_configs('{"x": {"url": "s3://b", "secret_access_key": "s"}}')
    assert load_store_configs('{"x": {"url": "s3://b/p", "anonymous": true}}')["x"].anonymous


def test_version_token_follows_the_etag() -> None:
    assert ObjectVersion("k", 1, "e1", 5).token() != ObjectVersion("k", 1, "e2", 5).token()
    assert ObjectVersion("k", 1, "e1", 5).token() == ObjectVersion("other", 1, "e1", 5).token()


def test_credentials_from_an_aws_profile(s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "credentials").write_text(f"[archive-reader]\naws_access_key_id = {s3.access_key}\n"
                                          f"aws_secret_access_key = {s3.secret_key}\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    store = open_store(StoreConfig("era5", "s3://objects/pre/fix", endpoint=s3.endpoint, region="us-east-1",
                                   profile="archive-reader"))
    assert [v.key for v in store.list_objects("a/*.nc")] == ["a/one.nc", "a/two.nc"]
    with pytest.raises(ValueError, match="AWS profile 'nobody' cannot be used"):
        open_store(StoreConfig("era5", "s3://objects/pre/fix", endpoint=s3.endpoint, profile="nobody"))


def test_a_local_folder_lists_and_opens_zarr_groups(tmp_path: Path) -> None:
    import numpy as np
    import zarr

    for name in ("a.zarr", "b.zarr"):
        group = zarr.open_group(tmp_path / "z" / name, mode="w", zarr_format=3)
        group.create_array("v", shape=(3,), dtype="i4")[:] = np.arange(3)
    (tmp_path / "z" / "c.zarr").mkdir()  # a folder without group metadata is no Zarr store
    (tmp_path / "z" / "c.zarr" / "junk").write_bytes(b"x")
    store = open_store(StoreConfig("local", str(tmp_path)))
    assert [v.key for v in store.list_zarr("z/*.zarr")] == ["z/a.zarr", "z/b.zarr"]
    assert store.zarr_group("z/b.zarr")["v"][:].tolist() == [0, 1, 2]


from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ranges=st.lists(st.tuples(st.integers(0, 3985), st.integers(0, 600)), min_size=1, max_size=12),
       gap=st.sampled_from([0, 1, 64, 1 << 20]))
def test_any_ranges_coalesced_or_not_equal_the_file_s_bytes(s3: S3Server, tree: Path, ranges: list[tuple[int, int]],
                                                            gap: int) -> None:
    data = (tree / "a/sub/three.nc").read_bytes()
    spans = [(min(s, len(data)), min(len(data), s + n)) for s, n in ranges]
    store = open_store(s3_config(s3, coalesce_bytes=gap, concurrency=3))
    version = store.head("a/sub/three.nc")
    assert store.read_ranges(version, spans) == [data[s:e] for s, e in spans]


@settings(max_examples=200, deadline=None)
@given(ranges=st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 500)), min_size=1, max_size=30),
       gap=st.sampled_from([0, 10, 300, 1 << 20]))
def test_coalesced_ranges_cover_every_range_and_fetch_at_most_a_quarter_more(ranges: list[tuple[int, int]],
                                                                             gap: int) -> None:
    spans = [(s, s + n) for s, n in ranges]
    got = coalesce(spans, gap, waste=0.25)
    needed: set[int] = set()
    for s, e in spans:
        needed.update(range(s, e))
    assert all(any(a <= s and e <= b for a, b in got) for s, e in spans)
    assert all(b1 < a2 for (_, b1), (a2, _) in zip(got, got[1:]))  # apart and in order
    assert sum(b - a for a, b in got) <= 1.25 * len(needed)
