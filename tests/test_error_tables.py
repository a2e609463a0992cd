"""The error tree is the one source of every error table: dstp/errors.py, proto/README.md, the R client.

``python -m dstp._error_tables`` regenerates the tables; these tests fail while
one is stale, and check the R client's classes against the tree by reading
``conditions.R`` itself, independently of the generator.
"""

from __future__ import annotations

import re
from pathlib import Path

from dstp import _error_tables, errors
from dstp.errors import ErrorRow, error_table

ROOT = Path(__file__).resolve().parents[1]
CONDITIONS_R = ROOT / "clients" / "r" / "R" / "conditions.R"


def _rows() -> list[ErrorRow]:
    return [row for row in error_table() if row.parent is not None]


def test_generated_tables_are_current() -> None:
    assert _error_tables.stale(ROOT) == [], "run: python -m dstp._error_tables"


def test_the_check_command_agrees() -> None:
    assert _error_tables.main(["--check", "--root", str(ROOT)]) == 0


def test_a_stale_table_is_found_and_rewritten(tmp_path: Path) -> None:
    for block in _error_tables.blocks(ROOT):
        target = tmp_path / block.path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(block.path.read_text(encoding="utf-8"), encoding="utf-8")
    readme = tmp_path / "proto" / "README.md"
    readme.write_text(readme.read_text().replace("| `truncated` |", "| `cut` |"))
    assert _error_tables.stale(tmp_path) == [readme]
    assert _error_tables.regenerate(tmp_path) == [readme]
    assert _error_tables.stale(tmp_path) == []


def test_every_class_is_a_row_with_a_meaning() -> None:
    rows = error_table()
    names = {row.name for row in rows}
    exported = {n for n in errors.__all__ if isinstance(getattr(errors, n), type)
                and issubclass(getattr(errors, n), errors.DstpError)}
    assert names == exported
    assert rows[0].error is errors.DstpError and rows[0].depth == 0
    for row in rows:
        assert row.meaning and row.meaning.endswith((".", ")")), f"give {row.name} a one-line docstring"
        assert issubclass(row.error, row.parent or object)


def test_truncated_is_in_every_generated_table() -> None:
    row = next(r for r in error_table() if r.error is errors.TruncatedResultError)
    assert (row.code, row.grpc_status, row.http_status) == ("truncated", "RESOURCE_EXHAUSTED", 429)
    assert "TruncatedResultError" in (errors.__doc__ or "")
    assert "| `truncated` | RESOURCE_EXHAUSTED | 429 | `TruncatedResultError`" in (ROOT / "proto" / "README.md").read_text()
    assert 'truncated = c("dstp_truncated", "dstp_limit_exceeded")' in CONDITIONS_R.read_text()


def test_a_code_shared_by_classes_means_one_status() -> None:
    by_code: dict[str, set[tuple[str, int]]] = {}
    for row in error_table():
        by_code.setdefault(row.code, set()).add((row.grpc_status, row.http_status))
    assert {code: s for code, s in by_code.items() if len(s) > 1} == {}


def test_framework_errors_have_their_own_classes() -> None:
    cases = [(errors.RouteNotFoundError, "not_found", 404, errors.NotFoundError),
             (errors.MethodNotAllowedError, "method_not_allowed", 405, errors.DstpError),
             (errors.BadRequestError, "invalid_query", 400, errors.QueryError)]
    for cls, code, status, parent in cases:
        err = cls("no")
        assert (err.code, err.http_status) == (code, status) and isinstance(err, parent)
        assert err.to_dict() == {"error": {"code": code, "message": "no"}}


def test_client_fallback_by_status_stays_inside_the_tree() -> None:
    for status, cls in errors._BY_STATUS.items():
        assert cls.grpc_status == status
    assert isinstance(errors.error_from_status("NOT_FOUND", "m", "truncated"), errors.TruncatedResultError)


# -- the R client, read from conditions.R ---------------------------------------------------

def _r_list(name: str) -> dict[str, list[str]]:
    text = CONDITIONS_R.read_text()
    body = re.search(rf"^{name} <- list\(\n(.*?)\n\)", text, re.S | re.M)
    assert body, f"{name} not found in conditions.R"
    entries: dict[str, list[str]] = {}
    for line in body.group(1).splitlines():
        m = re.fullmatch(r'\s*"?(\w+)"? = (?:"(\w+)"|c\(([^)]*)\)),?', line)
        assert m, f"cannot read {line!r}"
        entries[m.group(1)] = [m.group(2)] if m.group(2) else re.findall(r'"(\w+)"', m.group(3))
    return entries


def test_r_classes_follow_the_tree() -> None:
    classes = _r_list("DSTP_CLASSES")
    rows = _rows()
    assert {row.code for row in rows} | set(_error_tables.R_ONLY) == set(classes)
    first: dict[str, ErrorRow] = {}
    for row in rows:
        first.setdefault(row.code, row)
    for code, row in first.items():
        # own class, then each ancestor's (the root, dstp_error, is added by dstp_condition)
        chain, cls = [], row.error
        while cls is not errors.DstpError:
            chain.append(_error_tables.r_class(cls.code))
            cls = cls.__mro__[1]
        assert classes[code] == list(dict.fromkeys(chain)), code


def test_r_status_fallback_covers_every_status_with_its_topmost_class() -> None:
    statuses = _r_list("STATUS_CLASSES")
    rows = _rows()
    assert {int(s) for s in statuses} == {row.http_status for row in rows}
    for status, (cls,) in statuses.items():
        depth = min(row.depth for row in rows if row.http_status == int(status))
        assert cls in {_error_tables.r_class(row.code) for row in rows
                       if row.http_status == int(status) and row.depth == depth}
