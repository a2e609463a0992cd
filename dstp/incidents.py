"""Incidents: a failure the server did not expect, logged once with its cause under an id the client is told.

    for_client(exc, door) -> DstpError   what a door sends for ``exc``; an incident is logged here, once
    mint(err) -> str                     the incident id of a 500-class error (given once, kept after)

A refusal the user can act on (a bad query, a hidden dataset, a full server)
is sent as it is and is no incident. An incident is anything else: an
exception no layer expected, or an error of the tree whose HTTP status is 500
(``ServerError`` — "reading the data failed" —, ``DataFileError``). Inside,
each layer keeps the cause (``raise ServerError(…) from exc``); the door that
answers the client (gRPC, HTTP, Flight, a data channel) calls
:func:`for_client`, which logs the whole chain — traceback, cause, the door —
under one id at ERROR on the ``dstp.incidents`` logger, and returns the error
whose message names that id: ``reading the data failed (incident
1a2b3c4d5e6f); the server log has the details``. The id is given once per
error (:func:`mint`), so the audit line of the query written before the door
sees it (dstp/service/queries.py) names the same id, and a failure a second
door sees again (a transfer's stripes) is not logged twice. No traceback and
no exception type from a lower library reaches the client.
"""

from __future__ import annotations

import logging
import threading
import uuid

from dstp.errors import DstpError, ServerError

__all__ = ["for_client", "is_incident", "mint"]

log = logging.getLogger("dstp.incidents")

_lock = threading.Lock()


def is_incident(exc: BaseException) -> bool:
    """Return whether ``exc`` is an incident: not a dstp error, or one of HTTP status 500."""
    return not isinstance(exc, DstpError) or exc.http_status == 500


def mint(err: DstpError) -> str:
    """Return the incident id of ``err``, giving it one (and naming it in its message) the first time."""
    with _lock:
        if not err.incident:
            err.incident = uuid.uuid4().hex[:12]
            err.message = f"{err.message} (incident {err.incident}); the server log has the details"
            err.args = (err.message,)
        return err.incident


def for_client(exc: BaseException, door: str) -> DstpError:
    """Return the error ``door`` sends for ``exc``: a refusal as it is; an incident logged (once) and named.

    ``door`` says where it surfaced ("grpc", "http", "flight", "striped channel"…), for the log line.
    """
    if isinstance(exc, DstpError) and not is_incident(exc):
        return exc
    if isinstance(exc, DstpError):
        err = exc
    else:
        err = ServerError("unexpected server error")
        err.__cause__ = exc
    mint(err)
    with _lock:
        first = not err.logged
        err.logged = True
    if first:
        log.error("incident %s (%s): %s", err.incident, door, err.message, exc_info=err)
    return err
