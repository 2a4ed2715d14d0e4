"""Statistics of a stream of rounds, with vLLM's definitions: what the app shows live and the benchmarks report.

τ = tokens emitted per target forward (bonus token included; the prefill is a forward too);
acceptance rate = accepted drafts / drafted tokens; acceptance at position i = share of rounds that drafted at
least i+1 tokens and had the first i+1 accepted; mean acceptance length = 1 + accepted / drafting rounds;
tokens/s over the engine's own time (rendering excluded); a near-tie rejection = a rejected draft to which the
target itself gave at least NEAR_TIE probability (the target nearly chose it: a miss that only the target's own
computation would have avoided, not a sign of a weak drafter).

    stats = RunStats.of(generation.rounds, generation.seconds); stats.tau, stats.acceptance
"""

from __future__ import annotations

from dataclasses import dataclass

from core.decoding.rounds import Round

NEAR_TIE = 0.2


def near_tie(target_prob: float) -> bool:
    return target_prob >= NEAR_TIE


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
    rejections: int = 0
    near_tie_rejections: int = 0

    @classmethod
    def of(cls, rounds: list[Round], seconds: float, first_token_seconds: float | None = None) -> RunStats:
        longest = max((r.depth for r in rounds), default=0)
        positions = []
        for i in range(longest):
            reached = [r for r in rounds if r.depth > i]
            positions.append(sum(r.accepted > i for r in reached) / len(reached))
        rejected = [r.target_probs[i] for r in rounds if (i := r.rejected_index) is not None]
        return cls(
            tokens=sum(len(r.emitted) for r in rounds),
            forwards=len(rounds),
            drafted=sum(len(r.drafted) for r in rounds),
            accepted=sum(r.accepted for r in rounds),
            drafting_rounds=sum(bool(r.drafted) for r in rounds),
            seconds=seconds,
            first_token_seconds=first_token_seconds,
            position_acceptance=positions,
            rejections=len(rejected),
            near_tie_rejections=sum(map(near_tie, rejected)),
        )

    @property
    def tau(self) -> float:
        return self.tokens / max(1, self.forwards)

    @property
    def acceptance(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    @property
    def near_tie_share(self) -> float | None:
        return self.near_tie_rejections / self.rejections if self.rejections else None

    @property
    def mean_accepted_length(self) -> float:
        """vLLM's mean acceptance length: 1 + accepted drafts per drafting round."""
        return 1 + self.accepted / self.drafting_rounds if self.drafting_rounds else 1.0

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    def speedup(self, ar_tokens_per_second: float | None) -> float | None:
        return self.tokens_per_second / ar_tokens_per_second if ar_tokens_per_second else None
