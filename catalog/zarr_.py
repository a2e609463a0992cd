"""Zarr stores (v2 and v3) as files of a dataset, read through zarr-python 3, with xarray's conventions.

A Zarr group is one "file" of a dataset: its arrays are the variables, their dimensions come from the
``dimension_names`` of Zarr v3 or the ``_ARRAY_DIMENSIONS`` attribute xarray writes in Zarr v2, and a variable's
``_FillValue`` is what ``xr.open_zarr`` takes for it (v2: the array's ``fill_value``; v3: the ``_FillValue``
attribute, base64 for floats, the array's ``fill_value`` ignored). From there the catalog decodes it as any file:
per-file packing, fill values, units and calendars (:mod:`.cf`). Named ``zarr_`` so it never shadows ``zarr``.

Zarr-like sources that are not Zarr stores open here too (:func:`open_source`): kerchunk/VirtualiZarr reference
files (:mod:`.zarr_references`), local or objects of a store, and local Icechunk repositories at a branch, tag
or snapshot.
"""

from __future__ import annotations

import base64
import struct
import threading
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from dstp.errors import DataFileError

__all__ = ["REF_MARK", "ZarrFiles", "folder_identity", "icechunk_identity", "icechunk_ref", "is_icechunk", "is_zarr_source",
           "icechunk_versions", "open_in_store", "open_source", "split_ref", "with_ref", "zarr_meta"]

DIMENSION_KEY = "_ARRAY_DIMENSIONS"


def _fill_value_v3(value: Any, dtype: np.dtype) -> Any:
    """Return a v3 ``_FillValue`` attribute as xarray decodes it (floats are base64 of a little-endian double)."""
    if dtype.kind == "f" and isinstance(value, (str, bytes)):
        return dtype.type(struct.unpack("<d", base64.standard_b64decode(value))[0])
    if dtype.kind in "iu":
        return dtype.type(int(value))
    if dtype.kind == "b":
        return np.bool_(value)
    return value


def _attr_value(value: Any) -> Any:
    """Return a JSON attribute value as netCDF attributes come: lists as arrays (one element: a scalar)."""
    if isinstance(value, list):
        array = np.asarray(value)
        return array.reshape(())[()] if array.size == 1 and array.dtype.kind in "iufb" else array
    return value


def zarr_meta(group: Any, path: Path) -> Any:
    """Return the FileMeta of an open Zarr group (its arrays, at any depth, as variables)."""
    from dstp.catalog.cf import cf_spelling
    from dstp.catalog.netcdf4_ import FileMeta, VariableMeta

    v3 = group.metadata.zarr_format == 3
    #: arrays of a reference file whose fill value is netCDF's default (:mod:`.zarr_references`): not _FillValue
    defaulted: frozenset[str] = getattr(group.store, "defaulted", frozenset())
    #: a reference file describes a netCDF file, whose variables may be shorter than their unlimited dimension
    full = netcdf_shapes(group) if hasattr(group.store, "defaulted") else {}
    dimensions: dict[str, int] = {}
    variables: dict[str, VariableMeta] = {}
    for name, array in sorted(group.arrays()):
        attrs = dict(array.attrs)
        if v3:
            dims = tuple(array.metadata.dimension_names or ())
        else:
            dims = tuple(attrs.pop(DIMENSION_KEY, ()))
        if len(dims) != len(array.shape):
            raise DataFileError(f"{path.name}: Zarr array {name!r} has {len(array.shape)} dimensions but names "
                                f"{len(dims)} ({'dimension_names' if v3 else DIMENSION_KEY}); it cannot be placed "
                                "on a grid")
        dtype = np.dtype(array.dtype.to_native_dtype() if hasattr(array.dtype, "to_native_dtype") else array.dtype)
        values = {k: _attr_value(v) for k, v in attrs.items()}
        if v3:
            if "_FillValue" in values:
                values["_FillValue"] = _fill_value_v3(attrs["_FillValue"], dtype)
        elif array.fill_value is not None and name not in defaulted:
            values["_FillValue"] = dtype.type(array.fill_value) if dtype.kind in "iufb" else array.fill_value
        shape = full.get(name, tuple(int(n) for n in array.shape))
        for dim, size in zip(dims, shape):
            if dimensions.setdefault(dim, int(size)) != int(size):
                raise DataFileError(f"{path.name}: dimension {dim!r} is {dimensions[dim]} long in one array and "
                                    f"{size} in {name!r}")
        default = dtype.type(array.fill_value) if name in defaulted and "_FillValue" not in values else None
        variables[name] = VariableMeta(name=name, dimensions=dims, shape=shape, dtype=dtype,
                                       attrs=cf_spelling(values), default_fill=default)
    attrs = {k: _attr_value(v) for k, v in dict(group.attrs).items()}
    return FileMeta(path=path, format=f"ZARR{group.metadata.zarr_format}", dimensions=dimensions, unlimited=(),
                    variables=variables, attrs=attrs)


def netcdf_shapes(group: Any) -> dict[str, tuple[int, ...]]:
    """Return, by array, the shape netCDF-C gives it: each dimension as long as its longest array (kept on the
    group's store). A netCDF-4 variable whose last records were never written is shorter in HDF5 — and in the
    references kerchunk makes of it — than its unlimited dimension; netCDF-C reads those records as fill values."""
    store = group.store
    known: dict[str, tuple[int, ...]] | None = getattr(store, "netcdf_shapes", None)
    if known is None:
        lengths: dict[str, int] = {}
        named = []
        for name, array in group.arrays():
            attrs = dict(array.attrs)
            dims = tuple(array.metadata.dimension_names or ()) if group.metadata.zarr_format == 3 else \
                tuple(attrs.get(DIMENSION_KEY, ()))
            if len(dims) == len(array.shape):
                named.append((name, dims))
                for dim, size in zip(dims, array.shape):
                    lengths[dim] = max(lengths.get(dim, 0), int(size))
        known = {name: tuple(lengths[d] for d in dims) for name, dims in named}
        store.netcdf_shapes = known
    return known


def _padded(array: Any, full: tuple[int, ...], index: Sequence[slice | int]) -> np.ndarray:
    """Return ``array[index]`` on its netCDF shape ``full``: elements beyond the stored ones are its fill value."""
    dtype = np.dtype(array.dtype.to_native_dtype() if hasattr(array.dtype, "to_native_dtype") else array.dtype)
    fill = array.fill_value
    if fill is None:
        raise DataFileError(f"{array.path!r} is shorter than its dimensions and has no fill value to read the rest as")
    picks = list(index) + [slice(None)] * (len(full) - len(index))
    source: list[Any] = []
    target: list[np.ndarray] = []
    shape: list[int] = []
    scalar: list[int] = []
    for axis, (pick, n_full, n) in enumerate(zip(picks, full, array.shape)):
        positions = np.arange(n_full)[pick]
        if positions.ndim == 0:
            scalar.append(axis)
            positions = positions.reshape(1)
        inside = np.nonzero(positions < n)[0]
        shape.append(len(positions))
        target.append(inside)
        source.append(positions[inside])
    out = np.full(shape, fill, dtype=dtype)
    if all(len(s) for s in source):
        out[np.ix_(*target)] = np.asarray(array.oindex[tuple(source)]).reshape([len(t) for t in target])
    return out.reshape([n for axis, n in enumerate(shape) if axis not in scalar])


class ZarrFiles:
    """Open Zarr groups by (path, version), and their reads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._groups: dict[tuple[Path, int], Any] = {}

    def group(self, path: Path, token: int, opener: Any) -> Any:
        with self._lock:
            hit = self._groups.get((path, token))
        if hit is None:
            try:
                hit = opener()
            except DataFileError:
                raise
            except Exception as exc:  # noqa: BLE001 - zarr raises its own tree; it becomes ours
                raise DataFileError(f"{path.name} cannot be opened as a Zarr group ({type(exc).__name__})") from exc
            with self._lock:
                self._groups = {k: v for k, v in self._groups.items() if k[0] != path}  # other versions: let go
                self._groups[(path, token)] = hit
        return hit

    @staticmethod
    def read(group: Any, path: Path, variable: str, index: Sequence[slice | int]) -> np.ndarray:
        try:
            array = group[variable]
            full = netcdf_shapes(group).get(variable) if hasattr(group.store, "defaulted") else None
            if full is not None and full != tuple(array.shape):
                return _padded(array, full, index)
            return np.asarray(array[tuple(index)] if index else array[...])
        except DataFileError:
            raise
        except Exception as exc:  # noqa: BLE001
            # the library's message may quote a request (endpoint, headers): not shown
            raise DataFileError(f"cannot read {variable!r} from {path.name} ({type(exc).__name__})") from exc


#: How a repository's catalog path names the ref it is read at: ``era5_2001.icechunk@tag:v1`` (none: branch main).
REF_MARK = "@"
#: How the glob the catalog keeps carries a descriptor's ``ref`` (a backslash: descriptor globs hold none).
_GLOB_REF = "\\ref="


def with_ref(glob: str, ref: str) -> str:
    """Return the glob the catalog keeps for ``<files glob=… ref=…/>``."""
    return f"{glob}{_GLOB_REF}{ref}"


def split_ref(glob: str) -> tuple[str, str | None]:
    """Return (the descriptor's glob, its ref or None) of a glob the catalog keeps."""
    head, mark, ref = glob.partition(_GLOB_REF)
    return head, (ref if mark else None)


def is_icechunk(path: Path) -> bool:
    """Return whether ``path`` is the folder of an Icechunk repository (local filesystem storage)."""
    return (path / "refs").is_dir() and (path / "snapshots").is_dir()


def icechunk_ref(path: Path) -> tuple[Path, str] | None:
    """Return (repository folder, ref) of a catalog path naming an Icechunk repository (``x.icechunk`` or
    ``x.icechunk@tag:v1``); None for any other path."""
    name, mark, ref = path.name.partition(REF_MARK)
    repo = path.with_name(name) if mark else path
    if (mark and not ref) or not is_icechunk(repo):
        return None
    return repo, ref or "main"


def _ref_parts(ref: str) -> tuple[str, str]:
    kind, mark, name = ref.partition(":")
    return (kind, name) if mark else ("branch", ref)


def is_zarr_source(path: Path) -> bool:
    """Return whether a local ``path`` a descriptor's glob matched is read through zarr-python: a reference file,
    or an Icechunk repository."""
    from dstp.catalog.zarr_references import is_reference

    return is_reference(path.name) or icechunk_ref(path) is not None


def folder_identity(real: str, st: Any, ref: str | None = None) -> Any:
    """Return the FileIdentity of an Icechunk repository read at ``ref`` (default branch main): its inode a digest
    of the ref's objects' names, inodes, sizes and times — a commit to the branch rewrites them; a tag or a
    snapshot never changes — taken by stats only."""
    import hashlib
    import os

    from dstp.catalog.netcdf4_ import FileIdentity

    kind, name = _ref_parts(ref or "main")
    where = os.path.join(real, "snapshots", name) if kind == "snapshot" else os.path.join(real, "refs", f"{kind}.{name}")
    h = hashlib.sha256(f"{kind}:{name}\n".encode())
    size = 0
    found = [(where, "")] if os.path.isfile(where) else \
        [(os.path.join(folder, n), n) for folder, _, names in sorted(os.walk(where)) for n in sorted(names)]
    for full, _ in found:
        try:
            obj = os.stat(full)
        except OSError:
            continue
        size += obj.st_size
        h.update(f"{full}\0{obj.st_ino}\0{obj.st_size}\0{obj.st_mtime_ns}\0{obj.st_ctime_ns}\n".encode())
    token = int.from_bytes(h.digest()[:8], "big") >> 1
    return FileIdentity(real, st.st_dev, token, size, st.st_mtime_ns, st.st_ctime_ns)


def icechunk_identity(path: Path) -> Any:
    """Return the FileIdentity of the Icechunk repository a catalog path names, at its ref (None: not one)."""
    import os

    found = icechunk_ref(path)
    if found is None:
        return None
    return folder_identity(os.path.realpath(found[0]), found[0].stat(), found[1])


def open_icechunk(repo: Path, ref: str = "main") -> Any:
    """Return the Zarr group of the Icechunk repository at ``repo`` read at ``ref`` (read only)."""
    import icechunk
    import zarr

    kind, name = _ref_parts(ref)
    opened = icechunk.Repository.open(icechunk.local_filesystem_storage(str(repo)))
    if kind == "snapshot":
        session = opened.readonly_session(snapshot_id=name)
    elif kind == "tag":
        session = opened.readonly_session(tag=name)
    else:
        session = opened.readonly_session(branch=name)
    return zarr.open_group(session.store, mode="r")


def open_source(path: Path, stores: Mapping[str, Any]) -> Any:
    """Return the Zarr group of the local Zarr-like source ``path``: an Icechunk repository at its ref, or a
    reference file (its targets through ``stores`` where they are URLs)."""
    from dstp.catalog.zarr_references import Where, open_references

    found = icechunk_ref(path)
    if found is not None:
        repo, ref = found
        kind, name = _ref_parts(ref)
        try:
            return open_icechunk(repo, ref)
        except ImportError as exc:
            raise DataFileError(f"{path.name} is an Icechunk repository, and this server has no icechunk installed "
                                "(pip install 'dstp[icechunk]')") from exc
        except Exception as exc:  # noqa: BLE001 - icechunk raises its own IcechunkError
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            first = first[2:] if first.startswith("x ") else first  # icechunk's report marks its first line so
            raise DataFileError(f"{repo.name}: the Icechunk repository cannot be read at {kind} {name!r} "
                                f"({type(exc).__name__}: {first[:200]})") from exc
    try:
        text = path.read_bytes()
    except OSError as exc:
        raise DataFileError(f"reference file {path.name} cannot be read ({exc.strerror})") from exc
    return open_references(text, Where(name=path.name, local=path), stores)


def icechunk_versions(store: Any, pattern: str, ref: str | None) -> list[Any]:
    """Return one version per Icechunk repository of ``store`` whose folder matches ``pattern``: its key the
    folder, its ETag a digest of the keys and ETags of the objects of ``ref`` (default branch main) — a commit to
    that branch rewrites one; a tag or a snapshot never changes."""
    import hashlib

    from dstp.catalog.stores import ObjectVersion

    kind, name = _ref_parts(ref or "main")
    repos: dict[str, list[Any]] = {}
    for obj in store.list_objects(f"{pattern}/refs/**"):
        root, _, rest = obj.key.partition("/refs/")
        members = repos.setdefault(root, [])
        if kind != "snapshot" and rest.startswith(f"{kind}.{name}/"):
            members.append(obj)
    out = []
    for root, members in sorted(repos.items()):
        digest = hashlib.sha256(f"{kind}:{name}\n".encode() + "\n".join(
            f"{m.key}\0{m.etag}" for m in sorted(members, key=lambda m: m.key)).encode()).hexdigest()
        out.append(ObjectVersion(root, sum(m.size for m in members), digest,
                                 max((m.mtime_ns for m in members), default=0)))
    return out


def _icechunk_storage(store: Any, key: str) -> Any:
    """Return the icechunk Storage of the repository at ``key`` of a configured store: its endpoint, region and
    credentials (the operator's; never the repository's)."""
    import os
    from urllib.parse import urlsplit

    import icechunk

    config = store.config
    parts = urlsplit(config.url)
    if config.scheme == "file":
        return icechunk.local_filesystem_storage(str(Path(store.root) / key))
    if parts.scheme != "s3":
        raise DataFileError(f"{key} in {config.where()}: Icechunk repositories are read from S3 stores (or local "
                            "folders), not over HTTP(S)")
    if config.profile is not None:
        raise DataFileError(f"{key} in {config.where()}: Icechunk repositories cannot be read with an AWS profile "
                            "yet; name the credentials' environment variables (access_key_id_env, …)")
    kwargs: dict[str, Any] = {"bucket": parts.netloc, "prefix": "/".join(p for p in (parts.path.strip("/"), key) if p),
                              "region": config.region, "endpoint_url": config.endpoint,
                              "allow_http": (config.endpoint or "").startswith("http:"),
                              "force_path_style": config.endpoint is not None}
    if config.anonymous:
        kwargs["anonymous"] = True
    elif config.access_key_id_env is not None:
        kwargs["access_key_id"] = os.environ.get(config.access_key_id_env)
        kwargs["secret_access_key"] = os.environ.get(config.secret_access_key_env or "")
        if config.session_token_env is not None:
            kwargs["session_token"] = os.environ.get(config.session_token_env)
    else:
        kwargs["from_env"] = True
    return icechunk.s3_storage(**kwargs)


def open_in_store(stores: Mapping[str, Any], name: str, key: str, version: Any, shown: str) -> Any:
    """Return the Zarr group of the Zarr-like source ``key`` of store ``name``: a Zarr store, or a reference file
    (that version of it; relative targets in the same store)."""
    from dstp.catalog.zarr_references import Where, is_reference, open_references

    store = stores[name]
    _, mark, ref = shown.partition(REF_MARK)
    if mark or key.endswith(".icechunk"):
        import zarr

        kind, ref_name = _ref_parts(ref or "main")
        try:
            import icechunk

            repo = icechunk.Repository.open(_icechunk_storage(store, key))
            session = repo.readonly_session(snapshot_id=ref_name) if kind == "snapshot" else \
                repo.readonly_session(tag=ref_name) if kind == "tag" else repo.readonly_session(branch=ref_name)
            return zarr.open_group(session.store, mode="r")
        except DataFileError:
            raise
        except ImportError as exc:
            raise DataFileError(f"{shown} is an Icechunk repository, and this server has no icechunk installed "
                                "(pip install 'dstp[icechunk]')") from exc
        except Exception as exc:  # noqa: BLE001 - its message may quote the endpoint or a request: not shown
            raise DataFileError(f"{key} in {store.config.where()}: the Icechunk repository cannot be read at {kind} "
                                f"{ref_name!r} ({type(exc).__name__})") from exc
    if not is_reference(key):
        return store.zarr_group(key)
    (text,) = store.read_ranges(version, [(0, version.size)])
    return open_references(text, Where(name=shown, store=name, key=key), stores)
