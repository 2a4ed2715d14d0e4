"""The target VLM: a transformers vision-language model plus its tokenizer and image processor.

Per-family differences (model class, image processor, placeholder token) live in one adapter table,
`VLM_FAMILIES`; everything else (prompt building, image encoding, 3-D rotary positions) is shared, so the
embedded Qwen2.5-VL and a hub `Qwen/Qwen2.5-VL-7B-Instruct` take the same path.

    python -m core.models.vlm assets/models/target     # loads a target and prints one prepared request's shapes
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from PIL import Image
from transformers import (
    AutoConfig,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    Qwen2_5_VLForConditionalGeneration,
    Qwen2VLForConditionalGeneration,
    Qwen2VLImageProcessorPil,
)
from transformers.models.qwen2_5_vl import modeling_qwen2_5_vl
from transformers.models.qwen2_vl import modeling_qwen2_vl

from core.models.loading import LoadOptions
from core.models.packed_linear import pack


@dataclass(frozen=True)
class VLMFamily:
    model_class: type[PreTrainedModel]
    image_processor_class: type
    apply_rotary: Callable  # (q, k, cos, sin) -> (q, k): the family's rotary embedding of the text layers
    image_token: str = "<|image_pad|>"
    video_token: str = "<|video_pad|>"
    packed_on_cpu: tuple[str, ...] = ("model.visual.merger.mlp.0",)  # core/models/packed_linear.py


# The PIL image processor: the default one needs torchvision, which CPU installs here do not have.
VLM_FAMILIES = {
    "qwen2_5_vl": VLMFamily(Qwen2_5_VLForConditionalGeneration, Qwen2VLImageProcessorPil,
                            modeling_qwen2_5_vl.apply_rotary_pos_emb),
    "qwen2_vl": VLMFamily(Qwen2VLForConditionalGeneration, Qwen2VLImageProcessorPil,
                          modeling_qwen2_vl.apply_rotary_pos_emb),
}


@dataclass
class Request:
    """One prompt, tokenised for the target, plus the text-only view drafters without eyes get."""

    input_ids: torch.Tensor  # [1, L] with the image placeholders expanded
    mm_token_type_ids: torch.Tensor  # [1, L]: 1 where an image feature goes
    pixel_values: torch.Tensor | None
    image_grid_thw: torch.Tensor | None
    text_ids: torch.Tensor  # [1, L'] the same prompt without the image

    @property
    def image_mask(self) -> torch.Tensor:
        return self.mm_token_type_ids[0].bool()


class VisionLanguageModel:
    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, image_processor):
        family = VLM_FAMILIES.get(model.config.model_type)
        if family is None:
            raise ValueError(
                f"unsupported VLM type {model.config.model_type!r}; supported: {sorted(VLM_FAMILIES)}"
            )
        self.family = family
        self.model = model.eval()
        for path in family.packed_on_cpu:
            pack(model, path)
        self.tokenizer = tokenizer
        self.image_processor = image_processor
        self.image_token_id = tokenizer.convert_tokens_to_ids(family.image_token)
        self.image_token = family.image_token
        self.eos_token_ids = _eos_ids(model, tokenizer)
        self.control_tokens = control_tokens(tokenizer, (family.image_token, family.video_token))

    @classmethod
    def from_pretrained(cls, path: str | Path, load: LoadOptions = LoadOptions(), **kwargs) -> VisionLanguageModel:
        """A local directory or a hub repo id; `load` says dtype, device_map and quantization (core/models/presets.py)."""
        config = AutoConfig.from_pretrained(path, **load.file_kwargs())
        family = VLM_FAMILIES.get(config.model_type)
        if family is None:
            raise ValueError(f"{path}: unsupported VLM type {config.model_type!r}; supported: {sorted(VLM_FAMILIES)}")
        model = family.model_class.from_pretrained(path, **load.kwargs() | kwargs)
        tokenizer = AutoTokenizer.from_pretrained(path, **load.file_kwargs())
        image_processor = family.image_processor_class.from_pretrained(path, **load.file_kwargs())
        return cls(model, tokenizer, image_processor)

    @property
    def device(self) -> torch.device:
        return self.model.device

    @property
    def text_config(self):
        return self.model.config.get_text_config()

    def prompt_text(self, prompt: str, with_image: bool) -> str:
        found = [token for token in self.control_tokens if token in prompt]
        if found:
            raise ValueError(f"The prompt contains {min(found, key=prompt.index)}, one of the model's control tokens "
                             "(they mark the image and the turns); remove it.")
        return chat_prompt(self.tokenizer, prompt, with_image)

    def image_prompt_text(self, prompt: str, image_grid_thw: torch.Tensor) -> str:
        """The chat prompt with the image placeholder repeated once per visual feature of that image: the one prompt
        path of inference (`prepare`) and training (core/training/batches.py). transformers' Qwen2_5_VLProcessor
        does this expansion too, but cannot be built without a video processor (which needs torchvision), and this
        line is all of it we would use."""
        n_features = int(image_grid_thw.prod()) // self.image_processor.merge_size**2
        return self.prompt_text(prompt, True).replace(self.image_token, self.image_token * n_features, 1)

    def prepare(self, image: Image.Image | None, prompt: str) -> Request:
        text_ids = self.tokenizer(self.prompt_text(prompt, False), return_tensors="pt")["input_ids"]
        if image is None:
            ids = text_ids
            return Request(ids, torch.zeros_like(ids), None, None, text_ids)
        pixels = self.pixels([image])
        grid = pixels["image_grid_thw"]
        ids = self.tokenizer(self.image_prompt_text(prompt, grid), return_tensors="pt")["input_ids"]
        mm = (ids == self.image_token_id).long()
        return Request(ids, mm, pixels["pixel_values"], grid, text_ids)

    def pixels(self, images: list[Image.Image]) -> dict:
        """The image processor's tensors for a list of images: the one way images enter the model, in training and
        inference. A config with `image_side` (the embedded target's) first resizes every image to that square, so
        its 3x3 visual tokens are the 3x3 regions a colour layout names, whatever the image's aspect ratio
        (core/world/describe.py resamples the same way); hub models keep the processor's aspect-preserving resize."""
        side = getattr(self.model.config, "image_side", None)
        return self.image_processor(images=[model_input(image, side) for image in images], return_tensors="pt")

    @torch.no_grad()
    def encode_image(self, request: Request):
        """The vision tower's output, computed once per request and reused by the target and image-aware drafters."""
        if request.pixel_values is None:
            return None
        return self.model.get_image_features(
            request.pixel_values.to(self.device), request.image_grid_thw.to(self.device), return_dict=True
        )

    def rope_positions(self, request: Request) -> tuple[torch.Tensor, int]:
        """3-D rotary positions of the prompt, [4, 1, L] (text positions first), and the offset for later tokens."""
        ids = request.input_ids
        text = torch.arange(ids.shape[1]).view(1, 1, -1)
        if request.image_grid_thw is None:
            return torch.cat([text, text.expand(3, 1, -1)]), 0
        mrope, delta = self.model.model.get_rope_index(
            ids, mm_token_type_ids=request.mm_token_type_ids, image_grid_thw=request.image_grid_thw
        )
        return torch.cat([text, mrope]), int(delta.view(-1)[0])


def model_input(image: Image.Image, side: int | None) -> Image.Image:
    """The image a target with `image_side` sees: RGB, resized to that square (BOX resampling). Every client that
    sends an image to a server of such a target sends this (core/serve/client.py), since a server's own processor
    keeps the aspect ratio and would see other pixels."""
    image = image.convert("RGB")
    return image.resize((side, side), Image.Resampling.BOX) if side else image


def last_layer_attention(vlm: VisionLanguageModel, hidden_states: tuple[torch.Tensor, ...], positions: torch.Tensor,
                         keys: torch.Tensor, first_query: int = 0) -> torch.Tensor:
    """[L - first_query, L] attention of the target's last layer (mean over heads) from the prompt's queries
    first_query.. to every position, recomputed from the layer's input (`hidden_states[-2]` of a forward with
    output_hidden_states) and its cached, already rotated keys [1, kv_heads, >= L, head_dim], so prefill can keep
    its fast attention kernel."""
    text = vlm.model.model.language_model
    layer = text.layers[-1]
    attn = layer.self_attn
    length = hidden_states[-2].shape[1]
    x = layer.input_layernorm(hidden_states[-2][:, first_query:])
    q = attn.q_proj(x).view(*x.shape[:2], -1, attn.head_dim).transpose(1, 2)
    cos, sin = text.rotary_emb(x, positions[1:, :, first_query:].to(x.device))
    q, _ = vlm.family.apply_rotary(q, q[:, :1], cos, sin)  # the keys come rotated from the cache
    keys = keys[:, :, :length].repeat_interleave(q.shape[1] // keys.shape[1], dim=1)
    scores = (q @ keys.transpose(-1, -2)).float() * attn.scaling
    future = torch.ones(length, length, dtype=torch.bool, device=scores.device).triu(1)[first_query:]
    return scores.masked_fill(future, float("-inf")).softmax(-1).mean(1)[0]


def chat_prompt(tokenizer: PreTrainedTokenizerBase, prompt: str, with_image: bool) -> str:
    """One user turn through the model's own chat template, ready for the assistant's answer."""
    content = ([{"type": "image"}] if with_image else []) + [{"type": "text", "text": prompt}]
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": content}], tokenize=False, add_generation_prompt=True
    )


def control_tokens(tokenizer: PreTrainedTokenizerBase, placeholders: tuple[str, ...]) -> tuple[str, ...]:
    """The special tokens a user's prompt may not carry: those the chat template itself writes around a user turn
    with an image (turn markers, the image's brackets and placeholder) and the family's placeholders. Tokenised with
    the template, "<|image_pad|>" would claim an image slot no feature fills and "<|im_end|><|im_start|>assistant"
    would forge a turn. Other special tokens (Qwen's grounding boxes, <|box_start|>) stay the user's to write."""
    turn = chat_prompt(tokenizer, "", True)
    return tuple(t.content for t in tokenizer.added_tokens_decoder.values()
                 if t.special and (t.content in turn or t.content in placeholders))


def visual_features(image_features) -> torch.Tensor | None:
    """The target vision tower's output for a request (`encode_image`) as one [n_visual_tokens, width] tensor."""
    if image_features is None:
        return None
    return torch.cat(image_features.pooler_output, dim=0)


def with_image_features(embeds: torch.Tensor, image_mask: torch.Tensor, features: torch.Tensor | None) -> torch.Tensor:
    """Input embeddings with `features` written into the image placeholder positions (None: embeds unchanged)."""
    if features is None:
        return embeds
    return embeds.masked_scatter(image_mask.unsqueeze(-1).to(embeds.device), features.to(embeds.dtype))


def decode_positions(start: int, offsets: int | torch.Tensor, rope_delta: int) -> torch.Tensor:
    """[4, 1, n] positions for tokens that follow the prompt: text position start + offset (offsets: n for a chain,
    0..n-1, or each tree node's depth), rotary position = text position + delta on all three M-RoPE axes."""
    offsets = torch.arange(offsets) if isinstance(offsets, int) else offsets
    text = (start + offsets).view(1, 1, -1)
    return torch.cat([text, (text + rope_delta).expand(3, 1, -1)])


def _eos_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> set[int]:
    ids = model.generation_config.eos_token_id if model.generation_config is not None else None
    ids = ids if isinstance(ids, list) else [ids]
    return {i for i in ids + [tokenizer.eos_token_id] if i is not None}


if __name__ == "__main__":
    from core.world import scenes

    vlm = VisionLanguageModel.from_pretrained(sys.argv[1] if len(sys.argv) > 1 else "assets/models/target")
    s = scenes.sample("heldout", 0)
    r = vlm.prepare(s.image, s.prompt)
    print(r.input_ids.shape, r.pixel_values.shape, r.image_grid_thw.tolist(), int(r.mm_token_type_ids.sum()))
