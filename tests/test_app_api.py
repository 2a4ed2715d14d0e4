"""The Gradio app through its public API (gradio_client), launched in-process by the `app_url` fixture:
streaming order, and lossless output against plain decoding computed via core (bad input: tests/test_bad_inputs.py).

    python -m pytest -q tests/test_app_api.py
"""

from __future__ import annotations

import pytest
from gradio_client import handle_file
from PIL import Image

from core.decoding.engine import SpeculativeEngine
from core.models.registry import DRAFTERS, load_target
from ui.models import has_weights

MAX_NEW = 24


def _generate(client, image, prompt, drafter="none", gamma=4, temperature=0.0, max_new=MAX_NEW):
    return client.submit(image, prompt, "embedded", drafter, gamma, temperature, 1.0, 0, max_new, api_name="/generate")


def _sent(events, output: int) -> list:
    """The values one output received, in order; events that skip it (gr.skip()) arrive as update dicts."""
    return [e[output] for e in events if not (isinstance(e[output], dict) and e[output].get("__type__") == "update")]


def _ar_text(path, prompt) -> str:
    return SpeculativeEngine(load_target("embedded")).generate(Image.open(path), prompt, None, max_new_tokens=MAX_NEW).text


@pytest.mark.parametrize("drafter", ["none", "text"])
def test_generate_streams_rounds_in_order_and_matches_ar(client, world_png, drafter):
    if not has_weights(drafter):
        pytest.skip(f"the {drafter!r} drafter has no trained weights in assets/models yet")
    path, prompt = world_png
    events = list(_generate(client, handle_file(path), prompt, drafter))
    logs = [log["data"] for log in _sent(events, 3)]
    assert len(logs) >= 2, "the answer should stream over several events"
    for before, after in zip(logs, logs[1:]):
        assert after[: len(before)] == before and len(after) <= len(before) + 1  # one new round per event at most
    assert [row[0] for row in logs[-1]] == list(range(len(logs[-1])))  # round indices 0, 1, 2, ...
    assert _sent(events, 4)[-1] == _ar_text(path, prompt)
    stats, tokens = _sent(events, 1)[-1], _sent(events, 0)[-1]
    assert f"<div class='stat-value'>{len(logs[-1])}</div><div class='stat-label'>target forwards" in stats
    rejected = tokens.count("tok rejected") - 1  # one rejected draft shown per round that had one; the legend's too
    assert f"<div class='stat-value'>{rejected} (" in stats and "rejected drafts (near-ties)" in stats
    assert _sent(events, 2), "the chart is drawn"
    if drafter != "none":
        assert "tok accepted" in tokens or "tok rejected" in tokens


def test_race_is_lossless_and_reports_missing_drafters(client, world_png):
    path, prompt = world_png
    board, verdict, summary, *_ = client.predict(handle_file(path), prompt, list(DRAFTERS), 4, MAX_NEW, api_name="/race")
    rows = {row[0]: row for row in summary["data"]}
    ready = [name for name in DRAFTERS if has_weights(name)]
    assert sorted(rows) == sorted(["AR", *ready])
    assert all(row[-1] == "yes" for row in rows.values())
    assert ("Lossless" in verdict) == bool(ready)
    for name in set(DRAFTERS) - set(ready):
        assert f"The {name!r} drafter has no trained weights" in board.replace("&#x27;", "'")


@pytest.mark.parametrize("drafter", ["text", "massv"])
def test_tree_drafting_reaches_every_drafter_and_stays_lossless(client, world_png, drafter):
    """The settings' tree mode is not DREAM's and EAGLE-3's alone: the text drafter and MASSV grow trees too."""
    path, prompt = world_png
    outputs = list(client.submit(handle_file(path), prompt, "embedded", drafter, 4, 0.0, 1.0, 0, MAX_NEW, 0.75, "tree",
                                 4, 16, 0, api_name="/generate"))
    assert _sent(outputs, 4)[-1] == _ar_text(path, prompt)
    assert any(e["tree"] for e in _sent(outputs, 5)[-1])  # rounds that verified a branching tree, not only chains


def test_a_race_of_trees_is_lossless(client, world_png):
    path, prompt = world_png
    ready = [name for name in DRAFTERS if has_weights(name)]
    board, verdict, summary, events, *_ = client.predict(handle_file(path), prompt, ready, 4, MAX_NEW, "tree",
                                                         api_name="/race")
    rows = {row[0]: row for row in summary["data"]}
    assert sorted(rows) == sorted(["AR", *(f"{name} (tree)" for name in ready)])
    assert all(row[-1] == "yes" for row in rows.values()) and "Lossless" in verdict
    assert all(any(e["tree"] for e in events[f"{name} (tree)"]) for name in ready)
