"""The ERDDAP facade's core, free of web code: what griddap and tabledap requests mean and what their answers are.

:mod:`~dstp.erddap.dataset` (a dataset as ERDDAP sees it: axes, variables, griddap/tabledap request grammar →
one query), :mod:`~dstp.erddap.times` (ERDDAP's time labels and "seconds since 1970" on the dataset's calendar),
:mod:`~dstp.erddap.formats` (the file types: .csv, .json, .nc, .ncCF, .parquet…, and the attribute tables) and
:mod:`~dstp.erddap.ucum` (UDUNITS → UCUM). The routes are :mod:`dstp.http.facade_routes`; the OPeNDAP model
(:mod:`dstp.opendap`) reuses the dataset view, attributes and time labels.
"""
