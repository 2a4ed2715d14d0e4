"""The plain-decoding (AR) reference speed that "speedup vs AR" divides by, measured on this server.

Every AR run the app makes (the warm-up, drafter "none", the race's AR lane) is recorded; the estimate is
tokens per second over the most recent runs, so it follows the machine's current load.
"""

from __future__ import annotations

import threading
from collections import deque


class ArReference:
    def __init__(self, runs: int = 8):
        self._runs: deque[tuple[float, int]] = deque(maxlen=runs)
        self._lock = threading.Lock()

    def record(self, seconds: float, tokens: int) -> None:
        if seconds > 0 and tokens > 0:
            with self._lock:
                self._runs.append((seconds, tokens))

    def tokens_per_second(self) -> float | None:
        with self._lock:
            seconds = sum(s for s, _ in self._runs)
            tokens = sum(t for _, t in self._runs)
        return tokens / seconds if seconds else None


AR_REFERENCE = ArReference()
