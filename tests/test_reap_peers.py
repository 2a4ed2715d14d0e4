"""REAP here against llm-compressor's `REAPPruningModifier` (vllm-project's, the REAP most users run): on every MoE
family of the adapter table (tiny random models) and on the embedded Qwen3-MoE (trained, so its routing is real),
the experts this project keeps at a pruning ratio are exactly the ones llm-compressor keeps, and the two pruned
models compute the same logits.

llm-compressor installs without its dependencies (README's test command: requirements-peers.txt) and runs here as
its `oneshot` runs a recipe: the fused experts linearised, the session initialised with the modifier, its `basic`
calibration pipeline over the same token windows, then finalised (its default `sequential` pipeline was seen to run
attention without the causal mask on a tiny Qwen3-MoE: ../shared/reference/methods.md).
"""

from __future__ import annotations

import copy
import json

import pytest
import torch
from llmcompressor.core import active_session
from llmcompressor.modeling.moe.linearize import linearize_moe
from llmcompressor.modifiers.pruning import REAPPruningModifier
from llmcompressor.pipelines.basic.pipeline import BasicPipeline
from transformers import AutoModelForCausalLM, AutoTokenizer

from core.reap.adapters import moe_blocks
from core.reap.checkpoint import slice_experts
from core.reap.data import windows
from core.reap.embedded_moe import MOE_PATH
from core.reap.prune import experts_to_keep
from core.reap.scores import ScoreConfig, score
from core.reap.tiny import TINY, tiny_model

# DeepSeek's attention (MLA) has one key/value head per query head; llm-compressor calibrates with eager attention,
# which, unlike sdpa, refuses the tiny config's default of fewer.
MLA = {"num_key_value_heads": 4}


def ours(model, ids: torch.Tensor, ratio: float):
    """This project's REAP: scores from the observed routing, the lowest dropped per layer, a sliced copy."""
    result, _ = score(model, ids, ScoreConfig())
    saliency = result["scores"]["reap"]
    kept = experts_to_keep(saliency, ratio, model.config.num_experts_per_tok)
    pruned = copy.deepcopy(model)
    slice_experts(pruned, kept)
    return pruned, [sorted(k) for k in kept], saliency


def llm_compressor(model, ids: torch.Tensor, ratio: float, report):
    """llm-compressor's REAP on a copy, as `oneshot(model, recipe, pipeline="basic")` runs it."""
    pruned = copy.deepcopy(model)
    linearize_moe(pruned)
    session = active_session()
    session.reset()
    session.initialize(model=pruned, start=-1, recipe=[REAPPruningModifier(sparsity=ratio, report_path=str(report))])
    BasicPipeline()(pruned, [{"input_ids": row[None]} for row in ids], None)
    session.finalize()
    retained = json.loads(report.read_text())
    return pruned, [sorted(retained[name]) for name, _ in moe_blocks(model)]


def assert_same_pruning(model, ids, ratio, tmp_path) -> None:
    """The same experts kept, but for a choice among experts of equal saliency (experts the calibration never routed
    to all score 0, and either tool may keep any of them); with no such choice, the same logits too."""
    mine, kept, saliency = ours(model, ids, ratio)
    theirs, their_kept = llm_compressor(model, ids, ratio, tmp_path / "retained.json")
    for layer, (scores, a, b) in enumerate(zip(saliency, kept, their_kept)):
        assert a == b or sorted(scores[j] for j in a) == pytest.approx(sorted(scores[j] for j in b)), layer
    if kept == their_kept:
        with torch.no_grad():
            torch.testing.assert_close(mine(input_ids=ids).logits, theirs(input_ids=ids).logits, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("family", list(TINY))
def test_every_family_keeps_the_experts_llm_compressor_keeps(family, tmp_path):
    model = tiny_model(family, **(MLA if family.startswith("deepseek") else {}))
    ids = torch.randint(0, 128, (8, 32), generator=torch.Generator().manual_seed(0))
    assert_same_pruning(model, ids, 0.5, tmp_path)


@pytest.mark.parametrize("calibration", ["code", "math"])
@pytest.mark.parametrize("ratio", [0.25, 0.5, 0.75])
def test_the_embedded_moe_keeps_the_experts_llm_compressor_keeps(calibration, ratio, tmp_path):
    model = AutoModelForCausalLM.from_pretrained(MOE_PATH, dtype=torch.float32).eval()
    ids = windows(AutoTokenizer.from_pretrained(MOE_PATH), calibration, "train", 4096, 256)
    assert_same_pruning(model, ids, ratio, tmp_path)
