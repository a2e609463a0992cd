"""The catalog: descriptors, netCDF introspection and the registry of published datasets.

Installed as ``dstp.catalog``. Reading order for a newcomer: ``descriptor``
(the XML a publisher writes), ``publish`` (drafting one from CF metadata),
``cf`` (decoding rules, text and text times), ``netcdf4_`` (file access),
``dataset`` (a descriptor bound to its files; ``binding`` checks each column
against them, ``aggregation`` lines files up), ``dsg`` (station, profile and
trajectory data as tables of observations), ``hdfeos`` (HDF-EOS5 swaths and
grids), ``ugrid`` (unstructured meshes), ``registry`` (all datasets under
a root), and what keeps it current: ``index`` (what is kept between runs),
``facts`` (per file), ``rescan`` (one look), ``changes`` (versions and the
change log), ``live`` (the file watch).
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dstp.catalog.changes import Change, ChangeFeed
    from dstp.catalog.dataset import AttributeColumn, CoordinateColumn, Dimension, GriddedDataset
    from dstp.catalog.descriptor import Descriptor, parse_descriptor, read_descriptor, render_descriptor
    from dstp.catalog.publish import draft_descriptor, publish
    from dstp.catalog.registry import Catalog, CatalogPage, HeldBack, Problem

#: The module each name of ``__all__`` lives in: imported on first use, so that a process that needs one part
#: of the catalog (a cold build's header-reading helpers: netCDF-C and the header rules) does not load the
#: rest (the query columns, pyarrow, the registry): 0.23 s of each helper's start.
_HOMES = {
    "AttributeColumn": "dataset", "CoordinateColumn": "dataset", "Dimension": "dataset", "GriddedDataset": "dataset",
    "Descriptor": "descriptor", "parse_descriptor": "descriptor", "read_descriptor": "descriptor",
    "render_descriptor": "descriptor", "draft_descriptor": "publish", "publish": "publish",
    "Change": "changes", "ChangeFeed": "changes",
    "Catalog": "registry", "CatalogPage": "registry", "HeldBack": "registry", "Problem": "registry",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'dstp.catalog' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"dstp.catalog.{home}"), name)
    globals()[name] = value
    return value


__all__ = [
    "AttributeColumn",
    "Catalog",
    "CatalogPage",
    "Change",
    "ChangeFeed",
    "CoordinateColumn",
    "Descriptor",
    "Dimension",
    "GriddedDataset",
    "HeldBack",
    "Problem",
    "draft_descriptor",
    "parse_descriptor",
    "publish",
    "read_descriptor",
    "render_descriptor",
]
