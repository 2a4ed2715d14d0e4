"""The pixels' own answers (core/world/describe.py): the 11 basic colour terms on canonical colours, light / dark,
a 3x3 layout read off an image of any aspect ratio, the main colours and the brightest region, the command line and
the app's "what the pixels say" line.

    python -m pytest -q tests/test_describe.py
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from core.__main__ import cli
from core.world.describe import TERMS, answers, colour_terms, described_header, layout, region_agreement
from core.world.scenes import POSITIONS
from ui.spec_tab import what_the_pixels_say

CANONICAL = {"black": (10, 10, 10), "white": (250, 250, 250), "grey": (128, 128, 128), "red": (220, 30, 30),
             "orange": (240, 140, 20), "yellow": (240, 220, 30), "green": (40, 170, 60), "blue": (40, 80, 220),
             "purple": (130, 50, 190), "pink": (240, 120, 190), "brown": (120, 70, 30)}


@pytest.mark.parametrize("term", TERMS)
def test_each_basic_colour_term(term):
    rgb = np.array(CANONICAL[term], dtype=np.float64) / 255
    assert TERMS[int(colour_terms(rgb[None, None])[0, 0])] == term


def _grid(colours: list[tuple[int, int, int]], size: tuple[int, int]) -> Image.Image:
    """An image of 3x3 flat cells (reading order) at any size."""
    w, h = size
    cells = np.array(colours, dtype=np.uint8).reshape(3, 3, 3)
    rows = np.repeat(np.arange(h) * 3 // h, 1)[:, None]
    cols = (np.arange(w) * 3 // w)[None, :]
    return Image.fromarray(cells[rows, cols])


@pytest.mark.parametrize("size", [(300, 120), (90, 400), (4000, 3000), (7, 7)])
def test_a_three_by_three_layout_at_any_aspect_ratio(size):
    names = ["red", "green", "blue", "yellow", "white", "black", "purple", "orange", "grey"]
    lay = layout(_grid([CANONICAL[n] for n in names], size))
    assert list(lay.regions) == names
    assert lay.brightest == "center"  # the white cell
    assert lay.description().startswith("A mid-toned image, mostly ")
    assert lay.description().endswith("Top: red, green, blue. Middle: yellow, white, black. "
                                      "Bottom: purple, orange, grey.")


def test_light_dark_tone_and_main_colours():
    light_blue, dark_green = (150, 190, 250), (20, 80, 30)
    lay = layout(_grid([light_blue] * 6 + [dark_green] * 3, (240, 240)))
    assert lay.regions[:6] == ("light blue",) * 6 and lay.regions[6:] == ("dark green",) * 3
    assert lay.main == ("blue",)  # two thirds of the image: "mostly blue"
    assert lay.tone == "mid-toned"  # mean lightness (6 x 0.78 + 3 x 0.20) / 9 = 0.59, just under "bright" (0.6)
    assert layout(Image.new("RGB", (40, 40), light_blue)).tone == "bright"
    dark = layout(Image.new("RGB", (50, 80), (25, 25, 60)))
    assert dark.tone == "dark" and dark.main == ("blue",) and set(dark.regions) == {"dark blue"}
    half = layout(_grid([CANONICAL["red"]] * 4 + [CANONICAL["green"]] * 5, (90, 90)))
    assert half.main == ("green", "red")  # no term covers 60 %: the two largest, largest first


def test_answers_cover_every_region_and_the_command_line(tmp_path, capsys):
    image = _grid([CANONICAL[n] for n in ["red"] * 9], (60, 60))
    found = answers(image)
    assert found["Describe the image."] == ("A mid-toned image, mostly red. Top: red, red, red. Middle: red, red, red. "
                                            "Bottom: red, red, red.")
    assert {f"What colour is the {p}?" for p in POSITIONS} <= set(found)
    assert found["What colour is the top left?"] == "Red." and found["What are the main colours?"] == "Red."
    image.save(tmp_path / "red.png")
    cli(["describe", str(tmp_path / "red.png"), "--json"])
    assert json.loads(capsys.readouterr().out) == found
    with pytest.raises(SystemExit, match="error: image not found"):
        cli(["describe", str(tmp_path / "missing.png")])


def test_the_apps_line_compares_only_what_the_pixels_answer():
    image = _grid([CANONICAL["blue"]] * 9, (60, 60))
    assert what_the_pixels_say(None, "Describe the image.") == ""
    assert "**matches**" in what_the_pixels_say(image, "What colour is the center?", "Blue.")
    assert "**differs**" in what_the_pixels_say(image, "What colour is the center?", "Red.")
    assert "not compared" in what_the_pixels_say(image, "What is written here?", "There is no text.")
    assert "not compared" in what_the_pixels_say(image, "Describe the scene in French.", "Une image bleue.")
    reference = answers(image)["Describe the image."]  # "... Top: blue, blue, blue. ..."
    assert "**matches**" in what_the_pixels_say(image, "Describe the image.", reference)
    # The paraphrases the target learned ask the same question, and a question the pixels cannot answer has the
    # honest answer it was taught: an invented fact differs from it.
    assert "**matches**" in what_the_pixels_say(image, "Describe this picture.", reference)
    assert "**matches**" in what_the_pixels_say(image, "Which colour is at the center?", "Blue.")
    # Case, spacing and the closing mark do not change the question (the target is less forgiving: it answered the
    # lower-case "describe the image" with "The top left.", which the line then shows as wrong).
    assert "**differs**" in what_the_pixels_say(image, "describe  the image", "The top left.")
    assert "**differs**" in what_the_pixels_say(image, "What animal is this?", "A cat.")
    honest = f"I can only describe colours and layout: {reference}"
    assert "**matches**" in what_the_pixels_say(image, "What animal is this?", honest)
    said = reference.replace("Top: blue, blue", "Top: red, light blue")  # light / dark ignored, as in eval-target
    line = what_the_pixels_say(image, "Describe the image.", said)
    assert "8 of the 9 regions' colours agree (1 of them in another shade: light / dark)" in line
    assert "first sentence" not in line
    paler = reference.replace("Top: blue, blue, blue", "Top: light blue, light blue, blue")
    assert "9 of the 9 regions' colours agree (2 of them in another shade: light / dark)." in \
        what_the_pixels_say(image, "Describe the image.", paler)
    twice = reference.replace("mostly blue.", "mostly blue and blue.")  # the target's most common header slip
    assert "9 of the 9 regions' colours agree, and its first sentence (tone, main colours) differs" in \
        what_the_pixels_say(image, "Describe the image.", twice)
    assert "regions" not in what_the_pixels_say(image, "Describe the image.", "There are two objects.")


def test_region_agreement_ignores_light_and_dark():
    ref = "A bright image, mostly blue. Top: light blue, blue, white. Middle: green, green, grey. Bottom: red, red, red."
    assert region_agreement(ref, ref) == 1.0
    assert region_agreement(ref, ref.replace("light blue", "dark blue")) == 1.0
    assert region_agreement(ref, ref.replace("Bottom: red, red, red.", "Bottom: red, blue, red.")) == 8 / 9
    assert region_agreement(ref, "There are four objects: a large red circle.") == 0.0
    with pytest.raises(ValueError, match="names no 3x3 layout"):
        region_agreement("Blue.", ref)


def test_the_header_is_the_sentence_before_the_regions():
    ref = "A bright image, mostly blue. Top: light blue, blue, white. Middle: green, green, grey. Bottom: red, red, red."
    assert described_header(ref) == "A bright image, mostly blue."
    assert described_header(answers(_grid([CANONICAL["red"]] * 9, (60, 60)))["Describe the image."]) == \
        "A mid-toned image, mostly red."
    assert described_header("There are four objects: a large red circle.") is None


@pytest.fixture
def own_images(tmp_path):
    """A folder of images of one's own: a flat red one, and two with metadata answers (one asks what is written)."""
    _grid([CANONICAL["red"]] * 9, (120, 80)).save(tmp_path / "red.png")
    _grid([CANONICAL["blue"]] * 9, (80, 120)).save(tmp_path / "blue.png")
    (tmp_path / "metadata.jsonl").write_text(
        json.dumps({"file_name": "red.png", "prompt": "Describe the image."}) + "\n"
        + json.dumps({"file_name": "blue.png", "prompt": "What is written here?", "answer": "There is no text."}) + "\n")
    return tmp_path


def test_eval_target_scores_your_images_against_their_pixels(own_images, tiny_target_dir, capsys):
    cli(["eval-target", "--model", str(tiny_target_dir), "--images", str(own_images)])
    report = json.loads(capsys.readouterr().out)
    assert report["images"] == report["scored"] == 2
    red, blue = report["rows"]
    assert red["reference"] == answers(_grid([CANONICAL["red"]] * 9, (120, 80)))["Describe the image."]
    assert red["region_agreement"] == region_agreement(red["reference"], red["answer"])  # the tiny target's words
    assert blue["reference"] == "There is no text." and report["no_text_precision"] == float(blue["exact"])
    assert report["region_agreement"] == red["region_agreement"] and report["text_exact"] is None
    assert report["header_exact"] == float(red["header_exact"]) == float(
        described_header(red["answer"]) == described_header(red["reference"]))
    cli(["eval-target", "--model", str(tiny_target_dir), "--images", str(own_images), "--prompt",
         "What colour is the center?"])
    asked = json.loads(capsys.readouterr().out)["rows"]
    assert [r["reference"] for r in asked] == ["Red.", "Blue."]  # --prompt: the pixels answer, metadata set aside
    cli(["eval-target", "--model", str(tiny_target_dir), "--images", str(own_images), "--prompt",
         "Which colour is at the center?"])  # a paraphrase the embedded target learned asks the same
    assert [r["reference"] for r in json.loads(capsys.readouterr().out)["rows"]] == ["Red.", "Blue."]


def test_bench_spec_runs_on_your_images(own_images, capsys):
    cli(["bench-spec", "--images", str(own_images), "--drafters", "text", "--n", "2", "--max-new-tokens", "8",
         "--prompt", "Describe the image."])
    report = json.loads(capsys.readouterr().out)
    # a folder outside the repository is recorded by its name only (core/models/loading.py: recorded)
    assert report["config"]["images"] == own_images.name and report["config"]["tasks"] == ["custom"]
    assert report["drafters"]["text"]["lossless_mismatches"] == 0 and report["drafters"]["text"]["tau"] >= 1
