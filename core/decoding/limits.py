"""What one request may ask for, checked the same way by the app and the command line before any model runs:
the prompt's length, the tokens to generate, and the image (its size read from the file's header, refused before
it is decoded, then any PIL mode made RGB and an animation's first frame taken).

    from core.decoding.limits import check_prompt, open_image
    image = open_image("photo.png")      # ValueError with a one-line reason for anything it cannot use
"""

from __future__ import annotations

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

# 40 megapixels (a large phone photo) decode to 120 MB of RGB; the image processor shrinks any image far below
# that, so more pixels only cost memory and time. PIL itself refuses only past ~179 megapixels.
MAX_PIXELS = 40_000_000
# A request is an image and a question; 2000 characters is pages of text, and refusing by length costs nothing,
# where a 100k-character prompt would first be tokenised and then prefilled for minutes.
MAX_PROMPT_CHARS = 2000


class UnreadableImage(ValueError):
    """The file is not an image PIL can decode (not an image at all, empty, or truncated)."""


def check_prompt(prompt: str | None) -> str:
    if not prompt or not prompt.strip():
        raise ValueError("The prompt is empty: ask a question about the image.")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise ValueError(f"The prompt is {len(prompt)} characters long; the limit is {MAX_PROMPT_CHARS}.")
    return prompt.strip()


def check_new_tokens(max_new_tokens: int, context: int) -> int:
    if not 1 <= max_new_tokens <= context:
        raise ValueError(f"max_new_tokens must be between 1 and {context} (the model's context), got {max_new_tokens}")
    return max_new_tokens


def check_size(width: int, height: int) -> None:
    if width * height > MAX_PIXELS:
        raise ValueError(f"The image is {width} x {height} pixels ({width * height / 1e6:.0f} megapixels); "
                         f"the limit is {MAX_PIXELS / 1e6:.0f} megapixels.")


def to_rgb(image: Image.Image) -> Image.Image:
    """RGB of any mode: an animation's first frame, transparency dropped, 16-bit grey scaled (PIL's own
    conversion clips it to white)."""
    image.seek(0)
    if image.mode in ("I", "I;16", "I;16B", "I;16L"):
        image = Image.fromarray((np.asarray(image, dtype=np.uint32) >> 8).clip(0, 255).astype(np.uint8))
    return image.convert("RGB")


def open_image(path, name: str | None = None) -> Image.Image:
    """The file as an RGB image within MAX_PIXELS (EXIF rotation applied); `name` is what messages call it."""
    name = name or str(path)
    try:
        with Image.open(path) as image:  # reads the header only: the size is known before any pixel is decoded
            check_size(*image.size)
            image.load()
            return to_rgb(ImageOps.exif_transpose(image))
    except FileNotFoundError:
        raise ValueError(f"image not found: {name}") from None
    except Image.DecompressionBombError:  # PIL refuses these in Image.open itself, before check_size sees them
        raise ValueError(f"The image is over {2 * Image.MAX_IMAGE_PIXELS / 1e6:.0f} megapixels; "
                         f"the limit is {MAX_PIXELS / 1e6:.0f} megapixels.") from None
    except (UnidentifiedImageError, OSError) as exc:
        raise UnreadableImage(f"not a readable image: {name} ({exc})") from None
