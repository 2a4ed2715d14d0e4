"""Photographs and photo-like images to draw from: scikit-image's bundled photographs, Debian's wallpaper photographs
(core/world/image_sources.py), procedural photo-like images, and random views of them (crops, flips, colour jitter, any
size and aspect ratio). core/world/photos.py asks questions of them, core/world/text_images.py draws text on them.

Held out whole: the scikit-image photographs in HELDOUT_PHOTOS and one wallpaper package; only the held-out split shows
them.

    from core.world import photographs
    photographs.photo(random.Random(0), "train")        # a view of a training photograph (None without scikit-image)
"""

from __future__ import annotations

import random

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

from core.world import image_sources

# scikit-image's bundled photographs (they load without a download); the held-out ones never appear in training.
PHOTOS = ("astronaut", "coffee", "chelsea", "rocket", "camera", "cat", "hubble_deep_field", "immunohistochemistry",
          "moon", "page", "text", "coins", "horse", "retina", "logo", "colorwheel", "grass", "gravel", "brick",
          "clock", "cell")
HELDOUT_PHOTOS = ("astronaut", "chelsea", "rocket", "retina")
# Photographs that show text (a crop of them may: a reading question is not asked of them): the astronaut's mission
# patch names its crew, a wine bottle its label, MATE's logo a line under it.
PHOTOS_WITH_TEXT = ("page", "text", "logo", "clock", "astronaut", "focal-ubuntukylin.png", "GreenTraditional.jpg",
                    "Wine_by_Jakkub_Mede.jpg")


def random_size(rng: random.Random) -> tuple[int, int]:
    """A random size and aspect ratio (1:3 to 3:1)."""
    area, aspect = rng.randint(64, 640) ** 2, 3 ** rng.uniform(-1, 1)
    return max(16, int((area * aspect) ** 0.5)), max(16, int((area / aspect) ** 0.5))


def random_colour(rng: random.Random) -> tuple[int, int, int]:
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


def ramp(a: np.ndarray, b: np.ndarray, t: np.ndarray) -> np.ndarray:
    """[h, w, 3]: colour `a` blended into `b` along `t` [h, w], stretched to run from 0 to 1 over the image."""
    t = (t - t.min()) / max(np.ptp(t), 1e-6)
    return a + (b - a) * t[..., None]


def procedural(rng: random.Random) -> Image.Image:
    """A photo-like image: a base (gradient, fractal noise, stripes or texture), then blurred blobs and shapes."""
    w, h = random_size(rng)
    base = rng.choice(("gradient", "noise", "stripes", "texture"))
    a, b = np.array(random_colour(rng), float), np.array(random_colour(rng), float)
    if base == "gradient":
        angle = rng.uniform(0, np.pi)
        ys, xs = np.mgrid[0:h, 0:w]
        pixels = ramp(a, b, np.cos(angle) * xs / w + np.sin(angle) * ys / h)
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
        (draw.ellipse if rng.random() < 0.6 else draw.rectangle)(box, fill=random_colour(rng))
    if rng.random() < 0.7:
        image = image.filter(ImageFilter.GaussianBlur(rng.uniform(0.5, max(1.0, min(w, h) / 30))))
    return image


def photo_names(split: str) -> tuple[str, ...]:
    """The photographs a split draws from: the held-out ones, or all the others."""
    return HELDOUT_PHOTOS if split == "heldout" else tuple(p for p in PHOTOS if p not in HELDOUT_PHOTOS)


def scikit_photo(name: str) -> Image.Image:
    """One of scikit-image's photographs, whole, as an RGB image (needs scikit-image: the photos extra)."""
    from skimage import data

    return Image.fromarray(np.asarray(getattr(data, name)())).convert("RGB")


def scikit(rng: random.Random, split: str) -> tuple[Image.Image | None, str]:
    name = rng.choice(photo_names(split))
    try:
        return scikit_photo(name), name
    except ImportError:
        return None, name


def wallpaper(rng: random.Random, split: str) -> tuple[Image.Image | None, str]:
    paths = image_sources.split_photographs(split)
    if not paths:
        return None, ""
    path = rng.choice(paths)
    return image_sources.load(path), image_sources.picture_name(path)


def photo(rng: random.Random, split: str, from_wallpapers: bool = False) -> Image.Image | None:
    """A crop of one of scikit-image's photographs (or Debian's wallpapers), flipped and colour-jittered; None
    where they are not installed."""
    return view(rng, *(wallpaper if from_wallpapers else scikit)(rng, split))[0]


def any_photo(rng: random.Random, split: str) -> Image.Image | None:
    """A view of a photograph of any source, none that shows text (a background for text that is drawn)."""
    for _ in range(4):
        image, name = (wallpaper if rng.random() < 0.5 else scikit)(rng, split)
        if name not in PHOTOS_WITH_TEXT:
            return view(rng, image, name)[0]
    return None


def view(rng: random.Random, image: Image.Image | None, name: str) -> tuple[Image.Image | None, str]:
    """A random crop of a photograph, maybe flipped, colour-jittered and resized to a random size."""
    if image is None:
        return None, name
    w, h = image.size
    cw, ch = int(w * rng.uniform(0.4, 1.0)), int(h * rng.uniform(0.4, 1.0))
    x, y = rng.randint(0, w - cw), rng.randint(0, h - ch)
    image = image.crop((x, y, x + cw, y + ch))
    if rng.random() < 0.5:
        image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    jitter = np.array([rng.uniform(0.8, 1.2) for _ in range(3)])
    image = Image.fromarray(np.clip(np.asarray(image, dtype=float) * jitter, 0, 255).astype(np.uint8))
    return image.resize(random_size(rng), Image.Resampling.BILINEAR), name
