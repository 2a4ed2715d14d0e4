"""Images beyond the world, from many sources, with the answers their pixels give (core/world/describe.py): the data
the embedded target and its drafters learn to answer any image from.

Sources, each at a random size and aspect ratio:
  procedural  photo-like images: gradients, fractal noise, blurred blobs, stripes, textures, overlaid shapes
  text        rendered words and numbers (sizes, colours, outlines) on plain or procedural backgrounds
  photo       scikit-image's photographs (when installed), randomly cropped, flipped and colour-jittered
  collage     a grid of uneven cells, each a plain colour, a photo-like image or a photograph crop: neighbouring
              regions differ, so a layout cannot be told by repeating the previous region's colour
Tasks: "layout" (Describe the image.), "region" (one cell's colour), "colours" (the main colours), "brightest",
"read" (What is written here?: the text, or "There is no text.") and "unknown" (a question the pixels cannot answer:
an honest "I can only describe colours and layout: ..."). Prompts come in several paraphrases.

A sample is a pure function of (split, index): the split decides the seeds, so held-out images are never trained
on, and the photographs in HELDOUT_PHOTOS are held out whole (only the held-out split ever shows them).

    python -m core.world.photos          # writes a few samples to /tmp/photo_*.png and prints their Q/A
    python -m core.world.photos --heldout-photos DIR    # the held-out photographs, for eval-target / bench-spec --images
    python -m core.world.photos --heldout-views DIR     # 32 crops, flips and colour jitters of them, the same use
"""

from __future__ import annotations

import random

import numpy as np
from PIL import Image, ImageDraw, ImageFilter, ImageFont

from core.world.describe import answers
from core.world.scenes import OCR_WORDS, POSITIONS, SPLITS, Sample

SOURCES = ("procedural", "text", "photo", "collage")
TASKS = ("layout", "region", "colours", "brightest", "read", "unknown")
# scikit-image's bundled photographs (they load without a download); the held-out ones never appear in training.
PHOTOS = ("astronaut", "coffee", "chelsea", "rocket", "camera", "cat", "hubble_deep_field", "immunohistochemistry",
          "moon", "page", "text", "coins", "horse", "retina", "logo", "colorwheel", "grass", "gravel", "brick",
          "clock", "cell")
HELDOUT_PHOTOS = ("astronaut", "chelsea", "rocket", "retina")
NO_TEXT = "There is no text."
PARAPHRASES = {
    "layout": ("Describe the image.", "Describe this picture.", "What does the image look like?",
               "Give a short description of the image."),
    "colours": ("What are the main colours?", "Which colours does the image mostly have?", "Name the main colours."),
    "brightest": ("Which region is the brightest?", "Where is the image brightest?", "Which part is the lightest?"),
    "read": ("What is written here?", "What does the text say?", "Read the text in the image."),
    "unknown": ("What animal is this?", "Where was this photo taken?", "How many people are there?",
                "What time of day is it?", "Who made this?", "What is the person doing?"),
}
REGION_PROMPTS = ("What colour is the {}?", "Which colour is at the {}?", "What is the colour of the {} region?")
# The question core/world/describe.py's answers() names for each task whose paraphrases ask the same thing.
ASKED = {"layout": "Describe the image.", "colours": "What are the main colours?",
         "brightest": "Which region is the brightest?"}


def _size(rng: random.Random) -> tuple[int, int]:
    """A random size and aspect ratio (1:3 to 3:1)."""
    area, aspect = rng.randint(64, 640) ** 2, 3 ** rng.uniform(-1, 1)
    return max(16, int((area * aspect) ** 0.5)), max(16, int((area / aspect) ** 0.5))


def _colour(rng: random.Random) -> tuple[int, int, int]:
    return tuple(rng.randint(0, 255) for _ in range(3))


def _fractal_noise(rng: random.Random, w: int, h: int) -> np.ndarray:
    """[h, w, 3] in [0, 1]: octaves of smooth noise, each twice as fine and half as strong."""
    gen = np.random.default_rng(rng.randrange(2**32))
    out = np.zeros((h, w, 3))
    for octave in range(rng.randint(2, 5)):
        cells = 2 ** (octave + 1)
        coarse = gen.random((cells, cells, 3)) * 255
        out += np.asarray(Image.fromarray(coarse.astype(np.uint8)).resize((w, h), Image.Resampling.BICUBIC)) / 2**octave
    out -= out.min()
    return out / max(out.max(), 1e-6)


def procedural(rng: random.Random) -> Image.Image:
    """A photo-like image: a base (gradient, fractal noise, stripes or texture), then blurred blobs and shapes."""
    w, h = _size(rng)
    base = rng.choice(("gradient", "noise", "stripes", "texture"))
    a, b = np.array(_colour(rng), float), np.array(_colour(rng), float)
    if base == "gradient":
        angle = rng.uniform(0, np.pi)
        ys, xs = np.mgrid[0:h, 0:w]
        t = (np.cos(angle) * xs / w + np.sin(angle) * ys / h)
        t = (t - t.min()) / max(np.ptp(t), 1e-6)
        pixels = a + (b - a) * t[..., None]
    elif base == "noise":
        noise = _fractal_noise(rng, w, h)
        pixels = a + (b - a) * noise
    elif base == "stripes":
        period, vertical = rng.randint(4, 60), rng.random() < 0.5
        index = (np.arange(w)[None, :] if vertical else np.arange(h)[:, None]) // period % 2
        pixels = np.where(np.broadcast_to(index, (h, w))[..., None] == 0, a, b)
    else:
        grain = np.random.default_rng(rng.randrange(2**32)).random((h, w, 1))
        pixels = a + (b - a) * grain * rng.uniform(0.2, 1.0)
    image = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(image)
    for _ in range(rng.randint(0, 6)):
        x, y, r = rng.randint(0, w), rng.randint(0, h), rng.randint(4, max(5, min(w, h) // 2))
        box = (x - r, y - r, x + r, y + r)
        (draw.ellipse if rng.random() < 0.6 else draw.rectangle)(box, fill=_colour(rng))
    if rng.random() < 0.7:
        image = image.filter(ImageFilter.GaussianBlur(rng.uniform(0.5, max(1.0, min(w, h) / 30))))
    return image


def _text(rng: random.Random) -> str:
    if rng.random() < 0.3:
        return str(rng.randint(0, 99999))
    return " ".join(rng.choice(OCR_WORDS) for _ in range(rng.randint(1, 2)))


def rendered_text(rng: random.Random) -> tuple[Image.Image, str]:
    """Text of a random size, colour and outline, centred on a plain or procedural background."""
    text = _text(rng)
    background = procedural(rng) if rng.random() < 0.5 else Image.new("RGB", _size(rng), _colour(rng))
    w, h = background.size
    font = ImageFont.load_default(size=max(10, int(min(h / 2, 1.6 * w / max(len(text), 1)) * rng.uniform(0.4, 0.9))))
    ink = _colour(rng)
    # The ink stands out from the background around it (readable text, as in a photograph of a sign).
    behind = np.asarray(background.convert("L"), dtype=float).mean()
    if abs(np.mean(ink) - behind) < 90:
        ink = (0, 0, 0) if behind > 127 else (255, 255, 255)
    draw = ImageDraw.Draw(background)
    outline = rng.choice((0, 0, 1, 2))
    draw.text((w / 2, h / 2), text, font=font, fill=ink, anchor="mm", stroke_width=outline,
              stroke_fill=(255 - ink[0], 255 - ink[1], 255 - ink[2]))
    return background, text


def photo_names(split: str) -> tuple[str, ...]:
    """The photographs a split draws from: the held-out ones, or all the others."""
    return HELDOUT_PHOTOS if split == "heldout" else tuple(p for p in PHOTOS if p not in HELDOUT_PHOTOS)


def scikit_photo(name: str) -> Image.Image:
    """One of scikit-image's photographs, whole, as an RGB image (needs scikit-image: the photos extra)."""
    from skimage import data

    return Image.fromarray(np.asarray(getattr(data, name)())).convert("RGB")


def photo(rng: random.Random, split: str) -> Image.Image | None:
    """A crop of one of scikit-image's photographs, flipped and colour-jittered; None without scikit-image."""
    try:
        image = scikit_photo(rng.choice(photo_names(split)))
    except ImportError:
        return None
    w, h = image.size
    cw, ch = int(w * rng.uniform(0.4, 1.0)), int(h * rng.uniform(0.4, 1.0))
    x, y = rng.randint(0, w - cw), rng.randint(0, h - ch)
    image = image.crop((x, y, x + cw, y + ch))
    if rng.random() < 0.5:
        image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    jitter = np.array([rng.uniform(0.8, 1.2) for _ in range(3)])
    image = Image.fromarray(np.clip(np.asarray(image, dtype=float) * jitter, 0, 255).astype(np.uint8))
    return image.resize(_size(rng), Image.Resampling.BILINEAR)


def _spans(rng: random.Random, n: int, side: int) -> list[int]:
    """Cut points of n uneven spans across `side` pixels (even ones where the side is too short to vary)."""
    if side <= 8 * n:
        return [round(side * i / n) for i in range(n + 1)]
    return [0, *sorted(rng.sample(range(4, side - 4), n - 1)), side]


def collage(rng: random.Random, split: str) -> Image.Image:
    """Cells of an uneven grid (1-4 rows by 1-4 columns, never one cell), each filled from another source. Plain
    photographs and photo-like images mostly keep one colour across neighbouring regions; a model trained only on
    them learns to repeat the last colour it named instead of looking at each region."""
    w, h = _size(rng)
    rows, cols = rng.choice([(r, c) for r in range(1, 5) for c in range(1, 5) if r * c > 1])
    xs, ys = _spans(rng, cols, w), _spans(rng, rows, h)
    image = Image.new("RGB", (w, h))
    for top, bottom in zip(ys, ys[1:]):
        for left, right in zip(xs, xs[1:]):
            kind = rng.random()
            fill = photo(rng, split) if kind < 0.4 else None  # None without scikit-image
            if fill is None:
                fill = procedural(rng) if kind < 0.7 else Image.new("RGB", (1, 1), _colour(rng))
            image.paste(fill.resize((right - left, bottom - top), Image.Resampling.BILINEAR), (left, top))
    return image


def _honest(found: dict[str, str]) -> str:
    """The answer to a question the pixels cannot answer: what they can tell instead."""
    return f"I can only describe colours and layout: {found['Describe the image.']}"


def _question(rng: random.Random, task: str, image: Image.Image, text: str | None) -> tuple[str, str]:
    found = answers(image)
    if task == "region":
        position = rng.choice(POSITIONS)
        return rng.choice(REGION_PROMPTS).format(position), found[f"What colour is the {position}?"]
    if task == "read":
        return rng.choice(PARAPHRASES["read"]), text if text is not None else NO_TEXT
    if task == "unknown":
        return rng.choice(PARAPHRASES["unknown"]), _honest(found)
    return rng.choice(PARAPHRASES[task]), found[ASKED[task]]


def _question_key(prompt: str) -> str:
    """A prompt as a question: case, spacing and the closing mark do not change what it asks."""
    return " ".join(prompt.lower().split()).rstrip("?.!")


# Every learned wording (as a _question_key) -> what it asks: a question of describe.answers(), "read" or "unknown".
_ASKS = {_question_key(p): ASKED.get(task, task) for task in ("layout", "colours", "brightest", "read", "unknown")
         for p in PARAPHRASES[task]}
_ASKS |= {_question_key(p.format(position)): f"What colour is the {position}?"
          for position in POSITIONS for p in REGION_PROMPTS}


def asks_to_read(prompt: str) -> bool:
    """Whether a prompt is one of the questions about what is written (any case, spacing, closing mark)."""
    return _ASKS.get(_question_key(prompt)) == "read"


def reference(image: Image.Image, prompt: str) -> str | None:
    """What the pixels answer to a prompt the embedded models learned, in any of its paraphrases (an unanswerable
    question gets the honest answer they were taught); None for a prompt the pixels cannot answer (reading text
    needs its source, a world question its scene)."""
    asked = _ASKS.get(_question_key(prompt))
    if asked in (None, "read"):
        return None
    found = answers(image)
    return _honest(found) if asked == "unknown" else found[asked]


def sample(split: str, index: int, task: str | None = None, source: str | None = None) -> Sample:
    """The index-th sample of a split (tasks and sources cycle unless given); deterministic."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
    task = task or TASKS[index % len(TASKS)]
    source = source or SOURCES[index // len(TASKS) % len(SOURCES)]
    rng = random.Random(f"photos/{split}/{source}/{task}/{index}")
    text = None
    if source == "text":
        image, text = rendered_text(rng)
    elif source == "collage":
        image = collage(rng, split)
    else:
        image = photo(rng, split) if source == "photo" else None
        image = image if image is not None else procedural(rng)
    prompt, answer = _question(rng, task, image, text)
    return Sample(image, task, prompt, answer)


def samples(split: str, n: int, tasks: tuple[str, ...] = TASKS, start: int = 0) -> list[Sample]:
    return [sample(split, start + i, tasks[i % len(tasks)]) for i in range(n)]


def write_heldout_photos(folder: str) -> list[str]:
    """The held-out photographs, whole, as PNG files: a folder for `eval-target --images` and `bench-spec --images`."""
    from pathlib import Path

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in HELDOUT_PHOTOS:
        scikit_photo(name).save(out / f"{name}.png")
        paths.append(str(out / f"{name}.png"))
    return paths


def write_heldout_views(folder: str, n: int = 32) -> list[str]:
    """The first n held-out photograph views (crops, flips, colour jitter, any aspect ratio: how training sees the
    other photographs), as PNG files: a benchmark folder bigger than the four whole photographs."""
    from pathlib import Path

    if photo(random.Random(0), "heldout") is None:
        raise RuntimeError("the held-out photographs need scikit-image: pip install scikit-image (the photos extra)")
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    paths = [str(out / f"view{i:03d}.png") for i in range(n)]
    for i, path in enumerate(paths):
        sample("heldout", i, "layout", "photo").image.save(path)
    return paths


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--heldout-photos", metavar="DIR", help="write the held-out photographs to DIR instead")
    parser.add_argument("--heldout-views", metavar="DIR", help="write views (crops, flips, jitter) of them to DIR")
    parser.add_argument("--views", type=int, default=32, help="how many views --heldout-views writes")
    args = parser.parse_args()
    if args.heldout_photos:
        print("\n".join(write_heldout_photos(args.heldout_photos)))
    elif args.heldout_views:
        print("\n".join(write_heldout_views(args.heldout_views, args.views)))
    else:
        for i, s in enumerate(samples("train", 12)):
            path = f"/tmp/photo_{i}.png"
            s.image.save(path)
            print(f"{path} {s.image.size} [{s.task}] {s.prompt} -> {s.answer}")
