"""What decoding produces: one `Round` per target forward, and a whole `Generation` of them.

    for round in engine.stream(image, prompt, drafter):   # core/decoding/engine.py
        round.drafted, round.accepted, round.emitted
"""

from __future__ import annotations

from dataclasses import dataclass

from core.decoding.tree import depths


@dataclass
class Round:
    """One target forward and what it decided. `emitted` = accepted drafts + the target's own token."""

    index: int
    drafted: list[int]
    draft_probs: list[float]  # the drafter's probability of each drafted token
    target_probs: list[float]  # the target's probability of each drafted token
    accepted: int
    emitted: list[int]
    kind: str  # how the target's own token came: "prefill", "plain", "correction" (a draft was rejected), "bonus"
    draft_seconds: float
    verify_seconds: float
    parents: list[int] | None = None  # tree rounds: the drafted tree (core/decoding/tree.py)
    path: list[int] | None = None  # tree rounds: indices of the accepted branch's nodes

    def branch(self) -> list[int]:
        """Indices into `drafted` read as a chain: all of a chain; in a tree, the accepted branch followed by the
        draft the target turned down there (the best child of the branch's last node), if any."""
        if self.parents is None:
            return list(range(len(self.drafted)))
        tip = self.path[-1] if self.path else -1
        turned_down = next((i for i, p in enumerate(self.parents) if p == tip), None)
        return self.path + ([] if turned_down is None else [turned_down])

    @property
    def depth(self) -> int:
        """How many tokens deep the draft went: a chain's length, a tree's depth."""
        return max(depths(self.parents), default=0) if self.parents is not None else len(self.drafted)

    @property
    def rejected_index(self) -> int | None:
        """Index into `drafted` of the draft the target turned down, if any."""
        branch = self.branch()
        return branch[self.accepted] if self.accepted < len(branch) else None

    @property
    def rejected(self) -> int | None:
        i = self.rejected_index
        return None if i is None else self.drafted[i]

    def statuses(self) -> list[str]:
        """Per drafted token: "accepted" (emitted), "rejected" (the target chose otherwise at its position) or
        "not reached" (it followed a rejected draft, or the token budget ran out before it)."""
        if self.parents is None:
            return ["accepted" if i < self.accepted and i < len(self.emitted) else
                    "rejected" if i == self.accepted else "not reached" for i in range(len(self.drafted))]
        on_path = set(self.path[: len(self.emitted)])
        seen = {-1} | on_path  # positions whose next token the target decided
        return ["accepted" if i in on_path else "rejected" if parent in seen else "not reached"
                for i, parent in enumerate(self.parents)]



@dataclass
class Generation:
    text: str
    token_ids: list[int]
    rounds: list[Round]
    seconds: float

    @property
    def new_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def target_forwards(self) -> int:
        return len(self.rounds)

    @property
    def tau(self) -> float:
        """Tokens emitted per target forward (the bonus token included); 1.0 for plain decoding."""
        return self.new_tokens / max(1, self.target_forwards)

    def to_json(self) -> dict:
        return {
            "text": self.text,
            "token_ids": self.token_ids,
            "new_tokens": self.new_tokens,
            "target_forwards": self.target_forwards,
            "tau": self.tau,
            "rounds": [{"drafted": len(r.drafted), "accepted": r.accepted, "emitted": len(r.emitted),
                        **({"tree": {"parents": r.parents, "path": r.path}} if r.parents is not None else {})}
                       for r in self.rounds],
            "seconds": self.seconds,
        }
