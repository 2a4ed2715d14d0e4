"""User input to core arguments: every check that turns a bad value into a message the user can act on.

Values arrive from the browser or the API; anything wrong raises ValueError (shown as a gr.Error by the tabs),
so core's own validation (SamplingConfig, the engine's γ range) speaks to the user too.
"""

from __future__ import annotations

import math
from contextlib import contextmanager

import gradio as gr

from core.decoding.limits import UnreadableImage, check_size, open_image, to_rgb
from core.decoding.sampling import SamplingConfig
from core.models.registry import NO_DRAFTER

MAX_NEW_TOKENS = 256


def image_input(**kwargs) -> gr.Image:
    """A gr.Image that reads uploads with core.decoding.limits.open_image: an image over the pixel cap is refused from its
    header before decoding, any mode arrives as RGB (an animated GIF as its first frame), and an unreadable file
    (a text file renamed .png, a truncated one) is a clear gr.Error instead of Gradio's generic processing failure.
    The instance's preprocess is wrapped rather than gr.Image subclassed, because Gradio writes a .pyi stub beside
    every module that subclasses a component."""
    image = gr.Image(**kwargs)
    plain = image.preprocess

    def preprocess(payload):
        try:
            if payload is not None and payload.path:
                return open_image(payload.path, payload.orig_name or "the upload")
            decoded = plain(payload)  # no image, or a data: URL from an API client
            if decoded is None:
                return None
            check_size(*decoded.size)
            return to_rgb(decoded)
        except UnreadableImage:
            raise gr.Error("That file is not an image this app can read; upload a PNG, JPEG, WebP or GIF.") from None
        except ValueError as exc:
            raise gr.Error(str(exc)) from None

    image.preprocess = preprocess
    return image


@contextmanager
def user_errors():
    """ValueError from the inputs or from core becomes a gr.Error: a message, no stack trace."""
    try:
        yield
    except ValueError as exc:
        raise gr.Error(str(exc)) from None


def whole(value, name: str) -> int:
    if value is None or not math.isfinite(float(value)) or float(value) != int(float(value)):
        raise ValueError(f"{name} must be a whole number, got {value!r}")
    return int(value)


def drafter_spec(name: str, keep_ratio=0.75, mode: str = "chain", top_k=4, total=16) -> str:
    """The registry's drafter spec for the chosen drafter and its settings: any drafter drafts a chain or a tree,
    DREAM also takes its keep ratio."""
    options = [f"keep={float(keep_ratio)}"] if name == "dream" else []
    if mode == "tree":
        options.append(f"tree={whole(top_k, 'tree top-k')}x{whole(total, 'tree total tokens')}")
    return f"{name}:{','.join(options)}" if options and name != NO_DRAFTER else name


def sampling(temperature, top_p) -> SamplingConfig:
    try:
        return SamplingConfig(temperature=float(temperature), top_p=float(top_p))
    except TypeError:
        raise ValueError(f"temperature and top-p must be numbers, got {temperature!r} and {top_p!r}") from None
