"""Live statistics of one stream of rounds, with vLLM's definitions, and their HTML stat cards.

τ = tokens emitted per target forward (bonus token included; the prefill is a forward too);
acceptance rate = accepted drafts / drafted tokens; acceptance at position i = share of rounds that drafted at
least i+1 tokens and had the first i+1 accepted; tokens/s over the engine's own time (rendering excluded).
"""

from __future__ import annotations

import html
from dataclasses import dataclass

from core.decoding.engine import Round


@dataclass
class RunStats:
    tokens: int
    forwards: int
    drafted: int
    accepted: int
    seconds: float
    first_token_seconds: float | None
    position_acceptance: list[float]

    @classmethod
    def of(cls, rounds: list[Round], seconds: float, first_token_seconds: float | None = None) -> RunStats:
        longest = max((r.depth for r in rounds), default=0)
        positions = []
        for i in range(longest):
            reached = [r for r in rounds if r.depth > i]
            positions.append(sum(r.accepted > i for r in reached) / len(reached))
        return cls(
            tokens=sum(len(r.emitted) for r in rounds),
            forwards=len(rounds),
            drafted=sum(len(r.drafted) for r in rounds),
            accepted=sum(r.accepted for r in rounds),
            seconds=seconds,
            first_token_seconds=first_token_seconds,
            position_acceptance=positions,
        )

    @property
    def tau(self) -> float:
        return self.tokens / max(1, self.forwards)

    @property
    def acceptance(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    def speedup(self, ar_tokens_per_second: float | None) -> float | None:
        return self.tokens_per_second / ar_tokens_per_second if ar_tokens_per_second else None


def cards_html(stats: RunStats, ar_tokens_per_second: float | None, speedup_note: str) -> str:
    speedup = stats.speedup(ar_tokens_per_second)
    cards = [
        ("τ (tokens/forward)", f"{stats.tau:.2f}"),
        ("acceptance rate", "n/a" if stats.acceptance is None else f"{stats.acceptance:.0%}"),
        ("tokens/s", f"{stats.tokens_per_second:.1f}"),
        ("speedup vs AR", "n/a" if speedup is None else f"{speedup:.2f}x"),
        ("target forwards", str(stats.forwards)),
        ("tokens", str(stats.tokens)),
        ("first token", "n/a" if stats.first_token_seconds is None else f"{stats.first_token_seconds * 1000:.0f} ms"),
    ]
    body = "".join(
        f"<div class='stat'><div class='stat-value'>{value}</div><div class='stat-label'>{label}</div></div>"
        for label, value in cards
    )
    return f"<div class='stats'>{body}</div><div class='stat-note'>{html.escape(speedup_note)}</div>"
