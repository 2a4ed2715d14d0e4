"""EAGLE-3 drafter: the engine hands it the target's low / middle / high states, incremental drafting equals a
fresh run, chains and trees are lossless, the draft vocabulary holds, each training-time-test pass sees what that
draft depth sees at inference, and training writes a drafter that loads (speculators format) and decodes."""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest
import torch

from core.decoding.engine import SpeculativeEngine
from core.decoding.sampling import SamplingConfig, distribution
from core.decoding.tree import TreeShape
from core.drafters.dream.adapter import KVCache
from core.drafters.eagle3.drafter import Eagle3Drafter
from core.drafters.eagle3.model import Eagle3Model
from core.training.dream import StackedKV, rollout_masks
from core.training.eagle3 import Batch, Eagle3TrainConfig, extract, losses, train
from core.world import scenes


def _started(engine, drafter, sample, rounds: int, gamma: int = 4):
    session = engine.open(sample.image, sample.prompt, drafter, gamma=gamma)
    for _ in range(rounds + 1):  # the prefill, then speculative rounds
        session.step()
    return session


def test_session_features_are_the_targets_chosen_layers(tiny_target, tiny_eagle3):
    engine = SpeculativeEngine(tiny_target)
    s = scenes.sample("heldout", 5)
    session = _started(engine, tiny_eagle3, s, rounds=3, gamma=3)
    request = session.context.request
    ids = torch.cat([request.input_ids, torch.tensor([session.generated[:-1]])], dim=1)
    with torch.no_grad():
        states = tiny_target.model(input_ids=ids, pixel_values=request.pixel_values,
                                   image_grid_thw=request.image_grid_thw,
                                   mm_token_type_ids=(ids == tiny_target.image_token_id).long(),
                                   output_hidden_states=True).hidden_states
    expected = torch.cat([states[i][0] for i in (0, 1, 2)], -1)
    torch.testing.assert_close(session.context.features, expected, atol=1e-4, rtol=1e-4)


def test_incremental_drafting_equals_a_fresh_run(tiny_target, tiny_eagle3):
    """After rounds of accepted and rejected drafts (its cache cropped each time), the run drafts what a run started
    now drafts from the same committed tokens."""
    engine = SpeculativeEngine(tiny_target)
    s = scenes.sample("heldout", 6)
    session = _started(engine, tiny_eagle3, s, rounds=5)
    fresh = engine.open(s.image, s.prompt, tiny_eagle3)
    fresh.step()
    later = tiny_eagle3.start(session.context, fresh.prefill)
    incremental = session.run.propose(session.context, 4)
    restarted = later.propose(session.context, 4)
    assert incremental.tokens == restarted.tokens
    torch.testing.assert_close(incremental.probs, restarted.probs, atol=1e-5, rtol=1e-4)


def test_a_slot_reads_the_previous_positions_state_at_its_rotary_position(tiny_target, tiny_eagle3):
    """vLLM's feeding: the slot of token j gets token j's id and the fused target state of position j - 1, rotated
    at the target's position of j - 1. One causal pass over the whole sequence equals the run's catch-up."""
    engine = SpeculativeEngine(tiny_target)
    s = scenes.sample("heldout", 2)
    session = _started(engine, tiny_eagle3, s, rounds=2)
    context, model = session.context, tiny_eagle3.model
    ids = [*context.request.input_ids[0].tolist(), *context.generated]
    positions, delta = tiny_target.rope_positions(context.request)
    rows = torch.cat([positions[1:, 0], torch.arange(len(ids) - positions.shape[-1]).expand(3, -1)
                      + positions.shape[-1] + delta], dim=1)
    n = len(ids) - 1
    with torch.no_grad():
        whole = model(torch.tensor([ids[1:]]), model.fuse(context.features[:n]).unsqueeze(0), rows[:, None, :n],
                      torch.ones(n, n, dtype=torch.bool).tril()[None, None])
        proposal = tiny_eagle3.start(context, _prefill(engine, s, tiny_eagle3)).propose(context, 1)
    expected = tiny_eagle3.to_vocab(distribution(tiny_eagle3.model.logits(whole[0, -1:]), context.sampling))[0]
    torch.testing.assert_close(proposal.probs[0], expected, atol=1e-5, rtol=1e-4)


def _prefill(engine, sample, drafter):
    session = engine.open(sample.image, sample.prompt, drafter)
    session.step()
    return session.prefill


@pytest.mark.parametrize("tree", [None, TreeShape(4, 16)], ids=["chain", "tree"])
def test_greedy_eagle3_is_lossless(tiny_target, tiny_eagle3, tree):
    engine = SpeculativeEngine(tiny_target)
    drafter = Eagle3Drafter(tiny_eagle3.model, tiny_target, tree=tree)
    cases = [(s.image, s.prompt) for s in scenes.samples("heldout", 3)] + [(None, "Describe the image.")]
    for image, prompt in cases:
        plain = engine.generate(image, prompt, max_new_tokens=16)
        spec = engine.generate(image, prompt, drafter, gamma=4, max_new_tokens=16)
        assert spec.token_ids == plain.token_ids
        assert all(set(r.drafted) <= set(drafter.draft_ids.tolist()) for r in spec.rounds)


def test_sampled_drafts_come_from_the_draft_vocabulary_and_q_is_their_law(tiny_target, tiny_eagle3):
    engine = SpeculativeEngine(tiny_target)
    s = scenes.sample("heldout", 1)
    out = engine.generate(s.image, s.prompt, tiny_eagle3, gamma=4, max_new_tokens=24,
                          sampling=SamplingConfig(temperature=1.0), seed=3)
    allowed = set(tiny_eagle3.draft_ids.tolist())
    drafted = [t for r in out.rounds for t in r.drafted]
    assert drafted and set(drafted) <= allowed
    assert all(0 < q <= 1 for r in out.rounds for q in r.draft_probs)


def test_each_rollout_pass_sees_what_that_draft_depth_sees_at_inference(tiny_eagle3):
    """Training-time test: pass d at slot c + d equals the (d+1)-th draft of a chain whose last committed slot is c,
    computed step by step as Eagle3DraftRun does (catch-up from the target's states, then one slot per draft from
    the layer's own output), for each sample of a right-padded batch."""
    model = copy.deepcopy(tiny_eagle3.model)
    cfg = model.cfg
    torch.manual_seed(0)
    length = 10
    ids = torch.randint(0, cfg.vocab_size, (2, length))
    aux = torch.randn(2, length, 3 * cfg.target_hidden_size)
    attention_mask = torch.ones(2, length, dtype=torch.long)
    attention_mask[1, 7:] = 0
    positions = torch.arange(length).expand(3, 2, -1)
    state, cache, passes = model.fuse(aux), StackedKV(), []
    with torch.no_grad():
        for depth in range(3):
            mask, _ = rollout_masks(attention_mask, attention_mask, depth)
            out = model(ids, state, positions, mask, cache)
            passes.append(out)
            state = torch.cat([torch.zeros_like(out[:, :1]), out[:, :-1]], dim=1)
        for b, committed in ((0, 5), (1, 4)):
            step_cache = KVCache()
            causal = torch.ones(committed + 1, committed + 1, dtype=torch.bool).tril()[None, None]
            out = model(ids[b:b + 1, :committed + 1], model.fuse(aux[b:b + 1, :committed + 1]),
                        positions[:, b:b + 1, :committed + 1], causal, step_cache)[:, -1:]
            torch.testing.assert_close(out, passes[0][b:b + 1, committed:committed + 1])
            for depth in (1, 2):
                slot = committed + depth
                out = model(ids[b:b + 1, slot:slot + 1], out, positions[:, b:b + 1, slot:slot + 1], None, step_cache)
                torch.testing.assert_close(out, passes[depth][b:b + 1, slot:slot + 1], atol=1e-5, rtol=1e-4)


def test_extraction_pairs_each_token_with_the_previous_positions_states(tiny_target):
    samples = [scenes.Sample(s.image, s.task, s.prompt, s.answer) for s in scenes.samples("train", 3)]
    batch = extract(tiny_target, samples, (0, 1, 2), mrope=True)[0]
    assert batch.aux.shape[1] == batch.teacher.shape[1] == batch.slot_ids.shape[1] == batch.input_ids.shape[1] - 1
    assert batch.positions.shape[0] == 3
    # hidden_states[0] is the target's input embeddings: slot s's first chunk embeds token s (images: features).
    width = tiny_target.text_config.hidden_size
    embeds = tiny_target.model.get_input_embeddings()(batch.input_ids[0, :3])
    visual = batch.input_ids[0, :3] == tiny_target.image_token_id
    torch.testing.assert_close(batch.aux[0, :3, :width][~visual], embeds[~visual], atol=1e-5, rtol=1e-5)


def test_training_learns_and_writes_a_loadable_speculators_checkpoint(tmp_path, tiny_target_dir, tiny_target):
    out = tmp_path / "eagle3"
    cfg = Eagle3TrainConfig(steps=30, batch=8, prompts=8, target=str(tiny_target_dir), data="", out=str(out),
                            mlp_size=48, draft_vocab=0, rollout=2)  # the random target's answers: any token
    drafter = train(cfg)
    log = json.loads((out / "training_log.json").read_text())
    first, final = log["log"][0], log["log"][-1]
    assert (first["step"], final["step"]) == (1, 30)
    assert final["loss"] < first["loss"]
    config = json.loads((out / "config.json").read_text())
    assert config["speculators_model_type"] == "eagle3"
    assert config["draft_vocab_size"] == tiny_target.text_config.vocab_size
    loaded = Eagle3Drafter.from_pretrained(out, tiny_target)
    assert loaded.model.cfg == drafter.model.cfg
    s = scenes.sample("heldout", 0)
    engine = SpeculativeEngine(tiny_target)
    assert engine.generate(s.image, s.prompt, loaded, max_new_tokens=8).token_ids == \
        engine.generate(s.image, s.prompt, max_new_tokens=8).token_ids
    # --init continues it (a retrained target's drafter): same shape and draft vocabulary, weights moved on.
    again = train(dataclasses.replace(cfg, steps=2, init=str(out), out=str(tmp_path / "continued")))
    assert again.model.cfg == loaded.model.cfg and torch.equal(again.model.d2t, loaded.model.d2t)
    assert not torch.equal(again.model.fc.weight, loaded.model.fc.weight.to(again.model.fc.weight.dtype))


def test_a_drafter_for_another_target_is_refused(tmp_path, tiny_target, tiny_eagle3):
    from core.drafters.eagle3.formats import save_speculators

    cfg = copy.deepcopy(tiny_eagle3.model.cfg)
    cfg.target_hidden_size *= 2
    save_speculators(Eagle3Model(cfg), tmp_path, "elsewhere")
    with pytest.raises(ValueError, match="does not fit the target"):
        Eagle3Drafter.from_pretrained(tmp_path, tiny_target)


def test_losses_skip_slots_whose_target_token_is_outside_the_draft_vocabulary(tiny_eagle3):
    model = copy.deepcopy(tiny_eagle3.model)
    cfg = model.cfg
    torch.manual_seed(2)
    length, width = 6, cfg.target_hidden_size
    ids = torch.randint(0, cfg.vocab_size, (1, length + 1))
    predict = torch.ones(1, length + 1, dtype=torch.bool)
    lm_head = torch.nn.Linear(width, cfg.vocab_size, bias=False)
    with torch.no_grad():
        lm_head.weight.zero_()
        lm_head.weight[int((~model.t2d).nonzero()[0])] = 1.0  # every teacher argmax: a token it cannot draft
    batch = Batch(ids, predict, torch.ones(1, length, dtype=torch.long), torch.randn(1, length, 3 * width),
                  torch.ones(1, length, width), torch.arange(length).expand(3, 1, -1))
    parts = losses(model, lm_head, batch, Eagle3TrainConfig(rollout=2, out="x", target="y"))
    assert float(parts["loss"]) == 0.0 and not parts["loss"].requires_grad and "accuracy" not in parts
