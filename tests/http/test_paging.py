"""Listings page at scale: 1,200 one-file datasets through every listing door, each followed page by page.

The expected ids are the generator's own (``many_datasets``: ids ``ds_00000`` …, "Sea ice" in every 100th title,
a few restricted to the group ``polar``), never read back from the server. Following a door's next links from its
first page must list exactly the datasets the caller may read, in id order, each once: for alice (in polar)
all 1,200, for bob the others.
"""

from __future__ import annotations

import csv
import io
import json
from typing import Iterator

import httpx
import pytest
from many_datasets import many_datasets

import dstp
from dstp.auth import TokenStore
from dstp.cli import main
from dstp.server import DstpServer
from dstp.settings import Settings

N = 1_200
RESTRICTED = {7, 450, 451, 999, 1_100}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DstpServer, dict[str, str], dict[str, list[str]]]]:
    root = tmp_path_factory.mktemp("many")
    ids = many_datasets(root / "catalog", N, restricted=RESTRICTED)
    tokens = TokenStore(root / "tokens.json")
    issued = {"alice": tokens.create("alice", ["polar"]).secret, "bob": tokens.create("bob").secret}
    expected = {"alice": ids, "bob": [d for i, d in enumerate(ids) if i not in RESTRICTED]}
    settings = Settings(catalog_root=root / "catalog", port=0, http_port=0, data_port=-1, udt_port=-1,
                        state_dir=root / "state", catalog_settle_s=0.0, catalog_watch=False, catalog_poll_s=0.0, catalog_rescan_s=0.0,
                        token_store=root / "tokens.json", allow_anonymous="true")
    with DstpServer(settings) as server:
        assert server.catalog is not None and len(server.catalog) == N, server.catalog.problems if server.catalog \
            else None
        yield server, issued, expected


def _http(server: DstpServer, token: str) -> httpx.Client:
    assert server.endpoints is not None
    return httpx.Client(base_url=f"http://{server.endpoints.http}", headers={"Authorization": f"Bearer {token}"},
                        timeout=120)


@pytest.mark.parametrize("who", ["alice", "bob"])
def test_datasets_json_pages_follow_their_link_headers(served, who: str) -> None:
    server, tokens, expected = served
    seen, pages = [], 0
    with _http(server, tokens[who]) as http:
        answer = http.get("/datasets.json", params={"limit": 250})
        while True:
            assert answer.status_code == 200, answer.text
            assert int(answer.headers["x-total-count"]) == len(expected[who])
            seen += [d["id"] for d in answer.json()]
            pages += 1
            if "next" not in answer.links:
                break
            answer = http.get(answer.links["next"]["url"])
        assert seen == expected[who] and pages == -(-len(expected[who]) // 250)
        back = http.get("/datasets.json", params={"limit": 250, "offset": 500})
        assert back.links["prev"]["url"].endswith("offset=250&limit=250")
        # without limit or offset: the whole listing, as before paging
        assert [d["id"] for d in http.get("/datasets.json").json()] == expected[who]


@pytest.mark.parametrize("who", ["alice", "bob"])
def test_stac_collections_follow_next_links(served, who: str) -> None:
    server, tokens, expected = served
    seen = []
    with _http(server, tokens[who]) as http:
        body = http.get("/stac/collections").json()
        assert len(body["collections"]) == 100 and body["numberMatched"] == len(expected[who])  # the default page
        while True:
            seen += [c["id"] for c in body["collections"]]
            assert body["numberReturned"] == len(body["collections"])
            nxt = [link["href"] for link in body["links"] if link["rel"] == "next"]
            if not nxt:
                break
            body = http.get(nxt[0].replace(str(http.base_url).rstrip("/"), "")).json()
            if len(seen) == 100:
                assert any(link["rel"] == "prev" for link in body["links"])
    assert seen == expected[who]


def test_erddap_lists_page_by_page_and_items_per_page(served) -> None:
    server, tokens, expected = served
    ids = expected["bob"]
    with _http(server, tokens["bob"]) as http:
        first = http.get("/erddap/info/index.json").json()["table"]
        column = first["columnNames"].index("Dataset ID")
        assert [row[column] for row in first["rows"]] == ids[:1000]  # ERDDAP's default: page=1, itemsPerPage=1000
        second = http.get("/erddap/info/index.json", params={"page": 2, "itemsPerPage": 500}).json()["table"]
        assert [row[column] for row in second["rows"]] == ids[500:1000]
        listed = http.get("/erddap/tabledap/allDatasets.csv?datasetID,title&page=3&itemsPerPage=100")
        assert listed.status_code == 200, listed.text
        rows = list(csv.reader(io.StringIO(listed.text)))[2:]  # names, units, then rows
        assert [r[0] for r in rows] == ids[200:300]
        assert all(("Sea ice" in r[1]) == (int(r[0][3:]) % 100 == 0) for r in rows)
        whole = list(csv.reader(io.StringIO(http.get("/erddap/tabledap/allDatasets.csv?datasetID").text)))[2:]
        assert [r[0] for r in whole] == ids  # allDatasets without page= lists every dataset, as ERDDAP does
        bad = http.get("/erddap/info/index.json", params={"page": "0"})
        assert bad.status_code == 400 and "page='0'" in bad.text


def test_the_home_page_pages_and_searches(served) -> None:
    server, tokens, expected = served
    ids = expected["alice"]
    with _http(server, tokens["alice"]) as http:
        page = http.get("/index.json", params={"limit": 50, "offset": 100}).json()
        assert [d["id"] for d in page["datasets"]] == ids[100:150] and page["count"] == N
        assert page["paging"]["next"] == "/?offset=150&limit=50" and page["paging"]["prev"] == "/?offset=50&limit=50"
        assert page["facets"]["attribute"] == [] and not page["facets"]["counted"]  # 1,200 > FACETS_MAX
        html = http.get("/", params={"limit": 50, "offset": 100}).text
        assert 'rel="next" href="/?offset=150&amp;limit=50"' in html and "101–150 of 1,200" in html
        found = http.get("/index.json", params={"q": "sea ice"}).json()
        assert sorted(d["id"] for d in found["datasets"]) == [i for i in ids if int(i[3:]) % 100 == 0]
        assert found["count"] == N // 100 and found["paging"]["next"] is None


def test_grpc_listing_and_dstp_ls_page_through(served, capsys: pytest.CaptureFixture[str]) -> None:
    server, tokens, expected = served
    assert server.endpoints is not None
    with dstp.connect(server.endpoints.grpc, token=tokens["bob"]) as client:
        page = client.datasets_page(offset=1000, limit=500)
        assert [d.id for d in page.datasets] == expected["bob"][1000:] and page.next_offset == 0
        assert page.total == len(expected["bob"])
        found = client.datasets_page(search="sea ice", limit=5)
        assert [d.id for d in found.datasets] == ["ds_00000", "ds_00100", "ds_00200", "ds_00300", "ds_00400"]
        sea_ice = [i for i in expected["bob"] if int(i[3:]) % 100 == 0]  # ds_01100 is restricted
        assert found.total == len(sea_ice) == N // 100 - 1 and found.next_offset == 5
        assert {d.version for d in found.datasets} == {1}
    target = ["--server", server.endpoints.grpc, "--token", tokens["bob"]]
    assert main(["ls", "--json", *target]) == 0
    assert [d["id"] for d in json.loads(capsys.readouterr().out)] == expected["bob"]  # three pages of 500
    assert main(["ls", "--limit", "30", *target]) == 0
    out = capsys.readouterr().out
    assert f"30 of {len(expected['bob'])} datasets shown" in out
    assert "ds_00029" in out and "ds_00031" not in out  # ds_00007 is bob's hidden one


def _erddap_ids(answer: httpx.Response) -> list[str]:
    assert answer.status_code == 200, answer.text
    table = answer.json()["table"]
    return [row[table["columnNames"].index("Dataset ID")] for row in table["rows"]]


@pytest.mark.parametrize("who", ["alice", "bob"])
def test_erddap_search_and_protocol_lists_page_as_erddap(served, who: str) -> None:
    server, tokens, expected = served
    sea_ice = [d for d in expected[who] if int(d[3:]) % 100 == 0]  # the generator's "Sea ice" titles
    with _http(server, tokens[who]) as http:
        for path in ("/erddap/tabledap/index.json", "/erddap/griddap/index.json", "/erddap/search/index.json"):
            params = {"searchFor": "t2m"} if "search" in path else {}
            assert _erddap_ids(http.get(path, params=params)) == expected[who][:1000]  # page=1, itemsPerPage=1000
            seen, page = [], 1
            while True:
                answer = http.get(path, params={**params, "page": page, "itemsPerPage": 170})
                if answer.status_code == 404:
                    assert "past the last page" in answer.text and f"of {len(expected[who]):,}" in answer.text
                    break
                seen += _erddap_ids(answer)
                page += 1
            assert seen == expected[who] and page == -(-len(expected[who]) // 170) + 1, path
            # more than the 1,000 a page of the other listings holds: every one, none left out
            assert _erddap_ids(http.get(path, params={**params, "page": 1, "itemsPerPage": 5000})) == expected[who]
        words = {"searchFor": "sea ice"}
        assert _erddap_ids(http.get("/erddap/search/index.json", params={**words, "itemsPerPage": 5})) == sea_ice[:5]
        assert _erddap_ids(http.get("/erddap/search/index.json",
                                    params={**words, "page": 3, "itemsPerPage": 5})) == sea_ice[10:15]
        refused = http.get("/erddap/search/index.json", params={**words, "page": "0"})
        assert refused.status_code == 400 and "page='0'" in refused.text


def test_erddap_all_datasets_and_info_pages_of_more_than_a_thousand_skip_none(served) -> None:
    server, tokens, expected = served
    with _http(server, tokens["alice"]) as http:
        for page in (1, 2):
            info = _erddap_ids(http.get("/erddap/info/index.json", params={"page": page, "itemsPerPage": 1100}))
            listed = list(csv.reader(io.StringIO(http.get(
                f"/erddap/tabledap/allDatasets.csv?datasetID&page={page}&itemsPerPage=1100").text)))[2:]
            assert info == [row[0] for row in listed] == expected["alice"][(page - 1) * 1100:page * 1100]


def test_erddapy_search_lists_every_match(served) -> None:
    from erddapy import ERDDAP

    server, tokens, expected = served
    assert server.endpoints is not None
    e = ERDDAP(server=f"http://{server.endpoints.http}/erddap", protocol="tabledap")
    e.requests_kwargs = {"headers": {"Authorization": f"Bearer {tokens['bob']}"}}
    url = e.get_search_url(search_for="sea ice", response="csv")  # page=1&itemsPerPage=1000000
    with _http(server, tokens["bob"]) as http:
        found = list(csv.DictReader(io.StringIO(http.get(url).text)))
    assert [row["Dataset ID"] for row in found] == [d for d in expected["bob"] if int(d[3:]) % 100 == 0]
