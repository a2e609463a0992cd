"""STAC API item search: each file an Item, found by pystac-client as the files themselves say.

The archive is written here: ``daily`` (8 daily files on the standard
calendar, a region stored on 0…360 longitudes), ``model`` (4 monthly files on
a noleap calendar, global) and ``secret`` (3 files, readable by alice only).
Expected items come from each file opened with xarray on its own — its first
and last time, the lat/lon extent — never from the server's answers.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Iterator

import httpx
import numpy as np
import pystac
import pystac.validation
import pytest
import xarray as xr
from pystac_client import Client

from dstp.auth import TokenStore
from dstp.catalog.publish import publish
from dstp.server import DstpServer
from dstp.settings import Settings


def _write(path: Path, times: np.ndarray, units: str, calendar: str, lats: np.ndarray, lons: np.ndarray) -> Path:
    rng = np.random.default_rng(len(path.name) + int(times[0]))
    ds = xr.Dataset(
        {"tas": (("time", "lat", "lon"), rng.normal(280, 5, (len(times), len(lats), len(lons))).astype("float32"),
                 {"units": "K", "long_name": "air temperature"})},
        coords={"time": ("time", times, {"units": units, "calendar": calendar, "standard_name": "time",
                                         "axis": "T"}),
                "lat": ("lat", lats, {"units": "degrees_north", "standard_name": "latitude"}),
                "lon": ("lon", lons, {"units": "degrees_east", "standard_name": "longitude"})},
        attrs={"title": path.stem, "Conventions": "CF-1.8"},
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    ds.to_netcdf(path, encoding={"time": {"dtype": "float64"}})
    return path


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("stac-search")
    daily = [_write(root / "daily" / f"daily_{d:02d}.nc", np.array([d * 24.0, d * 24.0 + 12.0]),
                    "hours since 2001-03-01 00:00:00", "standard", np.array([40.0, 42.5, 45.0]),
                    np.array([200.0, 202.5, 205.0, 207.5])) for d in range(8)]
    publish(daily, "daily")
    model = [_write(root / "model" / f"model_{m:02d}.nc", np.array([m * 30.0 + 0.5, m * 30.0 + 15.5]),
                    "days since 1850-01-01", "noleap", np.linspace(-88.0, 88.0, 5), np.arange(0.0, 360.0, 60.0))
             for m in range(4)]
    publish(model, "model")
    secret = [_write(root / "secret" / f"secret_{d}.nc", np.array([float(d)]), "days since 2010-06-01", "standard",
                     np.array([-70.0, -65.0]), np.array([10.0, 20.0])) for d in range(3)]
    xml = publish(secret, "secret")
    text = xml.read_text()
    assert '<access policy="public"/>' in text
    xml.write_text(text.replace('<access policy="public"/>', '<access policy="restricted" groups="polar"/>'))
    return root


@pytest.fixture(scope="module")
def served(archive: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    store = tmp_path_factory.mktemp("tokens") / "tokens.json"
    tokens = TokenStore(store)
    issued = {"alice": tokens.create("alice", ["polar"]).secret, "bob": tokens.create("bob").secret}
    settings = Settings(catalog_root=archive, port=0, http_port=0, data_port=-1, udt_port=-1,
                        token_store=store, allow_anonymous="true")
    with DstpServer(settings) as srv:
        assert srv.endpoints is not None
        yield f"http://{srv.endpoints.http}", issued


def _oracle(archive: Path) -> dict[str, dict[str, object]]:
    """Item id → the file's own first/last instant (a datetime; cftime for noleap) and its box, read by xarray."""
    out: dict[str, dict[str, object]] = {}
    for dataset in ("daily", "model", "secret"):
        for path in sorted((archive / dataset).glob("*.nc")):
            with xr.open_dataset(path, decode_times=xr.coders.CFDatetimeCoder(use_cftime=True)) as ds:
                t = ds["time"].values
                raw = ds["lon"].values
                lon = ((raw + 180.0) % 360.0) - 180.0
                west, east = float(lon.min()), float(lon.max())
                if raw.max() - raw.min() + np.diff(raw).max() >= 360.0:  # cells all round: the whole globe
                    west, east = -180.0, 180.0
                out[f"{dataset}/{path.name}"] = {
                    "collection": dataset, "first": t[0], "last": t[-1],
                    "bbox": [west, float(ds["lat"].min()), east, float(ds["lat"].max())]}
    return out


def _when(value: object) -> dt.datetime:
    return dt.datetime(value.year, value.month, value.day, value.hour, value.minute,  # type: ignore[attr-defined]
                       value.second, tzinfo=dt.timezone.utc)  # type: ignore[attr-defined]


def _span(item: pystac.Item) -> tuple[dt.datetime, dt.datetime]:
    p = item.properties
    if item.datetime is not None:
        return item.datetime, item.datetime
    return (dt.datetime.fromisoformat(p["start_datetime"].replace("Z", "+00:00")),
            dt.datetime.fromisoformat(p["end_datetime"].replace("Z", "+00:00")))


def _client(url: str, token: str | None = None) -> Client:
    headers = {"Authorization": f"Bearer {token}"} if token else None
    return Client.open(f"{url}/stac", headers=headers)


def test_pystac_client_sees_item_search_and_every_file_as_an_item(served, archive: Path) -> None:
    url, tokens = served
    client = _client(url, tokens["alice"])
    assert client.conforms_to("ITEM_SEARCH")
    want = _oracle(archive)
    items = list(client.search(max_items=None, limit=5).items())  # pages of 5: next links followed
    assert sorted(i.id for i in items) == sorted(want)
    for item in items:
        pystac.validation.validate_dict(item.to_dict(), extensions=[])  # the core Item schema; raises if not
        w = want[item.id]
        assert item.collection_id == w["collection"]
        first, last = _span(item)
        assert (first, last) == (_when(w["first"]), _when(w["last"]))
        assert item.bbox == pytest.approx(w["bbox"])
        assert {"opendap", "xarray"} <= set(item.assets)


@pytest.mark.parametrize("interval", [
    "2001-03-03T00:00:00Z/2001-03-05T06:00:00Z",
    "../2001-03-02T00:00:00Z",
    "2001-03-07T12:00:00Z/..",
    "2001-03-04T12:00:00Z",
    "1850-02-01T00:00:00Z/1850-03-10T00:00:00Z",
])
def test_datetime_search_finds_the_files_whose_times_meet_the_interval(served, archive: Path, interval: str) -> None:
    url, tokens = served
    start_text, _, end_text = interval.partition("/") if "/" in interval else (interval, "", interval)
    start = None if start_text == ".." else dt.datetime.fromisoformat(start_text.replace("Z", "+00:00"))
    end = None if end_text == ".." else dt.datetime.fromisoformat(end_text.replace("Z", "+00:00"))
    want = sorted(k for k, w in _oracle(archive).items()
                  if w["collection"] != "secret"
                  and (end is None or _when(w["first"]) <= end) and (start is None or _when(w["last"]) >= start))
    assert want, "the interval should match something"
    got = sorted(i.id for i in _client(url, tokens["bob"]).search(datetime=interval, max_items=None).items())
    assert got == want


def test_bbox_collections_and_ids_filter_as_the_files_say(served, archive: Path) -> None:
    url, tokens = served
    client = _client(url, tokens["alice"])
    want = _oracle(archive)
    box = [-170.0, 30.0, -140.0, 50.0]  # the daily region (stored on 0…360 as 200…207.5)

    def meets(b: list[float]) -> bool:
        return b[0] <= box[2] and box[0] <= b[2] and b[1] <= box[3] and box[1] <= b[3]

    got = sorted(i.id for i in client.search(bbox=box, max_items=None).items())
    assert got == sorted(k for k, w in want.items() if meets(w["bbox"]))  # type: ignore[arg-type]
    assert sorted(i.id for i in client.search(collections=["model"], max_items=None).items()) == \
        sorted(k for k in want if k.startswith("model/"))
    ids = ["daily/daily_03.nc", "model/model_01.nc"]
    assert sorted(i.id for i in client.search(ids=ids, max_items=None).items()) == ids


def test_post_search_pages_with_its_body(served) -> None:
    url, tokens = served
    with httpx.Client(base_url=url, timeout=30) as http:
        body = {"collections": ["daily"], "limit": 3}
        seen: list[str] = []
        page = http.post("/stac/search", json=body).json()
        while True:
            seen += [f["id"] for f in page["features"]]
            nxt = next((link for link in page["links"] if link["rel"] == "next"), None)
            if nxt is None:
                break
            assert nxt["method"] == "POST"
            page = http.post(nxt["href"], json=nxt["body"]).json()
        assert seen == [f"daily/daily_{d:02d}.nc" for d in range(8)]
        assert page["numberMatched"] == 8


def test_restricted_items_are_found_only_by_their_readers(served) -> None:
    url, tokens = served
    for who, sees in (("alice", True), ("bob", False), (None, False)):
        ids = [i.id for i in _client(url, tokens[who] if who else None).search(max_items=None).items()]
        assert any(i.startswith("secret/") for i in ids) is sees
        headers = {"Authorization": f"Bearer {tokens[who]}"} if who else {}
        with httpx.Client(base_url=url, headers=headers, timeout=30) as http:
            assert http.get("/stac/collections/secret/items").status_code == (200 if sees else 404)
            assert http.get("/stac/collections/secret/items/secret_0.nc").status_code == (200 if sees else 404)


@pytest.mark.parametrize("query, words", [
    ("bbox=1,2,3", "has 3 numbers"),
    ("bbox=10,50,20,40", "south ≤ north"),
    ("datetime=yesterday", "'yesterday' is not an RFC 3339 instant"),
    ("datetime=2001-03-05T00:00:00Z/2001-03-01T00:00:00Z", "ends before it starts"),
    ("limit=0", "limit 0 is out of range"),
])
def test_a_bad_search_is_a_400_naming_what_to_fix(served, query: str, words: str) -> None:
    url, _ = served
    answer = httpx.get(f"{url}/stac/search?{query}", timeout=30)
    assert answer.status_code == 400
    assert words in answer.text


def test_an_items_zarr_and_edr_assets_answer_with_its_datasets_values(served, archive: Path) -> None:
    url, _ = served
    item = next(_client(url).search(collections=["model"], max_items=1).items())
    assert {"zarr", "edr"} <= set(item.assets)
    files = sorted((archive / "model").glob("model_*.nc"))
    parts = [xr.open_dataset(f, decode_times=xr.coders.CFDatetimeCoder(use_cftime=True)).load() for f in files]
    want = xr.concat(parts, dim="time", data_vars="minimal", coords="minimal", compat="override")
    got = xr.open_zarr(item.assets["zarr"].href, zarr_format=3, consolidated=True,
                       decode_times=xr.coders.CFDatetimeCoder(use_cftime=True)).load()
    name = next(iter(want.data_vars))
    xr.testing.assert_equal(got[name], want[name])
    edr = httpx.get(item.assets["edr"].href, timeout=30).json()
    assert edr["id"] == "model" and name in edr["parameter_names"]
    collection = httpx.get(f"{url}/stac/collections/model", timeout=30).json()
    assert collection["assets"]["zarr"]["href"] == item.assets["zarr"].href
    public = httpx.get(f"{url}/stac/collections", timeout=30).json()["collections"]
    assert {c["id"] for c in public if "zarr" in c["assets"] and "edr" in c["assets"]} == {"daily", "model"}
