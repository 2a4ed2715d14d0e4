"""The fast path (core/decoding/fast_path.py) changes speed, never results: static caches (and, on a GPU, CUDA graphs) give
token-for-token the output of the plain eager path, for chains and trees, greedy and sampled.

    python -m pytest -q tests/test_fast_path.py
"""

from __future__ import annotations

import pytest
import torch

from core.decoding.engine import SpeculativeEngine
from core.decoding.fast_path import FastPath
from core.decoding.sampling import SamplingConfig
from core.decoding.tree import TreeShape
from core.drafters.dream import DreamDrafter
from core.world import scenes

STATIC = FastPath(static_cache=True, bucket=64)  # small buckets: caches are resized across the cases below


def _cases():
    return [(s.image, s.prompt) for s in scenes.samples("heldout", 2)] + [(None, "Describe the image.")]


def _drafters(tiny_text_drafter, tiny_dream, tiny_target):
    return {
        "text": tiny_text_drafter,
        "dream": tiny_dream,
        "dream-tree": DreamDrafter(tiny_dream.adapter, tiny_target, tree=TreeShape(top_k=3, total=10)),
    }


def test_auto_is_eager_on_cpu():
    assert FastPath.auto("cpu") == FastPath()
    assert FastPath.auto("cuda") == FastPath(static_cache=True, compile=True)


@pytest.mark.parametrize("name", ["none", "text", "dream", "dream-tree"])
def test_static_caches_give_the_eager_tokens(name, tiny_target, tiny_text_drafter, tiny_dream):
    drafter = None if name == "none" else _drafters(tiny_text_drafter, tiny_dream, tiny_target)[name]
    eager, fast = SpeculativeEngine(tiny_target, FastPath()), SpeculativeEngine(tiny_target, STATIC)
    for image, prompt in _cases():
        reference = eager.generate(image, prompt, drafter, gamma=3, max_new_tokens=20)
        result = fast.generate(image, prompt, drafter, gamma=3, max_new_tokens=20)
        assert result.token_ids == reference.token_ids
        assert [r.accepted for r in result.rounds] == [r.accepted for r in reference.rounds]


def test_static_caches_keep_sampling_identical(tiny_target, tiny_text_drafter):
    eager, fast = SpeculativeEngine(tiny_target, FastPath()), SpeculativeEngine(tiny_target, STATIC)
    s = scenes.sample("heldout", 4)
    cfg = SamplingConfig(temperature=1.0, top_p=0.9)
    reference = eager.generate(s.image, s.prompt, tiny_text_drafter, sampling=cfg, seed=3, max_new_tokens=24)
    assert fast.generate(s.image, s.prompt, tiny_text_drafter, sampling=cfg, seed=3,
                         max_new_tokens=24).token_ids == reference.token_ids


def test_a_static_cache_is_sized_in_whole_buckets(tiny_target):
    cache = STATIC.new_cache(tiny_target.model, 65)
    assert cache.layers[0].max_cache_len == 128


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
def test_cuda_graphs_give_the_eager_tokens(tiny_target_dir, tiny_text_drafter_dir):
    from core.drafters.text import TextDrafter
    from core.models.vlm import VisionLanguageModel

    target = VisionLanguageModel.from_pretrained(tiny_target_dir)
    target.model.to("cuda")
    drafter = TextDrafter.from_pretrained(tiny_text_drafter_dir)
    drafter.model.to("cuda")
    s = scenes.sample("heldout", 1)
    reference = SpeculativeEngine(target, FastPath()).generate(s.image, s.prompt, drafter, max_new_tokens=24)
    graphs = SpeculativeEngine(target, FastPath.auto("cuda"))
    for _ in range(2):  # the second run replays the recorded graphs
        assert graphs.generate(s.image, s.prompt, drafter, max_new_tokens=24).token_ids == reference.token_ids
