"""Drafting a descriptor from objects of a configured store: ``dstp publish s3://bucket/prefix/ --glob 'x_*.nc'``.

The URL names a place inside one of the stores the operator configured (the ``stores`` setting): the store
whose URL is the longest prefix of it. Its objects matching the glob are listed and their headers read as
:meth:`Catalog.scan <dstp.catalog.registry.Catalog.scan>` reads them — by ranged GETs of 64 KiB blocks
(:class:`~dstp.catalog.objects.ObjectFiles`), never a whole netCDF-4 object — and drafted as
:func:`~dstp.catalog.publish.publish` drafts local files. The descriptor names the store by reference,
``<files store="NAME" glob="…"/>``: never its endpoint or a credential.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Mapping

from dstp.catalog.descriptor import DESCRIPTOR_SUFFIX, render_descriptor
from dstp.catalog.facts import FactsReader, FileFacts, Headers, Unreadable, gather_many
from dstp.catalog.netcdf4_ import FileHandles
from dstp.catalog.objects import ObjectFiles, store_glob
from dstp.catalog.publish import _EVERY_SMALL, _check_servable, _note_units_per_file, draft_descriptor
from dstp.errors import CatalogError, DataFileError

__all__ = ["publish_from_store", "store_of"]


def store_of(url: str, objects: ObjectFiles | None) -> tuple[str, str]:
    """Return (the store's name, the key prefix below its URL) of the configured store ``url`` lies in; raise
    CatalogError naming the setting to add when none does."""
    wanted = url if url.endswith("/") else url + "/"
    best: tuple[str, str] | None = None
    for name, store in sorted((objects.stores if objects is not None else {}).items()):
        root = store.config.url.rstrip("/") + "/"
        if wanted.startswith(root) and (best is None or len(root) > len(best[1])):
            best = (name, root)
    if best is None:
        known = ", ".join(f"{n} ({s.config.url})" for n, s in sorted((objects.stores if objects else {}).items()))
        example = json.dumps({"NAME": {"url": url.rstrip("/")}})
        raise CatalogError(f"{url} is in no store the server knows ({known or 'none is configured'}): add it to the "
                           f"stores setting (DSTP_STORES), e.g. {example}, with its region, endpoint and the names of "
                           "the environment variables holding its credentials (docs/object-stores.md)")
    name, root = best
    return name, wanted[len(root):]


def publish_from_store(url: str, glob: str, dataset_id: str, objects: ObjectFiles | None, catalog_root: Path, *,
                       rename: Mapping[str, str] | None = None, title: str | None = None, overwrite: bool = False,
                       group: str | None = None, notes: list[str] | None = None) -> Path:
    """Draft a descriptor of the objects below ``url`` matching ``glob`` and write it to
    ``catalog_root/ID/ID.dstp.xml``; return its path. Nothing is written unless the server would serve it."""
    if "/" in glob:
        raise CatalogError(f"--glob takes a pattern of object names below {url} (no '/'), got {glob!r}")
    if glob.rstrip("/").endswith(".zarr"):
        raise CatalogError(f"--glob {glob!r} names Zarr stores, which dstp publish does not draft from a store yet: "
                           "draft from a local copy of one, then add store= and the key glob (docs/publishing.md)")
    name, prefix = store_of(url, objects)
    assert objects is not None
    folder = (catalog_root / dataset_id).resolve()
    pattern = prefix + glob
    listed = sorted(objects.list_files(folder, store_glob(name, pattern)))
    if not listed:
        raise CatalogError(f"no object of store {name!r} matches {glob!r} below {url}")
    paths = [Path(p) for p, _ in listed]
    handles = FileHandles(objects=objects)
    try:
        found = list(gather_many(handles, [(p, _EVERY_SMALL) for p in paths], Headers(), 1))
        bad = [f for f in found if isinstance(f, Unreadable)]
        if bad:
            raise DataFileError(bad[0].reason + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""))
        facts = {f.path: f for f in found if isinstance(f, FileFacts)}
        reader = FactsReader(handles, facts)
        desc = draft_descriptor(paths, dataset_id, rename=rename, title=title, group=group, files_glob=glob,
                                reader=reader)
        if desc.parts:
            raise CatalogError(f"the objects matching {glob!r} are split by variable (<part>), which a store's files "
                               "cannot be yet; publish each variable's objects as a dataset of its own")
        path = folder / f"{dataset_id}{DESCRIPTOR_SUFFIX}"
        desc = replace(desc, files_store=name, files_glob=pattern, path=path)
        metas = [reader.inspect(p) for p in paths]
        if notes is not None and title is None and not str(metas[0].attrs.get("title", "")).strip():
            notes.append(f"the objects have no title attribute (ACDD): the title was drafted from their variables, "
                         f"{desc.title!r}; give a better one with --title or in {path.name}")
        if path.exists() and not overwrite:
            raise CatalogError(f"{path} exists; pass --overwrite to replace it")
        text = _note_units_per_file(render_descriptor(desc), desc, metas)
        _check_servable(text, path, handles, reader, [(Path(p), identity) for p, identity in listed])
    finally:
        handles.close()
    folder.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text)
    return path
