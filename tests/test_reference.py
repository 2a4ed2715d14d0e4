"""What an answer is checked against (core/world/reference.py) and the app's line for it: a reading answer that names
words beyond the world differs (invented), "There is no text." on an image with text differs, the two honest answers
match where the app knows whether the image holds text and are not compared where it does not, a world caption for
an image that is not a world scene differs, and world scenes are told from pages and photographs.

    python -m pytest -q tests/test_reference.py
"""

from __future__ import annotations

import pytest
from PIL import Image

from core.world import photos, scenes
from core.world.reference import check, looks_like_world
from ui.examples import known_text, text_examples
from ui.spec_tab import what_the_pixels_say

CAPTION = "There are two objects: a large purple square in the center and a small orange triangle at the bottom right."


def test_world_scenes_are_told_from_other_images():
    assert all(looks_like_world(s.image) for s in scenes.samples("heldout", 8))
    others = [photos.sample("heldout", i, "read", source).image for i, source in
              enumerate(("document", "screenshot", "drawing", "procedural", "sign", "text"))]
    assert not any(looks_like_world(image) for image in others)
    # nor is a page of the world's size in a colour its canvas never has
    assert not looks_like_world(Image.new("RGB", (96, 96), (200, 200, 200)))


@pytest.mark.parametrize("holds_text", [True, False, None])
def test_a_reading_answer_that_names_words_is_invented(holds_text):
    page = photos.sample("heldout", 0, "read", "document").image
    verdict = check(page, "What is written here?", "DOG", holds_text)
    assert verdict.outcome == "differs" and "invented" in verdict.reason


def test_honest_readings_are_compared_only_where_the_text_is_known():
    page = photos.sample("heldout", 0, "read", "document").image
    assert check(page, "What is written here?", photos.CANNOT_READ, True).outcome == "matches"
    missed = check(page, "Read the text in the image.", photos.NO_TEXT, True)
    assert missed.outcome == "differs" and "no text where there is" in missed.reason
    assert check(page, "What is written here?", photos.NO_TEXT, False).outcome == "matches"
    assert check(page, "What is written here?", photos.CANNOT_READ, False).outcome == "differs"
    assert check(page, "what is written here", photos.NO_TEXT, None).outcome is None  # any form of the question
    assert check(page, "What is written here?", None, True).expected == photos.CANNOT_READ


def test_a_world_scene_is_read_by_the_target_and_not_compared():
    ocr = scenes.sample("heldout", 2, "ocr")
    assert check(ocr.image, ocr.prompt, ocr.answer).outcome is None


def test_a_world_caption_for_another_image_is_invented():
    page = photos.sample("heldout", 0, "layout", "document").image
    verdict = check(page, "Describe the image.", CAPTION)
    assert verdict.expected.startswith("A ") and verdict.outcome == "differs" and "invented" in verdict.reason
    world = scenes.sample("heldout", 0, "caption")
    assert "more specific" in check(world.image, "Describe the image.", world.answer).reason


def test_the_app_knows_its_text_examples():
    rows = text_examples()
    assert len(rows) == 4
    held = [known_text(Image.open(path)) for path, _ in rows]
    assert held == [True, True, True, False]  # a document, a sign, a screenshot; then a drawing without text
    assert known_text(Image.new("RGB", (50, 50))) is None
    path, prompt = rows[0]
    image = Image.open(path)
    assert "**matches**" in what_the_pixels_say(image, prompt, photos.CANNOT_READ)
    line = what_the_pixels_say(image, prompt, "OPEN 24 HOURS")
    assert "**differs**" in line and "invented" in line
    unknown = Image.open(path).resize((300, 400))  # the same page uploaded at another size: not known
    assert "not compared" in what_the_pixels_say(unknown, prompt, photos.NO_TEXT)
