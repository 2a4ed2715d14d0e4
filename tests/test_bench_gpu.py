"""bench-gpu's code path on CPU with tiny models (the real sizes need a GPU): every part runs, speculation through
the scripted drafter stays lossless, and the scripted acceptance rate gives the τ asked for.

    python -m pytest -q tests/test_bench_gpu.py
"""

from __future__ import annotations

import pytest
import torch
from PIL import Image
from transformers import AutoTokenizer

from core.bench.gpu import SIZES, GpuBenchConfig, _accept_probability, _target, bench
from core.models.embedded import EMBEDDED_PATHS


@pytest.mark.parametrize("tau, gamma", [(1.0, 4), (2.0, 4), (3.5, 4), (5.0, 4), (3.0, 8)])
def test_acceptance_probability_gives_the_expected_accepted_length(tau, gamma):
    a = _accept_probability(tau, gamma)
    assert sum(a**k for k in range(gamma + 1)) == pytest.approx(tau, abs=1e-6)


def test_tau_outside_the_possible_range_is_refused():
    with pytest.raises(ValueError, match="tau"):
        _accept_probability(6.0, 4)


# The scripted drafter keeps each draft with probability a (E[accepted + 1] = 3 at gamma 4), so the reported τ
# (tokens / target forwards, prefill and the budget's shorter last rounds included) is random around 3: over 16
# tokens it spans 1.2..4, over 256 a simulation of the engine's rounds keeps 99.9 % of runs within 2.49..3.56.
# So a 256-token run (~2 s on CPU) and ±0.6: an acceptance that ignored the τ asked for (a of τ 2 or 4) fails.
# The bench seeds its random weights (GpuBenchConfig.seed): where the target's greedy continuation settles on ids only
# it has (8000..8191, beyond the drafter's vocabulary) nothing there can be drafted and τ falls to ~1 (about one
# unseeded run in ten).
SPEC_TOKENS, TAU, TAU_TOLERANCE = 256, 3.0, 0.6


def test_tiny_run_reports_every_part():
    report = bench(GpuBenchConfig(sizes="tiny", context=32, repeats=2, new_tokens=SPEC_TOKENS, taus=(TAU,),
                                  embedded_n=0, reap_tokens=128))
    assert set(report["steps"]) == {"target", "drafter"}
    assert all(row["eager_ms"] > 0 and row["floor_ms"] > 0 for row in report["steps"].values())
    assert list(report["verify_ms"]) == [1, 2, 4, 8, 16]
    (row,) = report["speculation"]
    assert row["lossless"] and row["bound"] > 0
    assert row["tau_asked"] == TAU and abs(row["tau"] - TAU) < TAU_TOLERANCE, row
    reap = report["reap_layerwise"]
    assert reap["same_ranking"] and reap["reap_scores_max_rel_diff"] < 1e-4 and reap["layerwise_s"] > 0


def test_random_target_reads_an_image_in_its_own_patches():
    # The hub-size tower cuts 14-pixel patches; a processor of the embedded target's 32 would not fit its embedding.
    tokenizer = AutoTokenizer.from_pretrained(EMBEDDED_PATHS["target"])
    target = _target("tiny-target", tokenizer, torch.device("cpu"), torch.float32)
    request = target.prepare(Image.new("RGB", (56, 84), (200, 40, 40)), "Describe the image.")
    assert request.pixel_values.shape[-1] == 3 * 2 * 14 * 14
    assert target.encode_image(request).pooler_output[0].shape == (6, SIZES["tiny-target"]["hidden_size"])
