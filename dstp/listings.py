"""What ``dstp ls`` and ``dstp describe`` print: one line per dataset that fits the terminal, then a dataset whole.

A table whose cells wrap is unreadable in an 80-column terminal (each dataset of ``dstp ls`` took 5–8
lines), so every cell stays on its line and the table is laid out for the width it has: the id and the
record count always show in full, the title takes what is left (shortened with "…"), and the columns
that matter least go first when there is no room — the attributes, then the grid, then the time span's
days. rich draws it; this module only decides what goes in.
"""

from __future__ import annotations

from typing import Any, Sequence

from rich.table import Table

__all__ = ["describe_lines", "fit_names", "ls_table"]

#: A title narrower than this says too little: optional columns go first.
MIN_TITLE = 20
#: The attributes column is shown only this wide or wider.
MIN_ATTRIBUTES = 22
#: Padding rich puts around each cell of a table without a box (one space each side).
PAD = 2


def fit_names(names: Sequence[str], width: int) -> str:
    """Return as many of ``names`` as fit in ``width`` characters, comma-separated, then ``+N`` for the rest."""
    shown: list[str] = []
    for i, name in enumerate(names):
        rest = len(names) - i - 1
        candidate = ", ".join([*shown, name])
        tail = f", +{rest}" if rest else ""
        if len(candidate) + len(tail) > width:
            more = len(names) - len(shown)
            return ", ".join(shown) + (f", +{more}" if shown else f"{len(names)} attributes")
        shown.append(name)
    return ", ".join(shown)


def _span(d: Any, days: bool) -> str:
    if not d.time_start:
        return ""
    cut = 10 if days else 7
    return f"{d.time_start[:cut]} … {d.time_end[:cut]}"


def ls_table(datasets: Sequence[Any], width: int) -> Table:
    """Return the table of ``dstp ls`` for a terminal ``width`` columns wide: one line per dataset."""
    ids = max([len("id"), *(len(d.id) for d in datasets)])
    records = max([len("records"), *(len(f"{d.default_grid_rows:,}") for d in datasets)])
    grids = [("×".join(d.default_grid)) for d in datasets]
    grid = max([len("grid"), *(len(g) for g in grids)])
    spans = {days: max([len("time span"), *(len(_span(d, days)) for d in datasets)]) for days in (True, False)}
    names = max([0, *(len(", ".join(d.attributes)) for d in datasets)])
    titles = max([len("title"), *(len(d.title) for d in datasets)])
    budget = width - 1  # a line as wide as the terminal wraps in some terminals
    # Richest layout first: (grid shown, span with days, span shown, attributes shown).
    layouts = [(True, True, True, True), (True, True, True, False), (False, True, True, False),
               (False, False, True, False), (False, False, False, False)]
    for with_grid, days, with_span, with_attributes in layouts:
        fixed = ids + records + 3 * PAD
        fixed += (grid + PAD) if with_grid else 0
        fixed += (spans[days] + PAD) if with_span else 0
        fixed += PAD if with_attributes else 0
        room = budget - fixed
        if with_attributes and room >= MIN_TITLE + MIN_ATTRIBUTES:
            title = min(titles, room - MIN_ATTRIBUTES)  # the title first, the attributes what is left
            attributes = min(names, room - title)
            break
        if not with_attributes and room >= MIN_TITLE:
            title, attributes = min(titles, room), 0
            break
    else:
        title, attributes = max(MIN_TITLE, budget - ids - records - 3 * PAD), 0
    table = Table(box=None, show_edge=False)
    table.add_column("id", no_wrap=True, min_width=ids)
    table.add_column("title", no_wrap=True, overflow="ellipsis", width=title)
    if attributes:
        table.add_column("attributes", no_wrap=True, overflow="ellipsis", width=attributes)
    if with_grid:
        table.add_column("grid", no_wrap=True)
    table.add_column("records", no_wrap=True, justify="right")
    if with_span:
        table.add_column("time span", no_wrap=True)
    for d, g in zip(datasets, grids):
        row = [d.id, d.title]
        if attributes:
            row.append(fit_names(d.attributes, attributes))
        if with_grid:
            row.append(g)
        row.append(f"{d.default_grid_rows:,}")
        if with_span:
            row.append(_span(d, days))
        table.add_row(*row)
    return table


def describe_lines(d: Any) -> list[Any]:
    """Return what ``dstp describe`` prints, in order: lines of text and rich tables."""
    from dstp.metadata import file_axis, units_label

    out: list[Any] = []
    s = d.summary
    out.append(f"[bold]{s.id}[/bold] — {s.title}")
    if s.summary:
        out.append(s.summary)
    out.append(f"{len(d.files)} file(s), {s.size_bytes / 2**20:.1f} MiB; select * has {s.default_grid_rows:,} records "
               f"on ({', '.join(s.default_grid)})")
    dims = Table("dimension", "size", "coordinate", "from", "to", "units", box=None, title="dimensions")
    for x in d.dimensions:
        order = {1: "↑", -1: "↓"}.get(x.order, "")
        dims.add_row(x.name, str(x.size), f"{x.coordinate} {order}", x.min, x.max,
                     units_label(d, x) + (f" ({x.calendar})" if x.calendar else ""))
    out.append(dims)
    attrs = Table("attribute", "units", "dimensions", "type", "description", box=None, title="attributes")
    for a in d.attributes:
        attrs.add_row(a.name, a.units, " × ".join(a.dimensions), a.arrow_type + (" (packed)" if a.packed else ""),
                      a.description)
    out.append(attrs)
    other = [c for c in d.coordinates if c.role not in ("dimension", "")]
    if other:
        coords = Table("coordinate", "role", "dimensions", "units", "type", "note", box=None,
                       title="other coordinates (auxiliary, scalar, bounds, derived)")
        for c in other:
            coords.add_row(c.name, c.role, " × ".join(c.dimensions) or "(scalar)", c.units, c.arrow_type, c.note)
        out.append(coords)
    for m in d.grid_mappings:
        out.append(f"grid mapping [bold]{m.name}[/bold]: {m.grid_mapping_name} — {m.proj or m.problem}")
    feature = dict(d.global_attributes).get("dstp:feature_type")
    if feature:
        layout = dict(d.global_attributes).get("dstp:layout", "")
        out.append(f"feature type: {feature}" + (f"; {layout}" if layout else ""))
    if d.correlation_keys:
        out.append("correlation keys: " + ", ".join(f"{k.name}={k.column}" for k in d.correlation_keys))
    axis = file_axis(d)
    files = Table("file", "size", "format", f"first {axis}" if axis else "", f"last {axis}" if axis else "",
                  box=None, title="files")
    for f in d.files:
        first = f.first or (str(f.start) if f.count else "")
        last = f.last or (str(f.start + f.count - 1) if f.count else "")
        files.add_row(f.name, f"{f.size_bytes / 2**20:.1f} MiB", f.format, first, last)
    out.append(files)
    for a in d.attributes:
        if a.missing_from:
            out.append(f"[yellow]{a.name} is NULL on the records of {', '.join(a.missing_from)}[/yellow] "
                       "(the variable is not in those files)")
    for warning in d.warnings:
        out.append(f"[yellow]warning:[/yellow] {warning}")
    return out
