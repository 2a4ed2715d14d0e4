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
from core.world.describe import TERMS, answers, colour_terms, layout
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
    assert "not compared" in what_the_pixels_say(image, "What animal is this?", "A cat.")
