"""The speculative engine on tiny random models: lossless greedy, exact KV rollback, consistent events."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from PIL import Image

from core.decoding.engine import SpeculativeEngine
from core.decoding.sampling import SamplingConfig
from core.world import scenes


def _images():
    """World images plus images that are not from the world (other sizes, aspect ratios, noise)."""
    gen = torch.Generator().manual_seed(0)
    noise = (torch.rand(70, 130, 3, generator=gen) * 255).byte().numpy()
    return [s.image for s in scenes.samples("heldout", 4)] + [
        Image.fromarray(noise),
        Image.new("RGB", (300, 40), (10, 200, 30)),
        None,  # text-only prompt
    ]


@pytest.mark.parametrize("gamma", [1, 3, 6])
@pytest.mark.parametrize("drafter_name", ["tiny_text_drafter", "twin_drafter"])
def test_greedy_speculative_equals_plain_decoding(tiny_target, drafter_name, gamma, request):
    drafter = request.getfixturevalue(drafter_name)
    engine = SpeculativeEngine(tiny_target)
    for i, image in enumerate(_images()):
        prompt = ["Describe the image.", "What is written here?", "How many circles are there?"][i % 3]
        plain = engine.generate(image, prompt, max_new_tokens=24)
        spec = engine.generate(image, prompt, drafter, gamma=gamma, max_new_tokens=24)
        assert spec.token_ids == plain.token_ids
        assert plain.tau == 1.0
        assert spec.target_forwards <= plain.target_forwards


def test_twin_drafter_is_accepted_and_earns_bonus_tokens(tiny_target, twin_drafter):
    engine = SpeculativeEngine(tiny_target)
    out = engine.generate(None, "Read the text in the image.", twin_drafter, gamma=4, max_new_tokens=30)
    assert out.tau > 3.0
    assert any(r.kind == "bonus" for r in out.rounds)


def test_rounds_are_consistent_with_the_emitted_text(tiny_target, tiny_text_drafter):
    engine = SpeculativeEngine(tiny_target)
    image = scenes.sample("heldout", 1).image
    rounds = list(engine.stream(image, "Describe the image.", tiny_text_drafter, gamma=3, max_new_tokens=20))
    assert rounds[0].kind == "prefill" and len(rounds[0].emitted) == 1
    assert [r.index for r in rounds] == list(range(len(rounds)))
    for r in rounds[1:]:
        assert r.emitted[: r.accepted] == r.drafted[: r.accepted]
        assert len(r.emitted) <= r.accepted + 1
        assert len(r.draft_probs) == len(r.target_probs) == len(r.drafted)
        if r.kind == "correction":
            assert r.rejected is not None and r.rejected != r.emitted[-1]
    ids = [t for r in rounds for t in r.emitted]
    assert len(ids) == 20 or ids[-1] in tiny_target.eos_token_ids


def test_kv_rollback_is_exact(tiny_target, tiny_text_drafter):
    """After speculative rounds the target's cache equals that of plain decoding of the same committed tokens."""
    engine = SpeculativeEngine(tiny_target)
    image = scenes.sample("heldout", 2).image
    with engine.open(image, "Describe the image.", tiny_text_drafter, gamma=4) as session:
        rounds = [session.step() for _ in range(6)]  # the prefill, then five speculative rounds
        assert all(r is not None for r in rounds) and sum(bool(r.drafted) for r in rounds) == 5
        held = session.cache.get_seq_length()
        assert held == session.context.request.input_ids.shape[1] + len(session.generated) - 1
        with engine.open(image, "Describe the image.") as plain:
            while len(plain.generated) < len(session.generated):
                plain.step()
            assert plain.generated == session.generated  # greedy: lossless
            for spec_layer, plain_layer in zip(session.cache.layers, plain.cache.layers):
                torch.testing.assert_close(spec_layer.keys, plain_layer.keys, atol=1e-5, rtol=1e-4)
                torch.testing.assert_close(spec_layer.values, plain_layer.values, atol=1e-5, rtol=1e-4)


def test_sampling_with_a_seed_is_reproducible(tiny_target, tiny_text_drafter):
    engine = SpeculativeEngine(tiny_target)
    cfg = SamplingConfig(temperature=1.0, top_p=0.9)
    a = engine.generate(None, "Describe the image.", tiny_text_drafter, sampling=cfg, seed=7, max_new_tokens=12)
    b = engine.generate(None, "Describe the image.", tiny_text_drafter, sampling=cfg, seed=7, max_new_tokens=12)
    assert a.token_ids == b.token_ids


@pytest.mark.parametrize("drafter_name", ["twin_drafter", "tiny_dream"])
def test_a_chain_stops_after_an_end_of_sequence_draft(tiny_target, drafter_name, request):
    drafter = request.getfixturevalue(drafter_name)
    engine = SpeculativeEngine(tiny_target)
    s = scenes.sample("heldout", 0)

    def propose(stop_ids):
        session = engine.open(s.image, s.prompt, drafter)
        session.step()  # the prefill
        context = replace(session.context, stop_ids=frozenset(stop_ids))
        return drafter.start(context, session.prefill).propose(context, 5).tokens

    full = propose([])
    assert len(full) == 5
    last_new = max(i for i, t in enumerate(full) if t not in full[:i])  # stopping there must cut the chain there
    assert propose([full[last_new]]) == full[: last_new + 1]


def test_a_chain_stops_below_min_draft_prob_and_stays_lossless(tiny_target, tiny_text_drafter):
    engine = SpeculativeEngine(tiny_target)
    stopped_early = 0
    for s in scenes.samples("heldout", 4):
        plain = engine.generate(s.image, s.prompt, max_new_tokens=20)
        spec = engine.generate(s.image, s.prompt, tiny_text_drafter, gamma=6, max_new_tokens=20, min_draft_prob=0.2)
        assert spec.token_ids == plain.token_ids
        done = len(spec.rounds[0].emitted)
        for r in spec.rounds[1:]:
            assert all(q >= 0.2 for q in r.draft_probs[:-1])  # every draft before the last cleared the bar
            if len(r.drafted) < min(6, 20 - done - 1):  # shorter than gamma and the token budget allow
                assert r.draft_probs[-1] < 0.2 or r.drafted[-1] in tiny_target.eos_token_ids
                stopped_early += 1
            done += len(r.emitted)
    assert stopped_early


@pytest.mark.parametrize("kwargs", [{"gamma": 0}, {"gamma": -1}, {"gamma": 1000}, {"max_new_tokens": 0},
                                    {"min_draft_prob": -0.1}, {"min_draft_prob": 1.0}])
def test_bad_settings_are_rejected(tiny_target, tiny_text_drafter, kwargs):
    with pytest.raises(ValueError):
        SpeculativeEngine(tiny_target).generate(None, "hi", tiny_text_drafter, **kwargs)


def test_a_committed_id_past_the_drafters_rows_is_read_as_its_last_row(tiny_target, tiny_text_drafter):
    """A target with more vocabulary rows than its drafter (Qwen2.5-VL-7B vs Qwen2.5-1.5B) can commit an id the
    drafter has no embedding for; the drafter must read it (as its last row) rather than fail."""
    engine = SpeculativeEngine(tiny_target)
    s = scenes.sample("heldout", 3)
    rows = tiny_text_drafter.model.get_input_embeddings().num_embeddings
    proposals = []
    for committed in (rows + 5, rows - 1):
        session = engine.open(s.image, s.prompt, tiny_text_drafter)
        session.step()  # the prefill
        run = tiny_text_drafter.start(session.context, session.prefill)
        session.committed.tokens.append(committed)  # as if the target had committed it
        proposals.append(run.propose(session.context, 3).tokens)
    assert proposals[0] == proposals[1]
