"""RunStats over hand-made rounds: τ, acceptance per position, and which rejections were the target's near-ties.

    python -m pytest -q tests/test_metrics.py
"""

from __future__ import annotations

import pytest

from core.decoding.metrics import NEAR_TIE, RunStats
from core.decoding.rounds import Round


def _round(drafted, target_probs, accepted, emitted, kind="correction", parents=None, path=None) -> Round:
    return Round(1, drafted, [0.5] * len(drafted), target_probs, accepted, emitted, kind, 0.0, 0.0, parents, path)


def test_stats_of_chain_and_tree_rounds():
    rounds = [
        Round(0, [], [], [], 0, [4], "prefill", 0.0, 0.0),
        _round([5, 6, 7], [0.9, NEAR_TIE + 0.1, 0.5], 1, [5, 8]),  # a draft the target nearly chose: a near-tie
        _round([5, 6], [0.9, 0.8], 2, [5, 6, 3], kind="bonus"),
        _round([5], [NEAR_TIE - 0.15], 0, [9]),  # a draft the target all but ruled out
        # a tree: node 0 accepted; its children (best first) turned down, the rejection counted is node 1's (p 0.3)
        _round([5, 6, 7], [0.9, 0.3, 0.01], 1, [5, 8], parents=[-1, 0, 0], path=[0]),
    ]
    stats = RunStats.of(rounds, seconds=2.0)
    assert stats.tokens == 1 + 2 + 3 + 1 + 2 and stats.forwards == 5 and stats.tau == pytest.approx(9 / 5)
    assert stats.drafted == 9 and stats.accepted == 4 and stats.acceptance == pytest.approx(4 / 9)
    assert stats.position_acceptance == pytest.approx([3 / 4, 1 / 3, 0.0])
    assert stats.rejections == 3 and stats.near_tie_rejections == 2 and stats.near_tie_share == pytest.approx(2 / 3)
    assert stats.tokens_per_second == pytest.approx(4.5)


def test_plain_decoding_has_no_rejections():
    stats = RunStats.of([Round(0, [], [], [], 0, [4], "prefill", 0.0, 0.0),
                         Round(1, [], [], [], 0, [5], "plain", 0.0, 0.0)], seconds=1.0)
    assert stats.rejections == 0 and stats.near_tie_share is None and stats.acceptance is None and stats.tau == 1.0
