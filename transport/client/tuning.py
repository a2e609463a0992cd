"""Auto-tuning of streams, buffers and congestion control, after GridCopy (paper 001, section 5).

Per server endpoint, a small JSON cache in the user's cache folder remembers
the streams, buffer and congestion control used, the throughput achieved and
a "decrease" flag. The rule:

* first transfer to an endpoint: ``default_streams`` (4) streams, each with a
  buffer of ``BDP / max(1, streams / loss_factor)`` (loss_factor 2: streams
  hit by a loss slow down, the others need room to take up the slack), BDP
  from the measured RTT and an assumed 1 Gb/s path, as GridCopy does (a caller
  may start elsewhere: the client starts a query result on a LAN at 1 stream);
* then (dstp's addition) one probe upwards: twice the streams. If that is at
  least 10 % faster, it is adopted and doubled again; otherwise the count
  falls back. GridCopy only ever sheds streams, which on a lossy long path
  leaves half the throughput behind (200 ms, 0.1 % loss: 4 BBR streams
  268 Mb/s, 8 streams 460 Mb/s, bench/results/bulk.md);
* while "decrease" is on, each transfer tries one stream fewer; if it keeps
  at least 97 % of the best throughput the smaller count is adopted, otherwise
  "decrease" goes off and the previous count stays;
* when the path changes — the RTT moves by more than 30 % and more than
  ``LAN_RTT_S`` (5 ms), or throughput at the settled count falls under 70 % of
  what it was — streams go up again (×2, at least +2) and the search restarts.
  The 5 ms floor is measured: the client's RTT pings (user space, on a busy
  2-core host) read 0.7–3.7 ms on loopback from one transfer to the next, and
  with a 2 ms floor each such swing counted as a new path and doubled the
  stripes (4 → 64 on loopback in one benchmark run); under 5 ms the
  bandwidth-delay product of a 1 Gb/s path fits one stream's window anyway.

Explicit socket buffers are requested only when they beat the kernel's own
autotuning (:func:`dstp.transport.wire.tcp.buffer_plan`); congestion control is BBR
when the server allows it and the path is not a LAN (RTT ≥ ``LAN_RTT_S``), since BBR
holds a lossy long path full where CUBIC collapses. Transfers under
``min_bytes`` teach nothing (latency dominates) and are not recorded.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import platformdirs

from dstp.transport.wire.tcp import buffer_plan

__all__ = ["LAN_RTT_S", "AutoTuner", "ChannelRecord", "StripePlan", "TuneRecord", "path_loss", "same_path"]

#: Below this RTT a path is a LAN: CUBIC rather than BBR, and RTT differences are measurement noise, not a new path.
LAN_RTT_S = 0.005


def same_path(known_rtt_s: float, rtt_s: float) -> bool:
    """Return True unless ``rtt_s`` differs from ``known_rtt_s`` by over 30 % and over ``LAN_RTT_S``."""
    return abs(rtt_s - known_rtt_s) <= max(0.3 * known_rtt_s, LAN_RTT_S)


@dataclass(frozen=True, slots=True)
class StripePlan:
    """How to run the next transfer to an endpoint, and why."""

    streams: int
    buffer_bytes: int
    congestion_control: str
    reason: str


@dataclass(frozen=True, slots=True)
class TuneRecord:
    """What the cache remembers about one endpoint."""

    streams: int
    buffer_bytes: int
    congestion_control: str
    throughput_bps: float
    best_bps: float
    decrease: bool
    rtt_s: float
    updated: float
    weak: int = 0  # consecutive transfers under 70 % of best at the settled count
    increase: bool = False  # the next transfer probes twice the streams


@dataclass(frozen=True, slots=True)
class ChannelRecord:
    """What one data channel achieved on one endpoint: throughput, loss and RTT seen."""

    best_bps: float
    last_bps: float
    loss: float
    rtt_s: float
    updated: float


def path_loss(paths: Mapping[str, Mapping[str, float]]) -> float:
    """Return the retransmitted fraction of segments the server's stripes reported, 0 if unknown.

    ``paths`` is a transfer's ``TransferSummary.paths``: per stripe, what the server's socket measured.
    """
    sent = sum(float(p.get("segments", 0)) for p in paths.values())
    lost = sum(float(p.get("retransmits", 0)) for p in paths.values())
    return lost / sent if sent > 0 else 0.0


class AutoTuner:
    """Chooses stripe plans and channels from measurements, and remembers the outcome."""

    def __init__(
        self,
        cache_path: Path | None = None,
        *,
        default_streams: int = 4,
        max_streams: int = 64,
        loss_factor: float = 2.0,
        assumed_bandwidth_bps: float = 1e9,
        keep_fraction: float = 0.97,
        increase_gain: float = 1.10,
        min_bytes: int = 32 * 2**20,
    ) -> None:
        self.cache_path = cache_path or Path(platformdirs.user_cache_dir("dstp")) / "tuning.json"
        self.default_streams = default_streams
        self.max_streams = max_streams
        self.loss_factor = loss_factor
        self.assumed_bandwidth_bps = assumed_bandwidth_bps
        self.keep_fraction = keep_fraction
        self.increase_gain = increase_gain
        self.min_bytes = min_bytes
        self._lock = threading.Lock()
        #: The cache file's stamp and contents as last parsed (:meth:`_peek`).
        self._seen: tuple[tuple[int, int, int], dict[str, Any]] | None = None

    # -- cache --------------------------------------------------------------------------

    def _read(self) -> dict[str, Any]:
        """Return the cache file's contents, parsed afresh (the caller may change and write them)."""
        try:
            raw = json.loads(self.cache_path.read_text())
            return raw if isinstance(raw, dict) and raw.get("version") == 2 else {}
        except (OSError, ValueError):
            return {}

    def _peek(self) -> dict[str, Any]:
        """Return the cache file's contents, not to be changed: parsed again only when the file changed (its
        size, modification time or inode), since every choice of ``auto`` reads it (0.03 ms a parse)."""
        try:
            st = os.stat(self.cache_path)
        except OSError:
            return {}
        stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
        seen = self._seen
        if seen is not None and seen[0] == stamp:
            return seen[1]
        raw = self._read()
        self._seen = (stamp, raw)
        return raw

    def _write(self, raw: dict[str, Any]) -> None:
        raw["version"] = 2
        self.cache_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.cache_path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(raw, indent=1))
        tmp.replace(self.cache_path)

    def _load(self) -> dict[str, TuneRecord]:
        try:
            return {k: TuneRecord(**v) for k, v in self._peek().get("striped", {}).items()}
        except TypeError:
            return {}

    def _save(self, records: dict[str, TuneRecord]) -> None:
        raw = self._read()
        raw["striped"] = {k: asdict(v) for k, v in records.items()}
        self._write(raw)

    def channel_record(self, endpoint: str, transport: str) -> ChannelRecord | None:
        """Return what ``transport`` achieved on ``endpoint`` so far."""
        try:
            entry = self._peek().get("channels", {}).get(endpoint, {}).get(transport)
            return ChannelRecord(**entry) if entry else None
        except TypeError:
            return None

    def observe(self, endpoint: str, transport: str, nbytes: int, seconds: float, rtt_s: float,
                loss: float) -> ChannelRecord | None:
        """Remember a channel's throughput and loss on ``endpoint`` (transfers ≥ ``min_bytes`` only)."""
        if nbytes < self.min_bytes or seconds <= 0:
            return None
        bps = nbytes * 8 / seconds
        with self._lock:
            raw = self._read()
            channels = raw.setdefault("channels", {}).setdefault(endpoint, {})
            old = channels.get(transport)
            best = bps
            if old and same_path(old["rtt_s"], rtt_s):
                best = max(bps, old["best_bps"])
            record = ChannelRecord(best, bps, loss, rtt_s, time.time())
            channels[transport] = asdict(record)
            self._write(raw)
            return record

    def choose_channel(self, endpoint: str, offered: Sequence[str], rtt_s: float) -> tuple[str, str]:
        """Return (transport, reason) among ``offered`` data channels ("striped", "udt") for a large transfer.

        UDT is taken only when it measured faster on this endpoint (by 10 %: it costs far
        more CPU than TCP), or — once, to learn — when striped TCP on a long path (RTT ≥
        20 ms) lost packets (≥ 0.01 % retransmitted) or stayed under half the assumed
        bandwidth. Measurements from another RTT (a changed path) do not count.
        """
        if "udt" not in offered:
            return "striped", "striped (UDT not offered)"
        if "striped" not in offered:
            return "udt", "udt (the only data channel offered)"

        tcp = self.channel_record(endpoint, "striped")
        udt = self.channel_record(endpoint, "udt")
        tcp = tcp if tcp is not None and same_path(tcp.rtt_s, rtt_s) else None
        udt = udt if udt is not None and same_path(udt.rtt_s, rtt_s) else None
        if tcp and udt:
            if udt.best_bps > 1.1 * tcp.best_bps:
                return "udt", (f"udt: measured {udt.best_bps / 1e6:.0f} Mb/s here vs striped TCP "
                               f"{tcp.best_bps / 1e6:.0f} Mb/s")
            return "striped", (f"striped: measured {tcp.best_bps / 1e6:.0f} Mb/s here vs UDT "
                               f"{udt.best_bps / 1e6:.0f} Mb/s")
        if tcp and not udt and rtt_s >= 0.02 and (
            tcp.loss >= 1e-4 or tcp.best_bps < 0.5 * self.assumed_bandwidth_bps
        ):
            return "udt", (f"probing udt once: striped TCP reached {tcp.best_bps / 1e6:.0f} Mb/s with "
                           f"{tcp.loss * 100:.3f} % retransmitted at {rtt_s * 1e3:.0f} ms RTT")
        return "striped", "striped (no measurement favours UDT on this path)"

    def record_for(self, endpoint: str) -> TuneRecord | None:
        """Return what the cache knows about ``endpoint``."""
        return self._load().get(endpoint)

    # -- planning -----------------------------------------------------------------------

    def _buffer(self, streams: int, rtt_s: float) -> int:
        bdp = rtt_s * self.assumed_bandwidth_bps / 8
        wanted = int(bdp / max(1.0, streams / self.loss_factor))
        return buffer_plan(wanted)

    def _cc(self, rtt_s: float, allowed: Sequence[str]) -> str:
        return "bbr" if "bbr" in allowed and rtt_s >= LAN_RTT_S else ""

    def plan(self, endpoint: str, rtt_s: float, allowed_cc: Sequence[str] = (), max_streams: int | None = None,
             first: tuple[int, str] | None = None) -> StripePlan:
        """Return the stripe plan for the next transfer to ``endpoint``; the first uses ``first`` (streams,
        why) if given, else ``default_streams`` (GridCopy's)."""
        cap = min(self.max_streams, max_streams or self.max_streams)
        rec = self.record_for(endpoint)
        cc = self._cc(rtt_s, allowed_cc)
        if rec is None:
            n, why = first or (self.default_streams, "GridCopy default")
            n = min(cap, n)
            return StripePlan(n, self._buffer(n, rtt_s), cc, f"first transfer to {endpoint}: {n} streams ({why})")
        if self._path_changed(rec, rtt_s):
            n = min(cap, max(rec.streams * 2, rec.streams + 2))
            return StripePlan(n, self._buffer(n, rtt_s), cc,
                              f"RTT moved from {rec.rtt_s * 1e3:.1f} to {rtt_s * 1e3:.1f} ms: path changed, "
                              f"trying {n} streams")
        if rec.increase and rec.best_bps > 0 and rec.streams * 2 <= cap:
            n = rec.streams * 2
            return StripePlan(n, self._buffer(n, rtt_s), rec.congestion_control or cc,
                              f"trying {n} streams (twice {rec.streams}, which gave {rec.best_bps / 1e6:.0f} Mb/s)")
        if rec.best_bps == 0:  # a raised count not measured yet
            n = min(cap, rec.streams)
            return StripePlan(n, self._buffer(n, rtt_s), rec.congestion_control or cc,
                              f"throughput fell: measuring {n} streams")
        if rec.decrease and rec.streams > 1:
            n = rec.streams - 1
            return StripePlan(n, self._buffer(n, rtt_s), rec.congestion_control or cc,
                              f"trying {n} streams (one fewer than {rec.streams}, which gave "
                              f"{rec.best_bps / 1e6:.0f} Mb/s)")
        n = min(cap, rec.streams)
        return StripePlan(n, self._buffer(n, rtt_s), rec.congestion_control or cc,
                          f"settled on {n} streams ({rec.best_bps / 1e6:.0f} Mb/s best)")

    @staticmethod
    def _path_changed(rec: TuneRecord, rtt_s: float) -> bool:
        return not same_path(rec.rtt_s, rtt_s)

    def record(self, endpoint: str, plan: StripePlan, nbytes: int, seconds: float, rtt_s: float) -> TuneRecord | None:
        """Learn from a finished transfer; return the updated record (None if too small to teach)."""
        if nbytes < self.min_bytes or seconds <= 0:
            return None
        bps = nbytes * 8 / seconds
        with self._lock:
            records = self._load()
            rec = records.get(endpoint)
            now = time.time()
            fresh = TuneRecord(plan.streams, plan.buffer_bytes, plan.congestion_control, bps, bps,
                               plan.streams > 1, rtt_s, now)
            if rec is None or self._path_changed(rec, rtt_s):
                new = replace(fresh, increase=True)  # a new search: probe upwards first
            elif rec.increase and rec.best_bps > 0 and plan.streams > rec.streams:  # an upward probe
                if bps >= self.increase_gain * rec.best_bps:
                    new = replace(fresh, decrease=False, increase=True)  # more streams paid: try more again
                else:
                    new = replace(rec, increase=False, throughput_bps=bps, updated=now)
            elif rec.best_bps == 0 or plan.streams > rec.streams:
                new = fresh
            elif plan.streams < rec.streams:  # a decrease trial
                if bps >= self.keep_fraction * rec.best_bps:
                    new = replace(fresh, best_bps=max(bps, rec.best_bps))
                else:
                    new = replace(rec, decrease=False, throughput_bps=bps, updated=now)
            else:  # steady state at the settled count
                weak = rec.weak + 1 if bps < 0.7 * rec.best_bps else 0
                if weak >= 2:  # throughput fell and stayed down: the path changed, search again
                    n = min(self.max_streams, max(rec.streams * 2, rec.streams + 2))
                    new = TuneRecord(n, self._buffer(n, rtt_s), rec.congestion_control, bps, 0.0, True, rtt_s, now)
                else:
                    new = replace(rec, throughput_bps=bps, best_bps=max(rec.best_bps, bps), weak=weak,
                                  rtt_s=rtt_s, updated=now)
            records[endpoint] = new
            self._save(records)
            return new
