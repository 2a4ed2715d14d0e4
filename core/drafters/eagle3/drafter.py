"""The EAGLE-3 drafter and one request's drafting with it.

`Eagle3Drafter` is the draft model (core/drafters/eagle3/model.py) behind the drafter protocol. `Eagle3DraftRun`
holds one request: per round a catch-up over the committed positions, whose input states are `fc` over the
target's own low / middle / high layer states, then a chain (or an EAGLE-2 tree) drafted from the layer's own
output states. It reads its inputs exactly as vLLM feeds an EAGLE-3 drafter, so a checkpoint drafts the same here
and there: the slot of token j pairs token j's id (the drafter's own embedding, image placeholders too: the
image reaches it through the target's states) with the state of position j - 1, at the target's rotary position
of j - 1 (its three multimodal rows with `mrope_section`, else the first); token 0 has no slot.

    drafter = Eagle3Drafter.from_pretrained("assets/models/eagle3", target)
    run = drafter.start(context, prefill); proposal = run.propose(context, gamma)   # core/decoding/engine.py
"""

from __future__ import annotations

from pathlib import Path

import torch

from core.decoding.session import DraftContext, PrefillRecord
from core.decoding.tree import TreeShape
from core.drafters.base import DraftProposal
from core.drafters.dream.adapter import KVCache
from core.drafters.eagle3.formats import check_fits, load_model
from core.drafters.eagle3.model import Eagle3Model
from core.drafters.state_drafting import draft_chain, grow_tree
from core.models.vlm import VisionLanguageModel


class Eagle3DraftRun:
    """One request's drafting state. Cache entries of committed slots (read from the target's states) are kept
    across rounds; entries of drafted slots are dropped."""

    def __init__(self, drafter: Eagle3Drafter, prefill: PrefillRecord):
        self.drafter = drafter
        self.device = drafter.target.device
        self.mrope = drafter.model.cfg.mrope_section is not None
        # The target's rotary positions of the prompt, [3, P] (multimodal rows) or [P]; later tokens continue them.
        rows = prefill.positions[1:, 0].to(self.device)
        self.prompt_positions = rows if self.mrope else rows[0]
        self.prompt_length = rows.shape[1]
        self.rope_delta = int(rows.max()) + 1 - self.prompt_length
        self.cache = KVCache()
        self.real = 0  # cache entries computed from the target's states (the slots of tokens 1..real)

    def _positions(self, indices: torch.Tensor) -> torch.Tensor:
        """The target's rotary positions of sequence indices: [1, n], or [3, 1, n] with M-RoPE."""
        inside = self.prompt_positions[..., indices.clamp(max=self.prompt_length - 1)]
        later = indices + self.rope_delta
        return torch.where(indices < self.prompt_length, inside, later).unsqueeze(-2)

    def _forward(self, tokens: list[int], states: torch.Tensor, state_indices: torch.Tensor,
                 mask: torch.Tensor | None) -> torch.Tensor:
        """Feed slots (token, state of position `state_indices`); returns their output states [n, H]."""
        ids = torch.tensor([tokens], device=self.device)
        out = self.drafter.model(ids, states.unsqueeze(0), self._positions(state_indices),
                                 None if mask is None else mask[None, None], self.cache)
        return out[0]

    @torch.no_grad()
    def propose(self, context: DraftContext, gamma: int) -> DraftProposal:
        ids = [*context.request.input_ids[0].tolist(), *context.generated]
        last = len(ids) - 1  # the newest committed token; the target's states cover positions < last
        self.cache.length = self.real
        # Catch up: the slots of tokens real+1..last, each reading the fused target state of the position before.
        before = torch.arange(self.real, last, device=self.device)
        states = self.drafter.model.fuse(context.features[self.real:last].to(self.device))  # a device map may differ
        # One new slot sees every cached entry: no mask, the cheapest attention call (most draft steps).
        causal = None if len(before) == 1 else \
            before.view(-1, 1) >= torch.arange(last, device=self.device).view(1, -1)
        out = self._forward(ids[self.real + 1:], states, before, causal)
        self.real = last  # the slot of token `last` is fed again next time, from the target's own state
        if self.drafter.tree is not None and context.sampling.greedy:
            return grow_tree(self, context, self.drafter.tree, last, out[-1:], gamma)
        return draft_chain(self, context, last, out[-1:], gamma)

    # The chain's and the tree's view of this run (core/drafters/state_drafting.py).
    @property
    def cache_length(self) -> int:
        return self.cache.length

    def logits(self, states: torch.Tensor) -> torch.Tensor:
        return self.drafter.model.logits(states)

    def token_ids(self, indices: torch.Tensor) -> torch.Tensor:
        return self.drafter.token_ids(indices)

    def to_vocab(self, probs: torch.Tensor) -> torch.Tensor:
        return self.drafter.to_vocab(probs)

    def feed(self, tokens: list[int], prev: torch.Tensor, position: int, mask: torch.Tensor | None) -> torch.Tensor:
        """Tokens at sequence index `position`, each after the state `prev` of its parent (at position - 1)."""
        return self._forward(tokens, prev, torch.full((len(tokens),), position - 1, device=self.device), mask)


class Eagle3Drafter:
    assistant_model = None  # no causal LM of its own: transformers' assisted generation cannot use it

    def __init__(self, model: Eagle3Model, target: VisionLanguageModel, name: str = "eagle3",
                 tree: TreeShape | None = None):
        self.model = model.eval()
        self.target = target
        self.name = name
        self.tree = tree  # None: chain drafting
        self.feature_layers = model.cfg.layer_ids  # the engine keeps these target states for it
        self.vocab_size = model.cfg.vocab_size
        self.draft_ids = model.draft_token_ids
        self.full_vocab = model.cfg.draft_vocab_size == model.cfg.vocab_size and bool((model.d2t == 0).all())

    @property
    def drafts_trees(self) -> bool:
        return self.tree is not None

    def token_ids(self, indices: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary indices -> token ids (d2t)."""
        return self.draft_ids[indices]

    def to_vocab(self, probs: torch.Tensor) -> torch.Tensor:
        """[n, K] -> [n, V] probabilities, zero for the tokens outside the draft vocabulary."""
        if self.full_vocab:
            return probs
        return probs.new_zeros(len(probs), self.vocab_size).index_copy_(1, self.draft_ids, probs)

    @classmethod
    def from_pretrained(cls, path: str | Path, target: VisionLanguageModel, name: str = "eagle3",
                        cache_dir: str | None = None) -> Eagle3Drafter:
        """A checkpoint in the speculators or the SpecForge format (core/drafters/eagle3/formats.py): a directory, or
        a hub repo id (read from `cache_dir`, the Hugging Face cache, when given)."""
        model = load_model(path, target, cache_dir)
        check_fits(model.cfg, target.text_config)
        return cls(model.to(target.device, target.model.dtype), target, name)

    def start(self, context: DraftContext, prefill: PrefillRecord) -> Eagle3DraftRun:
        return Eagle3DraftRun(self, prefill)
