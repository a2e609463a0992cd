"""``dstp catalog export-references ID``: a dataset's files as kerchunk references (:mod:`dstp.catalog.references`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

__all__ = ["add_reference_command"]

EPILOG = """\
Open what it writes with xarray (zarr-python and fsspec; s3fs for s3:// files, with the store's endpoint and
credentials given by the reader, never written into the references):

  xr.open_dataset("reference://", engine="zarr",
                  backend_kwargs={"consolidated": False, "storage_options": {"fo": "era5.json"}})

The combined set (the default) is written only when every file decodes alike: the same type, filters, fill
value, chunk shape and CF decoding attributes (scale_factor, add_offset, units, calendar…) for each variable,
chunks that line up with the files along the aggregation axis, and equal values off it. Otherwise it is refused,
naming the first file and attribute that differ: --per-file writes one set per file, always right.
"""


def cmd_export_references(args: argparse.Namespace) -> int:
    from dstp.catalog.references import all_file_references, combined_references
    from dstp.server import scan_catalog
    from dstp.settings import Settings

    settings = Settings.from_env()
    root = Path(args.root) if args.root else settings.catalog_root
    if root is None:
        from dstp.server import default_catalog_root

        root = default_catalog_root()
    catalog = scan_catalog(settings, Path(root))  # from the catalog index where it is current: no file is read again
    try:
        ds = catalog.get(args.dataset)
        out = Path(args.output)
        notes: list[str] = []
        if args.per_file:
            out.mkdir(parents=True, exist_ok=True)
            folder = ds.descriptor.path.parent if ds.descriptor.path is not None else Path(root)
            written = 0
            for k, refs in all_file_references(ds):
                name = ds.files[k].path.relative_to(folder).as_posix().replace("/", "__").replace("@", "")
                _write(out / f"{name}.json", refs.document())
                notes.extend(refs.notes)
                written += 1
            print(f"wrote {written} reference set(s) of {args.dataset}, one per file, into {out}")
        else:
            refs = combined_references(ds)
            notes.extend(refs.notes)
            _write(out, refs.document())
            print(f"wrote the references of {args.dataset} ({len(ds.files)} file(s) along "
                  f"{ds.descriptor.aggregate or 'no axis'}) to {out}")
        for note in notes:
            print(f"dstp: warning: {note}", file=sys.stderr)
    finally:
        catalog.close()
    return 0


def _write(path: Path, document: dict[str, Any]) -> None:
    """Write ``document`` to ``path`` whole or not at all."""
    partial = path.with_name(f".{path.name}.part")
    partial.write_text(json.dumps(document, separators=(",", ":")), encoding="utf-8")
    partial.replace(path)


def add_reference_command(catalog_commands: Any) -> None:
    """Add ``export-references`` to the ``dstp catalog`` sub-commands."""
    e = catalog_commands.add_parser(
        "export-references", help="write kerchunk references of a dataset's files, readable in place by xarray/zarr",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    e.add_argument("dataset", metavar="ID", help="dataset id")
    e.add_argument("-o", "--output", required=True, metavar="PATH",
                   help="the JSON file to write (with --per-file: a folder, one FILE.json per file)")
    e.add_argument("--root", help="catalog root (default: DSTP_CATALOG_ROOT, else the small samples)")
    e.add_argument("--per-file", action="store_true",
                   help="one reference set per file, each decoded with its own attributes (always right)")
    e.set_defaults(func=cmd_export_references)
