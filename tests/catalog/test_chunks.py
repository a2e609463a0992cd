"""Reading chunks outside the netCDF lock (dstp.catalog.chunks) gives netCDF-C's bytes, or defers to it.

hypothesis writes netCDF-4 files the way real archives vary them — type and
byte order, chunk shapes that do not divide the dimensions, shuffle and
deflate on or off at any level, fletcher32, a fill value or none, chunks
never written, variables in groups — and reads random hyperslabs (strided,
with integer indices) both ways. Every read must equal netCDF4-python's bit
for bit; where the fast path declines (a filter or type it does not decode,
an unwritten chunk) netCDF-C answers, and the test counts that the fast path
did answer the reads it can.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import netCDF4
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dstp.catalog.chunks import ChunkLayout, _spans, _unshuffle, decode_chunk
from dstp.catalog.netcdf4_ import FileHandles, ReadStats
from dstp.errors import DataFileError

DTYPES = ["i1", "u1", "i2", "u2", "i4", "u4", "i8", "u8", "f4", "f8"]


@st.composite
def variables(draw: st.DrawFn) -> dict:
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 9), min_size=ndim, max_size=ndim)))
    chunks = tuple(draw(st.integers(1, n + 2)) for n in shape)
    fill = draw(st.sampled_from(["none", "value", "nofill"]))
    return {
        "shape": shape,
        "chunks": tuple(min(c, max(n, 1)) for c, n in zip(chunks, shape)),
        "dtype": draw(st.sampled_from(DTYPES)),
        "endian": draw(st.sampled_from(["native", "native", "native", "big"])),
        "zlib": draw(st.booleans()),
        "complevel": draw(st.integers(1, 9)),
        "shuffle": draw(st.booleans()),
        "fletcher32": draw(st.integers(0, 5)) == 0,
        "fill": fill,
        # Without fill, what an unwritten chunk holds is undefined (two netCDF-C reads differ): all written.
        "written": "all" if fill == "nofill" else draw(st.sampled_from(["all", "all", "part"])),
        "group": draw(st.booleans()),
        "contiguous": draw(st.integers(0, 6)) == 0,
        # The outer dimension unlimited, and another variable written along all of it: where "v" is
        # written only in part, its HDF5 extent is shorter than the netCDF dimension.
        "unlimited": draw(st.booleans()),
        "seed": draw(st.integers(0, 2**31 - 1)),
    }


def write(path: Path, spec: dict) -> str:
    rng = np.random.default_rng(spec["seed"])
    dtype = np.dtype(spec["dtype"])
    endian = spec["endian"] if dtype.itemsize > 1 else "native"
    stored = dtype.newbyteorder(">") if endian == "big" else dtype
    with netCDF4.Dataset(path, "w") as ds:
        where = ds.createGroup("g") if spec["group"] else ds
        dims = []
        for i, n in enumerate(spec["shape"]):
            where.createDimension(f"d{i}", None if i == 0 and spec.get("unlimited") else n)
            dims.append(f"d{i}")
        other = where.createVariable("w", "i4", (dims[0],)) if spec["unlimited"] else None
        fill: object = None
        if spec["fill"] == "value":
            fill = np.array(7, dtype)[()]
        elif spec["fill"] == "nofill":
            fill = False
        contiguous = spec["contiguous"] and not spec["unlimited"]  # netCDF-C filters (and extends) only chunked ones
        var = where.createVariable("v", stored, dims, zlib=spec["zlib"] and not contiguous, complevel=spec["complevel"],
                                   shuffle=spec["shuffle"] and not contiguous,
                                   fletcher32=spec["fletcher32"] and not contiguous,
                                   contiguous=contiguous, chunksizes=None if contiguous else
                                   spec["chunks"], endian=endian, fill_value=fill)
        if dtype.kind == "f":
            values = rng.normal(0, 1e3, spec["shape"]).astype(dtype)
            values.flat[:: 7] = np.nan
        else:
            info = np.iinfo(dtype)
            values = rng.integers(info.min, info.max, spec["shape"], dtype=dtype, endpoint=True)
        if other is not None:  # extends the dimension after "v" was created: "v" keeps its own extent
            other[:] = np.arange(spec["shape"][0])
        if spec["written"] == "all":
            var[...] = values
        else:  # only the first half of the outer dimension: some chunks are never written
            half = max(1, spec["shape"][0] // 2)
            var[:half] = values[:half]
    return "g/v" if spec["group"] else "v"


@st.composite
def index_for(draw: st.DrawFn, shape: tuple[int, ...]) -> tuple:
    index = []
    for n in shape:
        if draw(st.integers(0, 4)) == 0:
            index.append(draw(st.integers(0, n - 1)))
        else:
            start = draw(st.integers(0, n - 1))
            stop = draw(st.integers(start + 1, n))
            index.append(slice(start, stop, draw(st.integers(1, 3))))
    return tuple(index)


def reference(path: Path, name: str, index: tuple) -> np.ndarray:
    with netCDF4.Dataset(path) as ds:
        ds.set_auto_maskandscale(False)
        ds.set_always_mask(False)
        return np.asarray(ds[name][index])


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(spec=variables(), data=st.data())
def test_every_read_is_netcdf_c_s_bit_for_bit(tmp_path_factory: pytest.TempPathFactory, spec: dict,
                                             data: st.DataObject) -> None:
    path = tmp_path_factory.mktemp("chunks") / "v.nc"
    name = write(path, spec)
    handles = FileHandles(capacity=4, direct_chunks=True)
    try:
        os.close(handles.open_raw(path))  # the catalog's first open records the file's identity
        for _ in range(4):
            index = data.draw(index_for(spec["shape"]))
            got = handles.read(path, name, list(index), ReadStats())
            assert same_bits(got, reference(path, name, index)), (spec, index)
        eligible = (not (spec["contiguous"] and not spec["unlimited"]) and not spec["fletcher32"]
                    and (spec["endian"] != "big" or np.dtype(spec["dtype"]).itemsize == 1))
        layout = handles.chunks.layout(path, name)
        assert (layout is not None) == eligible, (spec, layout)
        if eligible and spec["written"] == "all":
            assert handles.chunks.reads == 4  # the fast path answered every read it could
    finally:
        handles.close()


def test_unshuffle_undoes_hdf5_s_byte_planes_and_keeps_trailing_bytes() -> None:
    values = np.arange(10, dtype="<u4") * 0x01020304
    raw = values.view(np.uint8).reshape(10, 4).T.tobytes() + b"xy"  # planes, then two trailing bytes
    assert _unshuffle(raw, 4)[:40].view("<u4").tolist() == values.tolist()
    assert _unshuffle(raw, 4)[40:].tobytes() == b"xy"


def test_a_chunk_skipped_filter_is_not_undone() -> None:
    import zlib
    values = np.arange(12, dtype="<i2").reshape(3, 4)
    layout = ChunkLayout((3, 4), (3, 4), np.dtype("<i2"), (2, 1), {})
    shuffled = values.view(np.uint8).reshape(12, 2).T.tobytes()
    assert np.array_equal(decode_chunk(zlib.compress(shuffled), layout, 0), values)
    assert np.array_equal(decode_chunk(shuffled, layout, 0b10), values)  # deflate skipped for this chunk
    with pytest.raises(ValueError, match="decodes to 6 values, expected 12"):
        decode_chunk(zlib.compress(shuffled[:12]), layout, 0)


@given(n=st.integers(1, 40), chunk=st.integers(1, 12), data=st.data())
def test_spans_cover_each_index_once_in_order(n: int, chunk: int, data: st.DataObject) -> None:
    start = data.draw(st.integers(0, n - 1))
    stop = data.draw(st.integers(start + 1, n))
    step = data.draw(st.integers(1, 5))
    spans = _spans(slice(start, stop, step), n, chunk)
    assert spans is not None and _spans(slice(start, n + 1, step), n, chunk) is None  # past the extent: netCDF-C
    got = [c0 + i for c0, inner, _ in spans for i in range(inner.start, inner.stop, inner.step)]
    assert got == list(range(start, stop, step))
    assert [o.start for _, _, o in spans] == [sum(o.stop - o.start for _, _, o in spans[:k]) for k in range(len(spans))]


def published(tmp_path: Path, **spec: object) -> tuple[Path, FileHandles]:
    """Write a compressed variable ``v`` (``spec`` over the defaults) and open it as the catalog does."""
    path = tmp_path / "v.nc"
    write(path, {"unlimited": False, "endian": "native", "zlib": True, "complevel": 1, "shuffle": True,
                 "fletcher32": False, "fill": "none", "written": "all", "group": False, "contiguous": False,
                 "seed": 3, **spec})
    handles = FileHandles(direct_chunks=True)
    os.close(handles.open_raw(path))  # the catalog's first open records the file's identity
    return path, handles


def test_threads_reading_the_same_chunks_inflate_each_once(tmp_path: Path) -> None:
    path, handles = published(tmp_path, shape=(8, 64, 64), chunks=(1, 64, 64), dtype="f4", complevel=4)
    want = reference(path, "v", (slice(0, 8), slice(0, 64), slice(0, 64)))
    got: list[np.ndarray] = []
    barrier = threading.Barrier(4)

    def read() -> None:
        barrier.wait()
        got.append(handles.read(path, "v", [slice(0, 8), slice(0, 64), slice(0, 64)]))

    threads = [threading.Thread(target=read) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 4 and all(same_bits(g, want) for g in got)
    assert handles.chunks.inflated == 8  # eight chunks, each inflated once for four readers
    handles.close()


def test_a_file_changed_after_its_chunks_were_listed_is_refused_not_misread(tmp_path: Path) -> None:
    path, handles = published(tmp_path, shape=(4, 16), chunks=(1, 16), dtype="i4", shuffle=False)
    assert same_bits(handles.read(path, "v", [slice(0, 1), slice(0, 16)]), reference(path, "v", (slice(0, 1),)))
    with open(path, "r+b") as f:  # rewritten in place: same inode, new size
        f.seek(0, 2)
        f.write(b"\0" * 4096)
    with pytest.raises(DataFileError, match="changed on disk"):
        handles.read(path, "v", [slice(1, 2), slice(0, 16)])
    handles.close()


def test_a_variable_in_too_many_chunks_is_left_to_netcdf_c(tmp_path: Path) -> None:
    path, handles = published(tmp_path, shape=(8, 16), chunks=(1, 16), dtype="f8")
    assert handles.chunks is not None
    handles.chunks.max_chunks = 7  # the file has 8 chunks
    got = handles.read(path, "v", [slice(0, 8), slice(0, 16)])
    assert handles.chunks is not None and handles.chunks.layout(path, "v") is None and handles.chunks.reads == 0
    assert same_bits(got, reference(path, "v", (slice(0, 8), slice(0, 16))))
    handles.close()


def test_the_servers_file_settings_reach_every_dataset(tmp_path: Path) -> None:
    """Catalog.scan's handle settings (direct chunks, open files, chunk cache) are the ones its datasets read with.

    Each dataset used to get a fresh default FileHandles (``handles or FileHandles()`` on an empty, so
    falsy, cache): DSTP_DIRECT_CHUNKS, DSTP_OPEN_FILES and DSTP_CHUNK_CACHE_BYTES were silently ignored.
    """
    from dstp.catalog.registry import Catalog
    from dstp.samples import generate_samples

    generate_samples(tmp_path, "small")
    catalog = Catalog.scan(tmp_path, open_files=3, chunk_cache_bytes=2**20, direct_chunks=True)
    try:
        assert len(catalog) >= 2
        assert all(ds.handles is catalog.handles for ds in catalog)
        assert catalog.handles.capacity == 3 and catalog.handles.chunk_cache_bytes == 2**20
        ccm3 = catalog.get("ccm3")
        column = ccm3.readable("temperature")
        assert column is not None
        index = {d: slice(0, ccm3.dimensions[d].size, 1) for d in column.dimensions}
        values, _ = ccm3.read(column, index)
        assert catalog.handles.chunks is not None and catalog.handles.chunks.reads > 0  # the chunk path read it
        with netCDF4.Dataset(ccm3.files[0].path) as nc:  # first file, decoded as xarray would: scale and offset
            raw = nc.variables[column.spec.variable]
            raw.set_auto_maskandscale(True)
            want = np.ma.filled(raw[0].astype("f8"), np.nan)
        np.testing.assert_array_equal(np.asarray(values[0], "f8"), want)
    finally:
        catalog.handles.close()


def test_files_of_dropped_handles_are_closed_under_the_netcdf_lock_not_by_the_garbage_collector(
        tmp_path: Path) -> None:
    """netCDF-C is not thread-safe: a netCDF4.Dataset deallocated by the garbage collector closes its file from
    whatever thread runs the collection, while another may be inside netCDF-C. A FileHandles dropped without
    close() must leave its files to be closed under NETCDF_LOCK."""
    import gc

    from dstp.catalog.netcdf4_ import NETCDF_LOCK

    path, _ = published(tmp_path, shape=(4, 8, 8), chunks=(1, 8, 8), dtype="f4", complevel=1)
    descriptors = f"/proc/{os.getpid()}/fd"

    def open_descriptors_of_file() -> int:
        return sum(1 for fd in os.listdir(descriptors)
                   if os.path.realpath(os.path.join(descriptors, fd)) == os.path.realpath(path))

    dropped = FileHandles()
    dropped.inspect(path)  # opens the file
    assert open_descriptors_of_file() == 1
    held, release = threading.Event(), threading.Event()

    def hold_the_lock() -> None:  # another thread inside netCDF-C, as a scan would be
        with NETCDF_LOCK:
            held.set()
            release.wait(timeout=60)

    holder = threading.Thread(target=hold_the_lock)
    holder.start()
    try:
        assert held.wait(timeout=60)
        del dropped
        gc.collect()
        assert open_descriptors_of_file() == 1  # not closed while another thread holds the lock
    finally:
        release.set()
        holder.join(timeout=60)
    survivor = FileHandles()
    survivor.close()  # the next FileHandles that opens or closes a file closes it, under the lock
    assert open_descriptors_of_file() == 0


def _fast_read(path: Path) -> str:
    """Return code that reads all of ``v`` in ``path`` through a FileHandles with the chunk reader on
    (``handles``, left open), for a fresh interpreter."""
    return ("import os\nfrom pathlib import Path\nfrom dstp.catalog.netcdf4_ import FileHandles, ReadStats\n"
            f"path = Path({str(path)!r})\nhandles = FileHandles(direct_chunks=True)\n"
            "os.close(handles.open_raw(path))\nhandles.read(path, 'v', [slice(0, 4), slice(0, 32)], ReadStats())\n")


def _python(program: str) -> tuple[list[str], str]:
    """Run ``program`` in a fresh interpreter; return the words it printed, and all it wrote (for messages)."""
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    return run.stdout.split(), run.stdout + run.stderr


def test_the_reading_process_never_loads_a_second_hdf5(tmp_path: Path) -> None:
    """h5py's wheel bundles another HDF5 than netCDF4's; both in one process fail at open and close upstream
    (and one CI run died of SIGBUS in netCDF-C's close with the chunk reader on). The listing runs in a helper
    process: after reads on the fast path, this process has netCDF4 and no h5py."""
    path, handles = published(tmp_path, shape=(4, 32), chunks=(1, 32), dtype="f4")
    handles.close()
    said, output = _python("import sys\n" + _fast_read(path)
                           + "print(handles.chunks.reads, 'netCDF4' in sys.modules, 'h5py' in sys.modules)\n"
                           "handles.close()\n")
    assert said == ["1", "True", "False"], output


def test_a_listing_helper_that_died_is_started_again(tmp_path: Path) -> None:
    """A helper killed between listings (OOM killer, a crash in HDF5) costs nothing but its restart: the next
    listing starts another and answers; one killed during a listing makes that listing fall back to netCDF-C."""
    import signal

    from dstp._chunk_index import file_identity
    from dstp.catalog.chunk_lister import ChunkLister
    from dstp.catalog.chunks import layout_of

    path, handles = published(tmp_path, shape=(4, 32), chunks=(1, 32), dtype="f4")
    handles.close()
    identity = file_identity(os.stat(path))
    lister = ChunkLister()
    try:
        first = lister.try_listing(path, identity, "v", 100)
        layout = layout_of(first)
        assert layout is not None and layout.chunks == (1, 32)
        helper = lister._helper
        assert helper is not None
        helper.send_signal(signal.SIGKILL)
        helper.wait(timeout=30)
        again = lister.try_listing(path, identity, "v", 100)
        assert again == first and lister._helper is not helper
        assert lister._helper is not None
        lister._helper.stdout.close()  # type: ignore[union-attr]
        read_end, write_end = os.pipe()
        os.close(write_end)  # its answer ends before it begins: as if it died mid-listing
        lister._helper.stdout = os.fdopen(read_end, "rb")
        assert lister.try_listing(path, identity, "v", 100) is None
        assert lister.try_listing(path, identity, "v", 100) == first  # and the next starts another
    finally:
        lister.close()


def test_a_listing_helper_that_hangs_is_ended_and_the_read_falls_back(tmp_path: Path) -> None:
    """A helper that stops answering (HDF5 stuck on a damaged file, a stalled mount) must not hold every later
    listing behind it: past the lister's wait it is killed, that listing is None (netCDF-C reads), the next
    starts another helper."""
    import signal

    from dstp._chunk_index import file_identity
    from dstp.catalog.chunk_lister import LISTING_WAIT_S, ChunkLister

    path, handles = published(tmp_path, shape=(4, 32), chunks=(1, 32), dtype="f4")
    handles.close()
    identity = file_identity(os.stat(path))
    lister = ChunkLister()
    try:
        first = lister.try_listing(path, identity, "v", 100)
        assert first is not None
        hung = lister._helper
        assert hung is not None
        hung.send_signal(signal.SIGSTOP)  # alive, never answering
        lister.wait_s = 0.0  # the wait has passed (a stopped process answers no sooner after 30 s)
        assert lister.try_listing(path, identity, "v", 100) is None
        assert hung.poll() is not None and lister._helper is None  # killed and forgotten
        lister.wait_s = LISTING_WAIT_S
        assert lister.try_listing(path, identity, "v", 100) == first
    finally:
        lister.close()


def test_a_daemonic_process_reads_on_the_fast_path(tmp_path: Path) -> None:
    """Dask's workers are daemonic processes, which multiprocessing forbids to have children: the helper is a
    plain child process, so a worker lists and reads chunks like a server (a multiprocessing helper made every
    cluster query fail here)."""
    import textwrap

    path, handles = published(tmp_path, shape=(4, 32), chunks=(1, 32), dtype="f4")
    handles.close()
    said, output = _python("import multiprocessing\ndef read(answers):\n" + textwrap.indent(_fast_read(path), "    ")
                           + "    answers.put((multiprocessing.current_process().daemon, handles.chunks.reads))\n"
                           "    handles.close()\n"
                           "context = multiprocessing.get_context('fork')\nanswers = context.Queue()\n"
                           "worker = context.Process(target=read, args=(answers,), daemon=True)\nworker.start()\n"
                           "print(*answers.get(timeout=60))\nworker.join(60)\nprint(worker.exitcode)\n")
    assert said == ["True", "1", "0"], output


def test_the_listing_helper_ends_with_a_server_killed_outright(catalog_root: Path) -> None:
    """`dstp serve` with the chunk reader on starts the helper as it starts (a first query does not wait for
    a Python process and h5py's import), lists chunks in it; SIGKILL on the server (no cleanup of any kind)
    must not leave the helper behind."""
    import re
    import signal
    import subprocess
    import sys

    import psutil

    env = {**os.environ, "DSTP_DIRECT_CHUNKS": "true"}
    server = subprocess.Popen([sys.executable, "-m", "dstp.cli", "serve", str(catalog_root), "--port", "0",
                               "--http-port", "-1", "--data-port", "-1", "--udt-port", "-1"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert server.stdout is not None
        hint = next(line for line in server.stdout if line.startswith("try:"))
        address = re.search(r"--server (\S+)", hint).group(1)  # type: ignore[union-attr]
        started = [p for p in psutil.Process(server.pid).children() if "dstp._chunk_index" in p.cmdline()]
        assert len(started) == 1, started  # running before the first query
        run = subprocess.run([sys.executable, "-m", "dstp.cli", "query", "select avg(temperature) t from ccm3",
                              "--server", address], capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        helpers = [p for p in psutil.Process(server.pid).children() if "dstp._chunk_index" in p.cmdline()]
        assert helpers == started  # the one helper listed the chunks
        server.send_signal(signal.SIGKILL)
        server.wait(timeout=30)
        helpers[0].wait(timeout=30)  # psutil.TimeoutExpired if the helper outlived its server
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(timeout=30)
        if server.stdout:
            server.stdout.close()


def test_the_decoded_chunk_cache_is_sized_from_memory() -> None:
    from dstp.catalog.chunks import CACHE_MAX_BYTES, CACHE_MIN_BYTES, default_cache_bytes, memory_bytes

    assert default_cache_bytes(16 * 2**30) == 2**30  # 1/16
    assert default_cache_bytes(512 * 2**20) == CACHE_MIN_BYTES == 64 * 2**20
    assert default_cache_bytes(2**40) == CACHE_MAX_BYTES
    assert memory_bytes() > 0
    handles = FileHandles(direct_chunks=True)
    assert handles.chunks is not None and handles.chunks.cache_bytes == default_cache_bytes()
    handles.close()
    handles = FileHandles(direct_chunks=True, decoded_chunk_cache_bytes=3 * 2**20)
    assert handles.chunks is not None and handles.chunks.cache_bytes == 3 * 2**20
    handles.close()


def test_the_setting_reaches_the_catalogs_chunk_reader(tmp_path: Path) -> None:
    from dstp.catalog.registry import Catalog
    from dstp.settings import Settings

    assert Settings().decoded_chunk_cache_bytes == -1
    catalog = Catalog.scan(tmp_path, direct_chunks=True, decoded_chunk_cache_bytes=5 * 2**20)
    assert catalog.handles.chunks is not None and catalog.handles.chunks.cache_bytes == 5 * 2**20
    catalog.close()


@pytest.mark.parametrize("passes", [3])
def test_a_repeated_scan_larger_than_the_cache_keeps_finding_what_it_holds(tmp_path: Path, passes: int) -> None:
    # 48 chunks of 256 KiB (64 × 1024 float32) through a 4 MiB cache (a 2 MiB window, 2 MiB main part):
    # plain LRU evicts each chunk before the next pass reads it again and inflates all 48 every pass.
    path, _ = published(tmp_path, shape=(48, 64, 1024), chunks=(1, 64, 1024), dtype="f4", complevel=1)
    handles = FileHandles(direct_chunks=True, decoded_chunk_cache_bytes=4 * 2**20)
    os.close(handles.open_raw(path))
    reader = handles.chunks
    assert reader is not None and reader.window_bytes == 2 * 2**20
    want = reference(path, "v", (slice(0, 48), slice(0, 64), slice(0, 1024)))
    inflated = []
    for _ in range(passes):
        before = reader.inflated
        for t in range(48):  # one chunk per read, in order: a full scan
            got = handles.read(path, "v", [slice(t, t + 1), slice(0, 64), slice(0, 1024)])
            assert same_bits(got, want[t:t + 1])
        inflated.append(reader.inflated - before)
    assert inflated[0] == 48
    held = 2 * 2**20 // (64 * 1024 * 4)  # the main part's worth: 8 chunks
    assert all(n == 48 - held for n in inflated[1:]), inflated  # found every pass after the first
    handles.close()


def test_a_chunk_two_blocks_of_one_scan_read_is_inflated_once_even_with_the_cache_full(tmp_path: Path) -> None:
    path, _ = published(tmp_path, shape=(48, 64, 1024), chunks=(1, 64, 1024), dtype="f4", complevel=1)
    handles = FileHandles(direct_chunks=True, decoded_chunk_cache_bytes=4 * 2**20)
    os.close(handles.open_raw(path))
    reader = handles.chunks
    assert reader is not None
    for _ in range(2):  # the main part fills with chunks asked for twice
        for t in range(48):
            handles.read(path, "v", [slice(t, t + 1), slice(0, 64), slice(0, 1024)])
    before = reader.inflated
    for t in range(48):  # every chunk read by two blocks, its halves one after the other
        handles.read(path, "v", [slice(t, t + 1), slice(0, 32), slice(0, 1024)])
        handles.read(path, "v", [slice(t, t + 1), slice(32, 64), slice(0, 1024)])
    assert reader.inflated - before <= 48  # each at most once: the window holds it for the second block
    handles.close()


def test_a_listing_works_when_the_helper_s_pipes_are_past_descriptor_1024(tmp_path: Path) -> None:
    """A server holding thousands of connections and files (its limit is raised to 20,000) gives the helper's pipes
    descriptors past 1,024, where select() refuses ("filedescriptor out of range"): a fresh-clone run of the suite
    hit it, and so would a busy server, on every header image and chunk listing."""
    import resource

    from dstp._chunk_index import file_identity
    from dstp.catalog.chunk_lister import ChunkLister
    from dstp.catalog.chunks import layout_of

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 1100
    assert hard == resource.RLIM_INFINITY or hard >= wanted, f"the hard limit of open files is {hard}"
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, wanted), hard))
    path, handles = published(tmp_path, shape=(4, 32), chunks=(1, 32), dtype="f4")
    handles.close()
    held: list[int] = []
    lister = ChunkLister()
    try:
        while not held or held[-1] < 1030:  # every descriptor up to past 1,024 is taken: the helper's come after
            held.append(os.open(os.devnull, os.O_RDONLY))
        layout = layout_of(lister.try_listing(path, file_identity(os.stat(path)), "v", 100))
        assert layout is not None and layout.chunks == (1, 32)
        assert lister._helper is not None and lister._helper.stdout is not None
        assert lister._helper.stdout.fileno() > 1024
    finally:
        lister.close()
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
