"""Dataset descriptors: the small XML file that publishes netCDF files.

A descriptor (``<id>.dstp.xml``) names the files of one dataset, the query
columns it exposes and the metadata shown for discovery. Parsing is safe by
construction: :mod:`defusedxml` refuses any DOCTYPE (so no external entities
and no entity-expansion bombs) before lxml ever sees the bytes, and lxml then
validates against the bundled XML Schema so every problem has a line number.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from functools import lru_cache
from importlib import resources
from pathlib import Path

import defusedxml.ElementTree as safe_et
from defusedxml import DefusedXmlException
from lxml import etree

from dstp.errors import DescriptorError

__all__ = [
    "AttributeSpec",
    "CoordinateSpec",
    "CorrelationKey",
    "DESCRIPTOR_SUFFIX",
    "Descriptor",
    "NAMESPACE",
    "RemoteSpec",
    "parse_descriptor",
    "read_descriptor",
    "render_descriptor",
]

NAMESPACE = "urn:dstp:descriptor:1"
DESCRIPTOR_SUFFIX = ".dstp.xml"
MAX_DESCRIPTOR_BYTES = 4 * 2**20
_NS = "{" + NAMESPACE + "}"


@dataclass(frozen=True, slots=True)
class CoordinateSpec:
    """A coordinate column: a dimension's labels, a scalar, or an auxiliary coordinate.

    ``dimension`` names the one dimension a coordinate variable labels
    (``lat(lat)``). ``dimensions`` instead makes it an *auxiliary* coordinate
    (CF's ``coordinates`` attribute): a variable on one or more dimensions it
    does not label, such as a 2-D ``lat(rlat, rlon)`` on a rotated grid or
    ``station_name(station)``. Neither: a scalar coordinate.
    """

    name: str
    variable: str
    dimension: str | None
    axis: str | None = None
    units: str | None = None
    calendar: str | None = None
    cf: tuple[tuple[str, str], ...] = ()
    dimensions: tuple[str, ...] = ()
    #: ``iso8601``: the variable holds text date-times, served as timestamps (see :mod:`.cf`).
    time_format: str | None = None

    @property
    def auxiliary(self) -> bool:
        return bool(self.dimensions)


@dataclass(frozen=True, slots=True)
class AttributeSpec:
    """A data column: one netCDF variable on a tuple of dimensions."""

    name: str
    variable: str
    dimensions: tuple[str, ...]
    units: str | None = None
    description: str | None = None
    cf: tuple[tuple[str, str], ...] = ()
    #: ``iso8601``: the variable holds text date-times, served as timestamps (see :mod:`.cf`).
    time_format: str | None = None


@dataclass(frozen=True, slots=True)
class CorrelationKey:
    """A universal correlation key: a column other datasets can be joined on."""

    name: str
    column: str
    standard_name: str | None = None
    units: str | None = None


@dataclass(frozen=True, slots=True)
class RemoteSpec:
    """``<remote server="host:port" dataset="ocean" credential="b_reader"/>``: the dataset is served by another
    dstp server.

    ``credential`` names an entry of this server's own credentials file (the ``remote_credentials`` setting)
    that is presented to the other server; "" (none named): it is asked anonymously. Never the server
    process's ``$DSTP_TOKEN``: an operator's own token must not be re-published by accident (SECURITY.md).
    """

    server: str
    dataset: str
    credential: str = ""


@dataclass(frozen=True, slots=True)
class Descriptor:
    """Everything a descriptor says about one dataset."""

    id: str
    title: str
    files_glob: str
    coordinates: tuple[CoordinateSpec, ...]
    attributes: tuple[AttributeSpec, ...]
    default_grid: tuple[str, ...]
    aggregate: str | None = None
    summary: str | None = None
    license: str | None = None
    source: str | None = None
    keywords: tuple[str, ...] = ()
    correlation_keys: tuple[CorrelationKey, ...] = ()
    access_policy: str = "public"
    #: Groups that may read a restricted dataset, or an embargoed one before ``embargo_until``.
    access_groups: tuple[str, ...] = ()
    #: Until this day (00:00 UTC) only ``access_groups`` may read the dataset; then ``access_policy`` applies.
    embargo_until: date | None = None
    #: netCDF-4 group that variable names without a path are looked up in (``Grid`` for GPM IMERG).
    group: str | None = None
    #: Globs of the parts of a dataset split by variable (``<part glob="tas_*.nc"/>``), merged by variable;
    #: empty: one part, all the files.
    parts: tuple[str, ...] = ()
    #: Where the descriptor was read from (its folder anchors ``files_glob``).
    path: Path | None = field(default=None, compare=False)
    #: Set when another dstp server serves the dataset (no files, columns or grid here).
    remote: RemoteSpec | None = None
    #: The store the files are objects of (``<files store="era5" glob=…/>``); None: files beside the descriptor.
    files_store: str | None = None
    #: The version Icechunk repositories are read at (``<files ref="tag:v1"/>``, :mod:`.zarr_`); None: branch main.
    files_ref: str | None = None

    def attribute(self, name: str) -> AttributeSpec | None:
        """Return the attribute column called ``name``, if any."""
        for spec in self.attributes:
            if spec.name == name:
                return spec
        return None


@lru_cache(maxsize=1)
def _schema() -> etree.XMLSchema:
    xsd = resources.files("dstp.catalog").joinpath("schema/descriptor.xsd").read_bytes()
    parser = etree.XMLParser(resolve_entities=False, no_network=True)
    return etree.XMLSchema(etree.fromstring(xsd, parser))


def read_descriptor(path: Path) -> Descriptor:
    """Return the descriptor stored at ``path``; raise DescriptorError naming file and line."""
    try:
        size = path.stat().st_size
        if size > MAX_DESCRIPTOR_BYTES:
            raise DescriptorError(
                f"descriptor is {size} bytes; the limit is {MAX_DESCRIPTOR_BYTES}", path=str(path)
            )
        data = path.read_bytes()
    except OSError as exc:
        raise DescriptorError(f"cannot read descriptor: {exc.strerror}", path=str(path)) from exc
    return parse_descriptor(data, path=path)


def parse_descriptor(data: bytes, *, path: Path | None = None) -> Descriptor:
    """Return the descriptor encoded in ``data``, validated against the schema."""
    where = str(path) if path else None
    try:
        # defusedxml only screens here: it rejects DTDs, entities and external references.
        safe_et.fromstring(data, forbid_dtd=True, forbid_entities=True, forbid_external=True)
    except DefusedXmlException as exc:
        raise DescriptorError(
            f"descriptors may not contain a DOCTYPE or entities ({type(exc).__name__})", path=where
        ) from exc
    except safe_et.ParseError as exc:
        line = exc.position[0] if getattr(exc, "position", None) else None
        raise DescriptorError(f"not well-formed XML: {exc}", path=where, line=line) from exc
    parser = etree.XMLParser(
        resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False, remove_comments=True
    )
    try:
        root = etree.fromstring(data, parser)
    except etree.XMLSyntaxError as exc:
        raise DescriptorError(f"not well-formed XML: {exc.msg}", path=where, line=exc.lineno) from exc
    schema = _schema()
    if not schema.validate(root):
        first = schema.error_log[0]
        message = first.message.replace(_NS, "")
        if root.tag != _NS + "dataset":
            message = f"root element must be <dataset xmlns=\"{NAMESPACE}\">; {message}"
        raise DescriptorError(message, path=where, line=first.line)
    return _from_tree(root, path)


def _text(el: etree._Element | None) -> str | None:
    if el is None or el.text is None:
        return None
    return " ".join(el.text.split()) or None


def _cf(el: etree._Element) -> tuple[tuple[str, str], ...]:
    return tuple((c.get("name"), c.text or "") for c in el.findall(_NS + "cf"))


def _from_tree(root: etree._Element, path: Path | None) -> Descriptor:
    files = root.find(_NS + "files")
    remote_el = root.find(_NS + "remote")
    if files is None:  # a remote dataset: no files, coordinates or attributes of its own
        files = etree.Element(_NS + "files", {"glob": ""})
    coords = tuple(
        CoordinateSpec(
            name=c.get("name"),
            variable=c.get("variable") or c.get("name"),
            dimension=c.get("dimension"),
            axis=c.get("axis"),
            units=c.get("units"),
            calendar=c.get("calendar"),
            cf=_cf(c),
            dimensions=tuple((c.get("dimensions") or "").split()),
            time_format=c.get("time-format"),
        )
        for c in root.iterfind(f"{_NS}coordinates/{_NS}coordinate")
    )
    attrs_el = root.find(_NS + "attributes")
    if attrs_el is None:
        attrs_el = etree.Element(_NS + "attributes", {"default-grid": ""})
    attrs = tuple(
        AttributeSpec(
            name=a.get("name"),
            variable=a.get("variable") or a.get("name"),
            dimensions=tuple(a.get("dimensions").split()),
            units=a.get("units"),
            description=_text(a.find(_NS + "description")),
            cf=_cf(a),
            time_format=a.get("time-format"),
        )
        for a in attrs_el.iterfind(_NS + "attribute")
    )
    keys = tuple(
        CorrelationKey(
            name=k.get("name"),
            column=k.get("column"),
            standard_name=k.get("standard_name"),
            units=k.get("units"),
        )
        for k in root.iterfind(f"{_NS}correlation-keys/{_NS}key")
    )
    access = root.find(_NS + "access")
    desc = Descriptor(
        id=root.get("id"),
        title=_text(root.find(_NS + "title")) or root.get("id"),
        summary=_text(root.find(_NS + "summary")),
        license=_text(root.find(_NS + "license")),
        source=_text(root.find(_NS + "source")),
        keywords=tuple(
            t for t in (_text(k) for k in root.iterfind(f"{_NS}keywords/{_NS}keyword")) if t
        ),
        files_glob=files.get("glob"),
        aggregate=files.get("aggregate"),
        group=(files.get("group") or "").strip("/") or None,
        parts=tuple(p.get("glob") for p in files.iterfind(_NS + "part")),
        coordinates=coords,
        attributes=attrs,
        default_grid=tuple(attrs_el.get("default-grid").split()),
        correlation_keys=keys,
        access_policy=access.get("policy") if access is not None else "public",
        access_groups=tuple((access.get("groups") or "").split()) if access is not None else (),
        embargo_until=date.fromisoformat(access.get("embargo-until")[:10])
        if access is not None and access.get("embargo-until") else None,
        path=path,
        remote=RemoteSpec(remote_el.get("server"), remote_el.get("dataset"), remote_el.get("credential") or "")
        if remote_el is not None else None,
        files_store=files.get("store"),
        files_ref=files.get("ref"),
    )
    _check_consistency(desc, root)
    return desc


def _check_consistency(desc: Descriptor, root: etree._Element) -> None:
    """Check what XML Schema cannot: references between parts of the descriptor."""
    where = str(desc.path) if desc.path else None
    for glob in (desc.files_glob, *desc.parts):
        if ".." in Path(glob).parts:
            raise DescriptorError(
                f"files glob {glob!r} may not leave the descriptor's folder",
                path=where,
                line=root.find(_NS + "files").sourceline,
            )
    if desc.files_store is not None and desc.parts:
        raise DescriptorError("<part> is not supported with <files store=…> yet; publish each part as a dataset",
                              path=where, line=root.find(_NS + "files").sourceline)
    if desc.files_ref is not None and desc.parts:
        raise DescriptorError("ref= (an Icechunk branch, tag or snapshot) is not supported with <part> yet; publish "
                              "each part as a dataset", path=where, line=root.find(_NS + "files").sourceline)
    if len(set(desc.parts)) != len(desc.parts):
        raise DescriptorError("two <part> elements have the same glob; give each part its own",
                              path=where, line=root.find(_NS + "files").sourceline)
    _check_access(desc, root)
    dims = {c.dimension for c in desc.coordinates if c.dimension}
    used = {d for a in desc.attributes for d in a.dimensions}
    for el in root.iterfind(f"{_NS}coordinates/{_NS}coordinate"):
        if el.get("dimension") and el.get("dimensions"):
            raise DescriptorError(
                f"coordinate {el.get('name')!r} has both dimension= (it labels one dimension) and dimensions= "
                "(it is an auxiliary coordinate); keep one",
                path=where,
                line=el.sourceline,
            )
    columns = {c.name for c in desc.coordinates} | {a.name for a in desc.attributes}
    for el in root.iterfind(f"{_NS}attributes/{_NS}attribute"):
        if el.get("name") in dims and el.get("name") not in {c.name for c in desc.coordinates}:
            raise DescriptorError(
                f"attribute {el.get('name')!r} has the name of a dimension", path=where, line=el.sourceline
            )
    for d in desc.default_grid:
        if d not in used:
            raise DescriptorError(
                f"default-grid names dimension {d!r}, which no attribute uses",
                path=where,
                line=root.find(_NS + "attributes").sourceline,
            )
    for el in root.iterfind(f"{_NS}correlation-keys/{_NS}key"):
        if el.get("column") not in columns:
            raise DescriptorError(
                f"correlation key {el.get('name')!r} refers to unknown column {el.get('column')!r}",
                path=where,
                line=el.sourceline,
            )
    if desc.aggregate is not None and desc.aggregate not in used:
        raise DescriptorError(
            f"files are aggregated along {desc.aggregate!r}, which no attribute uses",
            path=where,
            line=root.find(_NS + "files").sourceline,
        )


def _check_access(desc: Descriptor, root: etree._Element) -> None:
    """Refuse an access policy that would not do what its writer meant (docs/security-auth.md)."""
    el = root.find(_NS + "access")
    if el is None:
        return
    where, line = (str(desc.path) if desc.path else None), el.sourceline
    if desc.access_policy == "restricted" and not desc.access_groups:
        raise DescriptorError('<access policy="restricted"> needs groups="…": name the groups that may read it',
                              path=where, line=line)
    if desc.embargo_until is not None and desc.access_policy == "restricted":
        raise DescriptorError('an embargo ends on its date, a restricted policy never does: write policy="public" '
                              '(or "registered") for who may read it after embargo-until', path=where, line=line)
    if desc.access_groups and desc.access_policy != "restricted" and desc.embargo_until is None:
        raise DescriptorError(f'groups="…" limits only restricted or embargoed datasets; policy="{desc.access_policy}" '
                              'lets more in: write policy="restricted" to limit it to those groups',
                              path=where, line=line)


def render_descriptor(desc: Descriptor) -> bytes:
    """Return the XML text of ``desc``, pretty-printed and schema-valid."""
    E = lambda tag, **attrs: etree.Element(  # noqa: E731 - a local element factory
        _NS + tag, {k: v for k, v in attrs.items() if v is not None}, nsmap={None: NAMESPACE}
    )

    def sub(parent: etree._Element, tag: str, text: str | None = None, **attrs: str | None) -> etree._Element:
        el = etree.SubElement(parent, _NS + tag, {k.replace("__", "-"): v for k, v in attrs.items() if v is not None})
        if text is not None:
            el.text = text
        return el

    root = E("dataset", id=desc.id, version="1")
    root.append(etree.Comment(" dstp dataset descriptor; schema: dstp/catalog/schema/descriptor.xsd "))
    sub(root, "title", desc.title)
    for tag in ("summary", "license", "source"):
        value = getattr(desc, tag)
        if value:
            sub(root, tag, value)
    if desc.keywords:
        kw = sub(root, "keywords")
        for k in desc.keywords:
            sub(kw, "keyword", k)
    if desc.remote is None:
        files = sub(root, "files", store=desc.files_store, glob=desc.files_glob, aggregate=desc.aggregate,
                    group=desc.group, ref=desc.files_ref)
        for part in desc.parts:
            sub(files, "part", glob=part)
        coords = sub(root, "coordinates")
    else:  # a remote dataset has no files, coordinates or attributes of its own
        sub(root, "remote", server=desc.remote.server, dataset=desc.remote.dataset,
            credential=desc.remote.credential or None)
        coords = etree.Element(_NS + "coordinates")
    for c in desc.coordinates:
        el = sub(
            coords,
            "coordinate",
            name=c.name,
            variable=c.variable if c.variable != c.name else None,
            dimension=c.dimension,
            dimensions=" ".join(c.dimensions) or None,
            axis=c.axis,
            units=c.units,
            calendar=c.calendar,
            time__format=c.time_format,
        )
        for k, v in c.cf:
            sub(el, "cf", v, name=k)
    attrs = sub(root, "attributes", default__grid=" ".join(desc.default_grid)) if desc.remote is None \
        else etree.Element(_NS + "attributes")
    for a in desc.attributes:
        el = sub(
            attrs,
            "attribute",
            name=a.name,
            variable=a.variable if a.variable != a.name else None,
            dimensions=" ".join(a.dimensions),
            units=a.units,
            time__format=a.time_format,
        )
        if a.description:
            sub(el, "description", a.description)
        for k, v in a.cf:
            sub(el, "cf", v, name=k)
    if desc.correlation_keys:
        keys = sub(root, "correlation-keys")
        for key in desc.correlation_keys:
            sub(keys, "key", name=key.name, column=key.column, standard_name=key.standard_name, units=key.units)
    sub(root, "access", policy=desc.access_policy, groups=" ".join(desc.access_groups) or None,
        embargo__until=desc.embargo_until.isoformat() if desc.embargo_until else None)
    etree.indent(root, space="  ")
    text = etree.tostring(root, xml_declaration=True, encoding="UTF-8", pretty_print=True)
    parse_descriptor(text)  # never write what we would refuse to read
    return text
