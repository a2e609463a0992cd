"""The wire form of the change feed (``WatchCatalog``): a :class:`~dstp.catalog.changes.Change` and back.

Server and client share it, as they share :mod:`.codec` for the other messages.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dstp.proto import dstp_pb2 as pb

if TYPE_CHECKING:
    from dstp.catalog.changes import Change

__all__ = ["KINDS", "change_from_pb", "change_pb"]

#: The change kinds of the core (``dstp.catalog.changes``) and their wire values.
KINDS = {"added": pb.CHANGE_KIND_ADDED, "changed": pb.CHANGE_KIND_CHANGED, "removed": pb.CHANGE_KIND_REMOVED}
_NAMES = {v: k for k, v in KINDS.items()}


def change_pb(c: "Change") -> pb.CatalogChange:
    """Return the wire form of one change."""
    return pb.CatalogChange(
        seq=c.seq, at_unix_ms=int(round(c.at * 1000)), dataset=c.dataset, version=c.version, kind=KINDS[c.kind],
        files_added=list(c.files_added), files_removed=list(c.files_removed), files_changed=list(c.files_changed),
        files_renamed=[pb.FileRename(old_path=a, new_path=b) for a, b in c.files_renamed],
        columns=list(c.columns), axis=c.axis, first=c.first, last=c.last, descriptor=c.descriptor)


def change_from_pb(m: pb.CatalogChange) -> "Change":
    """Return the change a CatalogChange message carries."""
    from dstp.catalog.changes import Change

    return Change(seq=m.seq, at=m.at_unix_ms / 1000, dataset=m.dataset, version=m.version,
                  kind=_NAMES.get(m.kind, "changed"), files_added=tuple(m.files_added),
                  files_removed=tuple(m.files_removed), files_changed=tuple(m.files_changed),
                  files_renamed=tuple((r.old_path, r.new_path) for r in m.files_renamed), columns=tuple(m.columns),
                  first=m.first, last=m.last, axis=m.axis, descriptor=m.descriptor)
