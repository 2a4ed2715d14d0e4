"""The text-only drafter (the baseline): a small causal LM sharing the target's tokenizer that never sees the image.

    drafter = TextDrafter.from_pretrained("assets/models/text-drafter")
    engine.generate(image, prompt, drafter, gamma=4)       # core/decoding/engine.py

`TextDraftRun` drafts with any causal LM over token ids (MASSV's too, once its prompt is prefilled): a chain, or with
a `tree` shape (greedy decoding) an EAGLE-2 dynamic tree (core/drafters/state_drafting.py), each level's nodes fed
in one forward under a tree attention mask; its state is the LM's next-token logits.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, PreTrainedModel

from core.decoding.fast_path import key_length
from core.decoding.sampling import distribution, sample
from core.decoding.session import DraftContext, PrefillRecord
from core.decoding.tree import TreeShape
from core.drafters.base import CachedPrefix, DraftProposal, keep_drafting
from core.drafters.state_drafting import grow_tree
from core.models.loading import LoadOptions


class TextDraftRun:
    """Drafting with a causal LM over token ids; `prefix` may arrive already holding a prefilled prompt."""

    def __init__(self, model: PreTrainedModel, prompt_ids: list[int], prefix: CachedPrefix,
                 tree: TreeShape | None = None):
        self.model = model
        self.prompt_ids = prompt_ids
        self.prefix = prefix
        self.tree = tree  # None: chain drafting
        # The target may commit ids past the drafter's rows (Qwen2.5-VL-7B has 128 more padding rows than
        # Qwen2.5-1.5B; random weights emit them). The drafter reads such an id as its last row: only its proposals
        # can suffer, verification stays lossless.
        self.last_id = model.get_input_embeddings().num_embeddings - 1

    @torch.no_grad()
    def propose(self, context: DraftContext, gamma: int) -> DraftProposal:
        sequence = [*self.prompt_ids, *context.generated]
        if self.tree is not None and context.sampling.greedy:
            return self._tree(context, sequence, gamma)
        tokens, probs = [], []
        feed = self.prefix.pending(sequence)
        for _ in range(gamma):
            step = self.model if not self.prefix.held else context.fast.step(self.model)  # a prompt prefill stays eager
            logits = step(input_ids=self._ids(feed), cache=self.prefix.cache, use_cache=True).logits[0, -1:]
            self.prefix.held += feed
            q = distribution(logits, context.sampling)[0]
            token = sample(q, context.sampling, context.generator)
            tokens.append(token)
            probs.append(q)
            if not keep_drafting(context, token, q):
                break
            feed = [token]
        return DraftProposal(tokens, torch.stack(probs))

    def _tree(self, context: DraftContext, sequence: list[int], depth: int) -> DraftProposal:
        """Catch the cache up on the committed sequence, grow the tree from there, then drop its nodes' entries."""
        feed = self.prefix.pending(sequence)
        root = self.model(input_ids=self._ids(feed), cache=self.prefix.cache, use_cache=True).logits[0, -1:]
        self.prefix.held += feed
        proposal = grow_tree(self, context, self.tree, len(sequence) - 1, root, depth)
        self.prefix.cache.crop(len(self.prefix.held) - self.cache_length)
        return proposal

    def _ids(self, tokens: list[int]) -> torch.Tensor:
        return torch.tensor([tokens], device=self.model.device).clamp(max=self.last_id)

    # The tree's view of this run (core/drafters/state_drafting.py): a node's state is its next-token logits.
    @property
    def cache_length(self) -> int:
        return int(self.prefix.cache.get_seq_length())

    def logits(self, states: torch.Tensor) -> torch.Tensor:
        return states

    def token_ids(self, indices: torch.Tensor) -> torch.Tensor:
        return indices

    def to_vocab(self, probs: torch.Tensor) -> torch.Tensor:
        return probs

    def feed(self, tokens: list[int], prev: torch.Tensor, position: int, mask: torch.Tensor | None) -> torch.Tensor:
        """Tokens at sequence index `position` (a causal LM's rotary position), each seeing the cache entries `mask`
        allows (None: all of them); the parents' states are in the cache already."""
        positions = torch.full((1, len(tokens)), position, device=self.model.device)
        width = key_length(self.prefix.cache)  # a static cache shows attention all its slots
        if mask is not None and width is not None:
            mask = torch.nn.functional.pad(mask, (0, width - mask.shape[-1]), value=False)
        # A 4D mask reaches every layer as it is, whatever the architecture (transformers' masking_utils).
        return self.model(input_ids=self._ids(tokens), position_ids=positions, cache=self.prefix.cache, use_cache=True,
                          attention_mask=None if mask is None else mask[None, None]).logits[0]


class TextDrafter:
    """A small causal LM sharing the target's tokenizer that never sees the image."""

    feature_layers = ()

    def __init__(self, model: PreTrainedModel, name: str = "text", tree: TreeShape | None = None):
        self.model = model.eval()
        self.name = name
        self.tree = tree  # None: chain drafting

    @property
    def drafts_trees(self) -> bool:
        return self.tree is not None

    @property
    def assistant_model(self) -> PreTrainedModel:
        return self.model

    @classmethod
    def from_pretrained(cls, path: str | Path, name: str = "text", load: LoadOptions = LoadOptions()) -> TextDrafter:
        return cls(AutoModelForCausalLM.from_pretrained(path, **load.kwargs()), name)

    def start(self, context: DraftContext, prefill: PrefillRecord | None = None) -> TextDraftRun:
        return TextDraftRun(self.model, context.request.text_ids[0].tolist(), CachedPrefix(self.model, context),
                            self.tree)
