"""DAP4 documents: the DMR, the chunked ``.dap`` body with CRC32 checksums, and error documents.

A ``.dap`` body (OPeNDAP DAP 4.0, Volume 2 §6) is a sequence of chunks, each
behind a 4-byte big-endian header: the high byte holds flags, the low three
bytes the chunk's length.

| flag | value | meaning |
|---|---|---|
| LAST | 0x01 | the last chunk |
| ERROR | 0x02 | the chunk holds an ``<Error>`` document instead of data |
| LITTLE_ENDIAN | 0x04 | the data are little-endian (dstp always sends little-endian) |

The first chunk is the DMR followed by ``\\r\\n``; then come the variables in
DMR order, each its values in C order (a String as an 8-byte count and its
UTF-8 bytes), followed — when ``dap4.checksum=true`` — by the CRC32 of those
bytes (4 bytes, little-endian); the DMR then also gives each variable's
``_DAP4_Checksum_CRC32``. Data chunks hold at most 16 MiB − 1 (the 24-bit length).

Dimensions: a sliced shared dimension is declared again with its new size
when every projected variable slices it the same way (as THREDDS does), so
coordinate maps stay attached; where two variables slice it differently,
each gets an anonymous ``<Dim size="n"/>`` and no map of it.
"""

from __future__ import annotations

import zlib
from typing import Iterator, Sequence
from xml.sax.saxutils import escape, quoteattr

import numpy as np

from dstp.opendap.dap2 import Ranges
from dstp.opendap.model import DapAttribute, DapDataset, dap4_type

__all__ = ["dmr", "order", "dap_chunks", "encode", "error_document", "LAST", "ERROR", "LITTLE_ENDIAN", "MAX_CHUNK"]

LAST, ERROR, LITTLE_ENDIAN = 0x01, 0x02, 0x04
MAX_CHUNK = 2**24 - 1
_NS = "http://xml.opendap.org/ns/DAP/4.0#"

#: One projected variable and its ranges.
Selection = Sequence[tuple[str, Ranges]]


def _value(v: object, dtype: np.dtype) -> str:
    if dtype.kind == "O":
        return escape(str(v))
    if dtype.kind == "f":
        number = float(v)  # type: ignore[arg-type]
        if np.isnan(number):
            return "NaN"
        return repr(float(np.float32(number))) if dtype.itemsize == 4 else repr(number)
    return str(int(v))  # type: ignore[call-overload]


def _attribute(a: DapAttribute, indent: str) -> list[str]:
    kind = "String" if a.dtype.kind == "O" else dap4_type(a.dtype)
    values = "".join(f"<Value>{_value(v, a.dtype)}</Value>" for v in a.values)
    return [f"{indent}<Attribute name={quoteattr(a.name)} type=\"{kind}\">{values}</Attribute>"]


def _size(r: tuple[int, int, int]) -> int:
    return len(range(r[0], r[2] + 1, r[1]))


def _dimension_sizes(ds: DapDataset, selection: Selection) -> dict[str, int | None]:
    """Return each dimension's size in the answer: its sliced size when every variable agrees, else None."""
    seen: dict[str, set[tuple[int, int, int]]] = {}
    for name, ranges in selection:
        for d, r in zip(ds.variables[name].dims, ranges):
            seen.setdefault(d, set()).add(r)
    return {d: _size(next(iter(rs))) if len(rs) == 1 else None for d, rs in seen.items()}


def _fqn(ds: DapDataset, dim: str) -> str:
    """Return a dimension's fully qualified name: in the group of its coordinate variable, else the root."""
    coordinate = ds.variables.get(dim)
    group = coordinate.group if coordinate is not None and coordinate.dims == (dim,) else ""
    return f"/{group}/{dim}" if group else f"/{dim}"


def order(ds: DapDataset, selection: Selection) -> list[tuple[str, Ranges]]:
    """Return the selection in the order the DMR declares it: the root's variables, then each group's."""
    rank = {n: i for i, n in enumerate(ds.variables)}
    return sorted(selection, key=lambda s: (ds.variables[s[0]].group, rank[s[0]]))


def dmr(ds: DapDataset, selection: Selection, checksums: dict[str, int] | None = None) -> str:
    """Return the DMR of an answer holding ``selection`` (with each variable's CRC32 when given)."""
    sizes = _dimension_sizes(ds, selection)
    selected = {n for n, _ in selection}
    lines = ['<?xml version="1.0" encoding="UTF-8"?>',
             f'<Dataset xmlns="{_NS}" dapVersion="4.0" dmrVersion="1.0" name={quoteattr(ds.id)}>']

    def dimensions(group: str, indent: str) -> list[str]:
        return [f'{indent}<Dimension name={quoteattr(d)} size="{n}"/>' for d, n in sizes.items()
                if n is not None and _fqn(ds, d) == (f"/{group}/{d}" if group else f"/{d}")]

    def variable(name: str, ranges: Ranges, indent: str) -> list[str]:
        v = ds.variables[name]
        out = [f"{indent}<{dap4_type(v.dtype)} name={quoteattr(name)}>"]
        for d, r in zip(v.dims, ranges):
            out.append(f"{indent}    <Dim name={quoteattr(_fqn(ds, d))}/>" if sizes.get(d) is not None
                       else f'{indent}    <Dim size="{_size(r)}"/>')
        for a in v.attributes:
            out += _attribute(a, indent + "    ")
        if checksums is not None and name in checksums:
            out.append(f'{indent}    <Attribute name="_DAP4_Checksum_CRC32" type="UInt32">'
                       f"<Value>{checksums[name]}</Value></Attribute>")
        for d in v.dims:
            if d != name and d in selected and sizes.get(d) is not None and ds.variables[d].dims == (d,):
                out.append(f"{indent}    <Map name={quoteattr(_fqn(ds, d))}/>")
        out.append(f"{indent}</{dap4_type(v.dtype)}>")
        return out

    lines += dimensions("", "    ")
    open_groups: list[str] = []
    for name, ranges in order(ds, selection):
        path = [p for p in ds.variables[name].group.split("/") if p]
        while open_groups and open_groups != path[:len(open_groups)]:
            open_groups.pop()
            lines.append("    " * (len(open_groups) + 1) + "</Group>")
        while len(open_groups) < len(path):
            open_groups.append(path[len(open_groups)])
            indent = "    " * len(open_groups)
            lines.append(f"{indent}<Group name={quoteattr(open_groups[-1])}>")
            lines += dimensions("/".join(open_groups), indent + "    ")
        lines += variable(name, ranges, "    " * (len(open_groups) + 1))
    while open_groups:
        open_groups.pop()
        lines.append("    " * (len(open_groups) + 1) + "</Group>")
    for a in ds.attributes:
        lines += _attribute(a, "    ")
    if ds.unlimited:
        lines += ['    <Attribute name="DODS_EXTRA" type="Container">',
                  f'        <Attribute name="Unlimited_Dimension" type="String"><Value>{escape(ds.unlimited)}'
                  "</Value></Attribute>", "    </Attribute>"]
    lines.append("</Dataset>")
    return "\n".join(lines) + "\n"


def encode(values: np.ndarray, dtype: np.dtype) -> bytes:
    """Return one variable's values as DAP4 sends them (little-endian; Strings with 8-byte counts)."""
    flat = np.asarray(values).reshape(-1)
    if dtype.kind == "O":
        out = bytearray()
        for v in flat:
            raw = ("" if v is None else str(v)).encode("utf-8")
            out += len(raw).to_bytes(8, "little") + raw
        return bytes(out)
    # one copy: values already little-endian in the served type (the usual case) are not converted first
    return np.ascontiguousarray(flat, dtype=dtype.newbyteorder("<")).tobytes()


def _header(size: int, flags: int) -> bytes:
    return ((flags << 24) | size).to_bytes(4, "big")


def dap_chunks(dmr_text: str, payloads: Sequence[bytes], checksums: dict[str, int] | None,
               names: Sequence[str]) -> Iterator[bytes | memoryview]:
    """Yield the chunked ``.dap`` body: the DMR chunk, then the data in chunks of at most MAX_CHUNK bytes.

    The data (each payload, then its checksum) are cut into chunks as one stream: full chunks while more than
    MAX_CHUNK bytes remain, the rest in the last. Pieces of payloads are yielded as views, not copies: joined
    once by the caller, a 21 MB variable is copied once instead of five times.
    """
    dmr_bytes = dmr_text.encode("utf-8") + b"\r\n"
    yield _header(len(dmr_bytes), LITTLE_ENDIAN) + dmr_bytes
    pieces: list[memoryview] = []
    for name, payload in zip(names, payloads):
        pieces.append(memoryview(payload).cast("B"))
        if checksums is not None:
            pieces.append(memoryview(checksums[name].to_bytes(4, "little")))
    remaining = sum(p.nbytes for p in pieces)
    at = 0  # position in pieces[0]
    while True:
        size = min(remaining, MAX_CHUNK)
        remaining -= size
        yield _header(size, LITTLE_ENDIAN | (LAST if remaining == 0 else 0))
        while size:
            piece = pieces[0]
            take = min(size, piece.nbytes - at)
            yield piece[at:at + take]
            size -= take
            at += take
            if at == piece.nbytes:
                pieces.pop(0)
                at = 0
        if remaining == 0:
            return


def crc32(payload: bytes) -> int:
    return zlib.crc32(payload) & 0xFFFFFFFF


def error_document(status: int, message: str) -> str:
    """Return a DAP4 error document."""
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error httpcode="{status}">\n'
            f"    <Message>{escape(message)}</Message>\n</Error>\n")
