"""Parsing of the emulator's human units: rates (``1gbit``), times (``100ms``), sizes (``12.5MB``)."""

from __future__ import annotations

import re

_NUM = r"([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)"

_RATE_UNITS = {
    "": 1, "bit": 1, "bps": 1,
    "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12,
    "kbps": 8e3, "mbps": 8e6, "gbps": 8e9,  # tc's convention: "bps" suffixes are bytes per second
    "k": 1e3, "m": 1e6, "g": 1e9,
}
_TIME_UNITS = {"": 1e-3, "us": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0, "secs": 1.0}
_SIZE_UNITS = {
    "": 1, "b": 1,
    "k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9,
    "kib": 1024, "mib": 1024**2, "gib": 1024**3,
}


def _split(text: str, what: str) -> tuple[float, str]:
    """Return (number, lower-case unit) of ``text``; raise ValueError naming ``what``."""
    m = re.fullmatch(_NUM + r"\s*([a-zA-Z]*)", text.strip())
    if not m:
        raise ValueError(f"cannot parse {what} {text!r}")
    return float(m.group(1)), m.group(2).lower()


def parse_rate(text: str) -> float:
    """Return a rate in bits per second from ``1gbit``, ``100mbit``, ``500kbit``, ``2.5e8`` (tc syntax)."""
    value, unit = _split(text, "rate")
    if unit not in _RATE_UNITS:
        raise ValueError(f"unknown rate unit {unit!r} in {text!r} (use bit, kbit, mbit, gbit)")
    return value * _RATE_UNITS[unit]


def parse_time(text: str) -> float:
    """Return seconds from ``100ms``, ``0.1s``, ``250us``; a bare number is milliseconds."""
    value, unit = _split(text, "time")
    if unit not in _TIME_UNITS:
        raise ValueError(f"unknown time unit {unit!r} in {text!r} (use us, ms, s)")
    return value * _TIME_UNITS[unit]


def parse_size(text: str) -> int:
    """Return bytes from ``12.5MB``, ``4MiB``, ``65536`` (k/M/G are powers of 1000, KiB/MiB of 1024)."""
    value, unit = _split(text, "size")
    if unit not in _SIZE_UNITS:
        raise ValueError(f"unknown size unit {unit!r} in {text!r}")
    return int(value * _SIZE_UNITS[unit])


def parse_queue(text: str, bdp_bytes: float, mtu: int) -> int:
    """Return a queue limit in bytes from ``1bdp``/``0.5bdp``, ``100p`` (packets of MTU size) or a size."""
    value, unit = _split(text, "queue")
    if unit == "bdp":
        return int(value * bdp_bytes)
    if unit in ("p", "pkt", "pkts", "packets"):
        return int(value * mtu)
    return parse_size(text)


def parse_sysctl_triple(text: str) -> str:
    """Return a normalised ``"min default max"`` string for tcp_rmem/tcp_wmem (sizes accept units)."""
    parts = text.replace(",", " ").split()
    if len(parts) != 3:
        raise ValueError(f"expected three values 'min default max', got {text!r}")
    nums = [parse_size(p) for p in parts]
    if not nums[0] <= nums[1] <= nums[2]:
        raise ValueError(f"tcp memory triple must be non-decreasing: {text!r}")
    return " ".join(str(n) for n in nums)


def format_rate(bps: float) -> str:
    """Return a rate as a short human string such as ``1gbit`` or ``200mbit``."""
    for unit, scale in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        if bps >= scale:
            return f"{bps / scale:g}{unit}"
    return f"{bps:g}bit"
