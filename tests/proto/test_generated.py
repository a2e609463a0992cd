"""The checked-in gRPC/protobuf modules are exactly what dstp.proto generates."""

from __future__ import annotations

from pathlib import Path

from dstp.proto._generate import GENERATED, generate

PROTO = Path(__file__).resolve().parents[2] / "proto"


def test_generated_code_is_fresh(tmp_path: Path) -> None:
    generate(PROTO, tmp_path)
    for name in GENERATED:
        fresh = (tmp_path / name).read_text()
        assert (PROTO / name).read_text() == fresh, (
            f"proto/{name} is stale: run `python proto/_generate.py` and commit the result"
        )


def test_every_rpc_message_and_field_is_documented() -> None:
    """A declaration needs a comment above it, inline, or a run of commented fields it belongs to."""
    lines = [line.strip() for line in (PROTO / "dstp.proto").read_text().splitlines()]
    undocumented = []
    covered = False
    for i, text in enumerate(lines):
        is_field = "=" in text and text.endswith(";") and not text.startswith(("syntax", "//"))
        is_decl = text.startswith(("rpc ", "message ", "enum ", "service ")) or is_field
        if not is_decl:
            covered = False
            continue
        prev = lines[i - 1] if i else ""
        documented = prev.startswith("//") or "//" in text or (is_field and covered)
        if not documented:
            undocumented.append(text)
        covered = is_field and documented
    assert undocumented == []
