"""MASSV drafter: widths from the configs, reuse of the target's image features, lossless decoding, both
training phases end to end on tiny random models."""

from __future__ import annotations

import json

import pytest
import torch

from core.decoding.engine import SpeculativeEngine
from core.drafters.massv import MassvDrafter
from core.training.massv import MassvTrainConfig, train
from core.world import scenes


def test_projector_widths_come_from_the_configs(tiny_massv, tiny_target, tiny_text_drafter):
    first, last = tiny_massv.projector[0], tiny_massv.projector[-1]
    assert first.in_features == tiny_target.model.config.vision_config.out_hidden_size == 64
    assert last.out_features == tiny_text_drafter.model.config.hidden_size == 32


def test_greedy_massv_is_lossless_and_reuses_the_target_image_features(tiny_target, tiny_massv, monkeypatch):
    engine = SpeculativeEngine(tiny_target)
    calls = []
    visual = tiny_target.model.model.visual
    original = visual.forward
    monkeypatch.setattr(visual, "forward", lambda *a, **k: calls.append(1) or original(*a, **k))
    for s in scenes.samples("heldout", 4):
        plain = engine.generate(s.image, s.prompt, max_new_tokens=16)
        calls.clear()
        spec = engine.generate(s.image, s.prompt, tiny_massv, gamma=3, max_new_tokens=16)
        assert spec.token_ids == plain.token_ids
        assert len(calls) == 1  # one vision pass per request, shared by target and drafter


def test_image_changes_the_draft(tiny_target, tiny_massv):
    """The drafter's first-token distribution depends on the image it is shown (it is not text-only)."""
    engine = SpeculativeEngine(tiny_target)
    dists = []
    for s in scenes.samples("heldout", 2, ("caption",)):
        session = engine.open(s.image, s.prompt)
        session.step()  # the prefill
        dists.append(tiny_massv.start(session.context).propose(session.context, 1).probs[0])
    assert not torch.allclose(dists[0], dists[1])


def test_two_phase_training_writes_loadable_checkpoints(tmp_path, tiny_target_dir, tiny_text_drafter_dir, tiny_target,
                                                        monkeypatch):
    p1, p2 = tmp_path / "massv-phase1", tmp_path / "massv"
    train(MassvTrainConfig(phase=1, steps=3, batch=4, target=str(tiny_target_dir),
                           text_drafter=str(tiny_text_drafter_dir), out=str(p1)))
    train(MassvTrainConfig(phase=2, steps=3, batch=4, target=str(tiny_target_dir), phase1=str(p1), out=str(p2),
                           prompts=6, max_new_tokens=8, data=""))
    data = json.loads((p2 / "distillation_set.json").read_text())
    assert data["metadata"]["temperature"] == 0.0 and data["metadata"]["samples_per_prompt"] == 1
    assert len(data["rows"]) == 6
    # The dataset holds what the target itself answers (greedy), token for token.
    engine = SpeculativeEngine(tiny_target)
    row = data["rows"][0]
    image = scenes.sample(row["split"], row["index"], row["task"]).image
    assert engine.generate(image, row["prompt"], max_new_tokens=8).text == row["response"]
    for path in (p1, p2):
        drafter = MassvDrafter.from_pretrained(path)
        out = engine.generate(image, row["prompt"], drafter, gamma=2, max_new_tokens=8)
        assert out.token_ids == engine.generate(image, row["prompt"], max_new_tokens=8).token_ids
    # Another phase-2 run with the same target and settings reuses the set instead of asking the target again.
    monkeypatch.setattr("core.training.self_distill.distillation_set", lambda *a, **k: pytest.fail("regenerated"))
    again = tmp_path / "again"
    train(MassvTrainConfig(phase=2, steps=1, batch=4, target=str(tiny_target_dir), phase1=str(p1), out=str(again),
                           prompts=6, max_new_tokens=8, data=str(p2 / "distillation_set.json")))
    assert json.loads((again / "distillation_set.json").read_text()) == data
