"""Drafters racing on one request: each lane is one engine session, stepped one round at a time in turn
(round-robin in a single generator), so on a small CPU they stream together without competing for cores, and
each lane's clock counts only its own rounds.

    for lanes in race([Lane("AR", engine.open(...)), Lane("text", engine.open(..., drafter))]): ...
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from core.decoding.engine import DecodingSession
from core.decoding.metrics import RunStats
from core.decoding.rounds import Round


@dataclass
class Lane:
    name: str
    session: DecodingSession | None  # None: the lane could not start (`error` says why)
    rounds: list[Round] = field(default_factory=list)
    seconds: float = 0.0
    error: str | None = None
    done: bool = False

    @property
    def token_ids(self) -> list[int]:
        return [t for r in self.rounds for t in r.emitted]

    @property
    def stats(self) -> RunStats:
        return RunStats.of(self.rounds, self.seconds)

    def step(self) -> None:
        start = time.perf_counter()
        try:
            round_ = self.session.step()
        finally:
            self.seconds += time.perf_counter() - start
        if round_ is None:
            self.done = True
            self.session.close()
        else:
            self.rounds.append(round_)


def race(lanes: list[Lane]) -> Iterator[list[Lane]]:
    """Yields the lanes after every sweep in which at least one lane advanced."""
    for lane in lanes:
        lane.done = lane.done or lane.session is None
    while not all(lane.done for lane in lanes):
        for lane in lanes:
            if not lane.done:
                lane.step()
        yield lanes
