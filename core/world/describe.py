"""What the pixels say: answers that hold for any image, of any size and aspect ratio, computed from its pixels.

The reference the embedded target is measured against on images outside its world (and what the app shows beside
its output): the overall tone and the colour of each of the 3x3 regions in reading order, named with the 11 basic
colour terms (black, white, grey, red, orange, yellow, green, blue, purple, pink, brown), optionally light or dark:

    A bright image, mostly green and blue. Top: light blue, light blue, white. Middle: green, green, grey.
    Bottom: brown, green, brown.

A region's colour is the term most of its pixels carry (not the colour of the mean pixel, which on a photograph is
a brownish grey); "light" / "dark" follow those pixels' mean lightness. Also: one region's colour, the main colours,
the brightest region. Reading rendered text needs its source (core/world/scenes.py knows what it drew): from
pixels alone only the questions above are answered.

    python -m core describe IMAGE [--json]          # every answer for one image
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import dataclass

import numpy as np
from PIL import Image

from core.world.scenes import (
    POSITIONS,  # the world's names of the 3x3 cells, in reading order
)

TERMS = ("black", "white", "grey", "red", "orange", "yellow", "green", "blue", "purple", "pink", "brown")
ROWS = ("top", "middle", "bottom")
SIDE = 96  # pixels per side the image is resampled to: the statistics of a 3x3 layout need no more
MOSTLY = 0.6  # one term covering this share of the image is "mostly X"; otherwise the two largest are named


@dataclass(frozen=True)
class Layout:
    tone: str  # "bright", "dark" or "mid-toned"
    main: tuple[str, ...]  # one or two basic terms, the largest share first
    regions: tuple[str, ...]  # 9 colours (term, optionally "light " / "dark "), in POSITIONS' reading order
    brightest: str  # one of POSITIONS
    lightness: tuple[float, ...]  # the 9 regions' mean lightness in [0, 1], in POSITIONS' reading order

    def description(self) -> str:
        """The answer to "Describe the image." for an image that is not a world scene."""
        rows = " ".join(f"{row.capitalize()}: {', '.join(self.regions[3 * i:3 * i + 3])}."
                        for i, row in enumerate(ROWS))
        return f"A {self.tone} image, mostly {' and '.join(self.main)}. {rows}"

    def region(self, position: str) -> str:
        return self.regions[POSITIONS.index(position)]


def _hsl(rgb: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Hue in degrees [0, 360), saturation and lightness in [0, 1] of [..., 3] RGB in [0, 1]."""
    high, low = rgb.max(-1), rgb.min(-1)
    light = (high + low) / 2
    chroma = high - low
    sat = np.where(chroma == 0, 0.0, chroma / np.maximum(1 - np.abs(2 * light - 1), 1e-6))
    r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    safe = np.maximum(chroma, 1e-6)
    hue = np.select([high == r, high == g], [((g - b) / safe) % 6, (b - r) / safe + 2], (r - g) / safe + 4) * 60
    return np.where(chroma == 0, 0.0, hue), np.clip(sat, 0, 1), light


def colour_terms(rgb: np.ndarray) -> np.ndarray:
    """The basic colour term (an index into TERMS) of every pixel of [..., 3] RGB in [0, 1]."""
    hue, sat, light = _hsl(rgb)
    achromatic = (sat < 0.2) | (light < 0.1) | (light > 0.93)
    grey = np.select([light < 0.2, light > 0.82], [TERMS.index("black"), TERMS.index("white")], TERMS.index("grey"))
    bands = [(15, "red"), (40, "orange"), (68, "yellow"), (165, "green"), (255, "blue"), (290, "purple"),
             (335, "pink"), (360, "red")]
    chromatic = np.full(hue.shape, TERMS.index("red"))
    for upper, term in reversed(bands):
        chromatic = np.where(hue < upper, TERMS.index(term), chromatic)
    warm = (hue >= 10) & (hue < 50)
    chromatic = np.where(warm & (light < 0.4), TERMS.index("brown"), chromatic)  # dark orange is brown
    reddish = (hue < 15) | (hue >= 335)
    chromatic = np.where(reddish & (light > 0.72), TERMS.index("pink"), chromatic)  # light red is pink
    return np.where(achromatic, grey, chromatic)


def _named(terms: np.ndarray, light: np.ndarray) -> str:
    """The term most pixels carry, "light" / "dark" by their mean lightness."""
    counts = np.bincount(terms.ravel(), minlength=len(TERMS))
    term = int(counts.argmax())
    mean = float(light[terms == term].mean())
    if TERMS[term] in ("black", "white"):
        return TERMS[term]
    modifier = "light " if mean > 0.68 else "dark " if mean < 0.3 else ""
    return modifier + TERMS[term]


def layout(image: Image.Image) -> Layout:
    """The colour layout of any image (read as RGB, resampled to SIDE x SIDE: regions follow its own aspect)."""
    rgb = np.asarray(image.convert("RGB").resize((SIDE, SIDE), Image.Resampling.BOX), dtype=np.float64) / 255
    terms, (_, _, light) = colour_terms(rgb), _hsl(rgb)
    cell = SIDE // 3
    regions, brightness = [], []
    for i in range(3):
        for j in range(3):
            window = (slice(i * cell, (i + 1) * cell), slice(j * cell, (j + 1) * cell))
            regions.append(_named(terms[window], light[window]))
            brightness.append(float(light[window].mean()))
    share = np.bincount(terms.ravel(), minlength=len(TERMS)) / terms.size
    order = [int(t) for t in np.argsort(-share, kind="stable")]
    main = (TERMS[order[0]],) if share[order[0]] >= MOSTLY else (TERMS[order[0]], TERMS[order[1]])
    mean = float(light.mean())
    tone = "bright" if mean > 0.6 else "dark" if mean < 0.35 else "mid-toned"
    return Layout(tone, main, tuple(regions), POSITIONS[int(np.argmax(brightness))], tuple(brightness))


def described_regions(text: str) -> list[str] | None:
    """The nine region colours a description names ("Top: a, b, c. Middle: ... Bottom: ..."), None if it names no
    such layout."""
    rows = [re.search(rf"{row.capitalize()}: ([^.]*)\.", text) for row in ROWS]
    if not all(rows):
        return None
    regions = [part.strip() for m in rows for part in m.group(1).split(",")]
    return regions if len(regions) == 9 else None


def described_header(text: str) -> str | None:
    """The sentence before the regions ("A bright image, mostly green and blue."), None if it names no layout."""
    head, found, _ = text.partition(" Top: ")
    return head.strip() if found else None


def region_agreement(reference: str, answer: str) -> float:
    """Share of the 9 regions whose colour term an answer names as the reference does (light / dark ignored)."""
    term = lambda colour: colour.split()[-1]  # noqa: E731  ("light blue" -> "blue")
    wanted, said = described_regions(reference), described_regions(answer)
    if wanted is None:
        raise ValueError(f"the reference {reference!r} names no 3x3 layout")
    return 0.0 if said is None else sum(term(a) == term(b) for a, b in zip(wanted, said)) / 9


def answers(image: Image.Image) -> dict[str, str]:
    """Every question the reference answers for any image, with its answer."""
    lay = layout(image)
    out = {"Describe the image.": lay.description(),
           "What are the main colours?": f"{' and '.join(lay.main).capitalize()}.",
           "Which region is the brightest?": f"The {lay.brightest}."}
    for position in POSITIONS:
        out[f"What colour is the {position}?"] = f"{lay.region(position).capitalize()}."
    return out


def run(args) -> None:
    from core.decoding.limits import open_image

    found = answers(open_image(args.image))
    if getattr(args, "json", False):
        print(json.dumps(found))
        return
    for question, answer in found.items():
        print(f"{question}\n  {answer}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("image")
    parser.add_argument("--json", action="store_true")
    run(parser.parse_args())
