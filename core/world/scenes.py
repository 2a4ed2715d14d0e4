"""The embedded world: procedurally generated images with questions whose answers depend on the image.

Four task families, each a small cousin of a public benchmark:
  caption  describe every object (size, colour, shape, position)        ~ COCO captions
  vqa      counts, colours, shapes at a place, spatial relations         ~ GQA
  ocr      read back words and numbers rendered in the image             ~ OCRBench
  chart    read values and labels off a small bar or line chart          ~ ChartQA

Images are 96x96: a 3x3 grid of 32-pixel cells, so one merged Qwen2.5-VL visual token covers exactly one cell (the
embedded target sees the scene as 192x192 in 8-pixel patches merged 8x8; run 16 in 32-pixel patches merged 2x2, runs
1-15 as 96x96 in 16-pixel patches);
that alignment is what lets tiny models learn the world on a CPU.
Every sample is a pure function of (split, index), so train and held-out splits never drift.

    python -m core.world.scenes            # writes a few samples to /tmp/world_*.png and prints their Q/A
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache

from PIL import Image, ImageDraw, ImageFont

IMAGE_SIZE = 96
CELL = 32
TASKS = ("caption", "vqa", "ocr", "chart")
SPLITS = ("train", "heldout")

SHAPES = ("circle", "square", "triangle", "diamond")
COLOURS = {
    "red": (220, 40, 40),
    "green": (40, 170, 60),
    "blue": (40, 80, 220),
    "yellow": (235, 200, 30),
    "purple": (140, 60, 180),
    "orange": (245, 130, 20),
}
SIZES = {"small": 9, "large": 14}  # half-extent in pixels inside a 32-pixel cell
POSITIONS = (
    "top left", "top center", "top right",
    "middle left", "center", "middle right",
    "bottom left", "bottom center", "bottom right",
)
NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
OCR_WORDS = (
    "CAT", "DOG", "SUN", "MAP", "KEY", "BOX", "CUP", "PEN", "RED", "SKY", "TREE", "BOOK", "DOOR", "FISH",
    "LAMP", "MILK", "RAIN", "ROAD", "SHIP", "STAR", "WIND", "BIRD", "CAKE", "COIN", "GOLD", "HILL", "KITE",
    "LEAF", "MOON", "NEST", "PARK", "RING", "ROCK", "SALT", "SNOW", "TOWN", "WAVE", "WOLF", "APPLE", "BREAD",
    "CHAIR", "CLOCK", "CLOUD", "EARTH", "FIELD", "GLASS", "HORSE", "HOUSE", "LIGHT", "MUSIC", "NIGHT",
    "OCEAN", "PAPER", "PLANT", "RIVER", "SHEEP", "SMILE", "STONE", "TABLE", "TIGER", "TRAIN", "WATER",
    "BRIDGE", "CASTLE", "FOREST", "GARDEN", "ISLAND", "LETTER", "MARKET", "PENCIL", "ROCKET", "SILVER",
    "SPRING", "STREET", "WINDOW", "WINTER", "YELLOW", "ORANGE", "PURPLE", "SUMMER",
)
CHART_LABELS = "ABCDEFGH"


OCR_CHARSET = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
PATCH = 16
PATCH_GRID = IMAGE_SIZE // PATCH  # 6 x 6 patches
# Per-patch content classes, the dense supervision core/training/target.py uses to pre-train vision quickly:
# 0 background, then one class per (shape, colour, size) object, then one per OCR character.
OBJECT_CLASSES = len(SHAPES) * len(COLOURS) * len(SIZES)
PATCH_CLASSES = 1 + OBJECT_CLASSES + len(OCR_CHARSET)


@dataclass(frozen=True)
class Sample:
    image: Image.Image
    task: str
    prompt: str
    answer: str
    patch_labels: tuple[int, ...] | None = None  # PATCH_GRID**2 classes, row-major; None where not labelled
    chart_columns: tuple[tuple[str, int], ...] | None = None  # (label, value) of each cell column of a chart
    # Beyond the world (core/world/photos.py): whether the image holds text (None: not known) and, where drawn here,
    # which of the 3x3 regions of the square the model sees hold some of it.
    holds_text: bool | None = None
    text_regions: tuple[bool, ...] | None = None
    text_mask: Image.Image | None = None  # where drawn here: white where ink of text is (a tower's per-patch labels)


@dataclass(frozen=True)
class Obj:
    shape: str
    colour: str
    size: str
    cell: int  # 0..8, reading order

    @property
    def phrase(self) -> str:
        return f"a {self.size} {self.colour} {self.shape}"

    @property
    def label(self) -> int:
        shape, colour, size = SHAPES.index(self.shape), list(COLOURS).index(self.colour), list(SIZES).index(self.size)
        return 1 + (shape * len(COLOURS) + colour) * len(SIZES) + size


def sample(split: str, index: int, task: str | None = None) -> Sample:
    """The index-th sample of a split; the task cycles through TASKS unless given."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
    task = task or TASKS[index % len(TASKS)]
    rng = random.Random(f"{split}/{task}/{index}")
    return _GENERATORS[task](rng)


def samples(split: str, n: int, tasks: tuple[str, ...] = TASKS, start: int = 0) -> list[Sample]:
    """n samples balanced over tasks (round-robin), deterministic."""
    return [sample(split, start + i, tasks[i % len(tasks)]) for i in range(n)]


# ---------------------------------------------------------------- drawing


def _canvas(rng: random.Random) -> tuple[Image.Image, ImageDraw.ImageDraw]:
    shade = rng.randint(235, 255)
    image = Image.new("RGB", (IMAGE_SIZE, IMAGE_SIZE), (shade, shade, rng.randint(230, 255)))
    return image, ImageDraw.Draw(image)


def _draw_obj(draw: ImageDraw.ImageDraw, obj: Obj, rng: random.Random) -> None:
    row, col = divmod(obj.cell, 3)
    cx = col * CELL + CELL // 2 + rng.randint(-2, 2)
    cy = row * CELL + CELL // 2 + rng.randint(-2, 2)
    r = SIZES[obj.size]
    fill = tuple(max(0, min(255, c + rng.randint(-15, 15))) for c in COLOURS[obj.colour])
    box = (cx - r, cy - r, cx + r, cy + r)
    if obj.shape == "circle":
        draw.ellipse(box, fill=fill)
    elif obj.shape == "square":
        draw.rectangle(box, fill=fill)
    elif obj.shape == "triangle":
        draw.polygon([(cx, cy - r), (cx - r, cy + r), (cx + r, cy + r)], fill=fill)
    else:
        draw.polygon([(cx, cy - r), (cx + r, cy), (cx, cy + r), (cx - r, cy)], fill=fill)


@lru_cache(maxsize=1)
def _font() -> ImageFont.FreeTypeFont:
    return ImageFont.load_default(size=14)


def _draw_text(draw: ImageDraw.ImageDraw, text: str, row: int, col: int, colour: tuple[int, int, int]) -> None:
    """One character per 16-pixel patch, so every glyph sits in a patch of its own."""
    for i, ch in enumerate(text):
        draw.text(((col + i) * PATCH + PATCH // 2, row * PATCH + PATCH // 2), ch, fill=colour, font=_font(), anchor="mm")


def _scene(rng: random.Random, lo: int, hi: int) -> list[Obj]:
    cells = sorted(rng.sample(range(9), rng.randint(lo, hi)))
    return [Obj(rng.choice(SHAPES), rng.choice(list(COLOURS)), rng.choice(list(SIZES)), c) for c in cells]


def _render(rng: random.Random, objs: list[Obj]) -> Image.Image:
    image, draw = _canvas(rng)
    for obj in objs:
        _draw_obj(draw, obj, rng)
    return image


def _object_patches(objs: list[Obj]) -> tuple[int, ...]:
    grid = [0] * PATCH_GRID**2
    for obj in objs:
        row, col = divmod(obj.cell, 3)
        for r in (2 * row, 2 * row + 1):
            for c in (2 * col, 2 * col + 1):
                grid[r * PATCH_GRID + c] = obj.label
    return tuple(grid)


def _at(position: str) -> str:
    return "in the center" if position == "center" else f"at the {position}"


# ---------------------------------------------------------------- tasks


def _caption(rng: random.Random) -> Sample:
    objs = _scene(rng, 2, 4)
    prompt = rng.choice(
        ("Describe the image.", "Describe every object in the image.", "What is in this picture?", "Caption this image.")
    )
    parts = [f"{o.phrase} {_at(POSITIONS[o.cell])}" for o in objs]
    listing = ", ".join(parts[:-1]) + f" and {parts[-1]}"
    answer = f"There are {NUMBER_WORDS[len(objs)]} objects: {listing}."
    return Sample(_render(rng, objs), "caption", prompt, answer, _object_patches(objs))


def _vqa(rng: random.Random) -> Sample:
    objs = _scene(rng, 2, 4)
    kind = rng.choice(("count_shape", "count_colour", "count_all", "colour_of", "shape_at", "relation"))
    if kind == "count_shape":
        shape = rng.choice(SHAPES)
        n = sum(o.shape == shape for o in objs)
        prompt, answer = f"How many {shape}s are there?", NUMBER_WORDS[n]
    elif kind == "count_colour":
        colour = rng.choice(list(COLOURS))
        n = sum(o.colour == colour for o in objs)
        prompt, answer = f"How many {colour} objects are there?", NUMBER_WORDS[n]
    elif kind == "count_all":
        prompt, answer = "How many objects are in the image?", NUMBER_WORDS[len(objs)]
    elif kind == "colour_of":
        obj = rng.choice(objs)
        prompt, answer = f"What colour is the object {_at(POSITIONS[obj.cell])}?", obj.colour
    elif kind == "shape_at":
        cell = rng.randrange(9)
        found = [o for o in objs if o.cell == cell]
        prompt = f"What shape is {_at(POSITIONS[cell])}?"
        answer = found[0].shape if found else "nothing"
    else:
        a, b = rng.sample(objs, 2)
        (ra, ca), (rb, cb) = divmod(a.cell, 3), divmod(b.cell, 3)
        relation = rng.choice(("left of", "right of", "above", "below"))
        truth = {"left of": ca < cb, "right of": ca > cb, "above": ra < rb, "below": ra > rb}[relation]
        prompt = f"Is the {a.colour} {a.shape} {relation} the {b.colour} {b.shape}?"
        answer = "yes" if truth else "no"
    return Sample(_render(rng, objs), "vqa", prompt, answer, _object_patches(objs))


def _ocr_text(rng: random.Random) -> str:
    if rng.random() < 0.5:
        return rng.choice(OCR_WORDS)
    return str(rng.randint(10 ** (rng.randint(2, 5)), 10 ** 6 - 1))[: rng.randint(3, 6)]


def is_ocr_answer(text: str) -> bool:
    """Whether `text` is something an OCR scene can say (`_ocr_text`): one of its words, or a number of 3-6 digits."""
    return text in OCR_WORDS or (text.isdigit() and 3 <= len(text) <= 6)


def _ocr(rng: random.Random) -> Sample:
    image, draw = _canvas(rng)
    lines = [_ocr_text(rng) for _ in range(rng.choice((1, 1, 2)))]
    rows = sorted(rng.sample(range(PATCH_GRID), len(lines)))
    grid = [0] * PATCH_GRID**2
    for text, row in zip(lines, rows):
        colour = (rng.randint(0, 80), rng.randint(0, 80), rng.randint(0, 80))
        col = rng.randint(0, PATCH_GRID - len(text))
        _draw_text(draw, text, row, col, colour)
        for i, ch in enumerate(text):
            grid[row * PATCH_GRID + col + i] = 1 + OBJECT_CLASSES + OCR_CHARSET.index(ch)
    prompt = rng.choice(("What does the text say?", "Read the text in the image.", "What is written here?"))
    return Sample(image, "ocr", prompt, " ".join(lines), tuple(grid))


def _chart(rng: random.Random) -> Sample:
    image, draw = _canvas(rng)
    labels = sorted(rng.sample(CHART_LABELS, 3))
    values = rng.sample(range(1, 10), 3)  # distinct, so "highest" has one answer
    kind = rng.choice(("bar", "line"))
    colour = COLOURS[rng.choice(list(COLOURS))]
    base = 80
    draw.line((4, base, 92, base), fill=(90, 90, 90))
    points = [(16 + 32 * i, base - 8 * v) for i, v in enumerate(values)]
    for (x, y), label in zip(points, labels):
        if kind == "bar":
            draw.rectangle((x - 8, y, x + 7, base - 1), fill=colour)
        draw.text((x, 88), label, fill=(30, 30, 30), font=_font(), anchor="mm")
    if kind == "line":
        draw.line(points, fill=colour, width=2)
        for x, y in points:
            draw.ellipse((x - 3, y - 3, x + 3, y + 3), fill=colour)
    question = rng.choice(("value", "highest", "lowest", "all"))
    if question == "value":
        i = rng.randrange(3)
        prompt, answer = f"What is the value of {labels[i]} in the {kind} chart?", str(values[i])
    elif question == "highest":
        prompt, answer = "Which label has the highest value?", labels[values.index(max(values))]
    elif question == "lowest":
        prompt, answer = "Which label has the lowest value?", labels[values.index(min(values))]
    else:
        prompt = f"List every value in the {kind} chart."
        answer = ", ".join(f"{label} is {v}" for label, v in zip(labels, values)) + "."
    return Sample(image, "chart", prompt, answer, chart_columns=tuple(zip(labels, values)))


_GENERATORS = {"caption": _caption, "vqa": _vqa, "ocr": _ocr, "chart": _chart}


if __name__ == "__main__":
    for i, s in enumerate(samples("train", 8)):
        s.image.save(f"/tmp/world_{i}.png")
        print(f"/tmp/world_{i}.png [{s.task}] {s.prompt} -> {s.answer}")
