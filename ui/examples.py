"""Example inputs: held-out world samples and the public-domain / CC0 photographs shipped inside scikit-image that
the embedded target never trained on (core/world/photos.py holds them out; it trained on crops of the others).

    python -m ui.examples      # writes the example images and prints their paths and prompts
"""

from __future__ import annotations

import hashlib
import importlib.util
import tempfile
from functools import lru_cache
from pathlib import Path

from PIL import Image

from core.world import photographs, photos, scenes
from core.world.photographs import HELDOUT_PHOTOS

TASK_PROMPTS = {
    "caption": "Describe the image.",
    "vqa": "How many objects are in the image?",
    "ocr": "What does the text say?",
    "chart": "Which label has the highest value?",
}
# name -> credit; every one loads from the scikit-image wheel itself, no download.
CREDITS = {
    "astronaut": "Eileen Collins, NASA (public domain)",
    "chelsea": "Stéfan van der Walt (CC0)",
    "rocket": "SpaceX (public domain)",
    "retina": "Mikael Häggström (CC0)",
}
PHOTOS = {name: CREDITS[name] for name in HELDOUT_PHOTOS}
PHOTO_SIDE = 256  # the target sees a 192x192 square anyway; small files keep the page light


@lru_cache(maxsize=1)
def _folder() -> Path:
    # One folder per process: another install's app (without scikit-image, its signs drawn on other backgrounds)
    # would otherwise overwrite the example files this one knows by their digests.
    return Path(tempfile.mkdtemp(prefix="speculum-examples-"))


@lru_cache(maxsize=1)
def world_examples() -> list[list[str]]:
    rows = []
    for i, s in enumerate(scenes.samples("heldout", 8)):
        path = _folder() / f"world-{i}-{s.task}.png"
        s.image.save(path)
        rows.append([str(path), s.prompt])
    return rows


@lru_cache(maxsize=1)
def photo_examples() -> list[list[str]]:
    """Empty when scikit-image is not installed (it is an optional extra: `pip install .[photos]`)."""
    if importlib.util.find_spec("skimage") is None:
        return []
    rows = []
    for name in PHOTOS:
        path = _folder() / f"photo-{name}.jpg"
        image = photographs.scikit_photo(name)
        image.thumbnail((PHOTO_SIDE, PHOTO_SIDE))
        image.save(path, quality=90)
        rows.append([str(path), TASK_PROMPTS["caption"]])
    return rows


# Held-out images of the sources that teach the target to say when it cannot read (core/world/text_images.py).
TEXT_EXAMPLES = (("document", 0), ("sign", 1), ("screenshot", 2), ("drawing", 3))


@lru_cache(maxsize=1)
def _text_example_images() -> dict[str, tuple[Image.Image, bool]]:
    found = {}
    for source, index in TEXT_EXAMPLES:
        s = photos.sample("heldout", index, "read", source)
        image = s.image
        image.thumbnail((PHOTO_SIDE * 2, PHOTO_SIDE * 2))
        path = _folder() / f"text-{source}-{index}.png"
        image.save(path)
        found[str(path)] = (Image.open(path).convert("RGB"), bool(s.holds_text))
    return found


def text_examples() -> list[list[str]]:
    return [[path, TASK_PROMPTS["ocr"]] for path in _text_example_images()]


def _digest(image: Image.Image) -> str:
    return hashlib.sha256(image.convert("RGB").tobytes()).hexdigest()


@lru_cache(maxsize=1)
def _known() -> dict[str, bool]:
    return {_digest(image): holds for image, holds in _text_example_images().values()}


def known_text(image: Image.Image) -> bool | None:
    """Whether an image holds text, where the app knows it (one of its text examples); None for anything else."""
    return _known().get(_digest(image))


def photo_credits() -> str:
    return "; ".join(f"{name}: {credit}" for name, credit in PHOTOS.items())


if __name__ == "__main__":
    for path, prompt in world_examples() + text_examples() + photo_examples():
        print(path, "|", prompt)
