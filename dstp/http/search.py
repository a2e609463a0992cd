"""Catalog search: full text over what describes a dataset, and facets.

A query ``q`` is split into terms; a dataset matches when every term is
found in one of its fields: id, title, summary, keywords, attribute names
and descriptions, CF standard names (at the start of a word,
case-insensitive: ``humid`` finds ``relative_humidity``), or units (whole
value, so ``K`` finds kelvin and not every word with a k). Hits are
ranked by where the terms matched (id and title first).

Facets narrow the hits: ``attribute`` (an attribute name or CF standard
name; several must all be present), a time span that must overlap the
dataset's (``start``/``end``, ISO 8601 prefixes such as ``1990`` or
``1990-06-01``), and a latitude/longitude box that must overlap the
dataset's (longitudes compared on the circle, so ``-10..10`` overlaps
``0..355``).
"""

from __future__ import annotations

import re
import threading
from collections import Counter, OrderedDict
from dataclasses import dataclass
from typing import Iterable, Sequence

from dstp.errors import QueryError
from dstp.metadata import DatasetDetails, DatasetSummary

__all__ = ["CatalogFilter", "FacetValue", "Hit", "SearchIndex"]

#: Searches whose hits an index keeps (per catalog version and set of readable datasets: CatalogView.index).
SEARCHES_KEPT = 64

_TIME_PREFIX = re.compile(r"-?\d{1,4}(-\d\d(-\d\d([T ]\d\d(:\d\d(:\d\d)?)?)?)?)?")


@dataclass(frozen=True, slots=True)
class CatalogFilter:
    """What the catalog page was asked for."""

    q: str = ""
    attributes: tuple[str, ...] = ()
    start: str = ""
    end: str = ""
    bbox: tuple[float, float, float, float] | None = None

    @classmethod
    def parse(
        cls, q: str = "", attributes: Sequence[str] = (), start: str = "", end: str = "", bbox: str = ""
    ) -> "CatalogFilter":
        """Return the filter for these request parameters; raise QueryError for malformed ones."""
        return cls(
            q=" ".join(q.split()),
            attributes=tuple(a.strip() for a in attributes if a.strip()),
            start=_time_bound("start", start),
            end=_time_bound("end", end),
            bbox=_parse_bbox(bbox),
        )

    @property
    def active(self) -> bool:
        return bool(self.q or self.attributes or self.start or self.end or self.bbox)


def _time_bound(name: str, text: str) -> str:
    text = text.strip().replace(" ", "T")
    if text and not _TIME_PREFIX.fullmatch(text):
        raise QueryError(f"{name}={text!r} is not an ISO 8601 date such as 1990, 1990-06 or 1990-06-01T12:00")
    return text


def _parse_bbox(text: str) -> tuple[float, float, float, float] | None:
    if not text.strip():
        return None
    try:
        lat0, lat1, lon0, lon1 = (float(p) for p in text.split(","))
    except ValueError as exc:
        raise QueryError(
            f"bbox={text!r} must be four numbers lat0,lat1,lon0,lon1 (degrees), e.g. bbox=30,60,-10,20"
        ) from exc
    if not (-90 <= min(lat0, lat1) and max(lat0, lat1) <= 90):
        raise QueryError(f"bbox={text!r}: latitudes must lie within -90..90")
    return (min(lat0, lat1), max(lat0, lat1), lon0, lon1)


@dataclass(frozen=True, slots=True)
class Hit:
    """A dataset that matched, with its score and the fields that matched."""

    summary: DatasetSummary
    score: int
    matches: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class FacetValue:
    """One value of a facet and how many of the current hits have it."""

    value: str
    count: int
    selected: bool


@dataclass(frozen=True, slots=True)
class _Field:
    label: str
    text: str
    weight: int
    exact: bool = False


def _fields(d: DatasetDetails) -> list[_Field]:
    s = d.summary
    out = [_Field("id", s.id, 8), _Field("title", s.title, 5), _Field("summary", s.summary, 2)]
    out += [_Field(f"keyword {k}", k, 3) for k in s.keywords]
    for c in (*d.attributes, *d.coordinates):
        out.append(_Field(f"attribute {c.name}", c.name, 4 if not c.coordinate else 1))
        if c.description:
            out.append(_Field(f"attribute {c.name}", c.description, 2))
        standard = dict(c.cf).get("standard_name", "")
        if standard:
            out.append(_Field(f"standard name {standard}", standard, 3))
            out.append(_Field(f"standard name {standard}", standard.replace("_", " "), 3))
        if c.units and not c.coordinate:
            out.append(_Field(f"units {c.units} ({c.name})", c.units, 2, exact=True))
    return out


def _attribute_labels(d: DatasetDetails) -> set[str]:
    labels = set()
    for c in d.attributes:
        labels.add(c.name.casefold())
        standard = dict(c.cf).get("standard_name", "")
        if standard:
            labels.add(standard.casefold())
    return labels


def _facet_values(d: DatasetDetails) -> list[str]:
    """Return a dataset's attribute facet values: standard names, else attribute names."""
    return sorted({dict(c.cf).get("standard_name") or c.name for c in d.attributes})


def _lon_overlap(a0: float, a1: float, b0: float, b1: float) -> bool:
    if a1 - a0 >= 360 or b1 - b0 >= 360:
        return True
    lo, hi = min(b0, b1), max(b0, b1)
    return any(a0 <= hi + k and lo + k <= a1 for k in (-720, -360, 0, 360, 720))


def _overlaps(s: DatasetSummary, f: CatalogFilter) -> bool:
    if f.start or f.end:
        if not s.time_start:
            return False
        # ISO text sorts chronologically on every calendar; a bound is a prefix (1990 = all of 1990).
        if f.start and s.time_end[: len(f.start)] < f.start:
            return False
        if f.end and s.time_start[: len(f.end)] > f.end:
            return False
    if f.bbox is not None:
        if s.bbox is None:
            return False
        lat0, lat1, lon0, lon1 = f.bbox
        if s.bbox[1] < lat0 or s.bbox[0] > lat1 or not _lon_overlap(s.bbox[2], s.bbox[3], lon0, lon1):
            return False
    return True


class SearchIndex:
    """The searchable text of every dataset of a catalog (built once; catalogs are static while served)."""

    def __init__(self, details: Iterable[DatasetDetails]) -> None:
        self._entries = [(d, _fields(d), _attribute_labels(d)) for d in sorted(details, key=lambda d: d.summary.id)]
        self._by_id = {d.summary.id: d for d, _, _ in self._entries}
        #: Each field's text casefolded once (a search over 10,000 datasets folded 180,000 texts per term).
        self._folded = [[(x, x.text.casefold()) for x in fields] for _, fields, _ in self._entries]
        #: The hits of the latest searches: the pages of one search are asked one after another.
        self._found: OrderedDict[CatalogFilter, list[Hit]] = OrderedDict()
        self._lock = threading.Lock()

    def details(self, dataset_id: str) -> DatasetDetails:
        """Return the description of one dataset of the index (KeyError if it has none of that id)."""
        return self._by_id[dataset_id]

    def search(self, f: CatalogFilter) -> list[Hit]:
        """Return the datasets matching ``f``, best first (the same list for the same filter: do not change it)."""
        with self._lock:
            kept = self._found.get(f)
            if kept is not None:
                self._found.move_to_end(f)
                return kept
        hits = self._search(f)
        with self._lock:
            self._found[f] = hits
            while len(self._found) > SEARCHES_KEPT:
                self._found.popitem(last=False)
        return hits

    def _search(self, f: CatalogFilter) -> list[Hit]:
        # A term matches where a word starts ("humid" finds relative_humidity, "k" does not find "masked").
        terms = [(t, re.compile(r"(?:^|[^a-z0-9])" + re.escape(t))) for t in (w.casefold() for w in f.q.split())]
        wanted = [a.casefold() for a in f.attributes]
        hits = []
        for (d, _, labels), fields in zip(self._entries, self._folded):
            if any(a not in labels for a in wanted) or not _overlaps(d.summary, f):
                continue
            score, matches = 0, list[str]()
            for term, pattern in terms:
                found = [x for x, text in fields if (term == text if x.exact else pattern.search(text))]
                if not found:
                    break
                best = max(found, key=lambda x: x.weight)
                score += best.weight
                matches += dict.fromkeys(x.label for x in found if x.label not in matches)
            else:
                hits.append(Hit(d.summary, score, tuple(matches)))
        return sorted(hits, key=lambda h: (-h.score, h.summary.id))

    def facets(self, hits: Sequence[Hit], f: CatalogFilter) -> list[FacetValue]:
        """Return the attribute facet (standard names, else attribute names) over ``hits``."""
        by_id = {d.summary.id: d for d, _, _ in self._entries}
        counts: Counter[str] = Counter()
        for h in hits:
            counts.update(_facet_values(by_id[h.summary.id]))
        selected = {a.casefold() for a in f.attributes}
        return [
            FacetValue(value, count, value.casefold() in selected)
            for value, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        ]
