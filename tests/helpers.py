"""What several test modules share (tests import it as `helpers`; no test module imports another, or conftest):
the tiny model sizes of tests/conftest.py's fixtures, and the chi-square test of the sampling tests.

It holds no tests; the tests that use it run with `python -m pytest -q tests/`.
"""

from __future__ import annotations

from core.models.embedded import DrafterSize, TargetSize

# Tiny random models of the real architectures (tests/conftest.py builds them; tests/test_presets.py lays one out
# under a hub preset's name).
TINY_TARGET = TargetSize(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128, vision_hidden=32,
                         vision_depth=1, vision_heads=2)
TINY_DRAFTER = DrafterSize(hidden=32, layers=1, heads=2, kv_heads=1, intermediate=64)

# Chi-square critical values at p = 0.001: a correct implementation fails these tests once in a thousand seeds,
# and the seeds are fixed.
CHI2_999 = {3: 16.27, 4: 18.47, 5: 20.52, 6: 22.46, 7: 24.32}


def chi_square(counts: dict, probs: dict) -> tuple[float, int]:
    """Pearson's statistic of observed `counts` against the law `probs` (outcome -> probability), and its degrees
    of freedom; an outcome the law gives probability 0 fails at once."""
    n = sum(counts.values())
    cells = [k for k, p in probs.items() if p > 0]
    assert all(k in cells for k in counts), "an outcome the target gives probability 0 was produced"
    stat = sum((counts.get(k, 0) - n * probs[k]) ** 2 / (n * probs[k]) for k in cells)
    return stat, len(cells) - 1
