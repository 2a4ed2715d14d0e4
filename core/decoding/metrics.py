"""Statistics of a stream of rounds, with vLLM's definitions: what the app shows live and the benchmarks report.

τ = tokens emitted per target forward (bonus token included; the prefill is a forward too);
acceptance rate = accepted drafts / drafted tokens; acceptance at position i = share of rounds that drafted at
least i+1 tokens and had the first i+1 accepted; mean acceptance length = 1 + accepted / drafting rounds;
tokens/s over the engine's own time (rendering excluded).

    stats = RunStats.of(generation.rounds, generation.seconds); stats.tau, stats.acceptance
"""

from __future__ import annotations

from dataclasses import dataclass

from core.decoding.rounds import Round


@dataclass
class RunStats:
    tokens: int
    forwards: int
    drafted: int
    accepted: int
    drafting_rounds: int  # rounds that verified at least one draft
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
            drafting_rounds=sum(bool(r.drafted) for r in rounds),
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
    def mean_accepted_length(self) -> float:
        """vLLM's mean acceptance length: 1 + accepted drafts per drafting round."""
        return 1 + self.accepted / self.drafting_rounds if self.drafting_rounds else 1.0

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    def speedup(self, ar_tokens_per_second: float | None) -> float | None:
        return self.tokens_per_second / ar_tokens_per_second if ar_tokens_per_second else None
