"""Every endpoint × every access policy × every principal, before and after an embargo.

One TLS server (auth_server: tokens, sealed data channels, anonymous
allowed) publishes a public, a registered, a restricted and an embargoed
dataset. For each principal (anonymous, alice of group polar, bob of another
group) and each dataset, every gRPC rpc (ListDatasets, Describe, Query +
Fetch, Run, OpenFile + FetchFile), the data channels (striped TCP, sealed)
and every HTTP endpoint (catalog page, search, facets, counts, dataset page
and JSON, /query in every format, GET and POST, quicklooks, query builder
with its snippets) either serves the dataset or answers exactly as for a
dataset that does not exist — same error, same message — so its existence
does not leak. Expired and revoked tokens are refused everywhere. The clock
is set, not slept through, to either side of the embargo.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any, Callable, Iterator

import httpx
import pytest

import dstp
from authcase import AFTER, BEFORE
from dstp.server import DstpServer
from dstp.transport.client.tuning import AutoTuner

PRINCIPALS = ("anonymous", "alice", "bob")
DATASETS = ("ccm3", "members", "polar", "embargoed")
WHEN = {"before": BEFORE, "after": AFTER}
FORMATS = ("csv", "json", "ndjson", "arrow", "parquet", "nc")
#: Who reads what: (principal, dataset) -> (before the embargo, after it).
READABLE = {
    ("anonymous", "ccm3"): (True, True), ("anonymous", "members"): (False, False),
    ("anonymous", "polar"): (False, False), ("anonymous", "embargoed"): (False, True),
    ("alice", "ccm3"): (True, True), ("alice", "members"): (True, True),
    ("alice", "polar"): (True, True), ("alice", "embargoed"): (True, True),
    ("bob", "ccm3"): (True, True), ("bob", "members"): (True, True),
    ("bob", "polar"): (False, False), ("bob", "embargoed"): (False, True),
}
#: A column and a file of each dataset (ccm3 and members are ccm3; polar and embargoed are ocean).
COLUMN = {"ccm3": "humidity", "members": "humidity", "polar": "salinity", "embargoed": "salinity"}
FILE = {"ccm3": "ccm3_1990-01.nc", "members": "ccm3_1990-01.nc", "polar": "ocean_2000-01.nc",
        "embargoed": "ocean_2000-01.nc"}


def absent_id(dataset: str) -> str:
    """Return an id no dataset has, as long as ``dataset`` (error messages point at columns)."""
    return ("nosuch" + "x" * 20)[:len(dataset)]


def visible(principal: str, dataset: str, when: str) -> bool:
    return READABLE[(principal, dataset)][when == "after"]


@pytest.fixture(scope="module")
def secrets_of(tokens: Any) -> dict[str, str | None]:
    return {"anonymous": None, "alice": tokens.alice, "bob": tokens.bob, "carol": tokens.carol,
            "dave": tokens.dave}


@pytest.fixture(scope="module")
def grpc_clients(auth_server: DstpServer, tls: Any, secrets_of: dict[str, str | None],
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, dstp.Client]]:
    tuner = AutoTuner(tmp_path_factory.mktemp("tuner") / "tuning.json")
    clients = {name: dstp.Client(auth_server.endpoints.grpc, token=token or "", tls=True, ca_file=str(tls.cert_path),
                                 tuner=tuner) for name, token in secrets_of.items()}
    yield clients
    for c in clients.values():
        c.close()


@pytest.fixture(scope="module")
def http_clients(auth_server: DstpServer, tls: Any, secrets_of: dict[str, str | None]) -> Iterator[dict[str, httpx.Client]]:
    clients = {name: httpx.Client(base_url=f"https://{auth_server.endpoints.http}", verify=ssl.create_default_context(cafile=str(tls.cert_path)),
                                  timeout=60, headers={"Authorization": f"Bearer {token}"} if token else {})
               for name, token in secrets_of.items()}
    yield clients
    for c in clients.values():
        c.close()


@pytest.fixture()
def at(auth_clock: Any) -> Iterator[Callable[[str], None]]:
    def set_time(when: str) -> None:
        auth_clock.now = WHEN[when]

    yield set_time
    auth_clock.now = BEFORE


def same_as_absent(message: str, dataset: str, absent_message: str) -> None:
    """Assert ``message`` (about ``dataset``) is the one a dataset that does not exist gets."""
    assert message.replace(dataset, "<id>") == absent_message.replace(absent_id(dataset), "<id>"), \
        (message, absent_message)


def dstp_error(call: Callable[[], Any]) -> dstp.DstpError:
    with pytest.raises(dstp.DstpError) as info:
        call()
    return info.value


# ---------------------------------------------------------------------- gRPC and the data channels


@pytest.mark.parametrize("when", WHEN)
@pytest.mark.parametrize("principal", PRINCIPALS)
@pytest.mark.parametrize("dataset", DATASETS)
def test_grpc_and_data_channels(grpc_clients: dict[str, dstp.Client], at: Callable[[str], None], tmp_path: Path,
                                auth_catalog: Path, when: str, principal: str, dataset: str) -> None:
    at(when)
    c = grpc_clients[principal]
    ABSENT = absent_id(dataset)
    sql = f"select {COLUMN[dataset]} from {dataset} limit 3"
    absent_sql = f"select {COLUMN[dataset]} from {ABSENT} limit 3"
    file = FILE[dataset]
    calls: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {
        "Describe": (lambda: c.describe(dataset), lambda: c.describe(ABSENT)),
        "AxisValues": (lambda: c.axis_values(dataset, "lat"), lambda: c.axis_values(ABSENT, "lat")),
        "Query+Fetch": (lambda: c.query(sql, transport="auto"), lambda: c.query(absent_sql, transport="auto")),
        "Run": (lambda: c.query(sql), lambda: c.query(absent_sql)),
        "Query+striped": (lambda: c.query(sql, transport="striped", streams=2),
                          lambda: c.query(absent_sql, transport="striped", streams=2)),
        "OpenFile+FetchFile": (lambda: c.get(dataset, file, tmp_path / "g.nc", transport="grpc"),
                               lambda: c.get(ABSENT, file, tmp_path / "g.nc", transport="grpc")),
        "OpenFile+striped": (lambda: c.get(dataset, file, tmp_path / "s.nc", transport="striped", streams=2),
                             lambda: c.get(ABSENT, file, tmp_path / "s.nc", transport="striped", streams=2)),
    }
    listed = {d.id for d in c.datasets()}
    assert (dataset in listed) == visible(principal, dataset, when)
    assert listed == {d for d in DATASETS if visible(principal, d, when)}
    if visible(principal, dataset, when):
        assert c.describe(dataset).summary.id == dataset
        assert len(calls["AxisValues"][0]()) == next(d.size for d in c.describe(dataset).dimensions if d.name == "lat")
        for name in ("Query+Fetch", "Run", "Query+striped"):
            assert calls[name][0]().num_rows == 3, name
        original = (auth_catalog / dataset / file).read_bytes()
        for name, out in (("OpenFile+FetchFile", "g.nc"), ("OpenFile+striped", "s.nc")):
            calls[name][0]()
            assert (tmp_path / out).read_bytes() == original, name
        return
    for name, (call, absent) in calls.items():
        err, expected = dstp_error(call), dstp_error(absent)
        assert type(err) is dstp.DatasetNotFoundError and type(expected) is dstp.DatasetNotFoundError, name
        same_as_absent(err.message, dataset, expected.message)


# ---------------------------------------------------------------------- HTTP


@pytest.mark.parametrize("when", WHEN)
@pytest.mark.parametrize("principal", PRINCIPALS)
@pytest.mark.parametrize("dataset", DATASETS)
def test_http(http_clients: dict[str, httpx.Client], at: Callable[[str], None], when: str, principal: str,
              dataset: str) -> None:
    at(when)
    http = http_clients[principal]
    can = visible(principal, dataset, when)
    shown = {d for d in DATASETS if visible(principal, d, when)}

    # listings, search, facets, counts
    assert f'href="/datasets/{dataset}"' in http.get("/").text if can else \
        f'/datasets/{dataset}"' not in http.get("/").text
    index = http.get("/index.json").json()
    assert {d["id"] for d in index["datasets"]} == shown and index["count"] == len(shown)
    salinity = next((f["count"] for f in index["facets"]["attribute"]
                     if f["value"] in ("salinity", "sea_water_salinity")), 0)
    assert salinity == len(shown & {"polar", "embargoed"})
    searched = http.get("/index.json", params={"q": dataset}).json()
    assert (dataset in {d["id"] for d in searched["datasets"]}) == can
    assert {d["id"] for d in http.get("/datasets.json").json()} == shown
    assert (dataset in {d["id"] for d in http.get("/datasets.json", params={"q": dataset}).json()}) == can
    assert {d["id"] for d in http.get("/datasets.json", params={"attribute": COLUMN[dataset]}).json()} == \
        shown & ({"ccm3", "members"} if COLUMN[dataset] == "humidity" else {"polar", "embargoed"})

    # one dataset: pages, JSON, quicklooks, builder, snippets, queries in every format
    column = COLUMN[dataset]
    requests: dict[str, Callable[[str], httpx.Response]] = {
        "page": lambda ds: http.get(f"/datasets/{ds}", headers={"Accept": "application/json"}),
        "json": lambda ds: http.get(f"/datasets/{ds}.json"),
        "quicklook": lambda ds: http.get(f"/datasets/{ds}/quicklook.png", params={"attribute": column}),
        "timeseries": lambda ds: http.get(f"/datasets/{ds}/timeseries.png",
                                          params={"attribute": column, "lat": 0, "lon": 0}),
        "builder": lambda ds: http.get(f"/datasets/{ds}/query", headers={"Accept": "application/json"}),
        "builder.json": lambda ds: http.get(f"/datasets/{ds}/query.json", params={"select": column}),
        "query-builder": lambda ds: http.get("/query-builder", params={"dataset": ds}, follow_redirects=False),
        "POST /query": lambda ds: http.post("/query", json={"sql": f"select {column} from {ds} limit 3"}),
        **{f"/query {fmt}": (lambda ds, fmt=fmt: http.get("/query", params={
            "sql": f"select * from {ds} limit 2" if fmt == "nc" else f"select {column} from {ds} limit 3",
            "format": fmt})) for fmt in FORMATS},
    }
    for name, request in requests.items():
        r = request(dataset)
        ABSENT = absent_id(dataset)
        if can:
            assert r.status_code in (200, 307), (name, r.status_code, r.text[:300])
            continue
        absent = request(ABSENT)
        assert r.status_code == absent.status_code == 404, (name, r.status_code, absent.status_code)
        error, expected = r.json()["error"], absent.json()["error"]
        assert error["code"] == expected["code"] == "dataset_not_found", name
        same_as_absent(error["message"], dataset, expected["message"])
    if can:
        snippets = http.get(f"/datasets/{dataset}/query.json").json()["snippets"]
        assert "tls=True" in snippets["python"] and snippets["r"].startswith("library(dstp)")
        assert ("DSTP_TOKEN" in snippets["curl"]) == (principal != "anonymous")


# ---------------------------------------------------------------------- tokens that are not valid


@pytest.mark.parametrize("principal, words", [("carol", "expired"), ("dave", "revoked")])
def test_expired_and_revoked_tokens_are_refused_everywhere(grpc_clients: dict[str, dstp.Client],
                                                           http_clients: dict[str, httpx.Client], tmp_path: Path,
                                                           principal: str, words: str) -> None:
    c, http = grpc_clients[principal], http_clients[principal]
    for call in (c.datasets, lambda: c.describe("ccm3"), lambda: c.query("select temperature from ccm3 limit 1"),
                 lambda: c.query("select temperature from ccm3 limit 1", transport="striped"),
                 lambda: c.get("ccm3", FILE["ccm3"], tmp_path / "x.nc", transport="grpc"), c.ping):
        err = dstp_error(call)
        assert type(err) is dstp.AuthenticationError and words in err.message, err
    for path in ("/", "/index.json", "/datasets.json", "/datasets/ccm3", "/datasets/ccm3.json",
                 "/datasets/ccm3/quicklook.png?attribute=temperature", "/datasets/ccm3/query.json",
                 "/query?sql=select%20temperature%20from%20ccm3%20limit%201", "/server.json", "/api.json"):
        r = http.get(path, headers={"Accept": "application/json"})
        assert r.status_code == 401 and r.json()["error"]["code"] == "unauthenticated", path
        assert words in r.json()["error"]["message"] and r.headers["WWW-Authenticate"].startswith("Bearer")
    page = http.get("/datasets/ccm3", headers={"Accept": "text/html"})
    assert page.status_code == 401 and 'action="/login"' in page.text and words in page.text
