"""The embedded default models: their configs, where they live, and how a fresh (untrained) one is built.

These are real transformers architectures at toy size, trained by `python -m core train ...` on the
procedural world (core/world/scenes.py) and committed under assets/models/ so the app runs with no hub access.

    python -m core.models.embedded        # builds fresh models and prints parameter counts and per-token latency
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import (
    Qwen2_5_VLConfig,
    Qwen2_5_VLForConditionalGeneration,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen2VLImageProcessorPil,
)

from core.models.loading import save_bf16
from core.models.tokenizer import train_tokenizer
from core.models.vlm import VisionLanguageModel

ASSETS = Path(__file__).resolve().parents[2] / "assets" / "models"
EMBEDDED_PATHS = {
    "target": ASSETS / "target",
    "text": ASSETS / "text-drafter",
    "massv-phase1": ASSETS / "massv-phase1",
    "massv": ASSETS / "massv",
    "dream": ASSETS / "dream",
    "eagle3": ASSETS / "eagle3",
}


def shipped_output(out: str, name: str, target: str, own_data: bool) -> str:
    """Where a drafter training run writes: `out`, or by default the shipped drafter `name`'s directory, which only
    a retraining of that drafter (the embedded target, the world's data) may replace."""
    if not out and (own_data or Path(target).resolve() != EMBEDDED_PATHS["target"]):
        raise ValueError("--out is required with your own data or target (the default is the shipped drafter)")
    return out or str(EMBEDDED_PATHS[name])


@dataclass
class TargetSize:
    """A fresh target's sizes (`train target` without --init). Its tower is target run 16's; the shipped target's,
    since run 23, is `fine_tower()` of core/training/tower.py (8-pixel patches merged 8x8, 6 blocks x 64), which
    `train tower` grows beside a trained language model; `target_size` reads any saved target's sizes back."""

    hidden: int = 192
    layers: int = 12
    heads: int = 6
    kv_heads: int = 2
    intermediate: int = 768
    vision_hidden: int = 128
    vision_depth: int = 2
    vision_heads: int = 4
    # Every image is seen as a 192x192 square in 32-pixel patches: still 3x3 merged visual tokens (the 3x3 regions a
    # colour layout names), but a line of text or a sign's words gets four times the pixels of the 96x96 / 16-pixel
    # tower of target runs 1-15, which could not tell them from a photograph's edges.
    side: int = 192
    patch: int = 32
    # Patches merged merge x merge into one visual token (side / patch / merge = 3), and the pixels of the window the
    # tower's blocks before the last attend within (0: the whole square). A tower of 8-pixel patches merged 8x8 with
    # windows of one region learns where text is far better than 32-pixel patches (docs/experiments.md, "which
    # vision tower can see a sign?").
    merge: int = 2
    window: int = 0
    # Standard theta: its slow rotary dimensions are what lets attention match content at any distance. With only
    # 3x3 visual tokens, rotary positions barely tell columns apart (one column step turns the width section by
    # <= 0.003 rad), so the visual tokens carry their cell in their content instead (VisionProbe in train_target).
    rope_theta: float = 10000.0


@dataclass
class DrafterSize:
    hidden: int = 192
    layers: int = 1
    heads: int = 6
    kv_heads: int = 2
    intermediate: int = 768


def target_size(config: Qwen2_5_VLConfig) -> TargetSize:
    """The TargetSize a target was built with, read back from its config (what new_target and vision_fields wrote)."""
    text, vision = config.text_config, config.vision_config
    side = config.image_side
    return TargetSize(hidden=text.hidden_size, layers=text.num_hidden_layers, heads=text.num_attention_heads,
                      kv_heads=text.num_key_value_heads, intermediate=text.intermediate_size,
                      vision_hidden=vision.hidden_size, vision_depth=vision.depth, vision_heads=vision.num_heads,
                      side=side, patch=vision.patch_size, merge=vision.spatial_merge_size,
                      window=0 if vision.window_size >= side * 2 else vision.window_size,
                      rope_theta=text.rope_parameters["rope_theta"])


def image_processor(size: TargetSize = TargetSize()) -> Qwen2VLImageProcessorPil:
    # One square of side x side pixels: 9 visual tokens, so requests stay cheap on a CPU.
    pixels = size.side * size.side
    return Qwen2VLImageProcessorPil(
        patch_size=size.patch, temporal_patch_size=2, merge_size=size.merge,
        size={"shortest_edge": pixels, "longest_edge": pixels},
    )


def _mrope_section(head_dim: int) -> list[int]:
    half = head_dim // 2  # the three sections (time, height, width) must cover head_dim / 2
    t = half // 4
    h = (half - t) // 2
    return [t, h, half - t - h]


def _decoder_fields(tokenizer, size: TargetSize | DrafterSize) -> dict:
    """The config fields the target's language model and the text drafter share (both a Qwen2 decoder)."""
    return dict(vocab_size=len(tokenizer), hidden_size=size.hidden, num_hidden_layers=size.layers,
                num_attention_heads=size.heads, num_key_value_heads=size.kv_heads, intermediate_size=size.intermediate,
                max_position_embeddings=4096, tie_word_embeddings=True, bos_token_id=None,
                eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)


def vision_fields(size: TargetSize) -> dict:
    """The vision tower's config fields (Qwen2_5_VLVisionConfig's) for a target of `size`."""
    return dict(
        depth=size.vision_depth,
        hidden_size=size.vision_hidden,
        intermediate_size=size.vision_hidden * 2,
        num_heads=size.vision_heads,
        out_hidden_size=size.hidden,
        patch_size=size.patch,
        spatial_merge_size=size.merge,
        window_size=size.window or size.side * 2,  # 0: one window holds the whole image
        fullatt_block_indexes=[size.vision_depth - 1],
    )


def new_target(size: TargetSize = TargetSize(), tokenizer=None) -> VisionLanguageModel:
    tokenizer = tokenizer or train_tokenizer()
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")}
    head_dim = size.hidden // size.heads
    config = Qwen2_5_VLConfig(
        text_config=dict(
            _decoder_fields(tokenizer, size),
            rope_parameters={"rope_type": "default", "rope_theta": size.rope_theta, "mrope_section": _mrope_section(head_dim)},
        ),
        vision_config=vision_fields(size),
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=True,
        image_side=size.side,  # VisionLanguageModel.pixels: every image as a square, its 3x3 tokens the regions
    )
    model = Qwen2_5_VLForConditionalGeneration(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return VisionLanguageModel(model, tokenizer, image_processor(size))


@torch.no_grad()
def resized_target(vlm: VisionLanguageModel, size: TargetSize = TargetSize()) -> VisionLanguageModel:
    """A target of another (side, patch) that answers as `vlm` does: the patch embedding grows by nearest
    upsampling divided by the area ratio, so a 32-pixel patch of a 2x-upscaled image gives exactly the 16-pixel
    patch's embedding, and the 2x2 means of a 192x192 BOX resize are the 96x96 one up to rounding. Every other
    weight is copied."""
    vision = vlm.model.config.vision_config
    patch, side = vision.patch_size, vlm.model.config.image_side
    if (patch, side) == (size.patch, size.side):
        return vlm
    scale = size.patch // patch
    if scale * patch != size.patch or side * scale != size.side or vision.spatial_merge_size != size.merge:
        raise ValueError(f"cannot resize a tower of {patch}-pixel patches merged {vision.spatial_merge_size}x"
                         f"{vision.spatial_merge_size} on {side}x{side} to {size.patch}-pixel patches merged "
                         f"{size.merge}x{size.merge} on {size.side}x{size.side}: the patch grid and merge must stay "
                         "the same")
    resized = new_target(size, vlm.tokenizer)
    state = vlm.model.state_dict()
    key = next(k for k in state if k.endswith("patch_embed.proj.weight"))
    state[key] = state[key].repeat_interleave(scale, -1).repeat_interleave(scale, -2) / scale**2
    resized.model.load_state_dict(state)
    resized.model.generation_config = vlm.model.generation_config
    return resized


def new_text_drafter(tokenizer, size: DrafterSize = DrafterSize()) -> Qwen2ForCausalLM:
    return Qwen2ForCausalLM(Qwen2Config(**_decoder_fields(tokenizer, size)))


def save_vlm(vlm: VisionLanguageModel, path: Path) -> None:
    """A normal HF directory (config, bf16 safetensors, tokenizer, image processor)."""
    path.mkdir(parents=True, exist_ok=True)
    save_bf16(vlm.model, path)
    vlm.tokenizer.save_pretrained(path)
    vlm.image_processor.save_pretrained(path)


@torch.no_grad()
def decode_step_ms(model, n: int = 30, **extra) -> float:
    """Median wall time of one cached single-token forward: what a decode step costs."""
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    model(input_ids=torch.randint(0, 100, (1, 32)), cache=cache, use_cache=True, **extra)
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        model(input_ids=torch.randint(0, 100, (1, 1)), cache=cache, use_cache=True)
        times.append(time.perf_counter() - t0)
        cache.crop(-1)
    return sorted(times)[n // 2] * 1e3


if __name__ == "__main__":
    target = new_target()
    drafter = new_text_drafter(target.tokenizer)
    for name, m in (("target", target.model), ("text drafter", drafter)):
        print(f"{name}: {sum(p.numel() for p in m.parameters()) / 1e6:.2f}M params, {decode_step_ms(m):.2f} ms/token")
