"""HDF-EOS5 swaths and grids, laid out as NASA Aura files are, against an oracle that pairs h5py arrays by name.

The files are written with h5py in the layout of MLS/OMI Level 2 swaths and OMI Level 3 grids:
``/HDFEOS/SWATHS/<swath>/Data Fields`` and ``/Geolocation Fields`` (``/HDFEOS/GRIDS/<grid>/Data Fields``),
no dimension scales, the dimension names only in ``/HDFEOS INFORMATION/StructMetadata.0`` — so netCDF-C
sees ``phony_dim_N``, different ones in each group. The oracle reads the same arrays with h5py, gives each
the dimensions the test itself wrote into StructMetadata.0 (the test's own layout, never dstp's parse of
it), masks ``_FillValue``/``MissingValue``, and lets xarray broadcast and DuckDB run the same SQL.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import xarray as xr
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from oracle import assert_same_records, run_sql

from dstp.catalog.publish import draft_descriptor, publish
from dstp.catalog.registry import Catalog
from dstp.errors import DataFileError, QueryError
from dstp.query.execute import QueryExecution, prepare_query
from dstp.settings import Settings

SETTINGS = Settings(batch_rows=5)
FILL = np.float32(-999.99)


@dataclass
class Field:
    group: str  # "Geolocation Fields" or "Data Fields"
    name: str
    dims: tuple[str, ...]
    values: np.ndarray
    attrs: dict = field(default_factory=dict)


@dataclass
class Swath:
    name: str
    dims: dict[str, int]
    fields: list[Field]
    maps: list[tuple[str, str, int, int]] = field(default_factory=list)


@dataclass
class Grid:
    name: str
    nx: int
    ny: int
    upper_left: tuple[float, float]
    lower_right: tuple[float, float]
    fields: list[Field]
    projection: str = "HE5_GCTP_GEO"
    origin: str = "HE5_HDFE_GD_UL"
    registration: str = "HE5_HDFE_CENTER"


def _objects(kind: str, key: str, fields: list[Field], unlimited: str | None) -> list[str]:
    lines = [f"\t\tGROUP={kind}"]
    for j, f in enumerate(fields, 1):
        dimlist = ",".join(f'"{d}"' for d in f.dims)
        maxdims = ",".join('"Unlim"' if d == unlimited else f'"{d}"' for d in f.dims)
        lines += [f"\t\t\tOBJECT={kind}_{j}", f'\t\t\t\t{key}="{f.name}"', "\t\t\t\tDataType=H5T_NATIVE_FLOAT",
                  f"\t\t\t\tDimList=({dimlist})", f"\t\t\t\tMaxdimList=({maxdims})", f"\t\t\tEND_OBJECT={kind}_{j}"]
    return [*lines, f"\t\tEND_GROUP={kind}"]


def struct_metadata(swaths: list[Swath], grids: list[Grid]) -> str:
    """Return StructMetadata.0 as the HDF-EOS5 library writes it (tabs, numbered objects, END)."""
    lines = ["GROUP=SwathStructure"]
    for k, s in enumerate(swaths, 1):
        lines += [f"\tGROUP=SWATH_{k}", f'\t\tSwathName="{s.name}"', "\t\tGROUP=Dimension"]
        for j, (d, n) in enumerate(s.dims.items(), 1):
            lines += [f"\t\t\tOBJECT=Dimension_{j}", f'\t\t\t\tDimensionName="{d}"', f"\t\t\t\tSize={n}",
                      f"\t\t\tEND_OBJECT=Dimension_{j}"]
        lines += ["\t\tEND_GROUP=Dimension", "\t\tGROUP=DimensionMap"]
        for j, (geo, data, offset, increment) in enumerate(s.maps, 1):
            lines += [f"\t\t\tOBJECT=DimensionMap_{j}", f'\t\t\t\tGeoDimension="{geo}"', f'\t\t\t\tDataDimension="{data}"',
                      f"\t\t\t\tOffset={offset}", f"\t\t\t\tIncrement={increment}", f"\t\t\tEND_OBJECT=DimensionMap_{j}"]
        lines += ["\t\tEND_GROUP=DimensionMap", "\t\tGROUP=IndexDimensionMap", "\t\tEND_GROUP=IndexDimensionMap"]
        lines += _objects("GeoField", "GeoFieldName", [f for f in s.fields if f.group == "Geolocation Fields"], "nTimes")
        lines += _objects("DataField", "DataFieldName", [f for f in s.fields if f.group == "Data Fields"], "nTimes")
        lines += ["\t\tGROUP=ProfileField", "\t\tEND_GROUP=ProfileField", "\t\tGROUP=MergedFields",
                  "\t\tEND_GROUP=MergedFields", f"\tEND_GROUP=SWATH_{k}"]
    lines += ["END_GROUP=SwathStructure", "GROUP=GridStructure"]
    for k, g in enumerate(grids, 1):
        lines += [f"\tGROUP=GRID_{k}", f'\t\tGridName="{g.name}"', f"\t\tXDim={g.nx}", f"\t\tYDim={g.ny}",
                  f"\t\tUpperLeftPointMtrs=({g.upper_left[0]:f},{g.upper_left[1]:f})",
                  f"\t\tLowerRightMtrs=({g.lower_right[0]:f},{g.lower_right[1]:f})",
                  f"\t\tProjection={g.projection}", "\t\tProjParams=(0,0,0,0,0,0,0,0,0,0,0,0,0)", "\t\tSphereCode=-1",
                  f"\t\tGridOrigin={g.origin}", f"\t\tPixelRegistration={g.registration}",
                  "\t\tGROUP=Dimension", "\t\tEND_GROUP=Dimension"]
        lines += _objects("DataField", "DataFieldName", g.fields, None)
        lines += ["\t\tGROUP=MergedFields", "\t\tEND_GROUP=MergedFields", f"\tEND_GROUP=GRID_{k}"]
    lines += ["END_GROUP=GridStructure", "GROUP=PointStructure", "END_GROUP=PointStructure", "GROUP=ZaStructure",
              "END_GROUP=ZaStructure", "END", ""]
    return "\n".join(lines)


def write_he5(path: Path, swaths: list[Swath] = (), grids: list[Grid] = ()) -> None:  # type: ignore[assignment]
    """Write an HDF-EOS5 file with h5py: no dimension scales, the names only in StructMetadata.0."""
    swaths, grids = list(swaths), list(grids)
    with h5py.File(path, "w") as f:
        info = f.create_group("HDFEOS INFORMATION")
        text = struct_metadata(swaths, grids).encode()
        info.create_dataset("StructMetadata.0", data=np.array(text, dtype=f"S{max(32000, len(text))}"))
        info.attrs["HDFEOSVersion"] = np.bytes_("HDFEOS_5.1.16")
        f.create_group("HDFEOS/ADDITIONAL/FILE_ATTRIBUTES").attrs["InstrumentName"] = np.bytes_("MLS Aura")
        for folder, structures in (("SWATHS", swaths), ("GRIDS", grids)):
            for s in structures:
                for fd in s.fields:
                    # Aura files are chunked and deflated (HE5_HDFE_COMP_SHUF_DEFLATE): read by the chunk reader
                    packed = {"compression": "gzip", "shuffle": True} if fd.values.size > 1 else {}
                    ds = f.require_group(f"HDFEOS/{folder}/{s.name}/{fd.group}").create_dataset(
                        fd.name, data=fd.values, **packed)
                    for k, v in fd.attrs.items():
                        ds.attrs[k] = v


def _float_attrs(units: str, title: str) -> dict:
    return {"_FillValue": FILL, "MissingValue": FILL, "Units": np.bytes_(units), "Title": np.bytes_(title),
            "UniqueFieldDefinition": np.bytes_("Aura-Shared")}


def mls_swath(name: str, n_times: int, n_levels: int, seed: int, fill_fraction: float = 0.2) -> Swath:
    """A swath as MLS L2GP files have one: profiles along nTimes, pressure levels along nLevels."""
    rng = np.random.default_rng(seed)

    def with_fills(values: np.ndarray) -> np.ndarray:
        values = values.astype(np.float32)
        values[rng.random(values.shape) < fill_fraction] = FILL
        return values

    lat = np.round(rng.uniform(-82, 82, n_times), 2).astype(np.float32)
    lat[rng.random(n_times) < fill_fraction / 2] = FILL
    return Swath(name, {"nTimes": n_times, "nLevels": n_levels}, [
        Field("Geolocation Fields", "Latitude", ("nTimes",), lat, _float_attrs("deg", "Latitude")),
        Field("Geolocation Fields", "Longitude", ("nTimes",),
              np.round(rng.uniform(-180, 180, n_times), 2).astype(np.float32), _float_attrs("deg", "Longitude")),
        Field("Geolocation Fields", "Time", ("nTimes",), 8.0e8 + np.arange(n_times) * 24.7,
              {"_FillValue": np.float64(-999.99), "MissingValue": np.float64(-999.99), "Units": np.bytes_("s"),
               "Title": np.bytes_("Time")}),
        Field("Geolocation Fields", "Pressure", ("nLevels",),
              (1000.0 / 10 ** (np.arange(n_levels) / 3)).astype(np.float32), _float_attrs("hPa", "Pressure")),
        Field("Data Fields", "L2gpValue", ("nTimes", "nLevels"),
              with_fills(np.round(rng.uniform(0, 10, (n_times, n_levels)), 3)), _float_attrs("ppmv", name)),
        Field("Data Fields", "L2gpPrecision", ("nTimes", "nLevels"),
              with_fills(np.round(rng.uniform(0, 1, (n_times, n_levels)), 3)), _float_attrs("ppmv", name)),
        Field("Data Fields", "Status", ("nTimes",), rng.integers(0, 8, n_times).astype(np.int32),
              {"MissingValue": np.int32(513), "_FillValue": np.int32(513), "Units": np.bytes_("NoUnits")}),
        Field("Data Fields", "Quality", ("nTimes",), with_fills(np.round(rng.uniform(0, 2, n_times), 2)),
              _float_attrs("NoUnits", "Quality")),
    ])


def oracle_frame(structure: Swath | Grid, path: Path, names: list[str], coords: dict | None = None) -> pd.DataFrame:
    """Return the records of fields ``names``: arrays read with h5py, dimensions from the test's own layout."""
    folder = "SWATHS" if isinstance(structure, Swath) else "GRIDS"
    variables = {}
    with h5py.File(path, "r") as f:
        for fd in structure.fields:
            if fd.name not in names:
                continue
            values = f[f"HDFEOS/{folder}/{structure.name}/{fd.group}/{fd.name}"][...]
            missing = np.zeros(values.shape, bool)
            for key in ("_FillValue", "MissingValue"):
                if key in fd.attrs:
                    missing |= values == fd.attrs[key]
            scale = fd.attrs.get("ScaleFactor")
            values = values * scale if scale is not None else values
            values = np.where(missing, np.nan, values) if missing.any() else values
            variables[fd.name] = (fd.dims, values)
    ds = xr.Dataset(variables, coords=coords or {})
    frame = ds.to_dataframe().reset_index()
    return frame


def answer(catalog: Catalog, sql: str) -> pa.Table:
    prepared = prepare_query(sql, catalog, SETTINGS)
    return pa.Table.from_batches(list(QueryExecution(prepared, SETTINGS).batches()), schema=prepared.schema)


def _catalog(folder: Path, files: list[Path], dataset_id: str) -> Catalog:
    publish(files, dataset_id)
    catalog = Catalog.scan(folder)
    assert not catalog.problems, catalog.problems
    return catalog


SWATH_QUERIES = [
    # a threshold on the field, a latitude band, a pressure range: the three things the issue combined
    ("select Latitude, Pressure, L2gpValue from mls where L2gpValue > 4 and Latitude between -40 and 60 "
     "and Pressure between 5 and 500", ["Latitude", "Pressure", "L2gpValue"]),
    ("select Time, Longitude, Pressure, L2gpValue, L2gpPrecision from mls where L2gpValue is null",
     ["Time", "Longitude", "Pressure", "L2gpValue", "L2gpPrecision"]),
    ("select count(*) as n, avg(L2gpValue) as mean from mls where Latitude > 0", ["Latitude", "L2gpValue"]),
    ("select Time, Latitude, Status, Quality from mls where Quality > 0.5 or Latitude is null",
     ["Time", "Latitude", "Status", "Quality"]),
    ("select Pressure, max(L2gpValue) as top from mls group by Pressure", ["Pressure", "L2gpValue"]),
]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n_times=st.integers(1, 12), n_levels=st.integers(1, 6), seed=st.integers(0, 2**16),
       fills=st.sampled_from([0.0, 0.25]))
@example(n_times=4, n_levels=4, seed=7, fills=0.25)  # equal sizes: netCDF-C gives one array two phony dimensions
def test_a_swath_pairs_data_and_geolocation_by_their_structmetadata_dimensions(
        n_times: int, n_levels: int, seed: int, fills: float) -> None:
    swath = mls_swath("O3", n_times, n_levels, seed, fills)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        path = folder / "MLS-Aura_L2GP-O3_v05-01-c01_2020d001.he5"
        write_he5(path, [swath])
        catalog = _catalog(folder, [path], "mls")
        try:
            ds = catalog.get("mls")
            assert ds.attributes["L2gpValue"].dimensions == ("nTimes", "nLevels")
            assert {"Latitude", "Longitude", "Time"} <= set(ds.auxiliaries)  # geolocation: coordinates
            for sql, names in SWATH_QUERIES:
                want = run_sql(oracle_frame(swath, path, names), sql, "mls")
                assert_same_records(answer(catalog, sql), want)
            # the answer the issue saw: one row per pair of phony dimensions, not per profile and level
            rows = answer(catalog, "select Latitude, L2gpValue from mls").num_rows
            assert rows == n_times * n_levels
        finally:
            catalog.close()


def test_units_fill_values_and_titles_of_hdf_eos_fields_read_as_cf(tmp_path: Path) -> None:
    swath = mls_swath("Temperature", 6, 3, seed=4)
    path = tmp_path / "MLS-Aura_L2GP-Temperature.he5"
    write_he5(path, [swath])
    desc = draft_descriptor([path], "mls")
    specs = {a.name: a for a in desc.attributes}
    coords = {c.name: c for c in desc.coordinates}
    assert specs["L2gpValue"].units == "ppmv" and specs["L2gpValue"].description == "Temperature"
    assert specs["Status"].units is None  # "NoUnits"
    assert coords["Latitude"].units == "degrees_north" and coords["Longitude"].units == "degrees_east"
    assert coords["Pressure"].dimension == "nLevels" and coords["Pressure"].units == "hPa"


def test_a_scale_factor_is_applied_and_a_nonzero_offset_is_refused(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    swath = mls_swath("O3", 5, 2, seed=1)
    packed = rng.integers(0, 30000, (5, 2)).astype(np.int16)
    packed[0, 0] = -32767
    swath.fields += [
        Field("Data Fields", "ColumnAmount", ("nTimes", "nLevels"), packed,
              {"ScaleFactor": np.float64(0.01), "Offset": np.float64(0.0), "_FillValue": np.int16(-32767),
               "MissingValue": np.int16(-32767), "Units": np.bytes_("DU")}),
        Field("Data Fields", "Reflectivity", ("nTimes",), rng.integers(0, 100, 5).astype(np.int16),
              {"ScaleFactor": np.float64(0.5), "Offset": np.float64(10.0)}),
    ]
    path = tmp_path / "omi.he5"
    write_he5(path, [swath])
    catalog = _catalog(tmp_path, [path], "omi")
    try:
        ds = catalog.get("omi")
        assert "Reflectivity" not in ds.column_names()
        sql = "select Pressure, ColumnAmount from omi"
        assert_same_records(answer(catalog, sql), run_sql(oracle_frame(swath, path, ["Pressure", "ColumnAmount"]),
                                                          sql, "omi"))
    finally:
        catalog.close()
    (tmp_path / "hand").mkdir()
    (tmp_path / "hand" / "omi.he5").write_bytes(path.read_bytes())
    (tmp_path / "hand" / "hand.dstp.xml").write_text("""<?xml version="1.0"?>
<dataset xmlns="urn:dstp:descriptor:1" id="hand" version="1"><title>hand</title>
  <files glob="omi.he5"/>
  <coordinates><coordinate name="nTimes" dimension="nTimes"/></coordinates>
  <attributes default-grid="nTimes">
    <attribute name="r" variable="HDFEOS/SWATHS/O3/Data Fields/Reflectivity" dimensions="nTimes"/>
  </attributes>
</dataset>""")
    hand = Catalog.scan(tmp_path / "hand")
    try:
        [problem] = hand.problems
        assert "column 'r': omi.he5: field 'HDFEOS/SWATHS/O3/Data Fields/Reflectivity' has HDF-EOS Offset = 10 (ScaleFactor = 0.5)" \
            in problem.message and "not served" in problem.message
    finally:
        hand.close()


def test_fields_of_two_swaths_are_never_paired(tmp_path: Path) -> None:
    o3, temperature = mls_swath("O3", 7, 4, seed=1), mls_swath("Temperature", 7, 5, seed=2)
    path = tmp_path / "MLS-Aura_L2GP-DGG.he5"
    write_he5(path, [o3, temperature])
    catalog = _catalog(tmp_path, [path], "dgg")
    try:
        ds = catalog.get("dgg")
        value = {a.spec.variable.split("/")[2]: a.name for a in ds.attributes.values()
                 if a.spec.variable.endswith("/L2gpValue")}
        assert ds.attributes[value["O3"]].dimensions == ("O3/nTimes", "O3/nLevels")
        with pytest.raises(QueryError) as err:
            answer(catalog, f"select {value['O3']}, {value['Temperature']} from dgg")
        message = str(err.value)
        assert f"column {value['O3']} is on dimension 'O3/nTimes' of swath 'O3'" in message
        assert f"column {value['Temperature']} on dimension 'Temperature/nTimes' of swath 'Temperature'" in message
        # each swath alone answers as the oracle does
        for swath in (o3, temperature):
            prefix = f"HDFEOS_SWATHS_{swath.name}_"
            names = {n: prefix + ("Geolocation_Fields_" if g == "Geolocation Fields" else "Data_Fields_") + n
                     for n, g in (("Latitude", "Geolocation Fields"), ("L2gpValue", "Data Fields"))}
            frame = oracle_frame(swath, path, list(names)).rename(columns=names)
            sql = f"select {names['Latitude']}, {names['L2gpValue']} from dgg where {names['L2gpValue']} > 5"
            assert_same_records(answer(catalog, sql), run_sql(frame, sql, "dgg"))
    finally:
        catalog.close()


def test_hdf5_groups_without_dimension_scales_or_structmetadata_are_never_paired(tmp_path: Path) -> None:
    path = tmp_path / "l2.h5"
    with h5py.File(path, "w") as f:
        f["Geolocation/solar_zenith"] = np.linspace(10, 80, 6).astype("f4")
        f["Data/precip"] = np.arange(6, dtype="f4")
    catalog = _catalog(tmp_path, [path], "l2")
    try:
        with pytest.raises(QueryError, match=r"column precip is on dimension 'phony_dim_\d' of group /Data and column "
                                             r"solar_zenith on dimension 'phony_dim_\d' of group /Geolocation; these "
                                             r"dimensions are not tied to each other in l2"):
            answer(catalog, "select solar_zenith, precip from l2 where precip > 2")
        assert answer(catalog, "select precip from l2 where precip > 2").num_rows == 3
    finally:
        catalog.close()


def _mapped(tmp_path: Path, offset: int, increment: int) -> tuple[Path, Swath]:
    rng = np.random.default_rng(9)
    n_geo = 6 if increment == 1 else 3
    swath = Swath("Cloud", {"GeoTrack": n_geo, "DataTrack": 6}, [
        Field("Geolocation Fields", "Latitude", ("GeoTrack",), np.linspace(-50, 50, n_geo).astype("f4"),
              {"Units": np.bytes_("deg")}),
        Field("Data Fields", "CloudFraction", ("DataTrack",), rng.random(6).astype("f4"), {}),
    ], maps=[("GeoTrack", "DataTrack", offset, increment)])
    path = tmp_path / "cloud.he5"
    write_he5(path, [swath])
    return path, swath


def test_a_dimension_map_of_offset_0_increment_1_ties_geolocation_to_data(tmp_path: Path) -> None:
    path, swath = _mapped(tmp_path, 0, 1)
    catalog = _catalog(tmp_path, [path], "cloud")
    try:
        frame = oracle_frame(Swath(swath.name, swath.dims, [
            Field(f.group, f.name, ("DataTrack",), f.values, f.attrs) for f in swath.fields]), path,
            ["Latitude", "CloudFraction"])
        sql = "select Latitude, CloudFraction from cloud where CloudFraction > 0.3"
        assert_same_records(answer(catalog, sql), run_sql(frame, sql, "cloud"))
    finally:
        catalog.close()


def test_any_other_dimension_map_is_refused_not_interpolated(tmp_path: Path) -> None:
    path, _ = _mapped(tmp_path, 0, 2)
    catalog = _catalog(tmp_path, [path], "cloud")
    try:
        with pytest.raises(QueryError, match=r"geolocation dimension 'GeoTrack' \(mapped onto 'DataTrack' by offset "
                                             r"0, increment 2; dstp does not interpolate geolocation\)"):
            answer(catalog, "select Latitude, CloudFraction from cloud")
    finally:
        catalog.close()


def _lat_lon(g: Grid, west: float, north: float, east: float, south: float) -> tuple[np.ndarray, np.ndarray]:
    """The oracle's cell centres (or corners) of a geographic grid, written out from the HDF-EOS definition."""
    dx, dy = (east - west) / g.nx, (north - south) / g.ny
    shift = 0.0 if g.registration.endswith("CORNER") else 0.5
    lon = west + (np.arange(g.nx) + shift) * dx
    lat = north - (np.arange(g.ny) + shift) * dy
    if g.registration.endswith("CORNER") and g.origin.endswith("LL"):
        lat = south + np.arange(g.ny) * dy
    elif g.origin.endswith("LL"):
        lat = lat[::-1]
    return lat, lon


@pytest.mark.parametrize("origin", ["HE5_HDFE_GD_UL", "HE5_HDFE_GD_LL"])
@pytest.mark.parametrize("registration", ["HE5_HDFE_CENTER", "HE5_HDFE_CORNER"])
def test_a_geographic_grid_gets_its_latitudes_and_longitudes(tmp_path: Path, origin: str, registration: str) -> None:
    rng = np.random.default_rng(11)
    values = np.round(rng.uniform(200, 400, (4, 6)), 1).astype("f4")
    values[1, 2] = FILL
    levels = np.round(rng.uniform(0, 1, (3, 4, 6)), 3).astype("f4")
    # a regional 0.75° x 0.5° grid: corners at 10°30'W, 50°15'N and 6°00'E, 48°15'N (packed DMS)
    grid = Grid("ColumnAmountO3", 6, 4, (-10030000.0, 50015000.0), (6000000.0, 48015000.0), [
        Field("Data Fields", "ColumnAmountO3", ("YDim", "XDim"), values, _float_attrs("DU", "ColumnAmountO3")),
        Field("Data Fields", "CloudFraction", ("nLayers", "YDim", "XDim"), levels, {}),
    ], origin=origin, registration=registration)
    path = tmp_path / "OMI-Aura_L3-OMDOAO3e.he5"
    write_he5(path, grids=[grid])
    catalog = _catalog(tmp_path, [path], "omi")
    try:
        lat, lon = _lat_lon(grid, -10.5, 50.25, 6.0, 48.25)
        coords = {"lat": ("YDim", lat), "lon": ("XDim", lon)}
        ds = catalog.get("omi")
        assert ds.coordinates["lat"].dimension == "YDim" and ds.coordinates["lon"].dimension == "XDim"
        for sql, names in (
            ("select lat, lon, ColumnAmountO3 from omi where lat > 49 and lon between -5 and 3", ["ColumnAmountO3"]),
            ("select lat, lon, ColumnAmountO3 from omi where ColumnAmountO3 is null", ["ColumnAmountO3"]),
            ("select lat, avg(CloudFraction) as cf from omi group by lat", ["CloudFraction"]),
        ):
            frame = oracle_frame(grid, path, names, coords)
            assert_same_records(answer(catalog, sql), run_sql(frame, sql, "omi"))
    finally:
        catalog.close()


def test_a_grid_in_another_projection_is_served_on_indices_and_says_so(tmp_path: Path) -> None:
    grid = Grid("SeaIce", 3, 2, (-3850000.0, 5850000.0), (3750000.0, -5350000.0), [
        Field("Data Fields", "SI", ("YDim", "XDim"), np.arange(6, dtype="f4").reshape(2, 3), {})],
        projection="HE5_GCTP_PS")
    path = tmp_path / "amsr.he5"
    write_he5(path, grids=[grid])
    catalog = _catalog(tmp_path, [path], "amsr")
    try:
        ds = catalog.get("amsr")
        assert "lat" not in ds.column_names()
        assert any("projection HE5_GCTP_PS is not read" in w for w in ds.warnings)
        table = answer(catalog, "select YDim, XDim, SI from amsr where SI > 3")
        assert sorted(table.column("SI").to_pylist()) == [4.0, 5.0]
    finally:
        catalog.close()


def omi_swath(n_times: int, n_xtrack: int, seed: int) -> Swath:
    """A swath as OMI Level 2 files have one: 2-D geolocation over (nTimes, nXtrack), time per scan line."""
    rng = np.random.default_rng(seed)
    lat = (np.linspace(-60, 60, n_times)[:, None] + np.linspace(-1, 1, n_xtrack)[None, :]).astype("f4")
    lon = (np.linspace(-20, 20, n_xtrack)[None, :] + np.linspace(0, 5, n_times)[:, None]).astype("f4")
    ozone = np.round(rng.uniform(220, 420, (n_times, n_xtrack)), 1).astype("f4")
    ozone[rng.random(ozone.shape) < 0.2] = np.float32(-1.2676506e30)
    return Swath("OMI Column Amount O3", {"nTimes": n_times, "nXtrack": n_xtrack}, [
        Field("Geolocation Fields", "Latitude", ("nTimes", "nXtrack"), lat,
              {"_FillValue": np.float32(-1.2676506e30), "MissingValue": np.float32(-1.2676506e30),
               "Units": np.bytes_("deg"), "Title": np.bytes_("Geodetic Latitude")}),
        Field("Geolocation Fields", "Longitude", ("nTimes", "nXtrack"), lon, {"Units": np.bytes_("deg")}),
        Field("Geolocation Fields", "Time", ("nTimes",), 4.7e8 + np.arange(n_times) * 2.0, {"Units": np.bytes_("s")}),
        Field("Data Fields", "ColumnAmountO3", ("nTimes", "nXtrack"), ozone,
              {"_FillValue": np.float32(-1.2676506e30), "MissingValue": np.float32(-1.2676506e30),
               "Units": np.bytes_("DU"), "ScaleFactor": np.float64(1.0), "Offset": np.float64(0.0)}),
    ])


@pytest.mark.parametrize("scales", [False, True], ids=["phony-dimensions", "dimension-scales"])
def test_an_omi_swath_with_2d_geolocation_answers_as_the_oracle(tmp_path: Path, scales: bool) -> None:
    swath = omi_swath(9, 4, seed=5)
    path = tmp_path / "OMI-Aura_L2-OMTO3_2010m0101t0000-o29000.he5"
    write_he5(path, [swath])
    if scales:  # newer HDF-EOS5 writes dimension scales in the swath group: netCDF-C then sees the names itself
        with h5py.File(path, "a") as f:
            g = f[f"HDFEOS/SWATHS/{swath.name}"]
            made = {}
            for dim, n in swath.dims.items():
                made[dim] = g.create_dataset(dim, data=np.arange(n, dtype="i4"))
                made[dim].make_scale(dim)
            for fd in swath.fields:
                for k, dim in enumerate(fd.dims):
                    g[fd.group][fd.name].dims[k].attach_scale(made[dim])
    catalog = _catalog(tmp_path, [path], "omi")
    try:
        sql = ("select Time, Latitude, Longitude, ColumnAmountO3 from omi where Latitude between -30 and 45 "
               "and ColumnAmountO3 > 300")
        frame = oracle_frame(swath, path, ["Time", "Latitude", "Longitude", "ColumnAmountO3"])
        want = run_sql(frame, sql, "omi")
        assert want.num_rows > 0
        assert_same_records(answer(catalog, sql), want)
    finally:
        catalog.close()


def test_daily_swath_files_aggregate_along_ntimes_as_their_concatenation(tmp_path: Path) -> None:
    swaths = {day: mls_swath("O3", n, 3, seed=day) for day, n in ((2, 4), (1, 6), (3, 5))}
    paths = []
    for day, swath in swaths.items():
        paths.append(tmp_path / f"MLS-Aura_L2GP-O3_v05-01-c01_2020d00{day}.he5")
        write_he5(paths[-1], [swath])
    catalog = _catalog(tmp_path, paths, "mls")
    try:
        assert catalog.get("mls").descriptor.aggregate == "nTimes"
        names = ["Time", "Latitude", "Pressure", "L2gpValue"]
        frames = [oracle_frame(swaths[day], tmp_path / f"MLS-Aura_L2GP-O3_v05-01-c01_2020d00{day}.he5", names)
                  for day in sorted(swaths)]
        frame = pd.concat(frames, ignore_index=True)
        sql = "select Time, Latitude, Pressure, L2gpValue from mls where L2gpValue > 5 or Latitude is null"
        want = run_sql(frame, sql, "mls")
        assert want.num_rows > 0
        assert_same_records(answer(catalog, sql), want)
    finally:
        catalog.close()


def test_a_field_whose_shape_contradicts_structmetadata_refuses_the_file_naming_it(tmp_path: Path) -> None:
    swath = mls_swath("O3", 5, 3, seed=0)
    swath.fields[0].values = swath.fields[0].values[:4]  # Latitude holds 4 profiles, StructMetadata says nTimes
    write_he5(tmp_path / "bad.he5", [swath])
    with pytest.raises(DataFileError, match=r"^bad\.he5: StructMetadata\.0 puts field 'HDFEOS/SWATHS/O3/Geolocation "
                                            r"Fields/Longitude' on dimension 'nTimes' of swath 'O3', but it has 5 points "
                                            r"there where 'HDFEOS/SWATHS/O3/Geolocation Fields/Latitude' has 4"):
        draft_descriptor([tmp_path / "bad.he5"], "bad")


def test_grid_corners_written_as_plain_degrees_get_no_lat_lon_rather_than_a_guess(tmp_path: Path) -> None:
    grid = Grid("Bad", 4, 2, (-10.0, 50.0), (10.0, 40.0), [
        Field("Data Fields", "V", ("YDim", "XDim"), np.arange(8, dtype="f4").reshape(2, 4), {})])
    write_he5(tmp_path / "bad.he5", grids=[grid])
    catalog = _catalog(tmp_path, [tmp_path / "bad.he5"], "bad")
    try:
        ds = catalog.get("bad")
        assert "lat" not in ds.column_names() and "lon" not in ds.column_names()
        assert any("look like plain degrees, not the packed degrees-minutes-seconds" in w for w in ds.warnings)
    finally:
        catalog.close()
