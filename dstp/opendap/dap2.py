"""DAP2 documents: the DAS, the DDS of a dataset or of a constrained answer, the XDR ``.dods`` body, errors.

Encoding follows OPeNDAP DAP 2.0 (ESE-RFC-004.1.2) as libdap writes it: the
``.dods`` body is the constrained DDS, ``Data:\\n``, then each projected
variable in XDR (big-endian): a scalar as its value (8- and 16-bit integers
widened to 4 bytes, a String as length + bytes padded to 4); an array as its
length twice then the values (bytes padded to 4, 16-bit integers widened to
4 bytes), a String array as its length once then each string; a Grid as its
array followed by its maps, a Structure as its members in order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

import numpy as np

from dstp.opendap.model import DapAttribute, DapDataset, dap2_type

__all__ = ["Answer", "AnswerItem", "das", "dds", "dods", "error_body", "DAP2_VERSION"]

DAP2_VERSION = "2.0"

Ranges = tuple[tuple[int, int, int], ...]
#: Reads one variable at its ranges: (name, ranges) -> array of the served type and the ranges' shape.
Reader = Callable[[str, Ranges], np.ndarray]


@dataclass(frozen=True, slots=True)
class AnswerItem:
    """One top-level variable of an answer: a Grid, a Structure of Grid members, or an array/scalar."""

    #: "grid", "structure" or "array".
    kind: str
    name: str
    #: (variable, ranges) of each part in order: a Grid's array then maps; a Structure's members; one array.
    parts: tuple[tuple[str, Ranges], ...]


Answer = list[AnswerItem]


def _number(value: object, dtype: np.dtype) -> str:
    if dtype.kind == "f":
        number = float(value)  # type: ignore[arg-type]
        if math.isnan(number):
            return "NaN"
        if math.isinf(number):
            return "Infinity" if number > 0 else "-Infinity"
        return repr(float(np.float32(number))) if dtype.itemsize == 4 else repr(number)
    return str(int(value))  # type: ignore[call-overload]


def quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _attribute_line(a: DapAttribute, indent: str) -> str:
    if a.dtype.kind == "O":
        return f"{indent}String {a.name} {', '.join(quote(str(v)) for v in a.values)};"
    return f"{indent}{dap2_type(a.dtype)} {a.name} {', '.join(_number(v, a.dtype) for v in a.values)};"


def das(ds: DapDataset) -> str:
    """Return the DAS: each variable's attributes, NC_GLOBAL, and DODS_EXTRA naming the unlimited dimension."""
    lines = ["Attributes {"]
    for v in ds.variables.values():
        lines.append(f"    {v.name} {{")
        lines += [_attribute_line(a, "        ") for a in v.attributes]
        lines.append("    }")
    lines.append("    NC_GLOBAL {")
    lines += [_attribute_line(a, "        ") for a in ds.attributes]
    lines.append("    }")
    if ds.unlimited:
        lines += ["    DODS_EXTRA {", f"        String Unlimited_Dimension {quote(ds.unlimited)};", "    }"]
    lines.append("}")
    return "\n".join(lines) + "\n"


def _size(r: tuple[int, int, int]) -> int:
    return len(range(r[0], r[2] + 1, r[1]))


def _declaration(ds: DapDataset, name: str, ranges: Ranges, indent: str) -> str:
    v = ds.variables[name]
    shape = "".join(f"[{d} = {_size(r)}]" for d, r in zip(v.dims, ranges))
    return f"{indent}{dap2_type(v.dtype)} {name}{shape};"


def dds(ds: DapDataset, answer: Answer) -> str:
    """Return the DDS of an answer (the whole dataset's when the answer holds every variable whole)."""
    lines = ["Dataset {"]
    for item in answer:
        if item.kind == "array":
            lines.append(_declaration(ds, *item.parts[0], "    "))
        elif item.kind == "grid":
            lines += ["    Grid {", "     ARRAY:", _declaration(ds, *item.parts[0], "        "), "     MAPS:"]
            lines += [_declaration(ds, n, r, "        ") for n, r in item.parts[1:]]
            lines.append(f"    }} {item.name};")
        else:
            lines.append("    Structure {")
            lines += [_declaration(ds, n, r, "        ") for n, r in item.parts]
            lines.append(f"    }} {item.name};")
    lines.append(f"}} {ds.id};")
    return "\n".join(lines) + "\n"


def _padded(raw: bytes) -> bytes:
    return raw + b"\0" * (-len(raw) % 4)


def _xdr_strings(values: Iterable[object]) -> bytes:
    out = bytearray()
    for v in values:
        raw = ("" if v is None else str(v)).encode("utf-8")
        out += len(raw).to_bytes(4, "big") + _padded(raw)
    return bytes(out)


def xdr(values: np.ndarray, dtype: np.dtype, scalar: bool) -> bytes:
    """Return values in DAP2's XDR: a scalar bare, an array with its length (twice, once for Strings)."""
    flat = np.asarray(values).reshape(-1)
    n = flat.size
    if dtype.kind == "O":
        body = _xdr_strings(flat)
        return body if scalar else n.to_bytes(4, "big") + body
    kind = dap2_type(dtype)
    if kind == "Byte":
        raw = flat.astype("u1").tobytes()
        if scalar:
            return raw + b"\0\0\0"
        return n.to_bytes(4, "big") * 2 + _padded(raw)
    wire = {"Int16": ">i4", "UInt16": ">u4", "Int32": ">i4", "UInt32": ">u4", "Float32": ">f4",
            "Float64": ">f8"}[kind]
    body = flat.astype(wire).tobytes()
    return body if scalar else n.to_bytes(4, "big") * 2 + body


def dods(ds: DapDataset, answer: Answer, read: Reader) -> Iterator[bytes]:
    """Yield the ``.dods`` body: the DDS, ``Data:``, then each part's values in XDR."""
    yield (dds(ds, answer) + "\nData:\n").encode("utf-8")
    for item in answer:
        for name, ranges in item.parts:
            v = ds.variables[name]
            yield xdr(read(name, ranges), v.dtype, scalar=not v.dims)


def error_body(status: int, message: str) -> str:
    """Return a DAP2 error object (``Error { code = …; message = "…"; };``)."""
    return f"Error {{\n    code = {status};\n    message = {quote(message)};\n}};\n"
