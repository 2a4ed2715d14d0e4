"""The shipped embedded MoE (assets/models/moe): its size, that it learned its domains, and that pruning it is
measurable and fast to redo from cached scores.

    OMP_NUM_THREADS=1 python -m pytest tests/test_reap_embedded.py -q
"""

from __future__ import annotations

import copy
import json
import time

import pytest
import torch

from core.reap import data
from core.reap.checkpoint import load_model, slice_experts
from core.reap.embedded_moe import MOE_PATH
from core.reap.prune import LiveMask, experts_to_keep
from core.reap.quality import QualityConfig, evaluate, perplexity
from core.reap.scores import ScoreConfig, load_scores, save_scores, score

SMALL = QualityConfig(ppl_windows=4, task_items=32)


@pytest.fixture(scope="module")
def embedded():
    return load_model(str(MOE_PATH))


@pytest.fixture(scope="module")
def scored(embedded, tmp_path_factory):
    model, tokenizer = embedded
    windows = data.windows(tokenizer, "mixed", "train", 2048, 128)
    path = tmp_path_factory.mktemp("scores")
    result, cache = score(model, windows, ScoreConfig(sample_tokens=64))
    save_scores(path, {"model": str(MOE_PATH), "calibration": "mixed"} | result, cache)
    return path


def test_shape_and_size(embedded):
    model, _ = embedded
    c = model.config
    assert c.model_type == "qwen3_moe" and c.num_experts >= 16 and c.num_experts_per_tok == 2
    assert c.num_hidden_layers >= 4
    assert sum(p.numel() for p in model.parameters()) <= 8e6
    assert (MOE_PATH / "model.safetensors").stat().st_size <= 16e6
    log = json.loads((MOE_PATH / "training_log.json").read_text())
    assert set(log["final"]) == set(data.DOMAINS)


def test_learned_its_domains(embedded):
    model, tokenizer = embedded
    q = evaluate(model, tokenizer, SMALL)
    # A uniform guess has perplexity 2048; the thresholds sit well below what an untrained model gets.
    assert q["code"]["ppl"] < 45 and q["prose"]["ppl"] < 70 and q["math"]["ppl"] < 4
    assert q["math"]["acc"] >= 0.8 and q["code"]["acc"] >= 0.1


def test_random_pruning_hurts_and_reap_hurts_less(embedded, scored):
    model, tokenizer = embedded
    scores, _ = load_scores(scored)
    windows = data.windows(tokenizer, "mixed", "heldout", 8 * 128, 128)
    base = perplexity(model, windows)
    ppl = {}
    for method in ("reap", "random"):
        pruned = copy.deepcopy(model)
        slice_experts(pruned, experts_to_keep(scores["scores"][method], 0.5, 2))
        ppl[method] = perplexity(pruned, windows)
    assert ppl["random"] > 1.2 * base
    assert ppl["reap"] < ppl["random"]


def test_reprune_from_cache_is_fast_and_mask_matches(embedded, scored):
    model, _ = embedded
    ids = torch.randint(0, model.config.vocab_size, (2, 32), generator=torch.Generator().manual_seed(0))
    t0 = time.perf_counter()
    scores, _ = load_scores(scored)
    kept = experts_to_keep(scores["scores"]["reap"], 0.25, 2)
    pruned = copy.deepcopy(model)
    slice_experts(pruned, kept)
    assert time.perf_counter() - t0 < 1.0
    mask = LiveMask(model)
    mask.set(kept)
    with torch.no_grad():
        masked = model(input_ids=ids).logits
    mask.clear()
    with torch.no_grad():
        torch.testing.assert_close(pruned(input_ids=ids).logits, masked, atol=1e-4, rtol=1e-4)
