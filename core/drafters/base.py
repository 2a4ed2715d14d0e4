"""The `Drafter` protocol every drafter implements, what a draft is, and generic KV-cache rollback.

A drafter is shared by all requests; `start(context, prefill)` returns a per-request `DraftRun` holding that
request's caches, so concurrent requests never share state. `DraftRun.propose(context, gamma)` drafts up to gamma
tokens that continue `context.generated`, drawing each from the distribution it returns (so the engine's acceptance
rule stays lossless), and stops early where `keep_drafting` says so; a drafter that `drafts_trees` may return a tree
instead (greedy decoding only, gamma = its depth). The context is the engine's read-only view of the request
(core/decoding/session.py); `prefill` is the target's prompt record for drafters that read its states
(`feature_layers`).

Cache rollback is generic: a run remembers which tokens its KV cache holds, and on each proposal crops the cache
to the longest prefix shared with the committed sequence and feeds the rest. Rejected drafts vanish; accepted ones
are never recomputed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
from transformers import PreTrainedModel

from core.decoding.session import DraftContext, PrefillRecord


@dataclass
class DraftProposal:
    """A chain (parents None: token i follows token i-1) or a tree (core/decoding/tree.py: parents[i] is the index of node
    i's parent, -1 for the newest committed token). probs[i] is the distribution token i was drawn from."""

    tokens: list[int]
    probs: torch.Tensor  # [len(tokens), V]
    parents: list[int] | None = None


def keep_drafting(context: DraftContext, token: int, q: torch.Tensor) -> bool:
    """Whether a chain goes on past `token`, just drawn from q. Never past an end-of-sequence token (nothing after
    it is emitted), and not once the drafter gives its own draft less than `context.min_draft_prob`: a rejection is
    then likely, and every further draft costs a drafter step and a verified row. The length of a draft depends
    only on the drafter's own state, so acceptance stays lossless."""
    return token not in context.stop_ids and float(q[token]) >= context.min_draft_prob


class DraftRun(Protocol):
    def propose(self, context: DraftContext, gamma: int) -> DraftProposal: ...


class Drafter(Protocol):
    """What the engine and the benchmarks may ask of any drafter."""

    name: str
    # The target's hidden_states the drafter reads (0 = embeddings, -1 = the last layer's, normed); () = none. The
    # engine then keeps them, concatenated, for every committed position and hands `start` a prefill record.
    feature_layers: tuple[int, ...]
    drafts_trees: bool  # propose may return a tree (greedy decoding)
    assistant_model: PreTrainedModel | None  # a causal LM transformers' assisted generation could pair with the target

    def start(self, context: DraftContext, prefill: PrefillRecord | None) -> DraftRun: ...


class CachedPrefix:
    """A KV cache plus the token ids it holds; `pending` crops it to the prefix shared with a sequence."""

    def __init__(self, model: PreTrainedModel, context: DraftContext):
        self.cache = context.fast.new_cache(model, context.max_length)
        self.held: list[int] = []

    def pending(self, sequence: list[int] | tuple[int, ...]) -> list[int]:
        """Crop to the longest common prefix with `sequence` and return what still has to be fed (>= 1 token,
        since a proposal needs the logits after the last one)."""
        keep = 0
        limit = min(len(self.held), len(sequence) - 1)
        while keep < limit and self.held[keep] == sequence[keep]:
            keep += 1
        if keep < len(self.held):
            self.cache.crop(keep - len(self.held))
            del self.held[keep:]
        return list(sequence[keep:])
