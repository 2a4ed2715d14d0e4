"""The training mix (core/world/mix.py): world scenes and images beyond the world as one task space, which the target
and every drafter draw from and a saved training set rebuilds from (split, index, task).

    python -m pytest -q tests/test_mix.py
"""

from __future__ import annotations

import numpy as np
import pytest

from core.training.self_distill import training_samples
from core.world import mix, photos, scenes


def test_the_world_mix_is_exactly_the_worlds_samples():
    ours, theirs = mix.samples("train", 7, start=3), scenes.samples("train", 7, start=3)
    assert [(s.task, s.prompt, s.answer) for s in ours] == [(s.task, s.prompt, s.answer) for s in theirs]
    assert all(np.array_equal(np.asarray(a.image), np.asarray(b.image)) for a, b in zip(ours, theirs))


def test_world_and_photos_alternate_and_cover_every_task():
    drawn = mix.samples("train", 2 * len(photos.TASKS) * len(scenes.TASKS), mix="world,photos")
    assert [s.task.startswith(mix.PHOTOS) for s in drawn[:6]] == [False, True] * 3
    assert {s.task for s in drawn} == set(mix.tasks("world,photos"))
    assert mix.tasks("world,photos", "photos") == tuple(mix.PHOTOS + t for t in photos.TASKS)
    with pytest.raises(ValueError, match="mix"):
        mix.tasks("photos")


def test_a_photos_task_is_photos_sample_under_its_mixed_name():
    ours, theirs = mix.sample("heldout", 11, "photos/read"), photos.sample("heldout", 11, "read")
    assert ours.task == "photos/read" and (ours.prompt, ours.answer) == (theirs.prompt, theirs.answer)
    assert np.array_equal(np.asarray(ours.image), np.asarray(theirs.image))


def test_a_task_of_one_source_draws_that_sources_images_under_the_tasks_name():
    arms = mix.tasks("world,photos", "photos", by_source=True)
    assert len(arms) == len(photos.TASKS) * len(photos.SOURCES) and "photos/read@sign" in arms
    ours, theirs = mix.sample("train", 5, "photos/read@sign"), photos.sample("train", 5, "read", "sign")
    assert ours.task == "photos/read" and ours.answer == theirs.answer == photos.CANNOT_READ
    assert np.array_equal(np.asarray(ours.image), np.asarray(theirs.image))
    assert mix.sample("train", 5, "photos/read@drawing").answer == photos.NO_TEXT


def test_lazy_samples_read_as_the_list_does():
    lazy, listed = mix.Samples("train", 9, 40, "world,photos"), mix.samples("train", 9, 40, "world,photos")
    assert len(lazy) == 9 and [s.answer for s in lazy[2:5]] == [s.answer for s in listed[2:5]]
    assert lazy[-1].answer == listed[-1].answer
    with pytest.raises(IndexError):
        lazy[9]


def test_a_saved_set_rebuilds_photos_rows_from_split_index_and_task():
    """A distillation set keeps (split, index, task) per row; rows of images beyond the world rebuild the same image."""
    drawn = mix.samples("train", 4, start=1_000_000, mix="world,photos")
    rows = [{"split": "train", "index": 1_000_000 + i, "task": s.task, "prompt": s.prompt, "response": f"r{i}"}
            for i, s in enumerate(drawn)]
    rebuilt = training_samples({"metadata": {}, "rows": rows})
    assert [s.answer for s in rebuilt] == ["r0", "r1", "r2", "r3"]
    assert all(np.array_equal(np.asarray(a.image), np.asarray(b.image)) for a, b in zip(rebuilt, drawn))


def test_a_partner_asks_the_same_image_the_other_question():
    """`train target --paired`: a reading sample's image asked to be described and the reverse, under the partner
    task's name of the same source; a photograph that may show text is never asked to be read."""
    import random

    from core.training.target import with_partners

    read = mix.sample("train", 5, "photos/read@sign")
    described, task = mix.partner(read, "photos/read@sign", "train", 5)
    assert task == "photos/layout@sign" and described.task == "photos/layout" and described.image is read.image
    assert described.answer == photos.reference(read.image, "Describe the image.")
    assert mix.partner(described, task, "train", 5)[0].answer == photos.CANNOT_READ
    assert mix.partner(read, "photos/colours@sign", "train", 5) is None
    assert mix.partner(read, "caption", "train", 5) is None
    with_text = next(s for i in range(200) if (s := mix.sample("train", i, "photos/layout@photo")).holds_text)
    assert mix.partner(with_text, "photos/layout@photo", "train", 0) is None
    tasks = ["caption", "photos/read@text", "photos/colours@text", "photos/layout@drawing"]
    batch = [mix.sample("train", i, t) for i, t in enumerate(tasks)]
    paired, names = with_partners(batch, tasks, 1.0, random.Random(0), 0)
    assert names == ["caption", "photos/read@text", "photos/layout@text", "photos/colours@text"]
    assert paired[2].image is paired[1].image and [s.task for s in paired] == [n.partition("@")[0] for n in names]
    assert with_partners(batch, tasks, 0.0, random.Random(0), 0) == (batch, tasks)
    left_out = with_partners(batch, tasks, 1.0, random.Random(0), 0, lambda t: t != "photos/layout@text")
    assert left_out[1] == ["caption", "photos/read@text", "photos/colours@text", "photos/layout@drawing"]
