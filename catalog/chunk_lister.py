"""The helper processes that read HDF5 structure with h5py, so that no second HDF5 enters a reading process.

One helper lists a variable's chunks (``python -m dstp._chunk_index``, over a pipe, one listing at a time);
image helpers read the header blocks of an object in a store (:meth:`ChunkLister.image`), one per object at a
time. A helper that dies or does not answer within ``wait_s`` is ended; its listing falls back to netCDF-C.
Split from :mod:`.chunks`, which decodes what the listings locate.
"""

from __future__ import annotations

import atexit
import pickle
import select
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Callable

from dstp._chunk_index import MAX_LISTED_CHUNKS, Listing

__all__ = ["LISTER", "LISTING_WAIT_S", "ChunkLister", "ListingFailed"]


#: Longest a listing waits for the helper's answer (seconds). A file that makes HDF5 hang (a damaged
#: chunk index, a stalled network mount) must not hold every other listing behind it: past this the
#: helper is killed and that read goes through netCDF-C.
LISTING_WAIT_S = 30.0
#: Image helpers kept free for the next object (more are started while more images are read at once).
IDLE_IMAGE_HELPERS = 2


class ChunkLister:
    """The helper process that lists chunks with h5py, so that no second HDF5 enters the reading process.

    ``python -m dstp._chunk_index``, asked over a pipe, one listing at a time; started by :meth:`start`
    (servers call it as they start) or the first listing, and kept for the next. A helper that dies, or
    does not answer within ``wait_s``, is ended and started again on the next listing; the listing it was
    doing falls back to netCDF-C.
    """

    def __init__(self, wait_s: float = LISTING_WAIT_S) -> None:
        self._lock = threading.Lock()
        self._helper: subprocess.Popen[bytes] | None = None
        self.wait_s = wait_s
        #: Helpers that read object images (:meth:`image`) and are free: one per image at a time, so that a look
        #: at a store reads several objects' headers at once (each waits on its GETs); at most IDLE_IMAGE_HELPERS
        #: are kept for the next.
        self._idle: list[subprocess.Popen[bytes]] = []

    def _running(self) -> subprocess.Popen[bytes]:
        """Return the helper, started if it is not running (hold ``_lock``)."""
        if self._helper is not None and self._helper.poll() is not None:
            _discard(self._helper)
            self._helper = None
        if self._helper is None:
            self._helper = subprocess.Popen([sys.executable, "-m", "dstp._chunk_index"], stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE)
        return self._helper

    def start(self) -> None:
        """Start the helper without waiting for it (a Python process and h5py's import: 0.1 s here)."""
        with self._lock:
            self._running()

    def try_listing(self, path: Path, identity: tuple[int, int, int, int], variable: str,
                    max_chunks: int) -> Listing | None:
        """Return :meth:`listing`, or None when the helper failed (netCDF-C reads the variable this time)."""
        try:
            return self.listing(path, identity, variable, max_chunks)
        except ListingFailed:
            return None

    def listing(self, path: Path, identity: tuple[int, int, int, int], variable: str,
                max_chunks: int) -> Listing | None:
        """Return the helper's listing (None: netCDF-C reads it); raise ListingFailed if the helper failed."""
        with self._lock:
            helper = self._running()
            assert helper.stdin is not None and helper.stdout is not None
            try:
                pickle.dump((str(path), identity, variable, max_chunks), helper.stdin, pickle.HIGHEST_PROTOCOL)
                helper.stdin.flush()
                # The helper starts writing only once it holds the whole answer: readable means it comes.
                if not _readable(helper.stdout, self.wait_s):
                    raise TimeoutError(f"no chunk listing of {path} in {self.wait_s:g} s")
                listing = pickle.load(helper.stdout)
            except (OSError, EOFError, pickle.UnpicklingError) as exc:  # died or hung: the next listing starts another
                _discard(helper)
                self._helper = None
                raise ListingFailed(str(exc)) from exc
        return listing  # type: ignore[no-any-return]

    def image(self, size: int, block: int, read: Callable[[list[tuple[int, int]]], list[bytes]],
              max_chunks: int = MAX_LISTED_CHUNKS) -> dict[str, Any]:
        """Return the helper's :func:`~dstp._chunk_index.object_image` of an object of ``size`` bytes whose ranges
        ``read`` fetches (in this process: the store's client, credentials and ``If-Match`` stay here). An error
        of ``read`` is raised here; a helper that died or hung raises ListingFailed.

        Each call has an image helper to itself (a free one, or one started): images of several objects are read
        at once when several threads ask (a look at a store, ``store_header_reads``), each waiting on its own GETs.
        """
        helper = self._image_helper()
        assert helper.stdin is not None and helper.stdout is not None
        try:
            pickle.dump(("image", size, block, max_chunks), helper.stdin, pickle.HIGHEST_PROTOCOL)
            helper.stdin.flush()
            failure: BaseException | None = None
            while True:
                if not _readable(helper.stdout, self.wait_s):
                    raise TimeoutError(f"no answer about an object in {self.wait_s:g} s")
                kind, value = pickle.load(helper.stdout)
                if kind == "done":
                    break
                try:
                    reply: tuple[str, Any] = ("bytes", read(value))
                except Exception as exc:  # noqa: BLE001 - the store's own error, raised once the helper is done
                    failure, reply = exc, ("error", type(exc).__name__)
                pickle.dump(reply, helper.stdin, pickle.HIGHEST_PROTOCOL)
                helper.stdin.flush()
        except (OSError, EOFError, pickle.UnpicklingError) as exc:
            _discard(helper)
            raise ListingFailed(str(exc)) from exc
        except BaseException:
            _discard(helper)  # in the middle of an exchange: never handed to the next image
            raise
        self._free(helper)
        if failure is not None:
            raise failure
        return value  # type: ignore[no-any-return]

    def _image_helper(self) -> subprocess.Popen[bytes]:
        with self._lock:
            while self._idle:
                helper = self._idle.pop()
                if helper.poll() is None:
                    return helper
                _discard(helper)
        return subprocess.Popen([sys.executable, "-m", "dstp._chunk_index"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE)

    def _free(self, helper: subprocess.Popen[bytes]) -> None:
        with self._lock:
            if len(self._idle) < IDLE_IMAGE_HELPERS:
                self._idle.append(helper)
                return
        _end(helper, self.wait_s)

    def close(self) -> None:
        with self._lock:
            helpers, self._helper, self._idle = [self._helper, *self._idle], None, []
        for helper in helpers:
            if helper is not None:
                _end(helper, self.wait_s)


def _end(helper: subprocess.Popen[bytes], wait_s: float) -> None:
    """End a helper: its input ends, so it ends after what it may be doing (killed when it hangs)."""
    assert helper.stdin is not None
    helper.stdin.close()
    try:
        helper.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        pass  # hung: killed below
    _discard(helper)


class ListingFailed(Exception):
    """The helper died or hung: this listing is unknown (not kept; netCDF-C reads the variable this time)."""


def _discard(helper: subprocess.Popen[bytes]) -> None:
    """Make sure ``helper`` ended, and close our ends of its pipes."""
    helper.kill()
    helper.wait()
    for pipe in (helper.stdin, helper.stdout):
        if pipe is not None:
            pipe.close()


#: The one lister of this process (every ChunkReader shares its helper), stopped before the interpreter
#: tears its modules down; a process that ends with os._exit or is killed closes the helper's input, and
#: the helper ends.
LISTER = ChunkLister()
atexit.register(LISTER.close)


def _readable(pipe: Any, wait_s: float) -> bool:
    """Return whether ``pipe`` has something to read (or was closed) within ``wait_s`` seconds.

    poll, not select: a server holding thousands of connections and files gives its helpers' pipes descriptors
    past 1,024, which select() refuses ("filedescriptor out of range in select()").
    """
    poller = select.poll()
    poller.register(pipe, select.POLLIN)
    return bool(poller.poll(max(0, round(wait_s * 1000))))
