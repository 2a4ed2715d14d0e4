"""eval-target's never-inventing figures (core/bench/evaluate.py): what counts as invented, text presence recall and
no-text precision per source, and a user's folder whose metadata.jsonl says which images hold text.

    python -m pytest -q tests/test_eval_text.py
"""

from __future__ import annotations

import json

import pytest
from PIL import Image

from core.bench import evaluate
from core.world import photos, reference, scenes

LAYOUT = "A bright image, mostly white and grey. Top left: white."


def test_reading_answers_that_name_words_or_deny_text_invent():
    assert reference.reading_invents("DOG", holds_text=True)
    assert reference.reading_invents("DOG", holds_text=False)
    assert reference.reading_invents(photos.NO_TEXT, holds_text=True)
    assert not reference.reading_invents(photos.NO_TEXT, holds_text=False)
    assert not reference.reading_invents(photos.CANNOT_READ, holds_text=True)
    assert not reference.reading_invents(photos.CANNOT_READ, holds_text=False)  # cautious, not invented


def test_a_world_caption_for_an_image_beyond_the_world_invents():
    page = Image.new("RGB", (320, 120), (250, 250, 245))
    caption = "There are two objects: a large purple square in the center and a small orange triangle."
    assert evaluate.describing_invents(caption, page)
    assert not evaluate.describing_invents(LAYOUT, page)
    world = scenes.sample("heldout", 0, "caption").image
    assert not evaluate.describing_invents(caption, world)  # a world scene's caption is its answer


def test_scores_pool_reading_and_describing():
    rows = [{"holds_text": True, "read": photos.CANNOT_READ, "read_invents": False, "described": LAYOUT,
             "describe_invents": False},
            {"holds_text": True, "read": photos.NO_TEXT, "read_invents": True, "described": "Two objects.",
             "describe_invents": True},
            {"holds_text": False, "read": photos.NO_TEXT, "read_invents": False, "described": LAYOUT,
             "describe_invents": False, "region_agreement": 0.5},
            {"holds_text": False, "read": photos.CANNOT_READ, "read_invents": False, "described": None}]
    scores = evaluate.text_scores(rows)
    assert scores["text_presence_recall"] == 0.5 and scores["no_text_precision"] == 0.5
    assert scores["invented"] == 2 and scores["invented_rate"] == 2 / 7
    assert scores["region_agreement"] == 0.5 and (scores["with_text"], scores["without_text"]) == (2, 2)


def test_every_source_is_scored_on_the_real_tiny_target(tiny_target):
    result = evaluate.on_sources(tiny_target, 1, ("document", "drawing", "procedural"), upper_case=2)
    per = result["per_source"]
    assert per["document"]["with_text"] == 1 and per["drawing"]["without_text"] == 1
    assert per["procedural"]["region_agreement"] is not None
    assert result["overall"]["images"] == 3 and 0 <= result["overall"]["invented_rate"] <= 1
    row = per["document"]["examples"][0]
    assert row["read_invents"] == reference.reading_invents(row["read"], True)
    if "upper_case_layout" in result:  # scikit-image installed
        assert result["upper_case_layout"]["images"] == 2
    with pytest.raises(ValueError, match="unknown sources"):
        evaluate.on_sources(tiny_target, 1, ("tweets",))


def test_wordings_never_trained_on_are_scored_against_the_trained_one(tiny_target):
    result = evaluate.on_wordings(tiny_target, 2, ("sign", "drawing"))
    assert set(result["per_task"]) == set(photos.HELDOUT_WORDINGS) and set(result["per_source"]) == {"sign", "drawing"}
    for task in result["per_task"].values():
        assert task["answers"] == 4 and 0 <= task["agreement"] <= 1 and 0 <= task["invented"] <= 4
    assert result["per_task"]["colours"]["invented"] == 0  # only reading and describing answers can invent
    tasks = result["per_task"].values()
    assert result["agreement"] == pytest.approx(sum(t["agreement"] for t in tasks) / len(tasks))  # equal counts
    with pytest.raises(ValueError, match="unknown sources"):
        evaluate.on_wordings(tiny_target, 1, ("tweets",))


def test_a_users_folder_says_which_images_hold_text(tmp_path, tiny_target):
    from core.training.training_data import from_folder

    sign = photos.sample("heldout", 0, "read", "sign").image
    sketch = photos.sample("heldout", 0, "read", "drawing").image
    sign.save(tmp_path / "sign.png")
    sketch.save(tmp_path / "sketch.png")
    rows = [{"file_name": "sign.png", "prompt": "What is written here?", "has_text": True},
            {"file_name": "sketch.png", "prompt": "Describe the image.", "has_text": False}]
    (tmp_path / "metadata.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = evaluate.on_images(tiny_target, from_folder(str(tmp_path)))
    never = result["never_inventing"]
    assert never["images"] == 2 and never["with_text"] == 1 and never["without_text"] == 0
    read, described = result["rows"]
    assert read["read_invents"] == reference.reading_invents(read["read"], True)
    assert described["describe_invents"] == evaluate.describing_invents(described["described"], sketch)
    (tmp_path / "metadata.jsonl").write_text(json.dumps(rows[0] | {"has_text": "yes"}) + "\n")
    with pytest.raises(ValueError, match="has_text"):
        from_folder(str(tmp_path))
