"""Images with text the target does not read, and light images without any (core/world/text_images.py): pure
functions of their seed, text that is drawn where the mask says, regions that follow the mask, text of any length,
drawings and illustrations with no text at all.

    python -m pytest -q tests/test_text_images.py
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from core.world import image_sources, text_images


@pytest.mark.parametrize("source", text_images.SOURCES)
def test_every_source_draws_deterministically_at_many_sizes(source):
    drawn = [text_images.draw_with_mask(source, random.Random(f"{source}/{seed}"), "train") for seed in range(12)]
    again = text_images.draw_with_mask(source, random.Random(f"{source}/0"), "train")
    assert drawn[0][0].tobytes() == again[0].tobytes() and drawn[0][1].tobytes() == again[1].tobytes()
    drawn = [(image, text_images.text_regions(mask)) for image, mask in drawn]
    assert all(image.mode == "RGB" and len(regions) == 9 for image, regions in drawn)
    assert len({image.size for image, _ in drawn}) > 6
    if source in text_images.WITH_TEXT:
        assert all(any(regions) for _, regions in drawn)  # text drawn thick enough to count somewhere
    else:
        assert not any(any(regions) for _, regions in drawn)


@pytest.mark.parametrize("source", text_images.WITH_TEXT)
def test_the_mask_marks_where_the_text_is_drawn(source):
    """Ink in the mask changes the pixels it covers: the mask is the text, not a guess of where it went."""
    for seed in range(6):
        image, mask = text_images.GENERATORS[source](random.Random(seed), "train")
        ink = np.asarray(mask) > 0  # anti-aliased: thin text shrunk to fit leaves only grey ink
        assert ink.any() and mask.size == image.size
        grey = np.asarray(image.convert("L"), dtype=float)
        # Text stands out from what is around it: the inked pixels differ from the image's pixels near them.
        rows, cols = np.nonzero(ink)
        y0, y1, x0, x1 = rows.min(), rows.max() + 1, cols.min(), cols.max() + 1
        box = grey[y0:y1, x0:x1]
        assert box.std() > 5, (source, seed)


def test_regions_follow_the_mask():
    mask = Image.new("L", (300, 300), 0)
    mask.paste(255, (210, 0, 300, 90))  # ink in the top right ninth only
    assert text_images.text_regions(mask) == (False, False, True) + (False,) * 6
    faint = Image.new("L", (960, 960), 0)
    faint.paste(255, (0, 0, 2, 2))  # four pixels of 102,400 in a region: under REGION_INK
    assert not any(text_images.text_regions(faint))


def test_text_has_any_length_words_beyond_the_world_and_punctuation():
    from core.world.scenes import OCR_WORDS

    rng = random.Random(0)
    lines = [text_images.line(rng, rng.randint(1, 40)) for _ in range(300)]
    assert min(len(t) for t in lines) <= 2 and max(len(t) for t in lines) >= 35
    words = {w.strip(text_images.PUNCTUATION) for t in lines for w in t.split()}
    assert len(words - set(OCR_WORDS)) > 200
    assert any(c.isdigit() for t in lines for c in t) and any(c in text_images.PUNCTUATION for t in lines for c in t)


def test_fonts_come_from_the_machine_or_pillow():
    rng = random.Random(1)
    face = text_images.font(rng, 20)
    assert face.getbbox("Ab")[2] > 0
    assert all(path.lower().endswith((".ttf", ".otf")) for path in image_sources.fonts())
    assert not [path for path in image_sources.fonts() if Path(path).stem in image_sources.PICTURE_FONTS]


def test_labels_look_like_the_worlds_ocr_but_never_say_its_words():
    """A label is level dark text on a light page, as a world OCR scene is, half of them in Pillow's font (the
    world's); its lines are never a world OCR answer (one of its words, a number of 3-6 digits), which the target
    reads: what a label teaches is that everything else is text it cannot read."""
    from core.world.scenes import OCR_WORDS

    lines = [text_images._label_line(random.Random(seed)) for seed in range(400)]
    assert not any(t in OCR_WORDS or (t.isdigit() and 3 <= len(t) <= 6) for t in lines)
    assert sum(t.isupper() for t in lines) > 200  # mostly capitals, as the world's
    for seed in range(8):
        image, mask = text_images.label(random.Random(seed), "train")
        grey = np.asarray(image.convert("L"), dtype=float)
        ink = np.asarray(mask) > 128
        assert np.median(grey[~ink]) > 200 and grey[ink].mean() < np.median(grey[~ink]) - 60, seed


def test_a_third_of_labels_are_door_plate_lines_of_mixed_case_and_codes_never_the_held_out_notices(monkeypatch):
    """Targets on tower 37 read the held-out notice "Gate B4" (mixed case, a code, DejaVu Sans) as a world word: a
    third of labels draw such lines, a made-up name with a code or number, in any font, and never a word of the
    notices that eval-target holds out or a world OCR answer."""
    from core.world.scenes import OCR_WORDS

    lines = [text_images._plate_line(random.Random(seed)) for seed in range(400)]
    assert "B4" in text_images.NOTICE_TOKENS and "PARKING" in text_images.NOTICE_TOKENS
    assert not [t for t in lines if text_images.NOTICE_TOKENS & set(t.upper().split()) or t in OCR_WORDS]
    assert sum(any(c.isdigit() for c in t) for t in lines) > 250  # most carry a code or number
    assert sum(t != t.upper() for t in lines) > 200  # most in mixed case, where labels are mostly capitals
    plates = set()
    for seed in range(60):
        monkeypatch.setattr(text_images, "_plate_line", lambda rng, seed=seed: plates.add(seed) or "Vemar B4")
        text_images.label(random.Random(seed), "train")
    assert 10 <= len(plates) <= 30


def test_notices_are_a_folder_eval_target_reads_as_text_to_read(tmp_path):
    """`--notices DIR`: the same fixed notices every time, real words (none of them made up by a training source),
    each asked to be read and marked as holding text in the metadata.jsonl that eval-target --images reads."""
    from core.training.training_data import from_folder

    names = [name for name, _ in text_images.notices(4)]
    faces = 1 + sum(Path(f).name in text_images.NOTICE_FACES for f in image_sources.fonts())  # Pillow's and those
    assert len(names) == 4 * faces
    assert text_images.notices(2)[1][1].tobytes() == text_images.notices(2)[1][1].tobytes()
    assert text_images.write_notices(str(tmp_path), 4) == len(names)
    examples = from_folder(str(tmp_path))
    assert len(examples.examples) == len(names)
    assert all(examples[i].holds_text and examples[i].prompt == "What is written here?" for i in range(len(names)))


def test_charts_are_a_folder_eval_target_reads_half_to_read_half_to_describe(tmp_path):
    """`--charts DIR`: the same fixed charts every time, every kind in turn, each marked as holding text; its title's
    dark ink is there on every one, and both prompts ask of every kind."""
    from core.training.training_data import from_folder

    drawn = text_images.charts(20)
    assert [name.split("-", 1)[1] for name, _ in drawn[:5]] == [k.replace(" ", "-") for k in text_images.CHART_KINDS]
    assert drawn[7][1].tobytes() == text_images.charts(8)[7][1].tobytes()
    for _, image in drawn:
        title = np.asarray(image.convert("L"))[:12]  # above the plot and any pie label
        assert (title < 100).any()
    assert text_images.write_charts(str(tmp_path), 20) == 20
    examples = from_folder(str(tmp_path))
    asked = {(example.image["file_name"].split("-", 1)[1], example.prompt) for example in examples.examples}
    assert all(examples[i].holds_text for i in range(20))
    assert len(asked) == 2 * len(text_images.CHART_KINDS)
