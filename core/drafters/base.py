"""The `Drafter` protocol every drafter implements, and the text-only drafter (the baseline).

A drafter is shared by all requests; `start(session)` returns a per-request `DraftRun` holding that request's
caches, so concurrent requests never share state. `DraftRun.propose(session, gamma)` drafts up to gamma tokens
that continue `session.generated`, drawing each from the distribution it returns (so the engine's acceptance rule
stays lossless), and stops early where `keep_drafting` says so; a run that can draft a tree may return one instead
(greedy decoding only, gamma = its depth).

Cache rollback is generic: a run remembers which tokens its KV cache holds, and on each proposal crops the cache
to the longest prefix shared with the committed sequence and feeds the rest. Rejected drafts vanish; accepted ones
are never recomputed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import torch
from transformers import AutoModelForCausalLM, PreTrainedModel

from core.decoding.sampling import distribution, sample
from core.models.loading import LoadOptions

if TYPE_CHECKING:
    from core.decoding.engine import Session


@dataclass
class DraftProposal:
    """A chain (parents None: token i follows token i-1) or a tree (core/decoding/tree.py: parents[i] is the index of node
    i's parent, -1 for the newest committed token). probs[i] is the distribution token i was drawn from."""

    tokens: list[int]
    probs: torch.Tensor  # [len(tokens), V]
    parents: list[int] | None = None


def keep_drafting(session: Session, token: int, q: torch.Tensor) -> bool:
    """Whether a chain goes on past `token`, just drawn from q. Never past an end-of-sequence token (nothing after
    it is emitted), and not once the drafter gives its own draft less than `session.min_draft_prob`: a rejection is
    then likely, and every further draft costs a drafter step and a verified row. The length of a draft depends
    only on the drafter's own state, so acceptance stays lossless."""
    return token not in session.stop_ids and float(q[token]) >= session.min_draft_prob


class DraftRun(Protocol):
    def propose(self, session: Session, gamma: int) -> DraftProposal: ...


class Drafter(Protocol):
    """`name`, `start`; a drafter that reads the target's hidden states also sets `reads_target_features = True`."""

    name: str

    def start(self, session: Session) -> DraftRun: ...


class CachedPrefix:
    """A KV cache plus the token ids it holds; `pending` crops it to the prefix shared with a sequence."""

    def __init__(self, model: PreTrainedModel, session: Session):
        self.cache = session.fast.new_cache(model, session.max_length)
        self.held: list[int] = []

    def pending(self, sequence: list[int]) -> list[int]:
        """Crop to the longest common prefix with `sequence` and return what still has to be fed (>= 1 token,
        since a proposal needs the logits after the last one)."""
        keep = 0
        limit = min(len(self.held), len(sequence) - 1)
        while keep < limit and self.held[keep] == sequence[keep]:
            keep += 1
        if keep < len(self.held):
            self.cache.crop(keep - len(self.held))
            del self.held[keep:]
        return sequence[keep:]


class TextDraftRun:
    """Drafting with a causal LM over token ids; `prefix` may arrive already holding a prefilled prompt."""

    def __init__(self, model: PreTrainedModel, prompt_ids: list[int], prefix: CachedPrefix):
        self.model = model
        self.prompt_ids = prompt_ids
        self.prefix = prefix
        # The target may commit ids past the drafter's rows (Qwen2.5-VL-7B has 128 more padding rows than
        # Qwen2.5-1.5B; random weights emit them). The drafter reads such an id as its last row: only its proposals
        # can suffer, verification stays lossless.
        self.last_id = model.get_input_embeddings().num_embeddings - 1

    @torch.no_grad()
    def propose(self, session: Session, gamma: int) -> DraftProposal:
        tokens, probs = [], []
        feed = self.prefix.pending(self.prompt_ids + session.generated)
        for _ in range(gamma):
            step = self.model if not self.prefix.held else session.fast.step(self.model)  # a prompt prefill stays eager
            logits = step(
                input_ids=torch.tensor([feed], device=self.model.device).clamp(max=self.last_id),
                cache=self.prefix.cache, use_cache=True,
            ).logits[0, -1:]
            self.prefix.held += feed
            q = distribution(logits, session.sampling)[0]
            token = sample(q, session.sampling, session.generator)
            tokens.append(token)
            probs.append(q)
            if not keep_drafting(session, token, q):
                break
            feed = [token]
        return DraftProposal(tokens, torch.stack(probs))


class TextDrafter:
    """A small causal LM sharing the target's tokenizer that never sees the image."""

    def __init__(self, model: PreTrainedModel, name: str = "text"):
        self.model = model.eval()
        self.name = name

    @classmethod
    def from_pretrained(cls, path: str | Path, name: str = "text", load: LoadOptions = LoadOptions()) -> TextDrafter:
        return cls(AutoModelForCausalLM.from_pretrained(path, **load.kwargs()), name)

    def start(self, session: Session) -> TextDraftRun:
        return TextDraftRun(self.model, session.request.text_ids[0].tolist(), CachedPrefix(self.model, session))
