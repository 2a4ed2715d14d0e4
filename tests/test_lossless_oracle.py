"""Greedy speculative decoding against an oracle outside the engine: transformers' own `model.generate(...,
do_sample=False)` on the same target model and the same (image, prompt). The engine's prefill, 3-D rotary
positions, KV-cache rollback, tree verification and commit are all its own code; generate shares none of them, so
a bug common to the engine with and without a drafter (which tests comparing the two cannot see) fails here.

Every drafter of the embedded target (text, MASSV, MASSV phase 1, DREAM, EAGLE-3; chains and EAGLE-2 trees) runs on
world images (caption, vqa, ocr, chart) and on images from outside the world: a natural photograph (scikit-image),
uniform noise and rendered text; gamma 4 and 8; eager and static KV caches. Last, a tiny random target built from a
config, with random drafters.

    OMP_NUM_THREADS=1 python -m pytest -q tests/test_lossless_oracle.py
"""

from __future__ import annotations

import copy
from functools import cache

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw

from core.decoding.engine import SpeculativeEngine
from core.decoding.fast_path import FastPath
from core.decoding.tree import TreeShape, is_chain
from core.drafters.dream import DreamDrafter
from core.drafters.eagle3.drafter import Eagle3Drafter
from core.drafters.text import TextDrafter
from core.models.registry import DRAFTERS, load_drafter, load_target
from core.world import scenes

# The trained target ends its answers within ~42 tokens, so to compare at least 48 the long runs ignore EOS on both
# sides (the engine: a target whose eos set is empty; generate: eos_token_id=None); test_stopping_at_eos_* keep it.
N_NEW = 48
SPECS = [*DRAFTERS, "text:tree=4x16", "massv:tree=4x16", "dream:tree=4x16", "eagle3:tree=4x16"]  # and their trees


def _photo() -> tuple[Image.Image, str]:
    data = pytest.importorskip("skimage.data", reason="scikit-image is not installed: no natural photograph here")
    return Image.fromarray(data.astronaut()), "Describe the image."


def _noise() -> tuple[Image.Image, str]:
    pixels = np.random.default_rng(1234).integers(0, 256, (112, 144, 3), dtype=np.uint8)
    return Image.fromarray(pixels), "Describe the image."


def _rendered_text() -> tuple[Image.Image, str]:
    image = Image.new("RGB", (200, 100), "white")
    draw = ImageDraw.Draw(image)
    draw.text((10, 10), "SPECULATIVE DECODING", fill="black")
    draw.text((10, 40), "lossless? 2 + 2 = 4", fill=(200, 0, 0))
    draw.rectangle((8, 70, 120, 90), outline="blue", width=2)
    return image, "What does the text say?"


def _world(task: str, index: int):
    def make() -> tuple[Image.Image, str]:
        sample = scenes.sample("heldout", index, task)
        return sample.image, sample.prompt
    return make


IMAGES = {
    "world-caption": _world("caption", 9),
    "world-vqa": _world("vqa", 1),
    "world-ocr": _world("ocr", 2),
    "world-chart": _world("chart", 3),
    "photo": _photo,
    "noise": _noise,
    "text": _rendered_text,
}


@cache
def _input(name: str) -> tuple[Image.Image, str]:
    return IMAGES[name]()


def hf_inputs(target, image: Image.Image | None, prompt: str) -> dict:
    """What transformers' Qwen2.5-VL needs, built here from the tokenizer and image processor (the chat template, one
    <|image_pad|> per merged patch), not by the engine's `prepare`."""
    content = ([{"type": "image"}] if image is not None else []) + [{"type": "text", "text": prompt}]
    text = target.tokenizer.apply_chat_template([{"role": "user", "content": content}], tokenize=False,
                                                add_generation_prompt=True)
    inputs = {}
    if image is not None:
        image = image.convert("RGB")
        side = getattr(target.model.config, "image_side", None)
        if side:  # the embedded target's config says it sees every image as this square (hub models do not)
            image = image.resize((side, side), Image.Resampling.BOX)
        pixels = target.image_processor(images=[image], return_tensors="pt")
        n = int(pixels["image_grid_thw"].prod()) // target.image_processor.merge_size ** 2
        text = text.replace("<|image_pad|>", "<|image_pad|>" * n, 1)
        inputs = {"pixel_values": pixels["pixel_values"], "image_grid_thw": pixels["image_grid_thw"]}
    ids = target.tokenizer(text, return_tensors="pt")["input_ids"]
    # As Qwen2.5-VL's processor returns it. Without it transformers (5.x) silently gives the image 1-D text
    # positions instead of its 3-D rotary ones, and answers differently: an oracle that would be wrong, not the engine.
    if image is not None:
        inputs["mm_token_type_ids"] = (ids == target.model.config.image_token_id).long()
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), **inputs}


@torch.no_grad()
def hf_greedy(target, image, prompt: str, max_new_tokens: int, stop_at_eos: bool) -> list[int]:
    inputs = hf_inputs(target, image, prompt)
    # The engine stops after any id of target.eos_token_ids, and only there and at the budget: generate likewise.
    eos = sorted(target.eos_token_ids) if stop_at_eos else None
    out = target.model.generate(**inputs, do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=eos,
                                pad_token_id=target.model.generation_config.pad_token_id)
    return out[0, inputs["input_ids"].shape[1]:].tolist()


def without_eos(target):
    """The same model, tokenizer and processor, with nothing to stop at: the engine then runs to its budget."""
    endless = copy.copy(target)
    endless.eos_token_ids = set()
    return endless


@pytest.fixture(scope="module")
def target():
    return load_target("embedded")


@pytest.fixture(scope="module")
def reference(target):
    """name -> generate's first N_NEW greedy tokens with EOS ignored, computed once per image for every drafter."""
    return cache(lambda name: hf_greedy(target, *_input(name), N_NEW, stop_at_eos=False))


def test_the_oracle_inputs_are_the_engines_request(target):
    """Both sides read the same tokens and pixels (else a mismatch below would say nothing about decoding)."""
    for name in ("world-ocr", "text"):
        image, prompt = _input(name)
        request, inputs = target.prepare(image, prompt), hf_inputs(target, image, prompt)
        assert torch.equal(request.input_ids, inputs["input_ids"])
        assert torch.equal(request.pixel_values, inputs["pixel_values"])
        assert torch.equal(request.image_grid_thw, inputs["image_grid_thw"])
        assert torch.equal(request.mm_token_type_ids, inputs["mm_token_type_ids"])


CASES = [(spec, name, (4, 8)[(i + j) % 2]) for i, spec in enumerate(SPECS) for j, name in enumerate(IMAGES)]


@pytest.mark.parametrize("spec, name, gamma", CASES)
def test_greedy_speculation_equals_transformers_generate(target, reference, spec, name, gamma):
    image, prompt = _input(name)
    drafter = load_drafter(spec)
    out = SpeculativeEngine(without_eos(target)).generate(image, prompt, drafter, gamma=gamma, max_new_tokens=N_NEW)
    expected = reference(name)
    assert len(expected) == N_NEW
    assert out.token_ids == expected, _first_difference(out.token_ids, expected)
    assert sum(r.accepted for r in out.rounds) > 0  # drafts were accepted: multi-token commits, not only corrections
    if "tree" in spec:
        assert any(r.parents is not None and not is_chain(r.parents) for r in out.rounds)  # trees were verified


@pytest.mark.parametrize("spec", ["text", "massv", "massv:tree=4x16", "dream:tree=4x16", "eagle3"])
def test_static_cache_equals_transformers_generate(target, reference, spec):
    """The GPU fast path's static KV cache (its crop, and the padded tree mask), run eagerly on CPU."""
    image, prompt = _input("world-caption")
    engine = SpeculativeEngine(without_eos(target), FastPath(static_cache=True, bucket=128))
    out = engine.generate(image, prompt, load_drafter(spec), gamma=8, max_new_tokens=N_NEW)
    assert out.token_ids == reference("world-caption"), _first_difference(out.token_ids, reference("world-caption"))


# Answers of 42, 21, 32 and 4 tokens, each ended by EOS well inside the budget.
STOPPING = [("massv", "world-caption", 4), ("dream", "noise", 8), ("dream:tree=4x16", "photo", 8),
            ("text", "world-ocr", 8)]


@pytest.mark.parametrize("spec, name, gamma", STOPPING)
def test_stopping_at_eos_matches_transformers_generate(target, spec, name, gamma):
    """With EOS on, both sides stop after the same token: the engine commits the EOS and nothing drafted past it."""
    image, prompt = _input(name)
    budget = 128  # a layout of a photograph can run past 64 tokens
    expected = hf_greedy(target, image, prompt, budget, stop_at_eos=True)
    out = SpeculativeEngine(target).generate(image, prompt, load_drafter(spec), gamma=gamma, max_new_tokens=budget)
    assert out.token_ids == expected, _first_difference(out.token_ids, expected)
    assert expected[-1] in target.eos_token_ids and len(expected) < budget  # it stopped at EOS, not the budget


def test_tiny_random_target_equals_transformers_generate(tiny_target, tiny_text_drafter, twin_drafter, tiny_dream,
                                                         tiny_eagle3):
    """A target built from a config with random weights (tests/conftest.py), random and twin drafters, DREAM and
    EAGLE-3 trees: nothing here was trained, so agreement cannot come from the models being predictable."""
    sample = scenes.sample("heldout", 4, "caption")
    tree = DreamDrafter(tiny_dream.adapter, tiny_target, "tiny-dream-tree", tree=TreeShape(4, 16))
    eagle3_tree = Eagle3Drafter(tiny_eagle3.model, tiny_target, "tiny-eagle3-tree", tree=TreeShape(4, 16))
    twin_tree = TextDrafter(twin_drafter.model, "twin-tree", tree=TreeShape(4, 16))
    engine = SpeculativeEngine(without_eos(tiny_target))
    for image, prompt in ((sample.image, sample.prompt), (None, "Describe the image.")):
        expected = hf_greedy(tiny_target, image, prompt, N_NEW, stop_at_eos=False)
        for drafter, gamma in ((tiny_text_drafter, 4), (twin_drafter, 8), (twin_tree, 8), (tiny_dream, 4), (tree, 8),
                               (tiny_eagle3, 4), (eagle3_tree, 8)):
            out = engine.generate(image, prompt, drafter, gamma=gamma, max_new_tokens=N_NEW)
            assert out.token_ids == expected, (drafter.name, image is None, _first_difference(out.token_ids, expected))


def _first_difference(got: list[int], want: list[int]) -> str:
    i = next((k for k, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    return f"first difference at new token {i}: engine {got[i:i + 4]}, generate {want[i:i + 4]} " \
           f"(lengths {len(got)} and {len(want)})"
