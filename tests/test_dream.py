"""DREAM drafter: the target's last-layer attention recomputed exactly, features handed over by the engine,
exact cache rollback, visual-token keep ratio, lossless decoding, and training end to end on tiny random models."""

from __future__ import annotations

import copy
import dataclasses
import json
import random

import pytest
import torch

from core.decoding.engine import SpeculativeEngine
from core.decoding.tree import TreeShape
from core.drafters.dream import AdapterCache, DreamDrafter, keep_visual, visual_scores
from core.models.vlm import VisionLanguageModel, last_layer_attention
from core.training.dream import Batch, DreamTrainConfig, attention_entropy, draft_vocabulary, losses, rollout, train
from core.world import scenes


def _started(engine, drafter, sample, rounds: int = 0, gamma: int = 4):
    """A greedy session prefilled, its drafter started, then `rounds` speculative rounds of gamma drafts."""
    session = engine.open(sample.image, sample.prompt, drafter, gamma=gamma)
    session.step()  # the prefill
    if not rounds:  # the engine starts its drafter on the next step: start one here instead
        return session, drafter.start(session.context, session.prefill)
    for _ in range(rounds):
        assert session.step().drafted
    return session, session.run


def test_recomputed_last_layer_attention_equals_eager(tiny_target_dir):
    eager = VisionLanguageModel.from_pretrained(tiny_target_dir, attn_implementation="eager")
    s = scenes.sample("heldout", 3)
    request = eager.prepare(s.image, s.prompt)
    positions, _ = eager.rope_positions(request)
    with torch.no_grad():
        out = eager.model(input_ids=request.input_ids, position_ids=positions, pixel_values=request.pixel_values,
                          image_grid_thw=request.image_grid_thw, mm_token_type_ids=request.mm_token_type_ids,
                          output_hidden_states=True, output_attentions=True, use_cache=True)
        keys = out.cache.layers[-1].keys
        recomputed = last_layer_attention(eager, out.hidden_states, positions, keys)
        after_image = int(request.image_mask.nonzero().max()) + 1
        after = last_layer_attention(eager, out.hidden_states, positions, keys, after_image)
    expected = out.attentions[-1].mean(1)[0]
    torch.testing.assert_close(recomputed, expected, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(after, expected[after_image:], atol=1e-5, rtol=1e-4)


def test_session_features_are_the_targets_last_layer_states(tiny_target, tiny_dream):
    engine = SpeculativeEngine(tiny_target)
    s = scenes.sample("heldout", 5)
    session, _ = _started(engine, tiny_dream, s, rounds=4, gamma=3)
    request, context = session.context.request, session.context
    ids = torch.cat([request.input_ids, torch.tensor([session.generated[:-1]])], dim=1)
    with torch.no_grad():
        full = tiny_target.model(input_ids=ids, pixel_values=request.pixel_values,
                                 image_grid_thw=request.image_grid_thw,
                                 mm_token_type_ids=(ids == tiny_target.image_token_id).long(),
                                 output_hidden_states=True).hidden_states[-1][0]
    assert context.features.shape == full.shape
    torch.testing.assert_close(context.features, full, atol=1e-4, rtol=1e-4)


def test_cache_rollback_is_exact(tiny_target, tiny_dream):
    """After rounds of accepted and rejected drafts, the run drafts exactly what a fresh run would."""
    engine = SpeculativeEngine(tiny_target)
    s = scenes.sample("heldout", 6)
    session, run = _started(engine, tiny_dream, s, rounds=5)
    _, fresh = _started(engine, tiny_dream, s)  # a new run, started on a fresh prefill
    incremental = run.propose(session.context, 4)
    assert incremental.tokens == fresh.propose(session.context, 4).tokens
    torch.testing.assert_close(incremental.probs, fresh.propose(session.context, 4).probs, atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize("keep_ratio", [1.0, 0.75, 0.5])
def test_greedy_dream_is_lossless(tiny_target, tiny_dream, keep_ratio):
    engine = SpeculativeEngine(tiny_target)
    drafter = DreamDrafter(tiny_dream.adapter, tiny_target, keep_ratio=keep_ratio)
    cases = [(s.image, s.prompt) for s in scenes.samples("heldout", 3)] + [(None, "Describe the image.")]
    for image, prompt in cases:
        plain = engine.generate(image, prompt, max_new_tokens=16)
        spec = engine.generate(image, prompt, drafter, gamma=3, max_new_tokens=16)
        assert spec.token_ids == plain.token_ids


def test_keep_ratio_keeps_the_most_attended_visual_tokens(tiny_target, tiny_dream):
    engine = SpeculativeEngine(tiny_target)
    drafter = DreamDrafter(tiny_dream.adapter, tiny_target, keep_ratio=0.5)
    session, run = _started(engine, drafter, scenes.sample("heldout", 7))
    visual = session.context.request.image_mask.nonzero().view(-1)
    prefill = session.prefill
    scores = visual_scores(last_layer_attention(tiny_target, prefill.hidden_states, prefill.positions,
                                                prefill.last_layer_keys), visual)
    assert len(run.dropped) == len(visual) - round(0.5 * len(visual))
    weakest_kept = min(scores[i] for i, p in enumerate(visual.tolist()) if p not in run.dropped)
    assert all(scores[i] <= weakest_kept for i, p in enumerate(visual.tolist()) if p in run.dropped)
    assert keep_visual(torch.tensor([0.1, 0.5, 0.3, 0.9]), 0.5).tolist() == [1, 3]  # in original order


@pytest.mark.parametrize("ratio", [0.0, -0.1, 1.5, float("nan")])
def test_bad_keep_ratio_is_rejected(tiny_target, tiny_dream, ratio):
    with pytest.raises(ValueError, match="keep_ratio"):
        DreamDrafter(tiny_dream.adapter, tiny_target, keep_ratio=ratio)


def test_attention_entropy_prefers_focused_heads():
    focused = torch.zeros(1, 2, 3, 3)
    focused[..., 0] = 1.0
    uniform = torch.full((1, 2, 3, 3), 1 / 3)
    entropy = torch.stack([attention_entropy(uniform), attention_entropy(focused)])
    assert entropy.argmin(0).eq(1).all()
    torch.testing.assert_close(attention_entropy(uniform), torch.full((1, 3), float(torch.log(torch.tensor(3.0)))))


def test_training_learns_and_writes_a_loadable_drafter(tmp_path, tiny_target_dir, tiny_target):
    out = tmp_path / "dream"
    cfg = DreamTrainConfig(steps=40, batch=8, prompts=8, target=str(tiny_target_dir), data="", out=str(out),
                           intermediate="0.5", mlp_size=48, draft_vocab=40, rollout=2)
    drafter = train(cfg)
    log = json.loads((out / "training_log.json").read_text())
    first, final = log["log"][0], log["log"][-1]
    assert (first["step"], final["step"]) == (1, 40)
    assert final["feature"] < 0.7 * first["feature"]  # the random tiny target's logits are near uniform: KL starts ~0
    assert set(log["intermediate_layer_share"]) == {"0"}
    loaded = DreamDrafter.from_pretrained(out, tiny_target)
    assert loaded.adapter.cfg.intermediate_size == 48
    assert loaded.draft_ids.tolist() == drafter.draft_ids.tolist() and len(loaded.draft_ids) <= 40
    assert set(tiny_target.eos_token_ids) <= set(loaded.draft_ids.tolist())
    for name, tensor in drafter.adapter.state_dict().items():
        expected = tensor.to(torch.bfloat16).float() if tensor.is_floating_point() else tensor
        torch.testing.assert_close(loaded.adapter.state_dict()[name], expected)
    s = scenes.sample("heldout", 0)
    engine = SpeculativeEngine(tiny_target)
    assert engine.generate(s.image, s.prompt, loaded, max_new_tokens=8).token_ids == \
        engine.generate(s.image, s.prompt, max_new_tokens=8).token_ids
    # --init continues it (a retrained target's drafter): its sizes and draft vocabulary, weights moved on.
    again = train(dataclasses.replace(cfg, steps=2, init=str(out), out=str(tmp_path / "continued")))
    assert again.adapter.cfg == loaded.adapter.cfg and again.draft_ids.tolist() == loaded.draft_ids.tolist()
    assert any(not torch.equal(a.float(), b.float()) for a, b in zip(again.adapter.state_dict().values(),
                                                                      loaded.adapter.state_dict().values()))


def test_bad_training_settings_are_rejected():
    with pytest.raises(ValueError, match="intermediate"):
        DreamTrainConfig(intermediate="middle")
    with pytest.raises(ValueError, match="rollout"):
        DreamTrainConfig(rollout=0)


def test_the_adapter_never_reads_the_future(tiny_dream):
    """Its self-attention layers apply the causal mask (a boolean mask added instead of applied would leak)."""
    adapter = tiny_dream.adapter
    torch.manual_seed(0)
    width = adapter.cfg.hidden_size
    embeds, prev = torch.randn(1, 6, width), torch.randn(1, 6, width)
    positions = torch.arange(6)[None]
    causal = torch.ones(6, 6, dtype=torch.bool).tril()[None, None]
    keys, values = adapter.cross.memory(prev)
    memory = (torch.arange(6)[None] < torch.arange(6)[:, None])[None, None]
    with torch.no_grad():
        _, before = adapter(embeds, prev, positions, causal, keys, values, memory)
        later = embeds.clone()
        later[:, 4:] += 5.0
        _, after = adapter(later, prev, positions, causal, keys, values, memory)
    torch.testing.assert_close(before[:, :4], after[:, :4])
    assert not torch.allclose(before[:, 4:], after[:, 4:])


def test_each_rollout_pass_sees_what_that_draft_depth_sees_at_inference(tiny_dream):
    """Training-time test: pass d at position c + d equals the (d+1)-th draft of a chain whose newest committed
    position is c, computed step by step as DreamDraftRun does (catch-up on the target's features, then one position
    per draft on the adapter's own), for each sample of a right-padded batch."""
    adapter = copy.deepcopy(tiny_dream.adapter)
    with torch.no_grad():  # open the cross-attention gates, so the memory masks matter too
        adapter.cross.attn_gate.fill_(0.8)
        adapter.cross.mlp_gate.fill_(0.5)
    torch.manual_seed(0)
    width, length = adapter.cfg.hidden_size, 10
    embeds, features = torch.randn(2, length, width), torch.randn(2, length, width)
    attention_mask = torch.ones(2, length, dtype=torch.long)
    attention_mask[1, 7:] = 0  # the second sample is 7 positions long
    batch = Batch(torch.zeros(2, length, dtype=torch.long), attention_mask, attention_mask.bool(), embeds, features,
                  None, [])
    prev = torch.cat([torch.zeros_like(features[:, :1]), features[:, :-1]], dim=1)
    with torch.no_grad():
        passes = [draft for _, _, draft in rollout(adapter, batch, prev, attention_mask.bool(), 3)]
        for b, committed in ((0, 5), (1, 4)):
            keys, values = adapter.cross.memory(features[b:b + 1, :committed])  # features of positions < c
            positions = torch.arange(committed + 1)
            causal = (positions[:, None] >= positions[None])[None, None]
            memory = (torch.arange(committed)[None] < positions[:, None])[None, None]
            cache = AdapterCache()
            _, out = adapter(embeds[b:b + 1, :committed + 1], prev[b:b + 1, :committed + 1], positions[None], causal,
                             keys, values, memory, cache)
            feature = out[:, -1:]
            torch.testing.assert_close(feature, passes[0][b:b + 1, committed:committed + 1])
            for depth in (1, 2):
                position = committed + depth
                _, feature = adapter(embeds[b:b + 1, position:position + 1], feature, torch.tensor([[position]]), None,
                                     keys, values, None, cache)
                torch.testing.assert_close(feature, passes[depth][b:b + 1, position:position + 1])


def test_rollout_losses_score_each_depth_that_some_answer_reaches(tiny_dream):
    adapter = copy.deepcopy(tiny_dream.adapter)
    width, length = adapter.cfg.hidden_size, 9
    lm_head = torch.nn.Linear(width, 16, bias=False)
    torch.manual_seed(0)
    ids = torch.zeros(2, length, dtype=torch.long)
    predict = torch.zeros(2, length, dtype=torch.bool)
    predict[0, 3:] = True  # a six-token answer
    predict[1, 5] = True  # an empty one: only its end of sequence, predicted at the last prompt position
    batch = Batch(ids, torch.ones_like(ids), predict, torch.randn(2, length, width), torch.randn(2, length, width),
                  None, [])
    cfg = DreamTrainConfig(rollout=3)
    parts = losses(adapter, lm_head, batch, cfg, random.Random(0))
    assert {"kl", "feature", "accuracy", "accuracy_2", "accuracy_3"} == set(parts)
    (parts["kl"] + parts["feature"]).backward()
    assert all(torch.isfinite(p.grad).all() for p in adapter.parameters() if p.grad is not None)
    short = Batch(ids[1:], torch.ones_like(ids[1:]), predict[1:], batch.embeds[1:], batch.features[1:], None, [])
    parts = losses(adapter, lm_head, short, cfg, random.Random(0))  # no chain goes past its first draft
    assert set(parts) == {"kl", "feature", "accuracy"} and torch.isfinite(parts["kl"] + parts["feature"])


def test_the_draft_vocabulary_is_the_most_answered_tokens_and_the_stop_tokens():
    ids = torch.tensor([[1, 5, 5, 7, 9, 0], [1, 9, 9, 9, 3, 0]])
    predict = torch.tensor([[0, 1, 1, 1, 0, 0], [0, 1, 1, 1, 1, 0]], dtype=torch.bool)  # next tokens: 5 7 9 / 9 9 3 0
    batch = Batch(ids, torch.ones_like(ids), predict, None, None, None, [])
    assert draft_vocabulary([batch], 3, stop_ids=[2]).tolist() == [2, 5, 9]  # 9 thrice, then 5 / 7 / 3 / 0 once
    assert draft_vocabulary([batch], 100, stop_ids=[2]).tolist() == [0, 2, 3, 5, 7, 9]  # no more than were answered


def test_a_draft_vocabulary_restricts_the_drafts_and_stays_lossless(tiny_target, tiny_dream):
    engine = SpeculativeEngine(tiny_target)
    samples = scenes.samples("heldout", 3)
    answered = {t for s in samples for t in engine.generate(s.image, s.prompt, max_new_tokens=12).token_ids}
    vocab = sorted(answered | set(range(3, 40)))  # what the target says, and tokens it does not
    adapter = copy.deepcopy(tiny_dream.adapter)
    adapter.draft_ids = torch.tensor(vocab)
    for tree in (None, TreeShape(top_k=3, total=10)):
        drafter = DreamDrafter(adapter, tiny_target, tree=tree)
        for s in samples:
            plain = engine.generate(s.image, s.prompt, max_new_tokens=12)
            spec = engine.generate(s.image, s.prompt, drafter, gamma=3, max_new_tokens=12)
            assert spec.token_ids == plain.token_ids
            assert {t for r in spec.rounds for t in r.drafted} <= set(vocab)
    session, run = _started(engine, DreamDrafter(adapter, tiny_target), samples[0])
    probs = run.propose(session.context, 3).probs
    outside = torch.ones(probs.shape[-1], dtype=torch.bool)
    outside[vocab] = False
    assert probs[:, outside].eq(0).all()
    torch.testing.assert_close(probs.sum(-1), torch.ones(len(probs)))
