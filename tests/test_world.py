"""The procedural world: deterministic, split, and answers that depend on the image."""

from __future__ import annotations

import numpy as np

from core.world import scenes


def test_samples_are_deterministic_and_splits_differ():
    a, b = scenes.sample("train", 5), scenes.sample("train", 5)
    assert a.prompt == b.prompt and a.answer == b.answer
    assert np.array_equal(np.asarray(a.image), np.asarray(b.image))
    held = scenes.sample("heldout", 5)
    assert not np.array_equal(np.asarray(a.image), np.asarray(held.image))


def test_every_task_family_and_caption_length():
    batch = scenes.samples("heldout", 40)
    assert {s.task for s in batch} == set(scenes.TASKS)
    for s in batch:
        assert s.image.size == (scenes.IMAGE_SIZE, scenes.IMAGE_SIZE) and s.answer
    captions = [s for s in batch if s.task == "caption"]
    assert all(12 <= len(s.answer.split()) <= 60 for s in captions)


def test_answers_depend_on_the_image():
    """Same prompt, different images, different answers: a model cannot answer from the text alone."""
    answers = {s.answer for s in scenes.samples("heldout", 80, ("ocr",))}
    assert len(answers) > 60
    colours = [s for s in scenes.samples("heldout", 200, ("vqa",)) if s.prompt.startswith("What colour")]
    assert len({s.answer for s in colours}) == len(scenes.COLOURS)


def test_caption_objects_are_drawn_where_the_caption_says():
    s = scenes.sample("heldout", 3, "caption")
    pixels = np.asarray(s.image).astype(int)
    for position in scenes.POSITIONS:
        row, col = divmod(scenes.POSITIONS.index(position), 3)
        cell = pixels[row * 32 + 10: row * 32 + 22, col * 32 + 10: col * 32 + 22]
        has_object = cell.std(axis=(0, 1)).max() > 20 or (cell.mean(axis=(0, 1)).min() < 200)
        said = (f"at the {position}" in s.answer) or (position == "center" and "in the center" in s.answer)
        assert has_object == said, position
