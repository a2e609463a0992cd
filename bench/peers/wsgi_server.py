"""A WSGI application on waitress, announced on stdout.

The SOAP and OPeNDAP peers are WSGI applications. Both run on waitress (a production,
pure-Python WSGI server): HTTP/1.1 with keep-alive, so a client's session reuses one TCP
connection, and its congestion window, from request to request, as it would against a
deployed SOAP or OPeNDAP (Hyrax, THREDDS) server. The standard library's ``wsgiref`` closes
the connection after every response, which on a 110 ms path costs each of the OPeNDAP
client's requests an extra round trip and a fresh slow start. :func:`announce` prints the line
``bench.peers.process`` waits for.
"""

from __future__ import annotations

import signal
import sys
from typing import Any, Callable

WsgiApp = Callable[..., Any]


def announce(peer: str, url: str) -> None:
    """Return after printing ``listening PEER URL`` (the line the launcher parses) and flushing."""
    print(f"listening {peer} {url}", flush=True)


def serve_forever(peer: str, app: WsgiApp, host: str, port: int = 0, path: str = "/") -> None:
    """Return when SIGTERM/SIGINT stops the server that serves ``app`` on ``host:port`` (0 = any)."""
    from waitress.server import create_server

    server: Any = create_server(app, host=host, port=port, threads=2, ident=peer,
                                channel_timeout=600, expose_tracebacks=False)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    announce(peer, f"http://{host}:{server.effective_port}{path}")
    try:
        server.run()
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        server.close()
