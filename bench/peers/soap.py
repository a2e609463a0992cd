"""The SOAP peer: a spyne service on waitress, and a zeep client.

Server: ``python -m bench.peers.soap --root CATALOG --host ADDR`` publishes the SOAP 1.1
operation ``query(threshold: double, limit: int) -> ArrayOfRecord`` where ``Record`` is
``{temperature: xs:float, time: xs:dateTime}``; the WSDL is at ``/?wsdl``. The service reads the
ccm3 files itself (:mod:`bench.peers.records`: netCDF4 + numpy) for every call and returns the
first ``limit`` records with humidity > ``threshold`` in grid order. SOAP has no query language,
so the question is an operation with parameters (as in paper 003's SOAP test).

Client: :class:`SoapClient` loads the WSDL once (untimed session setup) and then calls
``service.query`` through zeep, which parses the whole XML response into Python objects.

spyne 2.14 on Python 3.11: it imports and works; its vendored ``six`` only emits an
``ImportWarning`` (``_SixMetaPathImporter.find_spec() not found``), which Python ignores by
default. It runs in its own process here, so a warnings-as-errors test never sees it.
"""

from __future__ import annotations

import argparse
import datetime as dt
from pathlib import Path
from typing import Any, Iterator

TNS = "urn:dstp:bench:table4"


def build_app(root: Path) -> Any:
    """Return the spyne WSGI application serving the ccm3 records under catalog ``root``."""
    from spyne import Application, ComplexModel, DateTime, Double, Float, Integer, Iterable, ServiceBase, rpc
    from spyne.protocol.soap import Soap11
    from spyne.server.wsgi import WsgiApplication

    from bench.peers.records import matching_chunks

    class Record(ComplexModel):  # type: ignore[misc]
        """One record: a temperature and its time."""

        __namespace__ = TNS
        _type_info = [("temperature", Float), ("time", DateTime)]

    class Ccm3Service(ServiceBase):  # type: ignore[misc]
        """select temperature, time from ccm3 where humidity > threshold limit n."""

        @rpc(Double, Integer, _returns=Iterable(Record))  # type: ignore[misc]
        def query(ctx: Any, threshold: float, limit: int) -> Iterator[Any]:
            """Return the matching records one by one (spyne serialises them as they come)."""
            for chunk in matching_chunks(root, threshold if threshold is not None else 50.0,
                                         limit if limit is not None and limit >= 0 else None):
                when = dt.datetime.fromisoformat(str(chunk.time))
                for value in chunk.temperature.tolist():
                    yield Record(temperature=value, time=when)

    app = Application([Ccm3Service], tns=TNS, name="Ccm3", in_protocol=Soap11(validator="lxml"),
                      out_protocol=Soap11())
    return WsgiApplication(app)


class SoapClient:
    """A zeep client of the SOAP peer (WSDL loaded once at construction)."""

    def __init__(self, url: str, threshold: float = 50.0) -> None:
        import requests
        import zeep
        from zeep.transports import Transport

        self.threshold = threshold
        self._session = requests.Session()
        self._client = zeep.Client(url.rstrip("/") + "/?wsdl", transport=Transport(session=self._session),
                                   settings=zeep.Settings(xml_huge_tree=True))

    def fetch(self, limit: int) -> list[Any]:
        """Return the records of one call as zeep objects (request, XML parse, object creation)."""
        return list(self._client.service.query(threshold=self.threshold, limit=limit) or [])

    def describe(self, result: list[Any]) -> dict[str, Any]:
        """Return rows, temperature sum and first/last time of a fetched result."""
        if not result:
            return {"rows": 0, "temperature_sum": 0.0, "time_first": None, "time_last": None}
        return {"rows": len(result), "temperature_sum": float(sum(r.temperature for r in result)),
                "time_first": _iso(result[0].time), "time_last": _iso(result[-1].time)}

    def close(self) -> None:
        """Return after closing the HTTP session."""
        self._session.close()


def _iso(value: dt.datetime) -> str:
    """Return a naive ISO-8601 label of ``value`` (zeep may attach a UTC tzinfo)."""
    return value.replace(tzinfo=None).isoformat(timespec="seconds")


def main(argv: list[str] | None = None) -> None:
    """Return when the SOAP server is stopped (SIGTERM)."""
    from bench.peers.wsgi_server import serve_forever

    parser = argparse.ArgumentParser(prog="python -m bench.peers.soap", description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, required=True, help="catalog root holding ccm3/")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    serve_forever("soap", build_app(args.root), args.host, args.port)


if __name__ == "__main__":
    main()
