"""Sampling is lossless: speculative outputs follow the target's own distribution (chi-square tests).

    python -m pytest -q tests/test_sampling.py
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
from helpers import CHI2_999, chi_square

from core.decoding.engine import SpeculativeEngine
from core.decoding.sampling import SamplingConfig, distribution, verify
from core.drafters.text import TextDrafter


def test_verify_first_token_follows_target_distribution():
    gen = torch.Generator().manual_seed(0)
    cfg = SamplingConfig(temperature=1.0)
    p = torch.tensor([[0.5, 0.2, 0.15, 0.1, 0.05]] * 2)
    q = torch.tensor([[0.1, 0.1, 0.2, 0.3, 0.3]])
    counts = {}
    for _ in range(20000):
        x = int(torch.multinomial(q[0], 1, generator=gen))
        accepted, token = verify([x], q, p, cfg, gen)
        first = x if accepted else token
        counts[first] = counts.get(first, 0) + 1
    stat, df = chi_square(counts, dict(enumerate(p[0].tolist())))
    assert stat < CHI2_999[df]


def test_greedy_verify_accepts_the_matching_prefix():
    p = torch.eye(5)[[2, 4, 1, 0]]  # target argmax: 2, 4, 1, then 0 at the bonus position
    q = torch.full((3, 5), 0.2)
    gen = torch.Generator()
    assert verify([2, 4, 1], q, p, SamplingConfig(), gen) == (3, 0)
    assert verify([2, 3, 1], q, p, SamplingConfig(), gen) == (1, 4)
    assert verify([0, 4, 1], q, p, SamplingConfig(), gen) == (0, 2)


@pytest.fixture(scope="module")
def noisy_twin(twin_drafter):
    """Close to the target but not equal: drafts are accepted often and rejected often."""
    model = copy.deepcopy(twin_drafter.model)
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * p.std().clamp(min=1e-3) * 0.5)
    return TextDrafter(model, "noisy-twin")


@torch.no_grad()
def exact_target_law(target, prompt: str, cfg: SamplingConfig, length: int) -> dict:
    """P(first `length` tokens) under the target, enumerated over the (top-k truncated) support."""
    ids = target.prepare(None, prompt).input_ids[0].tolist()
    law = {(): 1.0}
    for _ in range(length):
        grown = {}
        for prefix, mass in law.items():
            logits = target.model(input_ids=torch.tensor([ids + list(prefix)])).logits[0, -1:]
            probs = distribution(logits, cfg)[0]
            for t in probs.nonzero().view(-1).tolist():
                grown[prefix + (t,)] = mass * float(probs[t])
        law = grown
    return law


@pytest.mark.parametrize("min_draft_prob", [0.0, 0.4])  # a chain's length may depend on the drafter's own state
def test_speculative_sampling_matches_the_target_distribution(tiny_target, noisy_twin, min_draft_prob):
    cfg = SamplingConfig(temperature=1.0, top_k=2)
    prompt = "Describe the image."
    law = exact_target_law(tiny_target, prompt, cfg, 3)
    engine = SpeculativeEngine(tiny_target)
    counts, drafted, accepted = {}, 0, 0
    for seed in range(600):
        out = engine.generate(None, prompt, noisy_twin, gamma=2, sampling=cfg, max_new_tokens=3, seed=seed,
                              min_draft_prob=min_draft_prob)
        key = tuple(out.token_ids[:3])
        counts[key] = counts.get(key, 0) + 1
        drafted += sum(len(r.drafted) for r in out.rounds)
        accepted += sum(r.accepted for r in out.rounds)
    assert 0.2 < accepted / drafted < 0.95  # both acceptance and the residual resampling were exercised
    stat, df = chi_square(counts, law)
    assert stat < CHI2_999[df], (stat, df)


@pytest.mark.parametrize("kwargs", [
    {"temperature": math.nan}, {"temperature": -0.1}, {"temperature": math.inf},
    {"top_p": 0.0}, {"top_p": 1.5}, {"top_p": -1}, {"top_k": -1},
])
def test_bad_sampling_settings_are_rejected(kwargs):
    with pytest.raises(ValueError):
        SamplingConfig(**kwargs)


def test_temperature_top_k_top_p_are_applied_in_order():
    cfg = SamplingConfig(temperature=0.5, top_k=3, top_p=0.9)
    logits = torch.tensor([[3.0, 2.5, 1.0, 0.5, -1.0]])
    tempered = torch.softmax(logits[0, :3] / 0.5, -1)  # top-3, then temperature
    assert tempered[0] < 0.9 < tempered[:2].sum()  # so top-p keeps exactly the first two
    expected = torch.zeros(5)
    expected[:2] = tempered[:2] / tempered[:2].sum()
    torch.testing.assert_close(distribution(logits, cfg)[0], expected)
