"""Every MoE family in the adapter table: score, prune, save, reload with plain transformers, live mask.

    OMP_NUM_THREADS=1 python -m pytest tests/test_reap_arch.py -q
"""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from core.reap.adapters import ADAPTERS
from core.reap.checkpoint import save_reduced, slice_experts
from core.reap.prune import LiveMask, experts_to_keep
from core.reap.scores import ScoreConfig, score
from core.reap.tiny import TINY, tiny_model


def test_every_adapter_has_a_tiny_config():
    assert set(TINY) == set(ADAPTERS)


@pytest.fixture(scope="module")
def ids():
    return torch.randint(0, 128, (4, 24), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("model_type", sorted(TINY))
def test_score_prune_reload_mask(model_type, ids, tmp_path):
    model = tiny_model(model_type)
    with torch.no_grad():
        reference = model(input_ids=ids).logits
    result, cache = score(model, ids, ScoreConfig(sample_tokens=16))
    assert len(result["scores"]["reap"][0]) == 8
    assert sum(result["routing"]["frequency"][0]) == pytest.approx(1.0)
    with torch.no_grad():  # observing must not change what the model computes
        assert torch.allclose(model(input_ids=ids).logits, reference)

    kept_all = experts_to_keep(result["scores"]["reap"], 0.0, 2)
    assert kept_all == [list(range(8))] * len(kept_all)
    full = AutoModelForCausalLM.from_config(model.config).eval()
    full.load_state_dict(model.state_dict())
    slice_experts(full, kept_all)
    with torch.no_grad():
        assert torch.equal(full(input_ids=ids).logits, reference)  # ratio 0 changes nothing

    kept = experts_to_keep(result["scores"]["reap"], 0.5, 2)
    mask = LiveMask(model)
    mask.set(kept)
    with torch.no_grad():
        masked = model(input_ids=ids).logits
    mask.clear()
    slice_experts(model, kept)
    with torch.no_grad():
        sliced = model(input_ids=ids).logits
    torch.testing.assert_close(masked, sliced, atol=1e-5, rtol=1e-4)  # preview == real prune
    assert not torch.allclose(sliced, reference, atol=1e-4)  # and pruning half the experts did something

    out = save_reduced(model, None, tmp_path / "pruned", {"method": "reap", "ratio": 0.5, "source_model": "tiny",
                       "calibration": "random", "calibration_tokens": 96, "experts_before": 8, "experts_after": 4,
                       "top_k": 2, "kept_experts": kept})
    reloaded = AutoModelForCausalLM.from_pretrained(out).eval()
    assert getattr(reloaded.config, ADAPTERS[model_type].experts_key) == 4
    with torch.no_grad():
        torch.testing.assert_close(reloaded(input_ids=ids).logits, sliced)
    assert {p.name for p in out.iterdir()} >= {"config.json", "recipe.yaml", "README.md", "model.safetensors"}


@pytest.mark.parametrize("model_type,overrides", [(t, {}) for t in sorted(TINY)] + [("gpt_oss", {"sliding_window": 8})])
def test_layerwise_scoring_equals_whole_model(model_type, overrides, ids):
    """`--layerwise DEVICE` replays each decoder layer on what the model passed it (masks per layer type, rotary
    embeddings) chunk by chunk; here DEVICE is the CPU, so the statistics must match the whole-model pass. The
    sliding-window GPT-OSS case fails if a layer is given another layer type's mask."""
    model = tiny_model(model_type, **overrides)
    whole, whole_cache = score(model, ids, ScoreConfig(batch=3, sample_tokens=16))
    layerwise, layer_cache = score(model, ids, ScoreConfig(batch=3, sample_tokens=16, layerwise="cpu"))
    for method in ("reap", "ean", "frequency", "weighted_frequency"):
        assert torch.allclose(torch.tensor(layerwise["scores"][method]), torch.tensor(whole["scores"][method]),
                              rtol=1e-4, atol=1e-6), method
    for key, value in whole_cache.items():
        assert torch.allclose(layer_cache[key], value, rtol=1e-4, atol=1e-6), key
    assert all("forward" not in vars(layer) for layer in model.get_decoder().layers)  # their own forwards are back
