"""Channel policy: which data channel a transfer takes, how many stripes, learned per server.

One policy serves queries and downloads alike:

    choice = policy.choose("auto", what="result")                      # before asking the server
    choice = policy.pick(choice, offered_kinds, upper_bytes)            # auto: from the offers and the size
    channel = policy.open(choice, offer)                                 # the DataChannel to receive on
    policy.learn(choice, nbytes, seconds, summary)                       # what the transfer achieved

``auto`` takes the gRPC stream when the transfer is known to be small, and
otherwise striped TCP with the stream count, buffers and congestion control
the auto-tuner (GridCopy's rule, :mod:`dstp.transport.client.tuning`) learned for this
server — or UDT where it measured faster. Query results and files learn their
stream counts apart (:func:`tune_key`): on one path they want opposite counts
(loopback, 1.1 GB: a result 866 MB/s on 1 stream, 744 on 4; a file 467 on 1,
822 on 8 — stripes write the file in parallel, while a result is bounded by
the server's scan and each stream costs both ends CPU), so a result on a LAN
starts at one stream and a file at GridCopy's four. The path's round-trip time comes
from Pings, cached for :data:`RTT_MAX_AGE_S`. For a query the server applies
the size rule itself: the client asks with Run and ``inline_max_bytes`` =
``GRPC_MAX_BYTES["result"]``, a small result streams on that call at once (one
round trip, as ``grpc``), a larger one comes back as offers to pick from.

``wrap_channel`` is the public seam for what goes between the client and a
data channel (a fault-injecting channel in tests, a proxy, a byte counter):
it receives each channel the policy opens and returns the one to use.

For a query result, ``auto`` also picks the batch compression (:meth:`ChannelPolicy.compression`,
before the Query rpc, which carries it): none, LZ4 or zstd, whichever the cost model
(:func:`estimate_seconds`, docs/transport.md "Compression") says finishes first on this
path. A compression the caller names is never overridden.

Striped TCP and UDT connections are kept warm between transfers (``pool``,
:mod:`dstp.transport.client.pool`): the next transfer to the same data endpoint
starts on connections whose congestion window (UDT: sending rate) and RTT
estimate are grown, and
:meth:`ChannelPolicy.predial` opens the stripes that the pool lacks while the
Query rpc is in flight (once an earlier offer has named the endpoint).
"""

from __future__ import annotations

import functools
import threading
import time
from dataclasses import dataclass, replace
from typing import Callable, Collection

from dstp.errors import DstpError, TransportUnavailableError
from dstp.transport.client.channels import DataChannel
from dstp.transport.client.pool import ConnectionPool
from dstp.transport.wire.values import ChannelOffer, TransferSummary, reachable_address
from dstp.transport.wire.tcp import kernel_limits
from dstp.transport.client.tuning import AutoTuner, LAN_RTT_S, StripePlan, path_loss, same_path

__all__ = ["CODECS", "GRPC_MAX_BYTES", "LOOPBACK_GRPC_MAX_RESULT_BYTES", "RTT_MAX_AGE_S", "TRANSPORTS", "ChannelChoice", "ChannelPolicy",
           "CodecCost", "LOOPBACK_RTT_S", "estimate_seconds", "handshake_seconds", "is_loopback", "tune_key", "udt_built"]

#: What ``transport=`` accepts.
TRANSPORTS = ("grpc", "striped", "udt", "auto")

#: ``auto`` sends a transfer known to be smaller than this over the gRPC stream, by what it is.
#: A query result on gRPC costs one round trip (Run) where a data channel costs three
#: (Query, connect, HELLO), so results stay on gRPC longer; a file over gRPC is one stream of
#: 2 MiB chunks, which stripes overtake sooner (docs/transport.md, "Auto-tuning").
GRPC_MAX_BYTES = {"result": 32 * 2**20, "file": 8 * 2**20}

#: The same bound for a query result from a server on this host (:func:`is_loopback`): there a round trip
#: costs 0.1 ms, so a data channel's two more are soon paid for, while the gRPC stream moves ~0.7 GB/s
#: (auto_matrix, loopback, warm, medians of 11: 1 MB 3.8 ms on gRPC vs 4.5 ms striped × 1; 10 MB 14.5
#: vs 10.8 ms).
LOOPBACK_GRPC_MAX_RESULT_BYTES = 4 * 2**20

#: How long a measured round-trip time is trusted before the client pings again. The Pings
#: cost two round trips (0.22 s on a 110 ms path), more than a small query; a path's RTT rarely
#: moves in minutes, and a moved path still shows in the throughput the tuner records.
RTT_MAX_AGE_S = 300.0
#: Pings behind an RTT estimate (the first on a new connection pays for its set-up).
RTT_SAMPLES = 3
#: Pings taken together that read under this are checked by one more taken alone: on a fast path
#: concurrent Pings contend for a busy CPU (the client's and the server's threads), and on loopback
#: under load two at once read 5 ms where one alone reads 1 ms (2 of 20 fresh clients). Below this
#: RTT the extra Ping costs little; on a long path it is never taken.
RTT_CHECK_BELOW_S = 0.020
#: The round-trip time ``auto`` takes for a server on this host (its address a loopback one, or
#: ``localhost``) without a Ping: 0.1 ms, a loopback round trip through the kernel, and far under
#: :data:`LAN_RTT_S`, which is all the choices below compare it with. The Pings would cost a new client
#: up to four sequential round trips (set-up, two together, one alone: 1–3 ms on a busy loopback) before
#: a small query that itself takes about as long.
LOOPBACK_RTT_S = 0.0001


@dataclass(frozen=True, slots=True)
class CodecCost:
    """What one batch compression costs and buys: size ratio, and per-core speeds in uncompressed bytes/s."""

    ratio: float
    compress_bps: float
    decompress_bps: float


#: Arrow IPC buffer compression as the server runs it (zstd at pyarrow's default level, 1), measured with
#: pyarrow 's stream writer/reader on one core (``use_threads=False``) on the Table 4 seed query's 1 M
#: record result from the medium samples (12.0 MB; ``python -m bench.compression``, docs/transport.md,
#: "Compression"). Speeds count uncompressed bytes and include the IPC writing/reading itself. zstd level 3
#: compressed this result no better than level 1 (3.63×) and 18 % slower, so level 1 is the one offered.
CODECS: dict[str, CodecCost] = {
    "none": CodecCost(1.0, float("inf"), float("inf")),
    "lz4": CodecCost(2.97, 4.38e9, 6.61e9),
    "zstd": CodecCost(3.63, 1.50e9, 1.96e9),
}

#: Uncompressed bytes/s the server produces a result at before any compression (scan: netCDF read,
#: decode, DuckDB). 1.1 GB result on loopback with striped × 8: 369 MB/s (issue 15). The codec runs on
#: the same cores, so its time adds to the scan's: this is what keeps loopback and LAN paths raw.
#: Kept below the chunk reader's 880–921 MB/s on purpose: the bandwidth the model is given is what
#: results moved at, and a result moves no faster than its scan — with 880 MB/s here a loopback result
#: measured at 3 Gb/s (scan-bound) would read as a 3 Gb/s wire and be compressed (a codec wins below
#: 5.1 Gb/s then; below 2.4 Gb/s with 370).
SCAN_BPS = 370e6

#: Cores the model gives the codec on each side. The client cannot see the server's cores and the
#: scan uses them too; one is the conservative count (Arrow does compress buffers in parallel).
CODEC_CORES = 1

#: Assumed path bandwidth, bits/s, when this server was never measured and the RTT is a LAN's (under the
#: tuner's :data:`LAN_RTT_S`, 5 ms: a gRPC Ping on a busy loopback can take over 1 ms); a longer path is
#: assumed at the tuner's ``assumed_bandwidth_bps`` (1 Gb/s).
LAN_BANDWIDTH_BPS = 10e9

#: A codec is taken only when the model says it is at least this much faster than the next best
#: choice without it (the model's constants are one result's; a close call is not worth the CPU).
CODEC_MARGIN = 1.15

#: The result size the compression is chosen for before the server's estimate exists (the Query rpc
#: carries the compression; its answer carries the size). Every term of the model but the pipeline fill
#: scales with size, so the choice is the same for any result large enough to matter.
NOMINAL_RESULT_BYTES = 32 * 2**20

#: Uncompressed bytes the codec handles before the first batch can leave (the pipeline fill).
FILL_BYTES = 1 * 2**20

def stream_window_bytes() -> int:
    """Return how many bytes one autotuned TCP stream keeps in flight at most: the window a single stream's
    throughput is bounded by (window / RTT) on a long path.

    Half of ``tcp_rmem``'s maximum (the share of the receive buffer Linux offers as window), and no more than
    ``tcp_wmem``'s maximum (the sender's buffer; the server's is taken to be this host's). Stock kernels:
    min(3, 4) MiB — 28.6 MB/s at 110 ms. Measured on the emulated 110 ms / 1 Gb/s path with stock buffers:
    a 12 MB result on the gRPC stream arrived at 33 MB/s after its first batch, Flight's at the same rate.
    """
    limits = kernel_limits()
    return min(limits.tcp_rmem_max // 2, limits.tcp_wmem_max)


def estimate_seconds(codec: str, nbytes: int, bandwidth_bps: float, rtt_s: float) -> float:
    """Return the model's time to move a result of ``nbytes`` (Arrow bytes) compressed with ``codec``.

    time = RTT + fill + nbytes / rate, rate = min(path bandwidth × ratio, producer, consumer), where the
    producer is the scan and the compression in series on :data:`CODEC_CORES` (1/(1/scan + 1/compress)) and
    the consumer the decompression; the fill is the first :data:`FILL_BYTES` through the codec both ways.
    """
    cost = CODECS[codec]
    cores = CODEC_CORES
    producer = 1.0 / (1.0 / SCAN_BPS + 1.0 / (cost.compress_bps * cores))
    rate = min(bandwidth_bps / 8 * cost.ratio, producer, cost.decompress_bps * cores)
    fill = min(nbytes, FILL_BYTES) * (1.0 / (cost.compress_bps * cores) + 1.0 / (cost.decompress_bps * cores))
    return rtt_s + fill + nbytes / rate


#: Congestion controls the tuner may ask the server for.
TUNER_CONGESTION_CONTROLS = ("bbr", "cubic", "reno")


@dataclass(frozen=True, slots=True)
class ChannelChoice:
    """The data path chosen for one transfer, and why (``dstp query -v`` prints the reason)."""

    transport: str
    streams: int
    congestion_control: str
    plan: StripePlan | None
    rtt_s: float
    reason: str
    #: The batch compression asked for ("none", "lz4", "zstd"), and why when the policy chose it.
    compression: str = "none"
    compression_reason: str = ""
    #: What moves: "result" (a query's records) or "file" (a download).
    what: str = "result"


class ChannelPolicy:
    """How one client moves data to and from one server (``key`` names it in the tuner's cache)."""

    def __init__(
        self,
        key: str,
        ping: Callable[[], float],
        tuner: AutoTuner | None = None,
        *,
        timeout: float = 30.0,
        wrap_channel: Callable[[DataChannel], DataChannel] | None = None,
        require_sealed: bool = False,
        keep_connections: bool = True,
        window_bytes: int | None = None,
        handshake: Callable[[], float] | None = None,
        connect: Callable[[], None] | None = None,
    ) -> None:
        self.key = key
        #: Times one TCP handshake with the server (seconds): a new client's first round-trip samples, taken
        #: while ``connect`` sets the control connection up (:meth:`rtt`).
        self._handshake = handshake
        self._connect = connect
        #: One TCP stream's window (:func:`stream_window_bytes`): what bounds the gRPC stream on a long path.
        self.window_bytes = window_bytes or stream_window_bytes()
        #: Refuse data channels whose offers are not sealed (the client speaks TLS to the control plane).
        self.require_sealed = require_sealed
        self.tuner = tuner or AutoTuner()
        self.timeout = timeout
        self.wrap_channel = wrap_channel
        self._ping = ping
        #: The server is on this host: its round trip is known without a Ping (:data:`LOOPBACK_RTT_S`).
        self.loopback = is_loopback(key)
        #: (monotonic time, seconds) of the Ping round trips measured lately.
        self._rtt_samples: list[tuple[float, float]] = []
        #: Striped connections kept between transfers (None: each transfer dials its own and closes them).
        self.pool = ConnectionPool() if keep_connections else None
        #: The striped channel the last striped offer named: (host, port, cipher), for pre-dialing.
        self._striped_at: tuple[str, int, str] | None = None

    # -- round-trip time ----------------------------------------------------------------

    def observe_rtt(self, seconds: float) -> None:
        """Remember one measured round trip."""
        now = time.monotonic()
        self._rtt_samples = [(t, v) for t, v in self._rtt_samples[-15:] if now - t < RTT_MAX_AGE_S]
        self._rtt_samples.append((now, seconds))

    def rtt(self) -> float:
        """Return the path's round-trip time: the least of the last 5 minutes' Pings (at least 3), or for a
        server on this host (:func:`is_loopback`) the least Ping taken anyway, else :data:`LOOPBACK_RTT_S`
        without a Ping.

        A new client's first samples are TCP handshakes taken while its control connection is set up
        (:meth:`_handshakes`), so measuring costs its first request nothing beyond that set-up; Pings
        measure when they fail, and once the samples are older than :data:`RTT_MAX_AGE_S`.

        Three samples, because the first Ping on a new connection also pays
        for the TCP and HTTP/2 set-up. Once the connection is up, the missing
        samples are taken at the same time, so a new client waits two round
        trips (plus set-up) rather than three before its first request; on a
        fast path (under :data:`RTT_CHECK_BELOW_S`) one more is taken alone.
        """
        now = time.monotonic()
        recent = [v for t, v in self._rtt_samples if now - t < RTT_MAX_AGE_S]
        if self.loopback:
            return min(recent, default=LOOPBACK_RTT_S)
        if not recent and self._handshake is not None:
            recent += self._handshakes()
        if not recent:
            recent += self._pings(1)  # alone: it sets the connection up
        if len(recent) < RTT_SAMPLES:
            together = self._pings(RTT_SAMPLES - len(recent))
            recent += together
            if len(together) > 1 and min(together) < RTT_CHECK_BELOW_S:
                recent += self._pings(1)  # a fast path: a Ping alone, free of the others' contention
        return min(recent)

    def _handshakes(self) -> list[float]:
        """Return :data:`RTT_SAMPLES` TCP handshake times taken at once, while the control connection is set
        up beside them ([] if a handshake failed: then Pings measure).

        A new client's Pings cost it two round trips before its first request (0.22 s across 110 ms, three
        times a small query there); a handshake is one round trip, taken while gRPC's own connection set-up
        (TCP, then HTTP/2's preface and settings) takes as long or longer, so the first request waits for no
        more than that set-up, as with ``transport="grpc"``.
        """
        assert self._handshake is not None
        handshake = self._handshake
        results: list[float | None] = [None] * RTT_SAMPLES

        def one(i: int) -> None:
            try:
                results[i] = handshake()
            except OSError:
                results[i] = None

        threads = [threading.Thread(target=one, args=(i,), name="dstp-handshake", daemon=True)
                   for i in range(RTT_SAMPLES)]
        for t in threads:
            t.start()
        if self._connect is not None:
            self._connect()
        for t in threads:
            t.join()
        samples = [r for r in results if r is not None]
        if len(samples) < RTT_SAMPLES:
            return []
        for r in samples:
            self.observe_rtt(r)
        return samples

    def _pings(self, count: int) -> list[float]:
        """Return ``count`` Pings sent at once (one in this thread, the rest in others; the first error is raised)."""
        results: list[float | BaseException] = [0.0] * count

        def one(i: int) -> None:
            try:
                results[i] = self._ping()
            except BaseException as exc:  # noqa: BLE001 - raised below, in the caller's thread
                results[i] = exc

        threads = [threading.Thread(target=one, args=(i,), name="dstp-ping", daemon=True) for i in range(1, count)]
        for t in threads:
            t.start()
        one(0)
        for t in threads:
            t.join()
        samples: list[float] = []
        for r in results:
            if isinstance(r, BaseException):
                raise r
            self.observe_rtt(r)
            samples.append(r)
        return samples

    # -- choosing -----------------------------------------------------------------------

    def choose(self, transport: str, streams: int = 0, congestion_control: str = "",
               compression: str = "none", *, what: str = "result") -> ChannelChoice:
        """Return the path to ask the server for a ``what`` ("result" or "file"); ``auto`` is settled later by
        :meth:`pick`.

        ``compression`` "auto" lets :meth:`compression` choose the codec (query results only); any other
        value is asked for as given.
        """
        if what not in GRPC_MAX_BYTES:
            raise ValueError(f"what moves must be one of {', '.join(GRPC_MAX_BYTES)}, not {what!r}")
        choice = replace(self._choose(transport, streams, congestion_control, what), what=what)
        if compression == "auto":
            return self.compression(choice)
        return replace(choice, compression=compression,
                       compression_reason="" if compression == "none" else f"{compression} (asked for)")

    def _choose(self, transport: str, streams: int, congestion_control: str, what: str) -> ChannelChoice:
        if transport not in TRANSPORTS:
            raise TransportUnavailableError(f"unknown transport {transport!r}; use one of {', '.join(TRANSPORTS)}")
        if transport == "grpc":
            return ChannelChoice("grpc", 0, congestion_control, None, 0.0, "asked for grpc")
        if transport == "udt":
            return ChannelChoice("udt", 1, "", None, 0.0, "asked for udt")
        if streams and transport == "striped":
            return ChannelChoice("striped", streams, congestion_control, None, 0.0, f"asked for {streams} streams")
        rtt = self.rtt()
        first = (1, "a result on a LAN: one stream's window covers the path") \
            if what == "result" and rtt < LAN_RTT_S else None
        plan = self.tuner.plan(tune_key(self.key, what), rtt, allowed_cc=TUNER_CONGESTION_CONTROLS, first=first)
        if congestion_control:
            plan = StripePlan(plan.streams, plan.buffer_bytes, congestion_control, plan.reason)
        return ChannelChoice("striped", plan.streams, plan.congestion_control, plan, rtt,
                             f"{plan.reason}; RTT {rtt * 1e3:.2f} ms")

    def grpc_max_bytes(self, what: str) -> int:
        """Return the size under which ``auto`` keeps a ``what`` ("result", "file") on the gRPC stream:
        :data:`GRPC_MAX_BYTES`, for a result from a server on this host :data:`LOOPBACK_GRPC_MAX_RESULT_BYTES`."""
        if what == "result" and self.loopback:
            return LOOPBACK_GRPC_MAX_RESULT_BYTES
        return GRPC_MAX_BYTES[what]

    def pick(self, choice: ChannelChoice, offered: Collection[str], upper_bytes: int, *,
             inline: bool = False) -> ChannelChoice:
        """Return ``choice`` settled on an offered channel for a transfer of at most ``upper_bytes``.

        gRPC when the transfer is small (under :meth:`grpc_max_bytes`;
        unknown counts as large), no data channel is offered, or the server
        already streams the records on the Run call (``inline``: it applied the
        same rule); else what the tuner measured best on this server.
        """
        what = choice.what
        data = [k for k in ("striped", "udt") if k in offered and (k != "udt" or udt_built())]
        if inline or 0 <= upper_bytes < self.grpc_max_bytes(what) or not data:
            size = f"at most {upper_bytes / 2**20:.1f} MiB" if upper_bytes >= 0 else "of unknown size"
            return replace(choice, transport="grpc",
                           reason=f"auto: grpc ({what} {size}){self._codec_note(choice, upper_bytes)}")
        kind, why = self.tuner.choose_channel(self.key, data, choice.rtt_s)
        if kind == "udt":
            from dstp.transport.wire import udt  # loading libudt costs 0.1 s: only when UDT is chosen

            if not udt.available():  # installed but does not load
                data = [k for k in data if k != "udt"]
                if not data:
                    return replace(choice, transport="grpc", reason=f"auto: grpc (UDT {udt.unavailable_reason()})")
                kind, why = self.tuner.choose_channel(self.key, data, choice.rtt_s)
        detail = f" × {choice.streams} ({choice.reason})" if kind == "striped" else ""
        size = f"up to {upper_bytes / 2**20:.1f} MiB" if upper_bytes >= 0 else "of unknown size"
        return replace(choice, transport=kind,
                       reason=f"auto: {why}{detail}{self._codec_note(choice, upper_bytes)}; {what} {size}")

    # -- compression --------------------------------------------------------------------

    def path_bandwidth(self, rtt_s: float) -> tuple[float, str]:
        """Return (bits/s, where from): the best a data channel measured on this path, else an assumption.

        Measurements at another RTT (a changed path) do not count. Never measured: a LAN's RTT (under
        :data:`LAN_RTT_S`) is assumed at :data:`LAN_BANDWIDTH_BPS`, a longer path at the tuner's assumed
        bandwidth.
        """
        measured = [rec.best_bps for kind in ("striped", "udt")
                    if (rec := self.tuner.channel_record(self.key, kind)) is not None
                    and same_path(rec.rtt_s, rtt_s)]
        if measured:
            return max(measured), "measured"
        if rtt_s < LAN_RTT_S:
            return LAN_BANDWIDTH_BPS, "assumed"
        return self.tuner.assumed_bandwidth_bps, "assumed"

    def _codec_bandwidth(self, rtt_s: float) -> tuple[float, str]:
        """Return (bits/s, why) the cost model runs a result at: the path's bandwidth, or less where one TCP
        stream's window cannot fill it in a round trip.

        The codec is chosen before the result's size is known, for the channel a result under
        ``GRPC_MAX_BYTES["result"]`` takes — the gRPC stream, one TCP connection — so the rate is
        min(path, :attr:`window_bytes` / RTT). Across 110 ms that is 229 Mb/s with stock buffers, where
        fewer bytes matter more than codec speed: zstd there; on a 1 Gb/s path LZ4 up to 33 ms (50 ms with
        a 4 MiB window).
        """
        bandwidth, source = self.path_bandwidth(rtt_s)
        why = f"path {_rate(bandwidth)} {source}"
        stream = self.window_bytes * 8 / rtt_s if rtt_s > 0 else float("inf")
        if stream < bandwidth:
            return stream, (f"{why}; one TCP stream {_rate(stream)}: {self.window_bytes / 2**20:.3g} MiB window "
                            f"per {rtt_s * 1e3:.0f} ms")
        return bandwidth, why

    def compression(self, choice: ChannelChoice, nbytes: int = NOMINAL_RESULT_BYTES) -> ChannelChoice:
        """Return ``choice`` with the batch compression the cost model finds fastest for this path.

        :func:`estimate_seconds` for each of :data:`CODECS` at the path's RTT and bandwidth
        (:meth:`path_bandwidth`, bounded by one TCP stream's window: :meth:`_codec_bandwidth`); a codec must
        beat sending raw by :data:`CODEC_MARGIN`. Chosen before
        the Query rpc (which carries it) for ``nbytes``; :meth:`pick` re-estimates for the server's size.
        """
        rtt = choice.rtt_s or self.rtt()
        bandwidth, why = self._codec_bandwidth(rtt)
        times = {codec: estimate_seconds(codec, nbytes, bandwidth, rtt) for codec in CODECS}
        best = min(times, key=times.__getitem__)
        if best != "none" and times["none"] < CODEC_MARGIN * times[best]:
            best = "none"
        if best != "none":
            why += f", est. {CODECS[best].ratio:.1f}×"
        return replace(choice, rtt_s=rtt, compression=best, compression_reason=f"{best} ({why})")

    def _codec_note(self, choice: ChannelChoice, nbytes: int) -> str:
        """Return ", <codec> (<why>; est. x s vs y s raw)" for the summary's choice string ("" if not chosen)."""
        if not choice.compression_reason:
            return ""
        note = f", {choice.compression_reason}"
        if nbytes > 0 and choice.compression != "none" and choice.rtt_s > 0:
            bandwidth, _ = self._codec_bandwidth(choice.rtt_s)
            ours = estimate_seconds(choice.compression, nbytes, bandwidth, choice.rtt_s)
            raw = estimate_seconds("none", nbytes, bandwidth, choice.rtt_s)
            note = f"{note[:-1]}: {ours:.2f} s vs {raw:.2f} s raw)"
        return note

    # -- opening ------------------------------------------------------------------------

    def open(self, choice: ChannelChoice, offer: ChannelOffer, control_target: str) -> DataChannel:
        """Return the data channel to receive ``offer`` on (wrapped by ``wrap_channel`` if set)."""
        if self.require_sealed and offer.kind in ("striped", "udt") and not offer.cipher:
            raise TransportUnavailableError(
                f"the server offers its {offer.kind} channel in plaintext although this client speaks TLS to it; "
                "refusing to receive the data unprotected (ask for transport='grpc', or connect without TLS on "
                "a trusted network)")
        host, port = reachable_address(offer.endpoint, control_target.rpartition(":")[0] or "127.0.0.1")
        channel: DataChannel
        if offer.kind == "udt":
            from dstp.transport.client.udt_channel import UdtChannel
            from dstp.transport.wire import udt

            if not udt.available():
                raise TransportUnavailableError(f"this client's UDT channel is {udt.unavailable_reason()}")
            channel = UdtChannel(host, port, rtt_s=choice.rtt_s or self.rtt(), timeout=self.timeout,
                                 pool=self.pool)
        elif offer.kind == "striped":
            from dstp.transport.client.channels import TcpChannel

            buffer_bytes = choice.plan.buffer_bytes if choice.plan else 0
            channel = TcpChannel(host, port, timeout=self.timeout, buffer_bytes=buffer_bytes, pool=self.pool)
            self._striped_at = (host, port, offer.cipher)
        else:
            raise TransportUnavailableError(f"{offer.kind or 'this'} offer is not a data channel")
        return self.wrap_channel(channel) if self.wrap_channel is not None else channel

    def predial(self, choice: ChannelChoice) -> None:
        """Open, in the background, the striped connections the pool lacks for ``choice``.

        Only for a striped choice to an endpoint an earlier offer named, and only without ``wrap_channel``
        (whose channel makes its own connections). The connection handshakes overlap the Query rpc; a
        pre-dialed connection the transfer does not take is closed by the pool after a few seconds.
        """
        if self.pool is None or self.wrap_channel is not None or self._striped_at is None \
                or choice.transport != "striped" or choice.streams < 1:
            return
        from dstp.transport.client.channels import TcpChannel

        host, port, cipher = self._striped_at
        channel = TcpChannel(host, port, timeout=self.timeout,
                             buffer_bytes=choice.plan.buffer_bytes if choice.plan else 0, pool=self.pool)
        key, pool = channel.pool_key(cipher), self.pool
        missing = choice.streams - pool.idle(key)
        if missing <= 0:
            return

        def dial() -> None:
            try:
                conn = channel.connect(0)
            except DstpError:
                pool.forfeit(key)
                return
            pool.give(key, conn, predialed=True)

        pool.expect(key, missing)
        for _ in range(missing):
            threading.Thread(target=dial, name="dstp-predial", daemon=True).start()

    def close(self) -> None:
        """Close the kept connections."""
        if self.pool is not None:
            self.pool.close()

    # -- learning -----------------------------------------------------------------------

    def learn(self, choice: ChannelChoice, nbytes: int, seconds: float, summary: TransferSummary) -> None:
        """Teach the auto-tuner what a data-channel transfer achieved."""
        kind = choice.transport
        if kind not in ("striped", "udt"):
            return
        rtt = choice.rtt_s or 0.0
        self.tuner.observe(self.key, kind, nbytes, seconds, rtt, path_loss(summary.paths))
        if kind == "striped" and choice.plan is not None:
            plan = choice.plan
            granted = summary.streams or plan.streams
            if granted < plan.streams:  # the server capped the count: learn what was really used
                plan = StripePlan(granted, plan.buffer_bytes, plan.congestion_control, plan.reason)
            self.tuner.record(tune_key(self.key, choice.what), plan, nbytes, seconds, rtt)


def tune_key(server: str, what: str) -> str:
    """Return the tuner's name for ``what`` ("result" or "file") moved from ``server``: files under the
    server's own key (as before results had their own), results under ``"<server> results"``. The channel
    records (UDT or striped TCP, a property of the path) stay the server's."""
    return server if what == "file" else f"{server} results"


def _rate(bps: float) -> str:
    """Return ``bps`` as "1 Gb/s", "250 Mb/s"."""
    return f"{bps / 1e9:.3g} Gb/s" if bps >= 0.9995e9 else f"{bps / 1e6:.3g} Mb/s"


def handshake_seconds(target: str, timeout: float) -> float:
    """Return how long one TCP handshake with ``target`` ("host:port") takes; the connection is closed at once.

    Raises OSError when it cannot connect (or ``target`` names no TCP address, e.g. a Unix socket)."""
    import socket

    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        raise OSError(f"{target!r} is not host:port")
    started = time.perf_counter()
    with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
        return time.perf_counter() - started


def is_loopback(target: str) -> bool:
    """Return whether ``target`` ("host:port", "[::1]:port", "unix:…") names a server on this host by its
    address: a loopback IP, ``localhost``, or a Unix socket. Names are not resolved (a DNS lookup would cost
    what the Ping it saves costs); any other name counts as remote."""
    import ipaddress

    if target.startswith(("unix:", "unix-abstract:")):
        return True
    host = target.rpartition(":")[0] if target.count(":") == 1 or target.startswith("[") else target
    host = host.strip("[]").lower()
    if host in ("localhost", "localhost.localdomain", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@functools.cache
def udt_built() -> bool:
    """Return whether the UDT extension is installed, without loading it (libudt starts threads: 0.1 s);
    asked once per process."""
    from importlib.util import find_spec

    return find_spec("dstp.transport._udt") is not None
