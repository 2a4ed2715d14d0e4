"""Images beyond the world, from many sources, with the answers their pixels give (core/world/describe.py): the data
the embedded target and its drafters learn to answer any image from.

Sources, each at a random size and aspect ratio:
  procedural  photo-like images: gradients, fractal noise, blurred blobs, stripes, textures, overlaid shapes
  photo       scikit-image's photographs (when installed), randomly cropped, flipped and colour-jittered
  wallpaper   the same of Debian's wallpaper photographs (core/world/image_sources.py; one package held out)
  collage     a grid of uneven cells, each a plain colour, a photo-like image or a photograph crop: neighbouring
              regions differ, so a layout cannot be told by repeating the previous region's colour
  text, document, screenshot, slide, sign, label, drawing, illustration    text of any kind, and light pages and
              artworks without any (core/world/text_images.py)
Tasks: "layout" (Describe the image.), "region" (one cell's colour), "colours" (the main colours), "brightest",
"read" (What is written here?) and "unknown" (a question the pixels cannot answer: an honest "I can only describe
colours and layout: ..."). The target reads only the world's words (core/world/scenes.py), so beyond the world a
reading question has two answers: "There is text here, but I cannot read it." and "There is no text.". Prompts come
in several paraphrases (PARAPHRASES) and, in training, the wordings users type (MORE_WORDINGS). The photographs come
from core/world/photographs.py.

A sample is a pure function of (split, index): the split decides the seeds, so held-out images are never trained
on, and the photographs in HELDOUT_PHOTOS are held out whole (only the held-out split ever shows them).

    python -m core.world.photos          # writes a few samples to /tmp/photo_*.png and prints their Q/A
    python -m core.world.photos --heldout-photos DIR    # the held-out photographs, for eval-target / bench-spec --images
    python -m core.world.photos --heldout-views DIR     # 32 crops, flips and colour jitters of them, the same use
    python -m core.world.photos --heldout-photos DIR --of wallpaper               # the same of the held-out wallpapers
    python -m core.world.photos --heldout-views DIR --views 100 --of wallpaper
"""

from __future__ import annotations

import random
from dataclasses import replace

from PIL import Image

from core.world import image_sources, text_images
from core.world.photographs import (HELDOUT_PHOTOS, PHOTOS_WITH_TEXT, any_photo, photo, procedural, random_colour,
                                    random_size, scikit, scikit_photo, view, wallpaper)
from core.world.describe import answers
from core.world.scenes import POSITIONS, SPLITS, Sample

SOURCES = ("procedural", "text", "photo", "collage", "wallpaper", "document", "screenshot", "slide", "sign", "label",
           "drawing", "illustration", "chart")
TASKS = ("layout", "region", "colours", "brightest", "read", "unknown")
NO_TEXT = "There is no text."
CANNOT_READ = "There is text here, but I cannot read it."
PARAPHRASES = {
    "layout": ("Describe the image.", "Describe this picture.", "What does the image look like?",
               "Give a short description of the image."),
    "colours": ("What are the main colours?", "Which colours does the image mostly have?", "Name the main colours."),
    "brightest": ("Which region is the brightest?", "Where is the image brightest?", "Which part is the lightest?"),
    "read": ("What is written here?", "What does the text say?", "Read the text in the image."),
    "unknown": ("What animal is this?", "Where was this photo taken?", "How many people are there?",
                "What time of day is it?", "Who made this?", "What is the person doing?"),
}
# Wordings a user types beside PARAPHRASES: training draws one of them for a quarter of its samples (the held-out split
# asks PARAPHRASES only, so the evals keep their questions).
MORE_WORDINGS = {
    "layout": ("What is in this picture?", "What do you see?", "Tell me about this image.", "Caption this image.",
               "Describe the image in detail.", "What is this image?", "Describe what you see.",
               "What's in the image?", "Can you describe this image?", "Explain this picture.", "What is shown here?"),
    "colours": ("What colors do you see?", "What is the main color?", "What colours are in this image?",
                "Which colors are in the picture?", "What are the dominant colors?", "List the colours.",
                "What colour is it?", "What color is this image?"),
    "brightest": ("Where is the brightest part?", "Which area is the lightest?", "What part of the image is brightest?",
                  "Where is it lightest?"),
    "read": ("What does it say?", "Read it.", "What text is in the image?", "Transcribe the text.",
             "Is there any text in this image?", "Does this image contain text?", "What words are in the image?",
             "Can you read the text?", "OCR this image.", "What does the sign say?", "Extract the text.",
             "What is the text?", "Read this.", "What does the label say?", "Is anything written here?"),
    "unknown": ("What is this?", "Who is this?", "Is this a photo?", "What is happening here?", "Where is this?",
                "Is it day or night?", "What breed is the dog?", "How old is this person?", "What is the weather like?",
                "What brand is this?", "How many people are in the photo?", "Why?", "hello", "Thanks!"),
}
# The world's questions (core/world/scenes.py), which of another image only the honest answer answers; not in
# reference()'s table, since of a world scene they have the world's answer.
WORLD_QUESTIONS = ("How many objects are in the image?", "How many circles are there?",
                   "What shape is at the top left?", "Is the red square left of the blue circle?",
                   "Which label has the highest value?")
# Wordings never trained on, which `eval-target --wordings` asks beside each task's first paraphrase.
HELDOUT_WORDINGS = {
    "layout": ("Describe this image.", "What can you see in this image?", "Give me a description of the picture.",
               "What does this picture show?", "Describe the photo."),
    "colours": ("What colors are in this image?", "Which colours stand out?", "Name the colors in the picture."),
    "read": ("What is written on the sign?", "Read the words in this image.", "What does the writing say?",
             "Can you read what it says?", "Please transcribe the text.", "What is the text in this picture?"),
    "unknown": ("What kind of animal is this?", "Who took this picture?", "What city is this?", "Is anyone smiling?",
                "What year was this taken?", "What is the man holding?"),
}
# A reading and a describing question asked of the same image in one batch (`train target --paired`): their wordings
# differ in a word or two ("What's in the image?" / "What text is in the image?"), and one image asked both points the
# loss at that word rather than at the pixels.
PARTNER = {"layout": "read", "read": "layout"}
REGION_PROMPTS = ("What colour is the {}?", "Which colour is at the {}?", "What is the colour of the {} region?")
# The question core/world/describe.py's answers() names for each task whose paraphrases ask the same thing.
ASKED = {"layout": "Describe the image.", "colours": "What are the main colours?",
         "brightest": "Which region is the brightest?"}


def _spans(rng: random.Random, n: int, side: int) -> list[int]:
    """Cut points of n uneven spans across `side` pixels (even ones where the side is too short to vary)."""
    if side <= 8 * n:
        return [round(side * i / n) for i in range(n + 1)]
    return [0, *sorted(rng.sample(range(4, side - 4), n - 1)), side]


def collage(rng: random.Random, split: str) -> Image.Image:
    """Cells of an uneven grid (1-4 rows by 1-4 columns, never one cell), each filled from another source. Plain
    photographs and photo-like images mostly keep one colour across neighbouring regions; a model trained only on
    them learns to repeat the last colour it named instead of looking at each region."""
    w, h = random_size(rng)
    rows, cols = rng.choice([(r, c) for r in range(1, 5) for c in range(1, 5) if r * c > 1])
    xs, ys = _spans(rng, cols, w), _spans(rng, rows, h)
    image = Image.new("RGB", (w, h))
    for top, bottom in zip(ys, ys[1:]):
        for left, right in zip(xs, xs[1:]):
            kind = rng.random()
            fill = any_photo(rng, split) if kind < 0.4 else None  # None without scikit-image
            if fill is None:
                fill = procedural(rng) if kind < 0.7 else Image.new("RGB", (1, 1), random_colour(rng))
            image.paste(fill.resize((right - left, bottom - top), Image.Resampling.BILINEAR), (left, top))
    return image


def _honest(found: dict[str, str]) -> str:
    """The answer to a question the pixels cannot answer: what they can tell instead."""
    return f"I can only describe colours and layout: {found['Describe the image.']}"


def _question(rng: random.Random, task: str, image: Image.Image, holds_text: bool, split: str) -> tuple[str, str]:
    found = answers(image)
    if task == "region":
        position = rng.choice(POSITIONS)
        return rng.choice(REGION_PROMPTS).format(position), found[f"What colour is the {position}?"]
    if split == "train" and rng.random() < 0.25:
        wordings = MORE_WORDINGS[task] + (WORLD_QUESTIONS if task == "unknown" else ())
    else:
        wordings = PARAPHRASES[task]
    if task == "read":
        return rng.choice(wordings), CANNOT_READ if holds_text else NO_TEXT
    if task == "unknown":
        return rng.choice(wordings), _honest(found)
    return rng.choice(wordings), found[ASKED[task]]


def ask(s: Sample, task: str, rng: random.Random, split: str) -> Sample | None:
    """The image of sample `s` asked another task's question (None where it has no sure answer: reading a photograph
    that may show text)."""
    if task == "read" and s.holds_text and s.text_regions is None:
        return None
    prompt, answer = _question(rng, task, s.image, s.holds_text, split)
    return replace(s, task=task, prompt=prompt, answer=answer)


def _question_key(prompt: str) -> str:
    """A prompt as a question: case, spacing and the closing mark do not change what it asks."""
    return " ".join(prompt.lower().split()).rstrip("?.!")


# Every learned wording (as a _question_key) -> what it asks: a question of describe.answers(), "read" or "unknown".
_ASKS = {_question_key(p): ASKED.get(task, task) for task in ("layout", "colours", "brightest", "read", "unknown")
         for p in PARAPHRASES[task] + MORE_WORDINGS[task]}
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


def sample_rng(split: str, index: int, task: str, source: str) -> random.Random:
    """The random stream a sample draws from (its image first): one draw per (split, index, task, source)."""
    return random.Random(f"photos/{split}/{source}/{task}/{index}")


def sample(split: str, index: int, task: str | None = None, source: str | None = None) -> Sample:
    """The index-th sample of a split (tasks and sources cycle unless given); deterministic."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
    task = task or TASKS[index % len(TASKS)]
    source = source or SOURCES[index // len(TASKS) % len(SOURCES)]
    rng = sample_rng(split, index, task, source)
    mask = None
    if source in text_images.SOURCES:
        image, mask = text_images.draw_with_mask(source, rng, split)
        regions = text_images.text_regions(mask)
        holds_text = source in text_images.WITH_TEXT
    else:
        image, name = None, ""
        if source == "collage":
            image = collage(rng, split)
        elif source in ("photo", "wallpaper"):
            pick = wallpaper if source == "wallpaper" else scikit
            for _ in range(4):  # a reading question is not asked of a photograph that may show text
                image, name = view(rng, *pick(rng, split))
                if task != "read" or name not in PHOTOS_WITH_TEXT:
                    break
        image = image if image is not None else procedural(rng)
        holds_text = name in PHOTOS_WITH_TEXT
        regions = None if holds_text else (False,) * 9
    prompt, answer = _question(rng, task, image, holds_text, split)
    return Sample(image, task, prompt, answer, holds_text=holds_text, text_regions=regions, text_mask=mask)


def samples(split: str, n: int, tasks: tuple[str, ...] = TASKS, start: int = 0) -> list[Sample]:
    return [sample(split, start + i, tasks[i % len(tasks)]) for i in range(n)]


def write_heldout_photos(folder: str, source: str = "photo") -> list[str]:
    """The held-out photographs, whole, as PNG files: scikit-image's (`photo`) or the held-out wallpaper package's
    (`wallpaper`, at most image_sources.LONGEST_SIDE, its licence beside them); a folder for `eval-target --images`
    and `bench-spec --images`."""
    from pathlib import Path

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    if source == "wallpaper":
        pictures = {image_sources.picture_name(p): image_sources.load(p)
                    for p in image_sources.split_photographs("heldout")}
        if not pictures:
            raise RuntimeError("the held-out wallpaper package is not installed: python -m core.world.image_sources "
                               "--install")
        image_sources.write_licences(out, image_sources.held_out_packages())
    else:
        pictures = {name: scikit_photo(name) for name in HELDOUT_PHOTOS}
    paths = []
    for name, image in pictures.items():
        path = out / f"{Path(name).stem}.png"
        image.save(path)
        paths.append(str(path))
    return paths


def write_heldout_views(folder: str, n: int = 32, source: str = "photo") -> list[str]:
    """The first n held-out views (crops, flips, colour jitter, any aspect ratio: how training sees the other
    photographs) of the held-out scikit-image photographs (`photo`) or of the held-out wallpaper package
    (`wallpaper`, its licence written beside them), as PNG files: a benchmark folder bigger than four photographs."""
    from pathlib import Path

    prefix = {"photo": "view", "wallpaper": "wallpaper"}[source]
    if source == "photo" and photo(random.Random(0), "heldout") is None:
        raise RuntimeError("the held-out photographs need scikit-image: pip install scikit-image (the photos extra)")
    if source == "wallpaper" and not image_sources.split_photographs("heldout"):
        raise RuntimeError("the held-out wallpaper package is not installed: python -m core.world.image_sources --install")
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    paths = [str(out / f"{prefix}{i:03d}.png") for i in range(n)]
    for i, path in enumerate(paths):
        sample("heldout", i, "layout", source).image.save(path)
    if source == "wallpaper":
        image_sources.write_licences(out, image_sources.held_out_packages())
    return paths


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--heldout-photos", metavar="DIR", help="write the held-out photographs to DIR")
    parser.add_argument("--heldout-views", metavar="DIR", help="write views (crops, flips, jitter) of them to DIR")
    parser.add_argument("--views", type=int, default=32, help="how many views --heldout-views writes")
    parser.add_argument("--of", choices=("photo", "wallpaper"), default="photo",
                        help="scikit-image's held-out photographs or the held-out wallpaper package's")
    args = parser.parse_args()
    if args.heldout_photos:
        print("\n".join(write_heldout_photos(args.heldout_photos, args.of)))
    if args.heldout_views:
        print("\n".join(write_heldout_views(args.heldout_views, args.views, args.of)))
    if not (args.heldout_photos or args.heldout_views):
        for i, s in enumerate(samples("train", 12)):
            path = f"/tmp/photo_{i}.png"
            s.image.save(path)
            print(f"{path} {s.image.size} [{s.task}] {s.prompt} -> {s.answer}")
