"""A clock tests move by hand: tickets expire by it, so no test sleeps out a TTL."""

from __future__ import annotations

import time


class Clock:
    """Wall-clock seconds (like ``time.time``) that move only when ``advance`` is called."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
