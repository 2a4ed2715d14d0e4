"""The reference an answer of the embedded target is checked against, for any image and prompt: what the pixels say
(core/world/describe.py) and, for a question about what is written, the only honest answers the target has beyond
its world. The app shows it beside every run (ui/spec_tab.py); `check` says whether the answer matches, differs or
cannot be compared, and why.

    from core.world.reference import check
    check(image, "What is written here?", "DOG")     # differs: beyond the world the target reads no words
    check(image, "Describe the image.", answer)      # the pixels' colour layout, region by region

Reading: the target reads only the world's words (core/world/scenes.py's 96x96 scenes). On any other image it may say
"There is text here, but I cannot read it." or "There is no text."; an answer naming words is invented. Whether an
uploaded image holds text the pixels' statistics do not tell, so where it is not known (`holds_text=None`) those two
answers are not compared; where it is (the app's examples, a folder's metadata) they are.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PIL import Image

from core.world import photos, scenes
from core.world.describe import described_header, described_regions, region_agreement

HONEST_READINGS = (photos.CANNOT_READ, photos.NO_TEXT)


def reading_invents(answer: str, holds_text: bool | None) -> bool:
    """Whether a reading answer beyond the world invents: it names words (the target reads none there), or says
    "There is no text." of an image that holds text. "I cannot read it" of an image without text is cautious, not
    invented. One rule for the app's verdict and eval-target's invented_rate."""
    return answer not in HONEST_READINGS or (answer == photos.NO_TEXT and bool(holds_text))


@dataclass(frozen=True)
class Verdict:
    asked: str
    expected: str | None  # the answer the reference gives; None where it gives none
    outcome: str | None  # "matches", "differs", or None: not compared (or no answer yet)
    reason: str  # why, in one sentence (empty for a plain match)


def looks_like_world(image: Image.Image) -> bool:
    """Whether an image is drawn as the world draws its scenes: 96x96 on one canvas colour (shade, shade, blue) that
    covers most of it. A photograph, a page or a screenshot at any other size is never taken for one."""
    if image.size != (scenes.IMAGE_SIZE, scenes.IMAGE_SIZE):
        return False
    pixels = np.asarray(image.convert("RGB")).reshape(-1, 3).astype(int)
    colours, counts = np.unique(pixels, axis=0, return_counts=True)
    r, g, b = colours[counts.argmax()]
    return counts.max() > 0.5 * len(pixels) and r == g and 235 <= r <= 255 and 230 <= b <= 255


def _reading(image: Image.Image, asked: str, answer: str | None, holds_text: bool | None) -> Verdict:
    if looks_like_world(image):
        return Verdict(asked, None, None, "A world scene: the target reads its words, which the pixels' statistics "
                                          "do not spell, so its answer is not compared.")
    expected = None if holds_text is None else photos.CANNOT_READ if holds_text else photos.NO_TEXT
    if answer is None:
        return Verdict(asked, expected, None, "")
    if reading_invents(answer, holds_text):
        why = ("It says there is no text where there is." if answer == photos.NO_TEXT
               else "It names words, but beyond its world the target reads none: they are invented.")
        return Verdict(asked, expected, "differs", why)
    if expected is None:
        return Verdict(asked, None, None, "Whether this image holds text the pixels' statistics do not tell, so an "
                                          "honest answer is not compared.")
    if answer == expected:
        return Verdict(asked, expected, "matches", "")
    return Verdict(asked, expected, "differs", "It says there is text where there is none.")


def check(image: Image.Image, prompt: str, answer: str | None = None, holds_text: bool | None = None) -> Verdict:
    """The reference for a prompt on an image and, given the target's answer, whether it agrees."""
    asked = (prompt or "").strip()
    said = answer.strip() if answer else None
    if photos.asks_to_read(asked):
        return _reading(image, asked, said, holds_text)
    expected = photos.reference(image, asked)
    if expected is None:
        return Verdict(asked, None, None, "The prompt is not one the pixels answer, so the answer is not compared.")
    if said is None or said == expected:
        return Verdict(asked, expected, None if said is None else "matches", "")
    reason = ""
    if described_regions(expected):
        if described_regions(said):
            reason = f"{round(9 * region_agreement(expected, said))} of the 9 regions' colours agree"
            # Agreement ignores light / dark (as eval-target's does); a differing answer whose terms all agree
            # must still say what differs.
            shades = sum(a != b and a.split()[-1] == b.split()[-1]
                         for a, b in zip(described_regions(expected), described_regions(said)))
            if shades:
                reason += f" ({shades} of them in another shade: light / dark)"
            if described_header(said) != described_header(expected):
                reason += ", and its first sentence (tone, main colours) differs"
            reason += "."
        elif looks_like_world(image):
            reason = "On a world scene its object caption is the more specific answer."
        else:
            reason = "It is not a colour layout: on an image that is not a world scene, an object caption is invented."
    return Verdict(asked, expected, "differs", reason)


def honest_readings() -> str:
    """What the target may answer to a reading question beyond its world, as a sentence."""
    return (f"Beyond its world the target reads no words: its honest answers are “{photos.CANNOT_READ}” and "
            f"“{photos.NO_TEXT}”")
