"""WMS 1.3.0 translated to map calls: parameters in, capabilities and exception reports out.

Framework-free; the routes (``/wms`` and ERDDAP's ``/erddap/wms/{dataset}/request``)
are in :mod:`dstp.http.map_routes`. Layers are named ``dataset/variable`` (also
``dataset:variable``, ERDDAP's spelling; under ERDDAP's path the variable alone).
Styles are colour maps. ``TIME`` and ``ELEVATION`` take the dataset's own values
(the nearest is drawn; a trailing ``Z`` is accepted), ``COLORSCALERANGE=min,max``
(ncWMS's parameter) sets the colour range. In 1.3.0 ``EPSG:4326`` orders its BBOX
latitude first (``minlat,minlon,maxlat,maxlon``), ``CRS:84`` longitude first;
``EPSG:3857`` is Web Mercator metres. Errors are ``ServiceExceptionReport``
documents with HTTP 400 (404 for a dataset the caller may not read, as elsewhere).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence
from xml.sax.saxutils import escape, quoteattr

from dstp.errors import BadRequestError
from dstp.http.maps import Style
from dstp.render import COLORMAPS

__all__ = ["CRSES", "CapabilityLayer", "WmsParams", "capabilities_xml", "exception_xml", "feature_info_text"]

CRSES = ("CRS:84", "EPSG:4326", "EPSG:3857")
VERSION = "1.3.0"
FORMATS = ("image/png",)
INFO_FORMATS = ("text/plain", "application/json")


class Coded(Exception):
    """Carries a user-visible :class:`~dstp.errors.DstpError` with the WMS exception code it maps to."""

    def __init__(self, code: str, error: Exception) -> None:
        super().__init__(str(error))
        self.code = code
        self.error = error


@dataclass(frozen=True, slots=True)
class CapabilityLayer:
    """One layer of the capabilities document."""

    name: str
    title: str
    abstract: str
    units: str
    #: west, south, east, north in degrees.
    bbox: tuple[float, float, float, float]
    times: tuple[str, ...]
    levels: tuple[str, ...]
    level_units: str


class WmsParams:
    """A WMS request's parameters, keys case-insensitive (as the standard says)."""

    def __init__(self, params: Mapping[str, str], dataset: str | None = None) -> None:
        self.params = {k.upper(): v for k, v in params.items()}
        self.dataset = dataset

    def get(self, key: str, default: str = "") -> str:
        return self.params.get(key, default).strip()

    def need(self, key: str, code: str = "MissingParameterValue") -> str:
        value = self.get(key)
        if not value:
            raise Coded(code, BadRequestError(f"the WMS request has no {key}= parameter; {self._needs()}"))
        return value

    def _needs(self) -> str:
        return {"GETMAP": "GetMap needs LAYERS, STYLES, CRS, BBOX, WIDTH, HEIGHT and FORMAT",
                "GETFEATUREINFO": "GetFeatureInfo needs the GetMap parameters and QUERY_LAYERS, I, J, INFO_FORMAT",
                "GETLEGENDGRAPHIC": "GetLegendGraphic needs LAYER"}.get(self.get("REQUEST").upper(),
                                                                       "see GetCapabilities")

    def request(self) -> str:
        """Return the operation: GetCapabilities, GetMap, GetFeatureInfo or GetLegendGraphic."""
        asked = self.need("REQUEST", "OperationNotSupported")
        for known in ("GetCapabilities", "GetMap", "GetFeatureInfo", "GetLegendGraphic"):
            if asked.lower() == known.lower():
                return known
        raise Coded("OperationNotSupported", BadRequestError(
            f"REQUEST={asked} is not a WMS operation this server offers; use GetCapabilities, GetMap, "
            "GetFeatureInfo or GetLegendGraphic"))

    def check_version(self) -> None:
        service = self.get("SERVICE")
        if service and service.upper() != "WMS":
            raise Coded("InvalidParameterValue", BadRequestError(f"SERVICE={service} is not WMS"))
        version = self.get("VERSION")
        if version and version != VERSION and self.request() != "GetCapabilities":
            raise Coded("InvalidParameterValue", BadRequestError(
                f"VERSION={version} is not served; this server speaks WMS {VERSION}"))

    def layer(self, key: str = "LAYERS") -> tuple[str, str]:
        """Return (dataset, variable) of the one layer named by ``key``."""
        text = self.need(key, "LayerNotDefined")
        if "," in text:
            raise Coded("InvalidParameterValue", BadRequestError(
                f"{key}={text} names several layers; ask for one layer per request"))
        for sep in ("/", ":"):
            if sep in text:
                dataset, variable = text.split(sep, 1)
                if self.dataset is not None and dataset != self.dataset:
                    raise Coded("LayerNotDefined", BadRequestError(
                        f"{key}={text} is not a layer of {self.dataset}; name a variable of it"))
                return dataset, variable
        if self.dataset is not None:
            return self.dataset, text
        raise Coded("LayerNotDefined", BadRequestError(
            f"{key}={text} is not a layer name; layers are named dataset/variable, e.g. ccm3/temperature"))

    def style(self) -> Style:
        """Return the colour map of STYLES (or STYLE) and the range of COLORSCALERANGE."""
        name = (self.get("STYLES") or self.get("STYLE")).split(",")[0].strip() or COLORMAPS[0]
        if name.lower() == "default":
            name = COLORMAPS[0]
        if name not in COLORMAPS:
            raise Coded("StyleNotDefined", BadRequestError(
                f"STYLES={name} is not a style; styles are the colour maps {', '.join(COLORMAPS)}"))
        low = high = None
        scale = self.get("COLORSCALERANGE")
        if scale:
            try:
                low, high = (float(v) for v in scale.split(","))
            except ValueError:
                raise Coded("InvalidParameterValue", BadRequestError(
                    f"COLORSCALERANGE={scale} is not two numbers min,max (e.g. 250,310)")) from None
        return Style(name, low, high)

    def dimensions(self) -> dict[str, str]:
        """Return time and elevation as the map source takes them."""
        time = self.get("TIME")
        if time.endswith("Z"):
            time = time[:-1]
        if "/" in time or "," in time:
            raise Coded("InvalidDimensionValue", BadRequestError(
                f"TIME={time} is a list or range; ask for one of the layer's times"))
        return {"time": time, "elevation": self.get("ELEVATION")}

    def integer(self, key: str, code: str = "InvalidParameterValue") -> int:
        text = self.need(key)
        try:
            return int(text)
        except ValueError:
            raise Coded(code, BadRequestError(f"{key}={text} is not a whole number")) from None

    def crs_and_bbox(self) -> tuple[str, tuple[float, float, float, float]]:
        """Return the CRS and the BBOX as (min x, min y, max x, max y) with x = longitude for the geographic CRSes."""
        crs = self.need("CRS", "InvalidCRS").upper()
        if crs not in CRSES:
            raise Coded("InvalidCRS", BadRequestError(f"CRS={crs} is not offered; use one of {', '.join(CRSES)}"))
        text = self.need("BBOX")
        try:
            a, b, c, d = (float(v) for v in text.split(","))
        except ValueError:
            raise Coded("InvalidParameterValue", BadRequestError(
                f"BBOX={text} is not four numbers minx,miny,maxx,maxy")) from None
        if not all(math.isfinite(v) for v in (a, b, c, d)):
            raise Coded("InvalidParameterValue", BadRequestError(f"BBOX={text} has a number that is not finite"))
        if crs == "EPSG:4326":  # WMS 1.3.0: the CRS's own axis order, latitude first
            return crs, (b, a, d, c)
        return crs, (a, b, c, d)

    def format(self, key: str = "FORMAT", offered: Sequence[str] = FORMATS) -> str:
        asked = self.need(key, "InvalidFormat")
        if asked not in offered:
            raise Coded("InvalidFormat", BadRequestError(f"{key}={asked} is not offered; use {', '.join(offered)}"))
        return asked


def exception_xml(message: str, code: str = "") -> str:
    """Return a WMS 1.3.0 ServiceExceptionReport holding ``message``."""
    attr = f" code={quoteattr(code)}" if code else ""
    return ('<?xml version="1.0" encoding="UTF-8"?>\n'
            f'<ServiceExceptionReport version="{VERSION}" xmlns="http://www.opengis.net/ogc">\n'
            f"  <ServiceException{attr}>{escape(message)}</ServiceException>\n</ServiceExceptionReport>\n")


def _online(url: str) -> str:
    return (f'<DCPType><HTTP><Get><OnlineResource xlink:type="simple" xlink:href={quoteattr(url)}/></Get></HTTP>'
            "</DCPType>")


def _layer_xml(layer: CapabilityLayer, url: str) -> str:
    west, south, east, north = layer.bbox
    crs = "".join(f"<CRS>{c}</CRS>" for c in CRSES)
    boxes = (f'<BoundingBox CRS="CRS:84" minx="{west}" miny="{south}" maxx="{east}" maxy="{north}"/>'
             f'<BoundingBox CRS="EPSG:4326" minx="{south}" miny="{west}" maxx="{north}" maxy="{east}"/>')
    dims = ""
    if layer.times:
        dims += (f'<Dimension name="time" units="ISO8601" default={quoteattr(layer.times[0])} nearestValue="1">'
                 f"{escape(','.join(layer.times))}</Dimension>")
    if layer.levels:
        dims += (f'<Dimension name="elevation" units={quoteattr(layer.level_units or "unknown")} '
                 f'default={quoteattr(layer.levels[0])} nearestValue="1">{escape(",".join(layer.levels))}'
                 "</Dimension>")
    styles = "".join(
        f"<Style><Name>{c}</Name><Title>{c} colour map</Title><LegendURL width=\"80\" height=\"260\">"
        "<Format>image/png</Format>"
        f'<OnlineResource xlink:type="simple" xlink:href={quoteattr(url + "?SERVICE=WMS&REQUEST=GetLegendGraphic&VERSION=1.3.0&FORMAT=image/png&LAYER=" + layer.name + "&STYLE=" + c)}/>'  # noqa: E501
        "</LegendURL></Style>" for c in COLORMAPS)
    return (f'<Layer queryable="1" opaque="0"><Name>{escape(layer.name)}</Name><Title>{escape(layer.title)}</Title>'
            f"<Abstract>{escape(layer.abstract)}</Abstract>{crs}"
            f"<EX_GeographicBoundingBox><westBoundLongitude>{west}</westBoundLongitude>"
            f"<eastBoundLongitude>{east}</eastBoundLongitude><southBoundLatitude>{south}</southBoundLatitude>"
            f"<northBoundLatitude>{north}</northBoundLatitude></EX_GeographicBoundingBox>{boxes}{dims}{styles}"
            "</Layer>")


def capabilities_xml(url: str, title: str, layers: Sequence[CapabilityLayer]) -> str:
    """Return the WMS 1.3.0 capabilities document of ``layers``, each operation at ``url``."""
    ops = "".join(f"<{op}>{''.join(f'<Format>{f}</Format>' for f in formats)}{_online(url)}</{op}>" for op, formats in (
        ("GetCapabilities", ("text/xml",)), ("GetMap", FORMATS), ("GetFeatureInfo", INFO_FORMATS)))
    inner = "".join(_layer_xml(x, url) for x in layers)
    crs = "".join(f"<CRS>{c}</CRS>" for c in CRSES)
    return ('<?xml version="1.0" encoding="UTF-8"?>\n'
            f'<WMS_Capabilities version="{VERSION}" xmlns="http://www.opengis.net/wms" '
            'xmlns:xlink="http://www.w3.org/1999/xlink">'
            f"<Service><Name>WMS</Name><Title>{escape(title)}</Title>"
            f'<OnlineResource xlink:type="simple" xlink:href={quoteattr(url)}/>'
            "<Fees>none</Fees><AccessConstraints>none</AccessConstraints>"
            "<MaxWidth>4096</MaxWidth><MaxHeight>4096</MaxHeight></Service>"
            f"<Capability><Request>{ops}</Request><Exception><Format>XML</Format></Exception>"
            f"<Layer><Title>{escape(title)}</Title>{crs}{inner}</Layer></Capability></WMS_Capabilities>\n")


def feature_info_text(answer: Mapping[str, Any]) -> str:
    """Return GetFeatureInfo's text/plain body: one ``key = value`` line per fact."""
    lines = [f"layer = {answer['dataset']}/{answer['variable']}", f"lon = {answer['lon']}", f"lat = {answer['lat']}"]
    lines += [f"{k} = {v}" for k, v in answer["fixed"].items()]
    if answer["cell"] is not None:
        lines += [f"cell_lon = {answer['cell']['lon']}", f"cell_lat = {answer['cell']['lat']}"]
    value = answer["value"]
    lines.append(f"value = {'none' if value is None else repr(value)} {answer['units']}".rstrip())
    return "\n".join(lines) + "\n"
