"""Every hub preset's code path, offline: tiny random models of the preset's own classes are laid out in a local
Hugging Face cache under the preset's repo id, then loaded by preset name exactly as the hub model would be.

    python -m pytest -q tests/test_presets.py
"""

from __future__ import annotations

import shutil
from dataclasses import replace

import huggingface_hub.constants
import pytest
import torch
from helpers import TINY_TARGET
from safetensors.torch import load_file, save_file
from transformers import AutoConfig, AutoTokenizer

from core.decoding.engine import SpeculativeEngine
from core.decoding.sampling import SamplingConfig
from core.models import presets, registry
from core.models.embedded import new_target, save_vlm
from core.models.loading import LoadOptions
from core.reap import lab as reap_lab
from core.reap.checkpoint import load_model
from core.reap.embedded_moe import MOE_PATH
from core.reap.tiny import tiny_model
from core.world import scenes

VLM_HUB = [name for name, p in presets.VLM_PRESETS.items() if p.hub]
MOE_HUB = [name for name, p in presets.MOE_PRESETS.items() if p.hub]
MOE_FAMILIES = {"allenai/OLMoE-1B-7B-0924": "olmoe", "Qwen/Qwen1.5-MoE-A2.7B": "qwen2_moe",
                "Qwen/Qwen3-30B-A3B": "qwen3_moe", "mistralai/Mixtral-8x7B-v0.1": "mixtral"}
EXTRA_TARGET_ROWS = 64  # Qwen2.5-VL-7B has 152064 vocabulary rows, its 1.5B drafter 151936: the engine must cope


def into_hub_cache(cache, repo: str, source) -> None:
    """The layout huggingface_hub leaves after a download: snapshots/<commit>/ files plus refs/main."""
    root = cache / f"models--{repo.replace('/', '--')}"
    commit = "0" * 40
    shutil.copytree(source, root / "snapshots" / commit)
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(commit)


@pytest.fixture
def offline_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    registry.load_target.cache_clear()
    registry._load_drafter.cache_clear()
    yield tmp_path / "hub"
    registry.load_target.cache_clear()
    registry._load_drafter.cache_clear()


def cpu(load: LoadOptions, cache) -> LoadOptions:
    """The preset's options as a CPU test can honour them: float32, no device_map or quantization."""
    return replace(load, dtype="float32", device_map=None, quantization=None, cache_dir=str(cache))


def test_every_moe_preset_has_a_tiny_family_here():
    assert set(MOE_FAMILIES) == set(MOE_HUB)


@pytest.mark.parametrize("name", VLM_HUB)
def test_vlm_preset_loads_from_the_hub_cache_and_stays_lossless(name, offline_cache, tmp_path, tokenizer,
                                                               tiny_text_drafter_dir, monkeypatch):
    preset = presets.VLM_PRESETS[name]
    torch.manual_seed(0)
    vlm = new_target(TINY_TARGET, tokenizer)
    vlm.model.resize_token_embeddings(len(tokenizer) + EXTRA_TARGET_ROWS)
    save_vlm(vlm, tmp_path / "target")
    into_hub_cache(offline_cache, preset.target, tmp_path / "target")
    into_hub_cache(offline_cache, preset.drafters["text"].weights, tiny_text_drafter_dir)
    assert not presets.availability(name, preset.target, True, None, reachable=False).usable
    assert presets.availability(name, preset.target, True, str(offline_cache), reachable=False).usable

    monkeypatch.setitem(presets.VLM_PRESETS, name, preset.with_load(cpu(preset.load, offline_cache)))
    target = registry.load_target(name)
    drafter = registry.load_drafter("text", name)
    assert target.text_config.vocab_size == drafter.model.config.vocab_size + EXTRA_TARGET_ROWS

    engine = SpeculativeEngine(target)
    s = scenes.sample("heldout", 3)
    plain = engine.generate(s.image, s.prompt, None, max_new_tokens=12)
    drafted = engine.generate(s.image, s.prompt, drafter, max_new_tokens=12, gamma=3)
    assert drafted.token_ids == plain.token_ids
    sampled = engine.generate(s.image, s.prompt, drafter, max_new_tokens=12, sampling=SamplingConfig(1.0), seed=5)
    assert all(t < target.text_config.vocab_size for t in sampled.token_ids)


def test_the_published_eagle3_drafter_loads_by_repo_id_and_stays_lossless(offline_cache, tmp_path, tokenizer,
                                                                          monkeypatch):
    """Qwen2.5-VL-7B's eagle3 entry is a hub repo in SpecForge's format (Rayzl/qwen2.5-vl-7b-eagle3-sgl): a tiny one
    under that id in the hub cache, without embed_tokens (the target's are shared, as vLLM does), loads by name."""
    from core.drafters.eagle3 import Eagle3Config, Eagle3Model
    from core.drafters.eagle3.formats import save_specforge

    name = "Qwen/Qwen2.5-VL-7B-Instruct"
    preset = presets.VLM_PRESETS[name]
    torch.manual_seed(0)
    vlm = new_target(TINY_TARGET, tokenizer)
    save_vlm(vlm, tmp_path / "target")
    into_hub_cache(offline_cache, preset.target, tmp_path / "target")
    eagle3 = Eagle3Model(Eagle3Config.for_target(vlm, draft_vocab_size=200))
    eagle3.set_draft_vocab(torch.arange(200))
    save_specforge(eagle3, tmp_path / "eagle3", vlm.text_config.num_hidden_layers)
    state = load_file(tmp_path / "eagle3" / "model.safetensors")
    save_file({k: v for k, v in state.items() if k != "embed_tokens.weight"}, tmp_path / "eagle3" / "model.safetensors")
    into_hub_cache(offline_cache, preset.drafters["eagle3"].weights, tmp_path / "eagle3")
    assert preset.drafters["eagle3"].weights == "Rayzl/qwen2.5-vl-7b-eagle3-sgl"

    monkeypatch.setitem(presets.VLM_PRESETS, name, preset.with_load(cpu(preset.load, offline_cache)))
    target = registry.load_target(name)
    drafter = registry.load_drafter("eagle3:tree=4x8", name)
    torch.testing.assert_close(drafter.model.embed_tokens.weight, target.model.get_input_embeddings().weight)
    engine = SpeculativeEngine(target)
    s = scenes.sample("heldout", 3)
    assert engine.generate(s.image, s.prompt, drafter, max_new_tokens=12, gamma=3).token_ids == \
        engine.generate(s.image, s.prompt, None, max_new_tokens=12).token_ids


@pytest.mark.parametrize("name", VLM_HUB)
def test_a_hub_preset_without_trained_drafters_says_so(name, offline_cache):
    with pytest.raises(ValueError, match="no trained weights"):
        registry.load_drafter("massv", name)
    with pytest.raises(ValueError, match="unknown drafter 'massv-phase1'"):
        registry.load_drafter("massv-phase1", name)
    if presets.VLM_PRESETS[name].drafters["eagle3"].weights.count("/") != 1:  # 7B's: a published hub repo (above)
        with pytest.raises(ValueError, match="no trained weights.*train eagle3"):
            registry.load_drafter("eagle3", name)


def test_a_hub_preset_that_is_not_cached_fails_with_a_clear_message(offline_cache, monkeypatch):
    name = VLM_HUB[0]
    preset = presets.VLM_PRESETS[name]
    monkeypatch.setitem(presets.VLM_PRESETS, name, preset.with_load(cpu(preset.load, offline_cache)))
    with pytest.raises(ValueError, match=f"cannot load '{name}'"):
        registry.load_target(name)


@pytest.mark.parametrize("name", MOE_HUB)
def test_moe_preset_loads_from_the_hub_cache_and_scores(name, offline_cache, tmp_path, monkeypatch):
    family = MOE_FAMILIES[name]
    model = tiny_model(family)
    model.save_pretrained(tmp_path / "moe")
    AutoTokenizer.from_pretrained(MOE_PATH).save_pretrained(tmp_path / "moe")  # any tokenizer: 128 ids are used
    preset = presets.MOE_PRESETS[name]
    into_hub_cache(offline_cache, preset.model, tmp_path / "moe")
    monkeypatch.setitem(presets.MOE_PRESETS, name, replace(preset, load=cpu(preset.load, offline_cache)))

    assert AutoConfig.from_pretrained(preset.model, cache_dir=str(offline_cache)).model_type == family
    info = reap_lab.model_info(name)
    assert (info.experts, info.top_k) == (8, 2)
    loaded, _ = load_model(preset.model, presets.MOE_PRESETS[name].load)
    torch.testing.assert_close(loaded(torch.arange(10)[None]).logits, model(torch.arange(10)[None]).logits)


def test_bad_load_options_are_refused():
    with pytest.raises(ValueError, match="dtype"):
        LoadOptions(dtype="int3")
    with pytest.raises(ValueError, match="quantization"):
        LoadOptions(quantization="2bit")
    assert LoadOptions().kwargs()["use_safetensors"] is True
