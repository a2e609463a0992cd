"""What ``dstp catalog export-references`` writes, dstp publishes back: the exported per-file references of an
archive, served as a dataset of reference files, answer as xarray on the netCDF files (each file decoded on its
own, its packing attributes as the JSON holds them: doubles; docs/zarr-sources.md).

Two branches built the halves (the export, and reference files as sources); this checks they meet, on the
archives the aggregation oracle generates: per-file packing, fill conventions, time units and calendars.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, assume, given, settings

from oracle import assert_same_records, run_sql
from test_aggregation_oracle import ArchiveSpec, archives, dstp_answer, oracle_records, write_archive
from test_zarr_references import describable, publish_references, reference_oracle

from dstp.catalog.publish import publish
from dstp.catalog.references import all_file_references
from dstp.catalog.registry import Catalog


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=archives().map(describable))
def test_exported_references_published_back_answer_as_the_files(spec: ArchiveSpec) -> None:
    with tempfile.TemporaryDirectory(prefix="dstp-round-") as tmp:
        root = Path(tmp)
        (root / "nc").mkdir()
        paths = write_archive(spec, root / "nc")
        publish(paths, "arch")
        catalog = Catalog.scan(root, direct_chunks=spec.direct_chunks)
        try:
            assert not catalog.problems, catalog.problems
            exported = list(all_file_references(catalog.get("arch")))
        finally:
            catalog.close()
        assume(not any(refs.notes for _, refs in exported))  # a variable left out is named, not served
        (root / "refs").mkdir()
        for k, refs in exported:
            (root / "refs" / f"back_{k:03d}.json").write_text(json.dumps(refs.document()))
        publish_references(root, paths, "refs/back_*.json", dataset="back")
        catalog = Catalog.scan(root, direct_chunks=spec.direct_chunks)
        try:
            assert not catalog.problems, catalog.problems
            assert [f.path.suffix for f in catalog.get("back").files] == [".json"] * len(paths)
            records = oracle_records(reference_oracle(paths), ["temp", "humid"], ["time", "lat", "lon"])
            for sql in ("select time, lat, lon, temp, humid from back",
                        "select time, temp from back where humid is null order by time desc, temp"):
                assert_same_records(dstp_answer(catalog, sql), run_sql(records, sql, "back"),
                                    ordered="order by" in sql)
        finally:
            catalog.close()
