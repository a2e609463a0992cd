"""The OPeNDAP door's own documents, errors and access policy (docs/opendap.md).

The DAP4 ``.dap`` body is taken apart here by its spec (chunk headers, DMR, little-endian values, CRC32 per
variable) and compared with xarray on the files; errors are DAP2 ``Error {…};`` objects or DAP4 ``<Error>``
documents with the dstp status; a restricted dataset is 404 to whoever may not read it, as on every door.
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path
from typing import Any, Iterator
from xml.etree import ElementTree

import httpx
import numpy as np
import pytest
import xarray as xr
from hypothesis import HealthCheck, given, settings, strategies as st

from dstp.auth import TokenStore
from dstp.errors import BadRequestError
from dstp.opendap import parse_dap2, parse_dap4

from opendap_site import local, run, same, serve, write_site

NS = {"d": "http://xml.opendap.org/ns/DAP/4.0#"}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("opendap-protocol")
    write_site(root)
    xml = root / "d360_east" / "d360_east.dstp.xml"
    text = xml.read_text()
    assert '<access policy="public"/>' in text
    shutil.copytree(root / "d360_east", root / "secret")
    (root / "secret" / "d360_east.dstp.xml").unlink()
    (root / "secret" / "secret.dstp.xml").write_text(
        text.replace('<access policy="public"/>', '<access policy="restricted" groups="polar"/>')
        .replace('id="d360_east"', 'id="secret"'))
    tokens = TokenStore(root / "tokens.json")
    issued = {"alice": tokens.create("alice", ["polar"]).secret, "bob": tokens.create("bob").secret}
    srv = serve(root, token_store=root / "tokens.json", allow_anonymous="true")
    assert srv.endpoints is not None
    with httpx.Client(base_url=f"http://{srv.endpoints.http}/opendap", timeout=60) as http:
        yield {"root": root, "http": http, "host": srv.endpoints.http, "tokens": issued}
    srv.stop()


def dap_body(raw: bytes) -> tuple[ElementTree.Element, list[bytes], list[int]]:
    """Return the DMR, the data bytes and the chunk flags of a ``.dap`` response, read by the DAP4 spec."""
    flags, chunks, offset = [], [], 0
    while True:
        header, = struct.unpack(">I", raw[offset:offset + 4])
        flag, size = header >> 24, header & 0xFFFFFF
        flags.append(flag)
        chunks.append(raw[offset + 4:offset + 4 + size])
        offset += 4 + size
        if flag & 0x01:
            break
    assert offset == len(raw), "bytes after the last chunk"
    assert chunks[0].endswith(b"\r\n")
    return ElementTree.fromstring(chunks[0][:-2]), chunks[1:], flags


# -- DAP4 ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("checksum", ["true", "false"])
def test_dap_body_holds_the_slab_with_a_crc32_per_variable(site: dict[str, Any], checksum: str) -> None:
    want = local(site["root"], "nol_west")
    r = site["http"].get("/nol_west.dap", params={"dap4.ce": "/pr[2:3:11][1:4][0:2:5];/lat[1:4]",
                                                   "dap4.checksum": checksum})
    assert r.status_code == 200 and r.headers["content-type"] == "application/vnd.opendap.dap4.data"
    dmr, data, flags = dap_body(r.content)
    assert all(f & 0x04 for f in flags)  # little-endian
    body = b"".join(data)
    names = [v.get("name") for v in dmr if v.tag.endswith(("Float32", "Float64"))]
    assert names == ["lat", "pr"]  # the dataset's order, whatever the expression's
    sizes = {d.get("name"): int(d.get("size")) for d in dmr.findall("d:Dimension", NS)}
    assert sizes == {"lat": 4, "time": 4, "lon": 3}  # each sliced one way only: declared again at its new size
    crc = 4 if checksum == "true" else 0
    lat = body[:32]
    pr = body[32 + crc:32 + crc + 4 * 4 * 3 * 4]
    assert len(body) == 32 + 4 * 4 * 3 * 4 + 2 * crc
    same(np.frombuffer(lat, "<f8"), want.lat.values[1:5])
    same(np.frombuffer(pr, "<f4").reshape(4, 4, 3), want.pr.values[2:12:3, 1:5, 0:6:2])
    if checksum == "true":
        sent = [int(a.find("d:Value", NS).text) for a in dmr.iter("{%s}Attribute" % NS["d"])
                if a.get("name") == "_DAP4_Checksum_CRC32"]
        assert sent == [zlib.crc32(lat), zlib.crc32(pr)]
        assert struct.unpack("<I", body[32:36])[0] == zlib.crc32(lat)
        assert struct.unpack("<I", body[-4:])[0] == zlib.crc32(pr)


def test_dmr_declares_groups_and_clients_read_them(site: dict[str, Any], tmp_path: Path) -> None:
    from pydap.client import open_url

    want = local(site["root"], "grp")
    dmr = ElementTree.fromstring(site["http"].get("/grp.dmr").content)
    group = dmr.find("d:Group", NS)
    assert group is not None and group.get("name") == "Grid"
    assert {d.get("name") for d in group.findall("d:Dimension", NS)} == {"lat", "lon"}
    precip = group.find("d:Float32", NS)
    assert precip is not None and [d.get("name") for d in precip.findall("d:Dim", NS)] == ["/Grid/lat", "/Grid/lon"]
    remote = open_url(f"http://{site['host']}/opendap/grp", protocol="dap4")
    same(np.asarray(remote["Grid/precip"][1:4, ::2].data), want.precip.values[1:4, ::2])
    out = tmp_path / "grp.nc"
    run("nccopy", f"dap4://{site['host']}/opendap/grp", str(out))
    with xr.open_dataset(out, group="Grid") as got:
        same(got.precip.values, want.precip.values)
        same(got.lat.values, want.lat.values)


# -- DAP2 documents ------------------------------------------------------------------------------------------

def test_dds_of_a_constrained_grid_slices_its_maps(site: dict[str, Any]) -> None:
    dds = site["http"].get("/std_east.dds?tas[1:2:7][0:4][3]").text
    assert "Float32 tas[time = 4][lat = 5][lon = 1];" in dds
    assert re.search(r"MAPS:\s+Float64 time\[time = 4\];\s+Float64 lat\[lat = 5\];\s+Float64 lon\[lon = 1\];", dds)
    dds = site["http"].get("/std_east.dds?tas.tas[0][0][0],tas.lon[2:3]").text
    assert re.search(r"Structure \{\s+Float32 tas\[time = 1\]\[lat = 1\]\[lon = 1\];\s+Float64 lon\[lon = 2\];"
                     r"\s+\} tas;", dds), dds


def test_das_types_numbers_and_keeps_no_packing(site: dict[str, Any]) -> None:
    das = site["http"].get("/std_east.das").text
    pr = das.split("    pr {", 1)[1].split("    }", 1)[0]
    assert "Float32 _FillValue NaN;" in pr and 'String units "mm day-1";' in pr
    assert "scale_factor" not in pr and "add_offset" not in pr
    assert 'String Unlimited_Dimension "time";' in das
    # a reference names only variables the virtual file holds: tas's grid mapping is served with it
    tas = das.split("    tas {", 1)[1].split("    }", 1)[0]
    assert 'String grid_mapping "crs";' in tas and 'String coordinates "forecast_reference_time";' in tas
    crs = das.split("    crs {", 1)[1].split("    }", 1)[0]
    assert "Float64 semi_major_axis 6378137.0;" in crs


# -- errors --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("path, status, words", [
    ("/nosuch.dds", 404, "nosuch"),
    ("/std_east.dods?tas[0:1:99][0][0]", 400, "index 99 is past the end of dimension time (size 12"),
    ("/std_east.dods?tas[0][0]", 400, "tas has 3 dimensions (time, lat, lon)"),
    ("/std_east.dods?tsa", 404, "std_east has no variable 'tsa'"),
    ("/std_east.dods?tas[3:1][0][0]", 400, "start 3 is after stop 1"),
    ("/std_east.dods?tas&tas>300", 400, "the selection &tas>300 applies to DAP2 Sequences"),
    ("/std_east.dods?tas[a:b]", 400, "cannot read [a:b]"),
    ("/std_east.nc", 404, "add one of .das, .dds, .dods"),
])
def test_dap2_errors_are_error_objects_naming_what_to_fix(site: dict[str, Any], path: str, status: int,
                                                          words: str) -> None:
    r = site["http"].get(path)
    assert r.status_code == status, r.text
    m = re.fullmatch(r'Error \{\n    code = (\d+);\n    message = "(.*)";\n\};\n', r.text, re.DOTALL)
    assert m is not None, r.text
    assert int(m[1]) == status and words in m[2], m[2]


@pytest.mark.parametrize("ce, status, words", [
    ("/tas[0:1:12][0][0]", 400, "index 12 is past the end of dimension time"),
    ("/rank|rank>1", 400, "rank has no missing value (only floating-point data variables with a _FillValue"),
    ("/tas|time>3", 400, "time cannot be compared here"),
    ("/tas|tas>>3", 400, "cannot read the clause 'tas>>3'"),
    ("/nope", 404, "no variable 'nope'"),
])
def test_dap4_errors_are_error_documents(site: dict[str, Any], ce: str, status: int, words: str) -> None:
    r = site["http"].get("/std_east.dap", params={"dap4.ce": ce})
    assert r.status_code == status
    error = ElementTree.fromstring(r.content)
    assert error.tag == "Error" and error.get("httpcode") == str(status)
    assert words in (error.findtext("Message") or "")


def test_ncdump_says_what_is_wrong_with_a_request(site: dict[str, Any]) -> None:
    result = subprocess.run(["ncdump", "-v", "tas", f"http://{site['host']}/opendap/std_east?tas[0:1:99][0][0]"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "index 99 is past the end of dimension time" in result.stderr + result.stdout


# -- access --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("who, sees", [("alice", True), ("bob", False), ("", False)])
def test_a_restricted_dataset_is_404_to_whoever_may_not_read_it(site: dict[str, Any], who: str, sees: bool) -> None:
    headers = {"Authorization": f"Bearer {site['tokens'][who]}"} if who else {}
    for path in ("/secret.das", "/secret.dds", "/secret.dods?tas[0][0][0]", "/secret.dmr", "/secret.dap"):
        r = site["http"].get(path, headers=headers)
        assert r.status_code == (200 if sees else 404), (path, r.text)
        if not sees:  # the same answer as for a dataset that does not exist
            unknown = site["http"].get(path.replace("secret", "secreu"), headers=headers)
            assert r.content == unknown.content.replace(b"secreu", b"secret")
    listing = site["http"].get("", headers=headers).text
    assert ("secret" in listing) is sees


# -- the grammar ---------------------------------------------------------------------------------------------

def test_constraint_grammar() -> None:
    assert [(p.name, p.member, p.ranges) for p in parse_dap2("tas[0:2:10][3][1:4],tas.lat,lon")] == [
        ("tas", "", ((0, 2, 10), (3, 1, 3), (1, 1, 4))), ("tas", "lat", ()), ("lon", "", ())]
    # netCDF-C sends brackets percent-encoded, dap4.ce even two times over
    assert parse_dap2("tas%5B0:1:0%5D") == parse_dap2("tas[0:1:0]")
    assert [(p.name, p.ranges) for p in parse_dap4("/tas%25255b0:1:0%25255d[][2:3:];/Grid/precip")] == [
        ("tas", ((0, 1, 0), (0, 1, None), (2, 3, None))), ("Grid/precip", ())]
    with pytest.raises(BadRequestError, match="stride 0"):
        parse_dap2("tas[0:0:3]")


def test_reads_are_audited_with_the_opendap_channel(site: dict[str, Any], caplog: pytest.LogCaptureFixture) -> None:
    import json
    import logging

    with caplog.at_level(logging.INFO, logger="dstp.audit"):
        r = site["http"].get("/secret.dods?pr[1:1:2][0][0:2:4]",
                             headers={"Authorization": f"Bearer {site['tokens']['alice']}"})
        assert r.status_code == 200
    lines = [json.loads(rec.getMessage()) for rec in caplog.records if rec.name == "dstp.audit"]
    reads = [x for x in lines if x.get("channel") == "opendap" and '"pr"' in x.get("sql", "")]
    assert reads and reads[-1]["principal"] == "alice" and reads[-1]["datasets"] == ["secret"], lines
    assert reads[-1]["outcome"] == "ok" and reads[-1]["rows"] == 2 * 3


@pytest.mark.parametrize("ce, keep", [
    ("/pr[0:1:5][][]|pr>20,lat>=62", lambda ds: (ds.pr > 20) & (ds.lat >= 62)),
    ("/pr[0:1:5][][]|10<pr<=30", lambda ds: (ds.pr > 10) & (ds.pr <= 30)),
    ("/pr[0:1:5][][]|pr<tas", lambda ds: ds.pr < ds.tas),
])
def test_a_dap4_filter_masks_what_it_rejects_run_by_the_sql_engine(site: dict[str, Any], ce: str, keep: Any) -> None:
    want = local(site["root"], "d360_east").isel(time=slice(0, 6))
    expected = want.pr.where(keep(want)).values
    r = site["http"].get("/d360_east.dap", params={"dap4.ce": ce})
    assert r.status_code == 200, r.text
    dmr, data, _ = dap_body(r.content)
    body = b"".join(data)
    same(np.frombuffer(body[:-4], "<f4").reshape(expected.shape), expected)
    assert struct.unpack("<I", body[-4:])[0] == zlib.crc32(body[:-4])
    assert np.isnan(expected).sum() > np.isnan(want.pr.values).sum()  # the filter did reject values
    # netCDF-C passes the expression on and reads the masked answer
    text = run("ncdump", "-p", "9,17", "-v", "pr", f"dap4://{site['host']}/opendap/d360_east?dap4.ce={ce}")
    body_text = text.split(" pr =", 1)[1].split(";", 1)[0]
    printed = np.array([np.nan if w == "_" else float(w) for w in re.findall(r"[^\s,]+", body_text)], "f4")
    same(printed.reshape(expected.shape), expected)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payloads=st.lists(st.binary(max_size=40), max_size=5), checksum=st.booleans(),
       max_chunk=st.integers(1, 24), dmr=st.text(max_size=20))
def test_dap_chunks_cut_the_data_as_the_spec_frames_them(payloads: list[bytes], checksum: bool, max_chunk: int,
                                                         dmr: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``.dap`` body by the DAP4 spec: the DMR chunk, then each variable's bytes and (when asked) its CRC32 as
    one stream in chunks of at most MAX_CHUNK bytes, only the last flagged LAST, all flagged little-endian."""
    from dstp.opendap import dap4

    monkeypatch.setattr(dap4, "MAX_CHUNK", max_chunk)  # set for each example; undone at the end
    names = [f"v{i}" for i in range(len(payloads))]
    sums = {n: zlib.crc32(p) for n, p in zip(names, payloads)} if checksum else None
    body = b"".join(dap4.dap_chunks(dmr, payloads, sums, names))
    stream = b"".join(p + (struct.pack("<I", zlib.crc32(p)) if checksum else b"") for p in payloads)
    chunks, at = [], 0
    while at < len(body):
        (head,) = struct.unpack(">I", body[at:at + 4])
        flags, size = head >> 24, head & 0xFFFFFF
        chunks.append((flags, body[at + 4:at + 4 + size]))
        at += 4 + size
    assert chunks[0] == (0x04, dmr.encode() + b"\r\n")
    data = chunks[1:]
    assert [f for f, _ in data] == [0x04] * (len(data) - 1) + [0x05]
    assert b"".join(c for _, c in data) == stream
    assert all(len(c) == max_chunk for _, c in data[:-1]) and len(data[-1][1]) <= max_chunk
    assert len(data) == max(1, -(-len(stream) // max_chunk))
