"""MASSV drafter (arXiv 2505.10526): a small LM that sees the image through the target's own vision encoder.

    drafter = MassvDrafter.from_pretrained("assets/models/massv")      # LM + projector
    engine.generate(image, prompt, drafter)

The small LM (initialised from the text-only drafter) gets a trainable projector, a 2-layer MLP with GELU, from
the width of the target's visual features (`vision_config.out_hidden_size`) to its own hidden size. At inference
the features the target already computed for the request (`DraftContext.image_features`) are reused: no second vision
pass. The projected features replace the LM's embeddings at the image placeholder positions of the same prompt
the target sees. Training (two phases) is in core/training/massv.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import AutoModelForCausalLM, PreTrainedModel

from core.decoding.session import DraftContext, PrefillRecord
from core.decoding.tree import TreeShape
from core.drafters.base import CachedPrefix
from core.drafters.text import TextDraftRun
from core.models.loading import LoadOptions, save_bf16
from core.models.vlm import visual_features, with_image_features

PROJECTOR_FILE = "projector.safetensors"
MASSV_CONFIG = "massv_config.json"


class Projector(nn.Sequential):
    def __init__(self, vision_width: int, hidden: int):
        super().__init__(nn.Linear(vision_width, hidden), nn.GELU(), nn.Linear(hidden, hidden))


def multimodal_embeds(lm: PreTrainedModel, projector: Projector, input_ids: torch.Tensor,
                      image_mask: torch.Tensor, features: torch.Tensor | None) -> torch.Tensor:
    """The LM's token embeddings with the projected visual features at the image placeholder positions."""
    embeds = lm.get_input_embeddings()(input_ids)
    projected = None if features is None else projector(features.to(embeds.dtype))
    return with_image_features(embeds, image_mask, projected)


class MassvDrafter:
    feature_layers = ()

    def __init__(self, lm: PreTrainedModel, projector: Projector, name: str = "massv", tree: TreeShape | None = None):
        self.model = lm.eval()
        self.projector = projector.eval()
        self.name = name
        self.tree = tree  # None: chain drafting (core/drafters/text.py drafts either)

    @property
    def drafts_trees(self) -> bool:
        return self.tree is not None

    @property
    def assistant_model(self) -> PreTrainedModel:
        """Its LM alone (no image): what transformers' assisted generation would be handed."""
        return self.model

    @classmethod
    def from_text_drafter(cls, lm: PreTrainedModel, vision_width: int, name: str = "massv") -> MassvDrafter:
        return cls(lm, Projector(vision_width, lm.config.hidden_size), name)

    @classmethod
    def from_pretrained(cls, path: str | Path, name: str = "massv", load: LoadOptions = LoadOptions()) -> MassvDrafter:
        """A directory written by save_pretrained (the LM is a normal HF model, the projector beside it)."""
        path = Path(path)
        config = json.loads((path / MASSV_CONFIG).read_text())
        lm = AutoModelForCausalLM.from_pretrained(path, **load.kwargs())
        projector = Projector(config["vision_width"], lm.config.hidden_size)
        projector.load_state_dict(load_file(path / PROJECTOR_FILE))
        return cls(lm, projector.to(lm.device, lm.dtype), name)

    def save_pretrained(self, path: str | Path, metadata: dict | None = None) -> None:
        path = Path(path)
        save_bf16(self.model, path)
        save_file({k: v.to(torch.bfloat16).contiguous() for k, v in self.projector.state_dict().items()},
                  path / PROJECTOR_FILE)
        vision_width = self.projector[0].in_features
        (path / MASSV_CONFIG).write_text(json.dumps({"vision_width": vision_width, **(metadata or {})}, indent=1))

    @torch.no_grad()
    def start(self, context: DraftContext, prefill: PrefillRecord | None = None) -> TextDraftRun:
        """Prefill the prompt (image features included) once; later tokens go through the plain token path."""
        request = context.request
        ids = request.input_ids.to(self.model.device)
        prefix = CachedPrefix(self.model, context)
        embeds = multimodal_embeds(self.model, self.projector, ids[:, :-1], request.image_mask[:-1].unsqueeze(0),
                                   visual_features(context.image_features))
        self.model(inputs_embeds=embeds, cache=prefix.cache, use_cache=True)
        prompt_ids = ids[0].tolist()
        prefix.held = prompt_ids[:-1]
        return TextDraftRun(self.model, prompt_ids, prefix, self.tree)
