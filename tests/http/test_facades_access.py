"""Access policy holds on every facade: a restricted dataset is invisible to whoever may not read it.

The catalog holds ccm3 (public) and a copy of ocean restricted to the group
``polar``; alice has a token in ``polar``, bob one without groups. Each
facade (ERDDAP, STAC, Flight, the xarray backend) is asked as both; the
service's one access check decides, so they must agree with each other.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Iterator

import httpx
import pyarrow.flight as fl
import pytest
import xarray as xr

import dstp
from dstp.auth import TokenStore
from dstp.server import DstpServer
from dstp.settings import Settings


@pytest.fixture(scope="module")
def secured(catalog_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DstpServer, dict[str, str]]]:
    root = tmp_path_factory.mktemp("secured")
    shutil.copytree(catalog_root / "ccm3", root / "ccm3")
    shutil.copytree(catalog_root / "ocean", root / "ocean")
    xml = root / "ocean" / "ocean.dstp.xml"
    text = xml.read_text()
    assert '<access policy="public"/>' in text
    xml.write_text(text.replace('<access policy="public"/>', '<access policy="restricted" groups="polar"/>'))
    store = root / "tokens.json"
    tokens = TokenStore(store)
    issued = {"alice": tokens.create("alice", ["polar"]).secret, "bob": tokens.create("bob").secret}
    settings = Settings(catalog_root=root, port=0, http_port=0, data_port=-1, udt_port=-1, flight_port=0,
                        token_store=store, allow_anonymous="true")
    with DstpServer(settings) as srv:
        yield srv, issued


def _http(srv: DstpServer, token: str) -> httpx.Client:
    assert srv.endpoints is not None
    return httpx.Client(base_url=f"http://{srv.endpoints.http}", headers={"Authorization": f"Bearer {token}"},
                        timeout=30)


@pytest.mark.parametrize("who, sees", [("alice", True), ("bob", False)])
def test_erddap_and_stac_show_only_what_the_caller_may_read(secured: tuple[DstpServer, dict[str, str]],
                                                             who: str, sees: bool) -> None:
    srv, tokens = secured
    with _http(srv, tokens[who]) as http:
        data = http.get("/erddap/griddap/ocean.csv?salinity[0][0][0][0:1:3]")
        assert data.status_code == (200 if sees else 404), data.text
        listing = http.get("/erddap/tabledap/allDatasets.csv?datasetID").text
        assert ("ocean" in listing) is sees
        search = http.get("/erddap/search/index.csv?searchFor=salinity")
        assert search.status_code == (200 if sees else 404)
        ids = {c["id"] for c in http.get("/stac/collections").json()["collections"]}
        assert ids == ({"ccm3", "ocean"} if sees else {"ccm3"})
        assert http.get("/stac/collections/ocean").status_code == (200 if sees else 404)
    with httpx.Client(base_url=f"http://{srv.endpoints.http}", timeout=30) as anonymous:  # type: ignore[union-attr]
        assert anonymous.get("/erddap/griddap/ocean.das").status_code == 404


@pytest.mark.parametrize("who, sees", [("alice", True), ("bob", False)])
def test_flight_shows_only_what_the_caller_may_read(secured: tuple[DstpServer, dict[str, str]],
                                                    who: str, sees: bool) -> None:
    srv, tokens = secured
    assert srv.endpoints is not None
    options = fl.FlightCallOptions(headers=[(b"authorization", f"Bearer {tokens[who]}".encode())])
    with fl.connect(f"grpc://{srv.endpoints.flight}") as flight:
        names = {f.descriptor.path[0].decode() for f in flight.list_flights(options=options)}
        assert names == ({"ccm3", "ocean"} if sees else {"ccm3"})
        if sees:
            info = flight.get_flight_info(fl.FlightDescriptor.for_path("ocean"), options)
            assert flight.do_get(info.endpoints[0].ticket, options).read_all().num_rows == 186_624
        else:
            with pytest.raises(fl.FlightError, match=r"\[dstp:dataset_not_found\]"):
                flight.get_flight_info(fl.FlightDescriptor.for_path("ocean"), options)
        with pytest.raises(fl.FlightUnauthenticatedError, match=r"\[dstp:"):
            bad = fl.FlightCallOptions(headers=[(b"authorization", b"Bearer dstp_nosuch_token")])
            list(flight.list_flights(options=bad))


def test_a_flight_ticket_is_bound_to_who_asked(secured: tuple[DstpServer, dict[str, str]]) -> None:
    srv, tokens = secured
    assert srv.endpoints is not None
    alice = fl.FlightCallOptions(headers=[(b"authorization", f"Bearer {tokens['alice']}".encode())])
    bob = fl.FlightCallOptions(headers=[(b"authorization", f"Bearer {tokens['bob']}".encode())])
    with fl.connect(f"grpc://{srv.endpoints.flight}") as flight:
        info = flight.get_flight_info(fl.FlightDescriptor.for_command("select gw from ccm3"), alice)
        with pytest.raises(fl.FlightError, match=r"\[dstp:bad_ticket\]"):
            flight.do_get(info.endpoints[0].ticket, bob).read_all()
        assert flight.do_get(info.endpoints[0].ticket, alice).read_all().num_rows == 32  # still alice's


def test_the_xarray_backend_uses_the_callers_token(secured: tuple[DstpServer, dict[str, str]]) -> None:
    srv, tokens = secured
    assert srv.endpoints is not None
    url = f"dstp://{srv.endpoints.grpc}/ocean"
    ds = xr.open_dataset(url, engine="dstp", token=tokens["alice"])
    assert ds.salinity.isel(time=0, depth=0).load().shape == (36, 72)
    with pytest.raises(dstp.DatasetNotFoundError):
        xr.open_dataset(url, engine="dstp", token=tokens["bob"])
