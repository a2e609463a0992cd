"""An unexpected failure inside a dataset read is an incident: the log holds it, with its cause, under the id the
client is told, whichever door the query came through (issue 34).

The failure is injected through a public seam: the server is given a catalog (``DstpServer(settings, catalog)``)
whose dataset's ``read`` raises, as a failing disk or a netCDF-C bug would. Before, the client was told "reading
the data failed; the server log has the details", and neither the log nor the audit line held a traceback, a
cause or an id.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from pathlib import Path
from typing import Any, Iterator

import httpx
import pyarrow.flight as fl
import pytest

import dstp
from dstp.catalog.dataset import GriddedDataset
from dstp.catalog.registry import Catalog
from dstp.server import DstpServer
from dstp.settings import Settings

SQL = "select temperature from ccm3 where lat > 80 limit 3"
CAUSE = "the disk said EIO (injected by test_incidents)"


class FailingDataset(GriddedDataset):
    """ccm3 whose every read fails the way no layer expects."""

    def read(self, *args: Any, **kwargs: Any) -> Any:
        raise OSError(5, CAUSE)


@pytest.fixture(scope="module")
def failing_server(catalog_root: Path) -> Iterator[DstpServer]:
    scanned = Catalog.scan(catalog_root)
    ds = scanned.get("ccm3")
    failing = FailingDataset(**{f.name: getattr(ds, f.name) for f in dataclasses.fields(ds)})
    catalog = Catalog(scanned.root, {"ccm3": failing}, [], handles=scanned.handles)
    settings = Settings(catalog_root=catalog_root, port=0, http_port=0, data_port=0, udt_port=-1, flight_port=0)
    with DstpServer(settings, catalog) as srv:
        yield srv


def _grpc(srv: DstpServer, transport: str) -> str:
    assert srv.endpoints is not None
    with dstp.connect(srv.endpoints.grpc) as c, pytest.raises(dstp.ServerError) as caught:
        c.query(SQL, transport=transport)
    return str(caught.value)


def _http(srv: DstpServer) -> str:
    assert srv.endpoints is not None
    r = httpx.get(f"http://{srv.endpoints.http}/query", params={"sql": SQL, "format": "csv"}, timeout=60)
    assert r.status_code == 500, r.text
    return str(r.json()["error"]["message"])


def _flight(srv: DstpServer) -> str:
    assert srv.endpoints is not None
    with fl.connect(f"grpc://{srv.endpoints.flight}") as client:
        info = client.get_flight_info(fl.FlightDescriptor.for_command(SQL))
        with pytest.raises(fl.FlightError) as caught:
            client.do_get(info.endpoints[0].ticket).read_all()
    return str(caught.value).split(". Client context:")[0]


DOORS = {"grpc": lambda s: _grpc(s, "grpc"), "striped": lambda s: _grpc(s, "striped"), "http": _http,
         "flight": _flight}


@pytest.mark.parametrize("door", list(DOORS))
def test_a_failed_read_is_logged_with_its_cause_under_the_id_the_client_sees(
        failing_server: DstpServer, door: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        message = DOORS[door](failing_server)
    found = re.search(r"incident ([0-9a-f]{12})", message)
    assert found is not None, message
    incident = found.group(1)
    assert "reading the data failed" in message and "Traceback" not in message and CAUSE not in message
    logged = [r for r in caplog.records if r.name == "dstp.incidents" and incident in r.getMessage()]
    assert len(logged) == 1, [r.getMessage() for r in caplog.records if r.name == "dstp.incidents"]
    text = logging.Formatter().format(logged[0])
    assert "Traceback" in text and CAUSE in text and "OSError" in text  # the cause, with where it was raised
    assert "in read" in text  # the frame of the failing read itself


def test_the_audit_line_names_the_incident(failing_server: DstpServer, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="dstp.audit"):
        message = _grpc(failing_server, "grpc")
    incident = re.search(r"incident ([0-9a-f]{12})", message)
    assert incident is not None, message
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "dstp.audit"]
    assert [(line["outcome"], line.get("incident")) for line in lines if line.get("sql") == SQL] == \
        [("internal", incident.group(1))]
