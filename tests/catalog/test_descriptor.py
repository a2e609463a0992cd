"""Descriptors: schema validation with line numbers, safe parsing, round trips."""

from __future__ import annotations

import dataclasses
import datetime
from pathlib import Path

import pytest

from dstp.catalog.descriptor import (
    AttributeSpec,
    CoordinateSpec,
    CorrelationKey,
    Descriptor,
    parse_descriptor,
    render_descriptor,
)
from dstp.errors import DescriptorError

GOOD = b"""<?xml version="1.0" encoding="UTF-8"?>
<dataset xmlns="urn:dstp:descriptor:1" id="demo" version="1">
  <title>Demo</title>
  <files glob="demo_*.nc" aggregate="time"/>
  <coordinates>
    <coordinate name="time" dimension="time" axis="T"/>
    <coordinate name="lat" dimension="lat" axis="Y" units="degrees_north"/>
  </coordinates>
  <attributes default-grid="time lat">
    <attribute name="t" variable="T" dimensions="time lat" units="K">
      <description>Temperature</description>
      <cf name="standard_name">air_temperature</cf>
    </attribute>
  </attributes>
  <correlation-keys><key name="time" column="time"/></correlation-keys>
  <access policy="public"/>
</dataset>
"""


def test_access_policies_parse() -> None:
    restricted = parse_descriptor(GOOD.replace(b'<access policy="public"/>',
                                               b'<access policy="restricted" groups="polar admins"/>'))
    assert (restricted.access_policy, restricted.access_groups, restricted.embargo_until) == \
        ("restricted", ("polar", "admins"), None)
    embargoed = parse_descriptor(GOOD.replace(b'<access policy="public"/>',
                                              b'<access policy="public" groups="polar" embargo-until="2027-01-01"/>'))
    assert (embargoed.access_policy, embargoed.access_groups, embargoed.embargo_until) == \
        ("public", ("polar",), datetime.date(2027, 1, 1))
    plain = parse_descriptor(GOOD.replace(b'<access policy="public"/>', b""))
    assert (plain.access_policy, plain.access_groups, plain.embargo_until) == ("public", (), None)


def test_good_descriptor_parses() -> None:
    d = parse_descriptor(GOOD)
    assert d.id == "demo" and d.aggregate == "time" and d.default_grid == ("time", "lat")
    assert d.attribute("t") == AttributeSpec("t", "T", ("time", "lat"), "K", "Temperature",
                                             (("standard_name", "air_temperature"),))
    assert d.correlation_keys == (CorrelationKey("time", "time"),)


@pytest.mark.parametrize(
    "change, line, words",
    [
        ((b'id="demo"', b'id="1demo"'), 2, "id"),
        ((b"<title>Demo</title>", b""), 4, "title"),
        ((b'dimensions="time lat" units', b'units'), 10, "dimensions"),
        ((b'<access policy="public"/>', b'<access policy="everyone"/>'), 16, "policy"),
        ((b'name="lat" dimension', b'name="time" dimension'), 7, "unique"),
        ((b'<files glob="demo_*.nc"', b'<files glob="/etc/*"'), 4, "glob"),
        ((b'<files glob="demo_*.nc"', b'<files glob="../other/*.nc"'), 4, "leave"),
        ((b'default-grid="time lat"', b'default-grid="time lev"'), 9, "default-grid"),
        ((b'<key name="time" column="time"/>', b'<key name="time" column="nope"/>'), 15, "nope"),
        ((b"</dataset>", b"</datasets>"), 17, "well-formed"),
        ((b'<access policy="public"/>', b'<access policy="restricted"/>'), 16, "needs groups"),
        ((b'<access policy="public"/>', b'<access policy="public" groups="polar"/>'), 16, 'policy="restricted"'),
        ((b'<access policy="public"/>', b'<access policy="restricted" groups="polar" embargo-until="2027-01-01"/>'),
         16, "embargo"),
        ((b'<access policy="public"/>', b'<access policy="public" embargo-until="next year"/>'), 16, "embargo-until"),
        ((b'<access policy="public"/>', b'<access policy="restricted" groups="a b;c"/>'), 16, "groups"),
        ((b'<dataset xmlns="urn:dstp:descriptor:1"', b'<dataset'), 2, "root element"),
    ],
)
def test_problems_name_the_line(change, line, words) -> None:
    data = GOOD.replace(*change)
    assert data != GOOD
    with pytest.raises(DescriptorError) as info:
        parse_descriptor(data, path=Path("/cat/demo.dstp.xml"))
    assert info.value.line == line, str(info.value)
    assert str(info.value).startswith(f"/cat/demo.dstp.xml:{line}: ")
    assert words.lower() in str(info.value).lower()


@pytest.mark.parametrize(
    "payload",
    [
        # external entity (XXE)
        b'<?xml version="1.0"?><!DOCTYPE d [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
        b'<dataset xmlns="urn:dstp:descriptor:1" id="x"><title>&x;</title></dataset>',
        # entity expansion bomb
        b'<?xml version="1.0"?><!DOCTYPE d [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">'
        b'<!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;"><!ENTITY d "&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;">]>'
        b'<dataset xmlns="urn:dstp:descriptor:1" id="x"><title>&d;&d;&d;&d;</title></dataset>',
        # external DTD
        b'<?xml version="1.0"?><!DOCTYPE d SYSTEM "http://example.invalid/x.dtd">'
        b'<dataset xmlns="urn:dstp:descriptor:1" id="x"/>',
    ],
)
def test_doctype_and_entities_are_refused(payload) -> None:
    with pytest.raises(DescriptorError, match="DOCTYPE"):
        parse_descriptor(payload)


def test_oversized_descriptor_is_refused(tmp_path: Path) -> None:
    from dstp.catalog.descriptor import read_descriptor

    path = tmp_path / "big.dstp.xml"
    path.write_bytes(GOOD.replace(b"<title>Demo</title>", b"<title>" + b"x" * (5 * 2**20) + b"</title>"))
    with pytest.raises(DescriptorError, match="limit"):
        read_descriptor(path)


def test_render_round_trips() -> None:
    d = Descriptor(
        id="rt", title="Round trip", files_glob="rt.nc",
        coordinates=(CoordinateSpec("time", "time", "time", "T", "days since 2000-01-01", "noleap"),
                     CoordinateSpec("height", "height", None, "Z", "m", cf=(("positive", "up"),))),
        attributes=(AttributeSpec("t", "T", ("time",), "K", "Temp & <stuff>", (("long_name", "T \"q\""),)),),
        default_grid=("time",), summary="S", license="CC0", source="src", keywords=("a", "b c"),
        correlation_keys=(CorrelationKey("time", "time", "time", "days"),), access_policy="restricted",
        access_groups=("polar", "admins"),
    )
    assert parse_descriptor(render_descriptor(d)) == d
    embargoed = dataclasses.replace(d, access_policy="public", embargo_until=datetime.date(2027, 1, 1))
    assert parse_descriptor(render_descriptor(embargoed)) == embargoed
