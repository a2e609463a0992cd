"""Server-side map rendering, free of web code: a lat/lon slab sampled onto map pixels and coloured.

:mod:`dstp.render.raster` holds the pieces: :class:`Slab` (one 2-D field with its
latitudes and longitudes, rectilinear or curvilinear), :func:`tile_lonlat` /
:func:`bbox_lonlat` (the lon/lat at the centre of each output pixel, Web Mercator by
its closed form), :func:`sample` (nearest cell, or NaN outside the data) and
:func:`colour` / :func:`png` (a matplotlib colour map, Pillow's PNG encoder).
"""

from dstp.render.raster import (
    COLORMAPS,
    Projection,
    Slab,
    bbox_lonlat,
    colour,
    legend_png,
    png,
    sample,
    tile_lonlat,
)

__all__ = ["COLORMAPS", "Projection", "Slab", "bbox_lonlat", "colour", "legend_png", "png", "sample", "tile_lonlat"]
