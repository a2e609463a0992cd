"""The peers of Table 4 (``bench.table4``): other services answering the same question as dstp.

One module per service, each a real server process that reads the ccm3 netCDF files itself
(never through dstp's query engine), plus its client:

* :mod:`bench.peers.soap` — spyne SOAP 1.1 service on waitress; zeep client.
* :mod:`bench.peers.opendap` — pydap's DAP2 server (netCDF handler) on waitress; pydap client.
* :mod:`bench.peers.flight` — ``pyarrow.flight`` DoGet server; ``FlightClient``.
* :mod:`bench.peers.http_csv` — client of dstp's own HTTP API (``/query?format=csv``).
* :mod:`bench.peers.dstp_client` — the dstp Python client over gRPC, striped TCP, auto, UDT.

Support: :mod:`~bench.peers.records` (the records, selected with netCDF4 + numpy),
:mod:`~bench.peers.sql` (the query), :mod:`~bench.peers.wsgi_server` (waitress launcher),
:mod:`~bench.peers.process` (server and client-driver processes, optionally in a network
namespace) and :mod:`~bench.peers.client` (the client driver, ``python -m bench.peers.client``).
"""
