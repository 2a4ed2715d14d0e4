"""The replay's data: each drafted token's status (chain and tree), the JSON events and per-round views built from
real rounds, and the draft-tree figure (one node per drafted token, coloured by status, branches kept together).

    python -m pytest -q tests/test_replay.py
"""

from __future__ import annotations

from core.decoding.engine import SpeculativeEngine
from core.decoding.rounds import Round
from core.world import scenes
from ui.replay import STATUS_COLOURS, _tidy_rows, events_of, tree_figure, views_of


def _round(drafted, accepted, emitted, parents=None, path=None) -> Round:
    n = len(drafted)
    return Round(1, drafted, [0.5] * n, [0.25] * n, accepted, emitted, "correction", 0.0, 0.0, parents, path)


def test_chain_statuses():
    assert _round([5, 6, 7, 8], 2, [5, 6, 9]).statuses() == ["accepted", "accepted", "rejected", "not reached"]
    assert _round([5, 6], 2, [5, 6, 1]).statuses() == ["accepted", "accepted"]
    # the token budget cut the round after one accepted draft: the second was never emitted
    assert _round([5, 6, 7], 2, [5]).statuses() == ["accepted", "not reached", "rejected"]


def test_tree_statuses():
    #        -1
    #      /  |  \\
    #     0   1   2        path: 1 -> 4
    #    / \\   \\
    #   3   5   4
    #           |
    #           6
    parents = [-1, -1, -1, 0, 1, 0, 4]
    r = _round([10, 11, 12, 13, 14, 15, 16], 2, [11, 14, 99], parents, [1, 4])
    assert r.statuses() == ["rejected", "accepted", "rejected", "not reached", "accepted", "not reached", "rejected"]


def test_tidy_rows_keep_branches_together():
    parents = [-1, -1, 0, 0, 1]
    y = _tidy_rows(parents)  # root first
    leaves = {2: y[3], 3: y[4], 4: y[5]}
    assert leaves[2] > leaves[3] > leaves[4]  # depth-first order, top to bottom
    assert y[1] == (leaves[2] + leaves[3]) / 2 and y[2] == leaves[4]  # a parent between its children
    assert y[0] == (y[1] + y[2]) / 2


def test_events_views_and_tree_of_a_real_run(tiny_target, twin_drafter):
    engine = SpeculativeEngine(tiny_target)
    s = scenes.sample("heldout", 1)
    gen = engine.generate(s.image, s.prompt, twin_drafter, gamma=4, max_new_tokens=24)
    decode = lambda t: tiny_target.tokenizer.decode([t])  # noqa: E731
    events = events_of(gen.rounds, decode)
    views = views_of(gen.rounds, events, decode)
    assert len(events) == len(views) == len(gen.rounds)
    for e, r, view in zip(events, gen.rounds, views):
        assert [d["id"] for d in e["drafted"]] == r.drafted and [t["id"] for t in e["emitted"]] == r.emitted
        assert [d["status"] for d in e["drafted"]] == r.statuses() and e["accepted"] == r.accepted
        assert f"Round {r.index} of {len(gen.rounds) - 1}" in view
        assert view.count("class='draft-tok") == len(r.drafted)
    text = views[-1].split("class='spec-text'")[1]  # after the legend: every emitted token, and each rejected draft
    rejected = sum(d["status"] == "rejected" for e in events for d in e["drafted"])
    assert text.count("class='tok ") == gen.new_tokens + rejected
    drafting = next(e for e in events if e["drafted"])
    fig = tree_figure(drafting)
    nodes = next(t for t in fig.data if t.name == "drafted")
    assert len(nodes.x) == len(drafting["drafted"])
    assert list(nodes.marker.color) == [STATUS_COLOURS[d["status"]] for d in drafting["drafted"]]
    assert "no draft" in tree_figure(events[0]).layout.title.text  # the prefill round
