"""The text-only drafter (the baseline): a small causal LM sharing the target's tokenizer that never sees the image.

    drafter = TextDrafter.from_pretrained("assets/models/text-drafter")
    engine.generate(image, prompt, drafter, gamma=4)       # core/decoding/engine.py
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, PreTrainedModel

from core.decoding.sampling import distribution, sample
from core.decoding.session import DraftContext, PrefillRecord
from core.drafters.base import CachedPrefix, DraftProposal, keep_drafting
from core.models.loading import LoadOptions


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
    def propose(self, context: DraftContext, gamma: int) -> DraftProposal:
        tokens, probs = [], []
        feed = self.prefix.pending([*self.prompt_ids, *context.generated])
        for _ in range(gamma):
            step = self.model if not self.prefix.held else context.fast.step(self.model)  # a prompt prefill stays eager
            logits = step(
                input_ids=torch.tensor([feed], device=self.model.device).clamp(max=self.last_id),
                cache=self.prefix.cache, use_cache=True,
            ).logits[0, -1:]
            self.prefix.held += feed
            q = distribution(logits, context.sampling)[0]
            token = sample(q, context.sampling, context.generator)
            tokens.append(token)
            probs.append(q)
            if not keep_drafting(context, token, q):
                break
            feed = [token]
        return DraftProposal(tokens, torch.stack(probs))


class TextDrafter:
    """A small causal LM sharing the target's tokenizer that never sees the image."""

    feature_layers = ()
    drafts_trees = False

    def __init__(self, model: PreTrainedModel, name: str = "text"):
        self.model = model.eval()
        self.name = name

    @property
    def assistant_model(self) -> PreTrainedModel:
        return self.model

    @classmethod
    def from_pretrained(cls, path: str | Path, name: str = "text", load: LoadOptions = LoadOptions()) -> TextDrafter:
        return cls(AutoModelForCausalLM.from_pretrained(path, **load.kwargs()), name)

    def start(self, context: DraftContext, prefill: PrefillRecord | None = None) -> TextDraftRun:
        return TextDraftRun(self.model, context.request.text_ids[0].tolist(), CachedPrefix(self.model, context))
