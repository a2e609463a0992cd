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

from dstp.catalog.dataset import AttributeColumn, CoordinateColumn, Dimension, GriddedDataset
from dstp.catalog.descriptor import Descriptor, parse_descriptor, read_descriptor, render_descriptor
from dstp.catalog.publish import draft_descriptor, publish
from dstp.catalog.changes import Change, ChangeFeed
from dstp.catalog.registry import Catalog, CatalogPage, HeldBack, Problem

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
