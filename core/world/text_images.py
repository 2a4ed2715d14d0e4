"""Images that hold text the embedded target does not read, and light images that hold none: what teaches it to say
"There is text here, but I cannot read it." instead of inventing a word, and "There is no text." only where there is
none (core/world/photos.py asks the questions).

Sources, each drawn at a random size and aspect ratio:
  text        1-40 characters on one to six lines (any words, digits, punctuation), in any installed font, size,
              alignment and rotation up to 15 degrees, on plain, paper-like, procedural, artwork or photograph
              backgrounds
  document    a page: heading, paragraph blocks, bullet lists, tables, page numbers
  screenshot  a window: title bar, menu, sidebar, buttons, text fields or a code editor, light or dark
  slide       a title and bullets on a plain or gradient background
  sign        a plate with a few words pasted into a photograph, tilted
  label       one to three short lines of dark text, level, on a plain light page, often in capitals and in the
              world's own font: what a world OCR scene looks like, but never the world's words; a third of them
              a door plate's lines instead (a capitalised name with a code: "Vemar B4", "Kalo 12") in any font
  drawing     no text: sketch-like strokes, outlines, hatching, grids and shapes that are not the world's, on white or
              paper, so that "a light image with dark marks" does not mean a world scene or text
  illustration  no text: a digital artwork's figure (blobs, eyes, scales, whiskers, a photograph cut out) on a
              gradient or dark backdrop, so that "a small busy shape on a smooth ground" does not mean text
  chart       bars (grouped, stacked, horizontal), lines, an area, dots, a pie or a donut, with a title, ticks,
              category labels and sometimes a legend, in any font, light or dark: small, sparse text beside large
              areas of plain colour, which without it look to the target like a world scene

Every generator returns (image, mask): the mask is white where ink of text was drawn, so `text_regions` can say which
of the 3x3 regions of the square the model sees hold text (measured on a 96x96 copy). Fonts are the TrueType /
OpenType files of the machine's font directories (Debian packages: core/world/image_sources.py installs them) and
Pillow's own; the same (split, index) draws the same sample on a machine with the same fonts.

    python -m core.world.text_images                    # writes a few of each source to /tmp/text_*.png
    python -m core.world.text_images --notices DIR      # real words of signs, level on a light page, in three
                                                        # faces, with a metadata.jsonl for eval-target --images
    python -m core.world.text_images --charts DIR       # bar, line, dot and pie charts with a title, ticks and
                                                        # labels, the same way
"""

from __future__ import annotations

import json
import math
import random
import string
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter, ImageFont

from core.world import image_sources, photographs, scenes

SOURCES = ("text", "document", "screenshot", "slide", "sign", "label", "drawing", "illustration", "chart")
WITH_TEXT = ("text", "document", "screenshot", "slide", "sign", "label", "chart")
SYLLABLES = ("ka", "lo", "mi", "ten", "ar", "sto", "ve", "ri", "nu", "pe", "dor", "an", "is", "qu", "el", "bra",
             "on", "ex", "ti", "ul", "mar", "gen", "sa", "fi", "wo", "th", "ch", "ing", "er", "pro", "con", "ment")
PUNCTUATION = ".,:;!?-/()&%$#@'\""
REGION_INK = 0.01  # share of a region's pixels (at 96x96) that must be ink for the region to hold text


def font(rng: random.Random, size: int, monospace: bool = False) -> ImageFont.FreeTypeFont:
    """A random installed font at `size` pixels (Pillow's default where none, or it fails to load)."""
    names = [f for f in image_sources.fonts() if not monospace or "mono" in f.lower()] or list(image_sources.fonts())
    if names and rng.random() < 0.9:
        try:
            return ImageFont.truetype(rng.choice(names), size)
        except OSError:
            pass
    return ImageFont.load_default(size=size)


def made_up(rng: random.Random, most: int) -> str:
    """A made-up word of one to `most` syllables."""
    return "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, most)))


def word(rng: random.Random) -> str:
    """A word of any shape: made-up syllables, letters, a number, a price, a date or a code-like token, in any case."""
    kind = rng.random()
    if kind < 0.45:
        text = made_up(rng, 4)
    elif kind < 0.6:
        text = "".join(rng.choice(string.ascii_letters) for _ in range(rng.randint(1, 9)))
    elif kind < 0.75:
        text = str(rng.randint(0, 10 ** rng.randint(1, 6)))
    elif kind < 0.82:
        text = f"{rng.choice('$€£')}{rng.randint(1, 999)}.{rng.randint(0, 99):02d}"
    elif kind < 0.88:
        text = f"{rng.randint(1, 28):02d}/{rng.randint(1, 12):02d}/{rng.randint(1990, 2030)}"
    else:
        text = "".join(rng.choice(string.ascii_lowercase + "_") for _ in range(rng.randint(2, 8))) + rng.choice(("()", "=", ":", ""))
    case = rng.random()
    text = text.upper() if case < 0.25 else text.capitalize() if case < 0.55 else text
    if rng.random() < 0.15:
        text += rng.choice(PUNCTUATION)
    return text


def line(rng: random.Random, chars: int) -> str:
    words = [word(rng)]
    while len(" ".join(words)) < chars:
        words.append(word(rng))
    return " ".join(words)[: max(chars, 1)].strip() or word(rng)


def _ink(rng: random.Random, behind: float) -> tuple[int, int, int]:
    """A text colour that stands out from a background of mean lightness `behind` (0-255)."""
    for _ in range(20):
        ink = photographs.random_colour(rng)
        if abs(np.mean(ink) - behind) >= 90:
            return ink
    return (0, 0, 0) if behind > 127 else (255, 255, 255)


def _size(rng: random.Random, low: int = 96, high: int = 1200) -> tuple[int, int]:
    area, aspect = rng.randint(low, high) ** 2, 3 ** rng.uniform(-1, 1)
    return max(24, int((area * aspect) ** 0.5)), max(24, int((area / aspect) ** 0.5))


def paper(rng: random.Random, size: tuple[int, int]) -> Image.Image:
    """A light page: white, cream or grey, sometimes with grain, a gradient of light or a scanner's shadow."""
    w, h = size
    base = np.array([rng.randint(215, 255)] * 3, float) - np.array([0, rng.randint(0, 12), rng.randint(0, 30)])
    pixels = np.broadcast_to(base, (h, w, 3)).copy()
    if rng.random() < 0.5:
        pixels += np.random.default_rng(rng.randrange(2**32)).normal(0, rng.uniform(2, 10), (h, w, 1))
    if rng.random() < 0.4:
        ys = np.linspace(0, 1, h)[:, None, None] if rng.random() < 0.5 else np.linspace(0, 1, w)[None, :, None]
        pixels -= rng.uniform(0, 40) * ys
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))


class Canvas:
    """An image and its text mask, drawn on together: every piece of text lands in both."""

    def __init__(self, image: Image.Image):
        self.image = image.convert("RGB")
        self.mask = Image.new("L", self.image.size, 0)
        self.draw, self.ink = ImageDraw.Draw(self.image), ImageDraw.Draw(self.mask)

    def text(self, xy, text: str, font, fill, anchor: str = "la", **kwargs) -> tuple[int, int, int, int]:
        self.draw.text(xy, text, font=font, fill=fill, anchor=anchor, **kwargs)
        self.ink.text(xy, text, font=font, fill=255, anchor=anchor, **kwargs)
        return self.draw.textbbox(xy, text, font=font, anchor=anchor)

    def paste(self, layer: Image.Image, mask: Image.Image, xy: tuple[int, int]) -> None:
        """An RGBA layer (its text mask beside it) pasted at xy."""
        self.image.paste(layer, xy, layer)
        self.mask.paste(mask, xy, mask)

    def behind(self, box) -> float:
        x0, y0, x1, y1 = (int(v) for v in box)
        crop = self.image.crop((max(0, x0), max(0, y0), max(x0 + 1, x1), max(y0 + 1, y1))).convert("L")
        return float(np.asarray(crop, dtype=float).mean())


def text_block(rng: random.Random, lines: list[str], size: int, fill, align: str) -> tuple[Image.Image, Image.Image]:
    """Lines of text on a transparent layer and its mask, to be rotated and pasted."""
    face = font(rng, size)
    spacing = int(size * rng.uniform(0.2, 0.6))
    probe = ImageDraw.Draw(Image.new("L", (1, 1)))
    box = [int(v) for v in probe.multiline_textbbox((0, 0), "\n".join(lines), font=face, spacing=spacing, align=align)]
    w, h = box[2] - box[0] + 4, box[3] - box[1] + 4
    layer, mask = Image.new("RGBA", (w, h), (0, 0, 0, 0)), Image.new("L", (w, h), 0)
    stroke = rng.choice((0, 0, 0, 1)) if size > 14 else 0
    ImageDraw.Draw(layer).multiline_text((2 - box[0], 2 - box[1]), "\n".join(lines), font=face, fill=(*fill, 255),
                                         spacing=spacing, align=align, stroke_width=stroke,
                                         stroke_fill=tuple(255 - c for c in fill))
    ImageDraw.Draw(mask).multiline_text((2 - box[0], 2 - box[1]), "\n".join(lines), font=face, fill=255,
                                        spacing=spacing, align=align, stroke_width=stroke)
    return layer, mask


def _rotated(layer: Image.Image, mask: Image.Image, degrees: float) -> tuple[Image.Image, Image.Image]:
    if not degrees:
        return layer, mask
    return (layer.rotate(degrees, Image.Resampling.BICUBIC, expand=True),
            mask.rotate(degrees, Image.Resampling.BILINEAR, expand=True))


def background(rng: random.Random, size: tuple[int, int], split: str) -> Image.Image:
    """Plain, paper-like, procedural, an artwork (`illustration`: so that its figure is not what tells text from
    none) or a photograph (core/world/photographs.py)."""
    kind = rng.random()
    if kind < 0.2:
        return Image.new("RGB", size, photographs.random_colour(rng))
    if kind < 0.4:
        return paper(rng, size)
    if kind < 0.6:
        return photographs.procedural(rng).resize(size)
    if kind < 0.8:
        return illustration(rng, split)[0].resize(size)
    found = photographs.any_photo(rng, split)
    return (found if found is not None else photographs.procedural(rng)).resize(size)


def free_text(rng: random.Random, split: str) -> tuple[Image.Image, Image.Image]:
    """1-40 characters on one to six lines, placed, aligned and tilted at random, readable on its background."""
    w, h = _size(rng)
    canvas = Canvas(background(rng, (w, h), split))
    n_lines = rng.choice((1, 1, 1, 2, 2, 3, 4, 5, 6))
    total = rng.randint(max(1, n_lines), 40)
    per_line = max(1, total // n_lines)
    lines = [line(rng, per_line) for _ in range(n_lines)]
    widest = max(len(t) for t in lines)
    # From text a few pixels high at 96x96 to text that fills the image.
    low = max(6, int(3 * h / 96))
    high = max(low + 1, int(min(h / (1.3 * n_lines), 1.7 * w / max(widest, 1))))
    size = rng.randint(low, max(low, high))
    layer, mask = text_block(rng, lines, size, (0, 0, 0), rng.choice(("left", "center", "right")))
    layer, mask = _rotated(layer, mask, rng.uniform(-15, 15) if rng.random() < 0.5 else 0)
    if layer.width > w or layer.height > h:  # too long for its line: shrink to fit
        scale = min(w / layer.width, h / layer.height) * 0.95
        layer = layer.resize((max(1, int(layer.width * scale)), max(1, int(layer.height * scale))))
        mask = mask.resize(layer.size)
    x, y = rng.randint(0, w - layer.width), rng.randint(0, h - layer.height)
    ink = _ink(rng, canvas.behind((x, y, x + layer.width, y + layer.height)))
    coloured = Image.new("RGBA", layer.size, (*ink, 255))
    coloured.putalpha(layer.getchannel("A"))
    canvas.paste(coloured, mask, (x, y))
    return canvas.image, canvas.mask


def _paragraph(rng: random.Random, canvas: Canvas, box, size: int, fill) -> int:
    """Lines of words filling the box's width, from its top; returns the y below the last line."""
    x0, y, x1, y1 = box
    face = font(rng, size)
    for _ in range(rng.randint(2, 9)):
        if y + size > y1:
            break
        text, limit = word(rng), (x1 - x0) * rng.uniform(0.55, 1.0)
        while face.getlength(text) < limit:
            text += " " + word(rng)
        while face.getlength(text) > x1 - x0 and " " in text:
            text = text.rsplit(" ", 1)[0]
        canvas.text((x0, y), text, face, fill)
        y += int(size * 1.35)
    return y + size


def _table(rng: random.Random, canvas: Canvas, box, size: int, fill) -> int:
    x0, y0, x1, y1 = box
    rows, cols = rng.randint(2, 6), rng.randint(2, 5)
    row_h = int(size * 1.8)
    face = font(rng, size)
    for r in range(rows + 1):
        if y0 + r * row_h > y1:
            break
        canvas.draw.line((x0, y0 + r * row_h, x1, y0 + r * row_h), fill=fill, width=1)
    for r in range(rows):
        if y0 + (r + 1) * row_h > y1:
            break
        for c in range(cols):
            cell_x = x0 + (x1 - x0) * c // cols
            text = word(rng)
            while face.getlength(text) > (x1 - x0) / cols - 4 and len(text) > 1:
                text = text[:-1]
            canvas.text((cell_x + 3, y0 + r * row_h + (row_h - size) // 2), text, face, fill)
    return y0 + rows * row_h + size


def document(rng: random.Random, split: str) -> tuple[Image.Image, Image.Image]:
    """A page of a document: a heading, then paragraphs, bullets and tables, in one or two columns."""
    portrait = rng.random() < 0.7
    w = rng.randint(200, 1100)
    h = int(w * (1.41 if portrait else 0.71) * rng.uniform(0.9, 1.1))
    canvas = Canvas(paper(rng, (w, h)))
    fill = tuple(rng.randint(0, 70) for _ in range(3))
    margin = int(w * rng.uniform(0.04, 0.12))
    body = max(6, int(h / rng.uniform(30, 70)))
    y = margin
    heading = font(rng, int(body * rng.uniform(1.4, 2.5)))
    y = canvas.text((margin, y), line(rng, rng.randint(4, 30)), heading, fill)[3] + body
    columns = 2 if not portrait and rng.random() < 0.3 else 1
    width = (w - 2 * margin) // columns
    for c in range(columns):
        x0, top = margin + c * width, y
        while top < h - margin - body:
            kind = rng.random()
            box = (x0, top, x0 + width - margin // 2, h - margin)
            if kind < 0.6:
                top = _paragraph(rng, canvas, box, body, fill)
            elif kind < 0.8:
                top = _table(rng, canvas, box, body, fill)
            else:
                for _ in range(rng.randint(2, 5)):
                    if top + body > h - margin:
                        break
                    canvas.draw.ellipse((x0, top + body // 3, x0 + body // 3, top + 2 * body // 3), fill=fill)
                    canvas.text((x0 + body, top), line(rng, rng.randint(5, 40)), font(rng, body), fill)
                    top += int(body * 1.5)
                top += body
    if rng.random() < 0.5:
        canvas.text((w // 2, h - margin // 2), str(rng.randint(1, 300)), font(rng, body), fill, anchor="mm")
    return canvas.image, canvas.mask


def screenshot(rng: random.Random, split: str) -> tuple[Image.Image, Image.Image]:
    """A window of an application: title bar and its buttons, a menu, a sidebar, then buttons and fields or code."""
    w, h = rng.choice(((1280, 720), (1920, 1080), (1366, 768), (800, 600), (1024, 768), (390, 844), (1440, 900)))
    scale = rng.uniform(0.3, 1.0)
    w, h = int(w * scale), int(h * scale)
    dark = rng.random() < 0.4
    surface = (rng.randint(20, 50),) * 3 if dark else (rng.randint(235, 255),) * 3
    fill = (220, 220, 220) if dark else (30, 30, 30)
    canvas = Canvas(Image.new("RGB", (w, h), surface))
    size = max(6, int(h / rng.uniform(25, 55)))
    bar = int(size * 2)
    accent = photographs.random_colour(rng)
    canvas.draw.rectangle((0, 0, w, bar), fill=tuple(max(0, c - 25) for c in surface))
    for i in range(3):
        cx = int(bar * (0.6 + 0.8 * i))
        canvas.draw.ellipse((cx - bar // 5, bar // 2 - bar // 5, cx + bar // 5, bar // 2 + bar // 5),
                            fill=((237, 106, 94), (245, 191, 79), (98, 197, 84))[i])
    canvas.text((w // 2, bar // 2), line(rng, rng.randint(4, 24)), font(rng, size), fill, anchor="mm")
    x = size
    for _ in range(rng.randint(2, 7)):  # the menu
        box = canvas.text((x, bar + size // 2), word(rng), font(rng, size), fill)
        x = box[2] + size
        if x > w - 4 * size:
            break
    top, left = bar + 2 * size, 0
    if rng.random() < 0.6 and w > 300:  # a sidebar of items
        left = int(w * rng.uniform(0.15, 0.3))
        canvas.draw.rectangle((0, top - size // 2, left, h), fill=tuple(max(0, c - 12) for c in surface))
        y = top
        while y < h - 2 * size:
            canvas.text((size, y), line(rng, rng.randint(3, 18)), font(rng, size), fill)
            y += int(size * 1.8)
    if rng.random() < 0.4:  # a code editor
        mono = font(rng, size, monospace=True)
        y, colours = top, ((86, 156, 214), (206, 145, 120), (106, 153, 85), fill)
        while y < h - size:
            indent = rng.randint(0, 3) * 2 * size
            canvas.text((left + size, y), str(1 + (y - top) // int(size * 1.4)), mono, (128, 128, 128))
            x = left + 4 * size + indent
            for _ in range(rng.randint(0, 5)):
                box = canvas.text((x, y), word(rng), mono, rng.choice(colours))
                x = box[2] + size // 2
                if x > w - 4 * size:
                    break
            y += int(size * 1.4)
    else:  # a form: labels, fields, buttons
        y = top
        while y < h - 3 * size:
            kind = rng.random()
            x0 = left + size
            if kind < 0.35:
                canvas.text((x0, y), line(rng, rng.randint(5, 40)), font(rng, size), fill)
            elif kind < 0.65 and x0 + 10 * size < w - size:
                canvas.text((x0, y), word(rng) + ":", font(rng, size), fill)
                field = (x0 + 8 * size, y - size // 3, min(w - size, x0 + 8 * size + int(w * 0.35)), y + size + size // 3)
                canvas.draw.rectangle(field, outline=(128, 128, 128))
                if rng.random() < 0.5:
                    canvas.text((field[0] + size // 2, y), word(rng), font(rng, size), fill)
            else:
                label = word(rng)
                face = font(rng, size)
                bw = int(face.getlength(label)) + 2 * size
                canvas.draw.rounded_rectangle((x0, y - size // 2, x0 + bw, y + size + size // 2), radius=size // 2,
                                              fill=accent)
                canvas.text((x0 + size, y), label, face, _ink(rng, float(np.mean(accent))))
            y += int(size * rng.uniform(2.0, 3.0))
    return canvas.image, canvas.mask


def slide(rng: random.Random, split: str) -> tuple[Image.Image, Image.Image]:
    """A presentation slide: a large title and a few bullets, sometimes a picture beside them."""
    h = rng.randint(120, 1080)
    w = int(h * rng.choice((4 / 3, 16 / 9, 16 / 10)))
    a, b = (np.array([rng.randint(0, 255) for _ in range(3)], float) for _ in range(2))
    t = np.linspace(0, 1, h)[:, None, None] if rng.random() < 0.5 else 0.0
    canvas = Canvas(Image.fromarray(np.broadcast_to(a + (b - a) * t * (rng.random() < 0.5), (h, w, 3)).astype(np.uint8)))
    title = font(rng, max(8, int(h / rng.uniform(7, 14))))
    fill = _ink(rng, canvas.behind((0, 0, w, h)))
    centred = rng.random() < 0.4
    box = canvas.text((w // 2 if centred else w // 12, h // 8), line(rng, rng.randint(3, 28)), title, fill,
                      anchor="ma" if centred else "la")
    right = w
    if rng.random() < 0.4:
        picture = photographs.procedural(rng).resize((w // 3, h // 2))
        canvas.image.paste(picture, (w - w // 3 - w // 20, h // 3))
        right = w - w // 3 - w // 10
    size, y = max(6, int(h / rng.uniform(14, 24))), box[3] + h // 12
    for _ in range(rng.randint(0 if centred else 1, 5)):
        if y > h - 2 * size:
            break
        face = font(rng, size)
        text = line(rng, rng.randint(4, 40))
        while face.getlength(text) > right - w // 12 - 2 * size and " " in text:
            text = text.rsplit(" ", 1)[0]
        canvas.draw.ellipse((w // 12, y + size // 3, w // 12 + size // 2, y + size // 3 + size // 2), fill=fill)
        canvas.text((w // 12 + size, y), text, face, fill)
        y += int(size * 1.8)
    return canvas.image, canvas.mask


def sign(rng: random.Random, split: str) -> tuple[Image.Image, Image.Image]:
    """A sign, a label or a poster (a plate with one to three short lines) pasted into a photograph, tilted."""
    found = photographs.any_photo(rng, split)
    image = (found if found is not None else photographs.procedural(rng)).resize(_size(rng, 160, 1200))
    canvas = Canvas(image)
    w, h = image.size
    lines = [line(rng, rng.randint(2, 14)) for _ in range(rng.choice((1, 1, 2, 3)))]
    plate_colour = photographs.random_colour(rng)
    ink = _ink(rng, float(np.mean(plate_colour)))
    size = max(8, int(min(w, h) * rng.uniform(0.05, 0.2)))
    layer, mask = text_block(rng, lines, size, ink, "center")
    pad = size // 2
    plate = Image.new("RGBA", (layer.width + 2 * pad, layer.height + 2 * pad), (0, 0, 0, 0))
    ImageDraw.Draw(plate).rounded_rectangle((0, 0, plate.width - 1, plate.height - 1), radius=rng.choice((0, pad)),
                                            fill=(*plate_colour, 255), outline=(*ink, 255), width=rng.choice((0, 2)))
    plate.alpha_composite(layer, (pad, pad))
    plate_mask = Image.new("L", plate.size, 0)
    plate_mask.paste(mask, (pad, pad))
    plate, plate_mask = _rotated(plate, plate_mask, rng.uniform(-15, 15))
    if plate.width > w or plate.height > h:
        scale = min(w / plate.width, h / plate.height) * 0.9
        plate = plate.resize((max(1, int(plate.width * scale)), max(1, int(plate.height * scale))))
        plate_mask = plate_mask.resize(plate.size)
    canvas.paste(plate, plate_mask, (rng.randint(0, w - plate.width), rng.randint(0, h - plate.height)))
    return canvas.image, canvas.mask


def _label_line(rng: random.Random) -> str:
    """One to three words, most in capitals, that are not an answer of the world's OCR (one of its words, or a number
    of 3-6 digits): those the target reads."""
    while True:
        text = " ".join(word(rng) for _ in range(rng.choice((1, 1, 2, 3))))
        text = text.upper() if rng.random() < 0.6 else text
        if not scenes.is_ocr_answer(text):
            return text


def _plate_line(rng: random.Random) -> str:
    """A line of a door plate or shop sign: a capitalised made-up name, most with a code, number or share beside it
    ("Vemar B4", "Kalo 12", "Stomi 3F"), no world OCR answer and no word of the held-out NOTICE_WORDS."""
    while True:
        name = made_up(rng, 3)
        name = name.upper() if rng.random() < 0.25 else name.capitalize()
        letter, number = rng.choice(string.ascii_uppercase), rng.randint(1, 99)
        code = rng.choice(("", f"{letter}{number}", str(number), f"{number % 10}{letter}", f"{number}%",
                           f"No. {number}"))
        text = f"{code} {name}" if code and rng.random() < 0.2 else f"{name} {code}".strip()
        if not NOTICE_TOKENS & set(text.upper().split()) and not scenes.is_ocr_answer(name.upper()):
            return text


def label(rng: random.Random, split: str) -> tuple[Image.Image, Image.Image]:
    """A notice, a label or a caption: dark, level lines on a plain light page, a third of them in Pillow's own font,
    the one the world's OCR scenes are drawn in. Target run 23 read short capitals like these as a world word
    (`CLOUD` for "OPEN 24 HOURS"), which the world's scenes alone cannot unteach; targets on tower 37 read a door
    plate's mixed case with a digit ("Gate B4" in DejaVu Sans) as `WINDOW`: a third of labels are such lines, in any
    font."""
    w, h = _size(rng, 96, 900)
    page = paper(rng, (w, h)) if rng.random() < 0.5 else Image.new("RGB", (w, h), (rng.randint(225, 255),) * 3)
    canvas = Canvas(page)
    plate_lines = rng.random() < 1 / 3
    lines = [(_plate_line if plate_lines else _label_line)(rng) for _ in range(rng.choice((1, 1, 1, 2, 2, 3)))]
    high = max(9, int(min(h / (1.5 * len(lines)), 1.8 * w / max(len(t) for t in lines))))
    size = rng.randint(max(8, high // 3), high)
    face = ImageFont.load_default(size=size) if not plate_lines and rng.random() < 0.5 else font(rng, size)
    text, spacing = "\n".join(lines), size // 3
    box = canvas.draw.multiline_textbbox((0, 0), text, font=face, spacing=spacing)
    if box[2] - box[0] > w or box[3] - box[1] > h:  # too long for the page: Pillow's font at the size that fits
        size = max(6, int(size * min(w / (box[2] - box[0]), h / (box[3] - box[1])) * 0.95))
        face = ImageFont.load_default(size=size)
        box = canvas.draw.multiline_textbbox((0, 0), text, font=face, spacing=spacing)
    tw, th = box[2] - box[0], box[3] - box[1]
    x, y = rng.randint(0, max(0, w - tw)) - box[0], rng.randint(0, max(0, h - th)) - box[1]
    canvas.text((x, y), text, face, tuple(rng.randint(0, 90) for _ in range(3)), spacing=spacing,
                align=rng.choice(("left", "center", "center")))
    return canvas.image, canvas.mask


def drawing(rng: random.Random, split: str) -> tuple[Image.Image, Image.Image]:
    """No text: pen strokes, outlines, hatching, a grid or shapes the world does not draw, on a light page."""
    w, h = _size(rng, 96, 900)
    canvas = Canvas(paper(rng, (w, h)) if rng.random() < 0.7 else Image.new("RGB", (w, h), (255, 255, 255)))
    pen = tuple(rng.randint(0, 110) for _ in range(3))
    width = max(1, int(min(w, h) / rng.uniform(80, 300)))
    if rng.random() < 0.25:  # graph paper or a blank form's lines: lines that are not a table's text
        step = rng.randint(8, 60)
        grid = tuple(rng.randint(150, 220) for _ in range(3))
        for x in range(0, w, step) if rng.random() < 0.5 else ():
            canvas.draw.line((x, 0, x, h), fill=grid, width=1)
        for y in range(0, h, step):
            canvas.draw.line((0, y, w, y), fill=grid, width=1)
    for _ in range(rng.randint(1, 12)):
        kind = rng.random()
        x, y = rng.randint(0, w), rng.randint(0, h)
        r = rng.randint(max(3, min(w, h) // 30), max(4, min(w, h) // 3))
        colour = pen if rng.random() < 0.7 else photographs.random_colour(rng)
        if kind < 0.35:  # a wandering stroke
            points, angle = [(x, y)], rng.uniform(0, 2 * math.pi)
            for _ in range(rng.randint(3, 30)):
                angle += rng.uniform(-0.8, 0.8)
                x, y = x + r / 4 * math.cos(angle), y + r / 4 * math.sin(angle)
                points.append((x, y))
            canvas.draw.line(points, fill=colour, width=width, joint="curve")
        elif kind < 0.55:  # an outline: star, polygon, ellipse
            n = rng.randint(3, 9)
            star = rng.random() < 0.4
            points = [(x + (r if i % 2 or not star else r / 2.2) * math.cos(2 * math.pi * i / n),
                       y + (r if i % 2 or not star else r / 2.2) * math.sin(2 * math.pi * i / n)) for i in range(n)]
            if rng.random() < 0.3:
                canvas.draw.ellipse((x - r, y - r / 2, x + r, y + r / 2), outline=colour, width=width)
            else:
                canvas.draw.polygon(points, outline=colour, width=width)
        elif kind < 0.7:  # hatching
            gap = rng.randint(3, 12)
            for k in range(0, 2 * r, gap):
                canvas.draw.line((x + k - r, y - r, x + k, y + r), fill=colour, width=1)
        elif kind < 0.85:  # a filled shape in any colour
            canvas.draw.regular_polygon((x, y, r), rng.randint(3, 8), rotation=rng.uniform(0, 360), fill=colour)
        else:  # an arc or a spiral
            canvas.draw.arc((x - r, y - r, x + r, y + r), rng.uniform(0, 360), rng.uniform(0, 360), fill=colour,
                            width=width)
    if rng.random() < 0.3:
        canvas.image = canvas.image.filter(ImageFilter.GaussianBlur(rng.uniform(0.3, 1.2)))
    return canvas.image, canvas.mask


def _gradient(rng: random.Random, size: tuple[int, int]) -> Image.Image:
    """Two colours blended across the image, linearly or from a point outwards: a digital artwork's backdrop."""
    w, h = size
    a, b = (np.array(photographs.random_colour(rng), float) for _ in range(2))
    if rng.random() < 0.5:
        a *= rng.uniform(0.1, 0.6)  # many artworks sit on a dark ground
    ys, xs = np.mgrid[0:h, 0:w] / max(w, h)
    if rng.random() < 0.5:
        angle = rng.uniform(0, 2 * math.pi)
        t = xs * math.cos(angle) + ys * math.sin(angle)
    else:
        t = np.hypot(xs - rng.uniform(0, w / max(w, h)), ys - rng.uniform(0, h / max(w, h)))
    return Image.fromarray(photographs.ramp(a, b, t).clip(0, 255).astype(np.uint8))


def _blob(rng: random.Random, x: float, y: float, r: float, n: int = 12) -> list[tuple[float, float]]:
    """A closed, irregular outline around (x, y)."""
    stretch, turn = rng.uniform(0.5, 1.5), rng.uniform(0, math.pi)
    points = []
    for i in range(n):
        angle = 2 * math.pi * i / n
        radius = r * rng.uniform(0.7, 1.15)
        dx, dy = radius * math.cos(angle) * stretch, radius * math.sin(angle) / stretch
        points.append((x + dx * math.cos(turn) - dy * math.sin(turn), y + dx * math.sin(turn) + dy * math.cos(turn)))
    return points


def illustration(rng: random.Random, split: str) -> tuple[Image.Image, Image.Image]:
    """No text: a digital artwork, one figure of blobs with fine detail (eyes, whiskers, scales, fins, hatching) or a
    photograph cut out in a blob, often glowing, on a gradient, dark or saturated backdrop, sometimes splashed with
    dots: a small busy figure on a smooth ground is not text either."""
    w, h = _size(rng, 160, 1200)
    canvas = Canvas(_gradient(rng, (w, h)) if rng.random() < 0.8 else photographs.procedural(rng).resize((w, h)))
    layer = Image.new("RGBA", (w, h), (0, 0, 0, 0))
    draw = ImageDraw.Draw(layer)
    cx, cy = rng.uniform(0.25, 0.75) * w, rng.uniform(0.25, 0.75) * h
    r = min(w, h) * rng.uniform(0.08, 0.3)
    line = max(1, int(r / rng.uniform(15, 60)))
    outline = tuple(rng.randint(0, 60) for _ in range(3)) + (255,) if rng.random() < 0.6 else None
    found = photographs.any_photo(rng, split) if rng.random() < 0.25 else None
    if found is not None:  # a sticker: a photograph's crop inside an outline
        cut = Image.new("L", (w, h), 0)
        ImageDraw.Draw(cut).polygon(_blob(rng, cx, cy, r * 1.5), fill=255)
        layer.paste(found.convert("RGB").resize((w, h)), (0, 0), cut)
    for _ in range(rng.randint(3, 14)):  # body, head, ears, fins: overlapping filled parts
        px, py = cx + rng.gauss(0, r / 2), cy + rng.gauss(0, r / 2)
        colour = photographs.random_colour(rng) + (rng.choice((255, 255, 200)),)
        draw.polygon(_blob(rng, px, py, r * rng.uniform(0.2, 0.8)), fill=colour, outline=outline, width=line)
    fine = photographs.random_colour(rng) + (255,)
    for _ in range(rng.randint(0, 3)):  # fine detail: scales, stripes or whiskers
        kind, px, py, size = rng.random(), cx + rng.gauss(0, r / 3), cy + rng.gauss(0, r / 3), r * rng.uniform(0.2, 0.6)
        step = max(3, int(size / rng.uniform(3, 8)))
        if kind < 0.4:
            for gx in range(int(px - size), int(px + size), step):
                for gy in range(int(py - size / 2), int(py + size / 2), step):
                    draw.arc((gx, gy, gx + step, gy + step), 0, 180, fill=fine, width=max(1, line // 2))
        elif kind < 0.7:
            for k in range(-3, 4):
                draw.line((px, py + k * step, px + rng.uniform(-1, 1) * size * 2, py + k * step * 1.5), fill=fine,
                          width=max(1, line // 2))
        else:
            for k in range(rng.randint(4, 12)):
                draw.line((px + k * step, py - size, px + k * step + size / 3, py + size), fill=fine, width=line)
    for _ in range(rng.randint(0, 2)):  # eyes
        ex, ey, er = cx + rng.uniform(-r, r) / 2, cy + rng.uniform(-r, r) / 2, r * rng.uniform(0.05, 0.15)
        draw.ellipse((ex - er, ey - er, ex + er, ey + er), fill=(255, 255, 255, 255), outline=outline)
        draw.ellipse((ex - er / 2, ey - er / 2, ex + er / 2, ey + er / 2), fill=(0, 0, 0, 255))
    if rng.random() < 0.4:  # a glow around the figure
        glow = layer.filter(ImageFilter.GaussianBlur(r / 4))
        canvas.image.paste(glow, (0, 0), glow)
    canvas.image.paste(layer, (0, 0), layer)
    for _ in range(rng.choice((0, 0, 5, 20))):  # splashed dots and rings
        px, py, pr = rng.uniform(0, w), rng.uniform(0, h), r * rng.uniform(0.02, 0.2)
        canvas.draw.ellipse((px - pr, py - pr, px + pr, py + pr), fill=fine[:3] if rng.random() < 0.7 else None,
                            outline=fine[:3], width=line)
    return canvas.image, canvas.mask


FIGURE_KINDS = ("bars", "stacked bars", "horizontal bars", "lines", "area", "dots", "pie", "donut")


def _tick(value: float) -> str:
    return f"{value:g}" if abs(value) < 1e4 else f"{value / 1000:g}k"


def figure(rng: random.Random, split: str) -> tuple[Image.Image, Image.Image]:
    """A chart: bars (grouped, stacked or horizontal), lines, an area, dots, a pie or a donut, with a title, ticks,
    category labels and sometimes a legend, axis titles and value labels, in any font; light, dark or tinted."""
    w, h = _size(rng, 160, 1000)
    w = max(w, h * 3 // 4)  # a chart is rarely much taller than wide
    theme = rng.random()
    page = (paper(rng, (w, h)) if theme < 0.6 else Image.new("RGB", (w, h), (rng.randint(15, 60),) * 3)
            if theme < 0.8 else Image.new("RGB", (w, h), tuple(rng.randint(200, 255) for _ in range(3))))
    canvas = Canvas(page)
    behind = canvas.behind((0, 0, w, h))
    ink = (tuple(rng.randint(0, 80) for _ in range(3)) if behind > 127
           else tuple(rng.randint(190, 255) for _ in range(3)))
    size = max(7, int(h / rng.uniform(12, 28)))
    face, small = font(rng, size), font(rng, max(7, int(size * rng.uniform(0.7, 1.0))))
    kind = rng.choice(FIGURE_KINDS)
    series = rng.choice((1, 1, 2, 3)) if kind in ("bars", "stacked bars", "horizontal bars", "lines", "dots") else 1
    categories = [word(rng)[:rng.randint(2, 10)] for _ in range(rng.randint(3, 8))]
    colours = [photographs.random_colour(rng) for _ in range(max(series, len(categories)))]
    top = margin = size // 2 + 2
    if rng.random() < 0.85:
        title = line(rng, rng.randint(4, 32))
        while face.getlength(title) > w - 2 * margin and len(title) > 3:
            title = title[:-1].rstrip()
        top = canvas.text((w // 2, margin), title, face, ink, anchor="ma")[3] + size // 2
    legend = series > 1 or (kind in ("pie", "donut") and rng.random() < 0.5)
    right = w - margin
    if legend:  # swatches and names down the right edge
        names = [word(rng)[:10] for _ in range(series)] if series > 1 else categories
        right = int(w * rng.uniform(0.7, 0.8))
        for i, name in enumerate(names):
            y = top + i * int(size * 1.4)
            canvas.draw.rectangle((right + 6, y, right + 6 + size * 0.8, y + size * 0.8), fill=colours[i])
            canvas.text((right + 10 + size, y), name, small, ink)
    if kind in ("pie", "donut"):
        r = min(right - margin, h - top - margin) // 2 - (0 if legend else size * 2)
        cx, cy = (margin + right) // 2, (top + h - margin) // 2
        shares = np.random.default_rng(rng.randrange(1 << 30)).dirichlet(np.ones(len(categories)))
        start = rng.uniform(0, 360)
        for i, share in enumerate(shares):
            end = start + 360 * float(share)
            canvas.draw.pieslice((cx - r, cy - r, cx + r, cy + r), start, end, fill=colours[i],
                                 outline=page.getpixel((0, 0)) if rng.random() < 0.5 else None)
            middle = math.radians((start + end) / 2)
            if not legend:
                canvas.text((cx + math.cos(middle) * (r + size * 1.5), cy + math.sin(middle) * (r + size * 1.5)),
                            categories[i], small, ink, anchor="mm")
            if share > 0.08 and rng.random() < 0.6:
                canvas.text((cx + math.cos(middle) * r * 0.7, cy + math.sin(middle) * r * 0.7),
                            f"{share * 100:.0f}%", small, (255, 255, 255) if np.mean(colours[i]) < 128 else (0, 0, 0),
                            anchor="mm")
            start = end
        if kind == "donut":
            hole = r * rng.uniform(0.4, 0.65)
            canvas.draw.ellipse((cx - hole, cy - hole, cx + hole, cy + hole), fill=page.getpixel((cx, cy)))
        return canvas.image, canvas.mask
    horizontal = kind == "horizontal bars"
    label_room = max(int(small.getlength(c)) for c in categories) + 6 if horizontal else size + 6
    left = margin + (label_room if horizontal else 3 * size)
    bottom = h - margin - (size + 4 if horizontal else label_room)
    if rng.random() < 0.4:  # an axis title under the axis
        bottom -= size + 2
        canvas.text(((left + right) // 2, h - margin), word(rng), small, ink, anchor="md")
    if right - left < 20 or bottom - top < 20:
        return canvas.image, canvas.mask  # too small for a plot: the title alone
    steps, step_value = rng.randint(3, 6), rng.choice((1, 2, 5, 10, 20, 25, 50, 100, 250, 1000))
    grid = tuple((c + int(behind)) // 2 for c in ink) if rng.random() < 0.5 else None  # half-way to the page
    for t in range(steps + 1):
        value = _tick(t * step_value)
        if horizontal:
            x = left + t * (right - left) // steps
            canvas.text((x, bottom + 3), value, small, ink, anchor="ma")
            if grid:
                canvas.draw.line((x, top, x, bottom), fill=grid)
        else:
            y = bottom - t * (bottom - top) // steps
            canvas.text((left - 4, y), value, small, ink, anchor="rm")
            if grid:
                canvas.draw.line((left, y, right, y), fill=grid)
    canvas.draw.line([(left, top), (left, bottom), (right, bottom)], fill=ink, width=rng.choice((1, 1, 2)))
    along = (bottom - top if horizontal else right - left) / len(categories)
    middles = [(top if horizontal else left) + along * (i + 0.5) for i in range(len(categories))]
    values = [[rng.uniform(0.05, 0.95 / (series if kind == "stacked bars" else 1)) for _ in categories]
              for _ in range(series)]
    for middle, category in zip(middles, categories):
        if horizontal:
            canvas.text((left - 4, middle), category, small, ink, anchor="rm")
        else:
            canvas.text((middle, bottom + 3), category, small, ink, anchor="ma")
    extent = (right - left) if horizontal else (bottom - top)
    for s in range(series):
        points = []
        for i, middle in enumerate(middles):
            base = sum(values[k][i] for k in range(s)) if kind == "stacked bars" else 0.0
            low, high = base * extent, (base + values[s][i]) * extent
            if kind in ("bars", "stacked bars", "horizontal bars"):
                width = along * 0.7 / (series if kind != "stacked bars" else 1)
                offset = -along * 0.35 + width * (s if kind != "stacked bars" else 0)
                box = ((left + low, middle + offset, left + high, middle + offset + width) if horizontal else
                       (middle + offset, bottom - high, middle + offset + width, bottom - low))
                canvas.draw.rectangle(box, fill=colours[s])
                if series == 1 and rng.random() < 0.3:  # the value beside its bar
                    at = (box[2] + 3, (box[1] + box[3]) / 2) if horizontal else ((box[0] + box[2]) / 2, box[1] - 2)
                    canvas.text(at, _tick(round(values[s][i] * steps * step_value)), small, ink,
                                anchor="lm" if horizontal else "md")
            points.append((middle, bottom - high))
        if kind in ("lines", "area"):
            if kind == "area":
                canvas.draw.polygon([(points[0][0], bottom), *points, (points[-1][0], bottom)], fill=colours[s])
            canvas.draw.line(points, fill=colours[s], width=rng.choice((1, 2, 3)))
        if kind in ("lines", "dots"):
            r = max(2, size // 4)
            for x, y in points:
                canvas.draw.ellipse((x - r, y - r, x + r, y + r), fill=colours[s])
    return canvas.image, canvas.mask


GENERATORS = {"text": free_text, "document": document, "screenshot": screenshot, "slide": slide, "sign": sign,
              "label": label, "drawing": drawing, "illustration": illustration, "chart": figure}


def text_regions(mask: Image.Image, side: int = 96) -> tuple[bool, ...]:
    """Which of the 3x3 regions of the side x side square (reading order) hold text: ink on REGION_INK of them."""
    ink = np.asarray(mask.resize((side, side), Image.Resampling.BOX), dtype=float) / 255
    third = side // 3
    return tuple(bool(ink[r * third:(r + 1) * third, c * third:(c + 1) * third].mean() > REGION_INK)
                 for r in range(3) for c in range(3))


def draw_with_mask(source: str, rng: random.Random, split: str) -> tuple[Image.Image, Image.Image]:
    """One image of a source and its text mask. A source with text draws again where its text is too thin to count
    in any region at 96x96 (rare: it still holds text after 8 tries)."""
    for _ in range(8):
        image, mask = GENERATORS[source](rng, split)
        if source not in WITH_TEXT or any(text_regions(mask)):
            break
    return image, mask


# Words of shop signs and notices: real words, where every training source's are made up.
NOTICE_WORDS = ("OPEN", "CLOSED", "EXIT", "SALE", "HOURS", "PUSH", "PULL", "NO PARKING", "24/7", "WELCOME", "CAFE",
                "BUS STOP", "TAXI", "HOTEL", "BAR", "PHARMACY", "Open", "exit", "Sale 50%", "Room 12", "Gate B4",
                "ENTER", "FIRE EXIT", "WC")
NOTICE_TOKENS = frozenset(w.upper() for notice in NOTICE_WORDS for w in notice.split())  # no training line holds one
NOTICE_FACES = ("DejaVuSans.ttf", "LiberationSans-Regular.ttf")  # beside Pillow's own, where installed


def notice_faces() -> list[str | None]:
    """Pillow's own font (None) and the installed NOTICE_FACES: the faces of the fixed evaluation sets."""
    return [None] + sorted(f for f in image_sources.fonts() if Path(f).name in NOTICE_FACES)


def face_at(face: str | None, size: int) -> ImageFont.FreeTypeFont:
    return ImageFont.load_default(size=size) if face is None else ImageFont.truetype(face, size)


def notices(n: int = 60) -> list[tuple[str, Image.Image]]:
    """n notices of one to three NOTICE_WORDS, dark, level and centred on a light page, each drawn in Pillow's font
    (the world's) and in NOTICE_FACES: (name, image) pairs, a fixed set drawn by no training generator."""
    faces = notice_faces()
    rng = random.Random("notices")
    out = []
    for i in range(n):
        text = " ".join(rng.choice(NOTICE_WORDS) for _ in range(rng.choice((1, 2, 3))))
        w, h = rng.choice(((320, 120), (200, 200), (400, 300), (300, 100), (240, 240), (500, 200)))
        size = rng.randint(18, 60)
        page, ink = tuple(rng.randint(225, 255) for _ in range(3)), tuple(rng.randint(0, 80) for _ in range(3))
        for face in faces:
            image = Image.new("RGB", (w, h), page)
            drawn = face_at(face, size)
            ImageDraw.Draw(image).text((w // 2, h // 2), text, font=drawn, fill=ink, anchor="mm")
            out.append((f"{i:03d}-{Path(face).stem if face else 'pillow'}", image))
    return out


def write_notices(folder: str, n: int = 60) -> int:
    """The notices as PNG files and a metadata.jsonl that asks each to be read and says it holds text: a folder for
    `python -m core eval-target --images DIR` (its never-inventing figures)."""
    return write_folder(folder, [(name, image, "What is written here?") for name, image in notices(n)])


def write_folder(folder: str, asked: list[tuple[str, Image.Image, str]]) -> int:
    """(name, image, prompt) triples, every image holding text, as PNG files and the metadata.jsonl eval-target reads."""
    from core.training.training_data import METADATA_FILE  # the reader's name for it; training builds on the world

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, image, prompt in asked:
        image.save(out / f"{name}.png")
        rows.append({"file_name": f"{name}.png", "prompt": prompt, "has_text": True})
    (out / METADATA_FILE).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return len(rows)


# Charts: the figures users upload most after documents and screenshots. Their text is small and sparse (a title, tick
# numbers, category labels) beside large areas of plain colour: bars and wedges look like the world's shapes.
CHART_KINDS = ("bars", "outlined bars", "line", "dots", "pie")
CHART_TITLES = ("Revenue", "Sales by region", "Monthly users", "Temperature", "Share of votes", "Costs 2024",
                "Visitors per day", "Growth rate", "Orders", "Energy use")
CHART_CATEGORIES = (("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul"), ("Q1", "Q2", "Q3", "Q4"),
                    ("North", "South", "East", "West"), ("2019", "2020", "2021", "2022", "2023", "2024"))


def chart(rng: random.Random, kind: str, face: str | None) -> Image.Image:
    """One chart of `kind` with a title, category labels and (but for a pie) tick numbers on a y axis."""
    w, h = rng.randint(260, 520), rng.randint(200, 400)
    page = tuple(rng.randint(235, 255) for _ in range(3))
    ink = tuple(rng.randint(0, 70) for _ in range(3))
    size = rng.randint(11, 20)
    type_face = face_at(face, size)
    image = Image.new("RGB", (w, h), page)
    draw = ImageDraw.Draw(image)
    draw.text((w // 2, 4), rng.choice(CHART_TITLES), font=type_face, fill=ink, anchor="ma")
    labels = rng.choice(CHART_CATEGORIES)
    colours = [tuple(rng.randint(0, 220) for _ in range(3)) for _ in labels]
    if kind == "pie":
        box = (w // 2 - h // 3, h // 2 - h // 3 + 8, w // 2 + h // 3, h // 2 + h // 3 + 8)
        start = 0.0
        for label, colour, share in zip(labels, colours, np.random.default_rng(rng.randrange(1 << 30)).dirichlet(
                np.ones(len(labels)))):
            end = start + 360 * float(share)
            draw.pieslice(box, start, end, fill=colour)
            middle = math.radians((start + end) / 2)
            draw.text((w // 2 + math.cos(middle) * h * 0.42, h // 2 + 8 + math.sin(middle) * h * 0.42), label,
                      font=type_face, fill=ink, anchor="mm")
            start = end
        return image
    left, top, right, bottom = 4 + 3 * size, 12 + size, w - 10, h - 8 - size
    draw.line([(left, top), (left, bottom), (right, bottom)], fill=ink, width=1)
    tick_step = rng.choice((5, 10, 20, 25, 100))
    for tick in range(5):
        y = bottom - tick * (bottom - top) // 5
        draw.text((left - 4, y), str(tick * tick_step), font=type_face, fill=ink, anchor="rm")
    step = (right - left) / len(labels)
    heights = [rng.uniform(0.1, 0.95) * (bottom - top) for _ in labels]
    points = [(left + step * (i + 0.5), bottom - height) for i, height in enumerate(heights)]
    for i, (label, (x, y)) in enumerate(zip(labels, points)):
        draw.text((x, bottom + 3), label, font=type_face, fill=ink, anchor="ma")
        if kind in ("bars", "outlined bars"):
            bar = (x - step * 0.3, y, x + step * 0.3, bottom)
            draw.rectangle(bar, fill=colours[0] if kind == "bars" else None, outline=colours[0], width=2)
        else:
            draw.ellipse((x - 4, y - 4, x + 4, y + 4), fill=colours[0])
    if kind == "line":
        draw.line(points, fill=colours[0], width=2)
    return image


def charts(n: int = 120) -> list[tuple[str, Image.Image]]:
    """n charts, CHART_KINDS in turn, in Pillow's font and NOTICE_FACES by turns: (name, image) pairs, a fixed set
    drawn by no training generator (the chart source, `figure`, draws made-up words in any font, other layouts)."""
    faces = notice_faces()
    rng = random.Random("charts")
    out = []
    for i in range(n):
        kind, face = CHART_KINDS[i % len(CHART_KINDS)], faces[i // len(CHART_KINDS) % len(faces)]
        out.append((f"{i:03d}-{kind.replace(' ', '-')}", chart(rng, kind, face)))
    return out


def write_charts(folder: str, n: int = 120) -> int:
    """The charts, every kind asked to be read and to be described by turns, as a folder like `write_notices`'."""
    return write_folder(folder, [(name, image, "What is written here?" if i // len(CHART_KINDS) % 2 == 0
                                  else "Describe the image.") for i, (name, image) in enumerate(charts(n))])


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--notices", metavar="DIR", help="write the notices and their metadata.jsonl to DIR")
    parser.add_argument("--charts", metavar="DIR", help="write the charts and their metadata.jsonl to DIR")
    args = parser.parse_args()
    if args.notices or args.charts:
        if args.notices:
            print(f"{write_notices(args.notices)} notices in {args.notices}")
        if args.charts:
            print(f"{write_charts(args.charts)} charts in {args.charts}")
    else:
        for source in SOURCES:
            for i in range(3):
                image, mask = draw_with_mask(source, random.Random(f"{source}/{i}"), "train")
                image.save(f"/tmp/text_{source}_{i}.png")
                print(f"/tmp/text_{source}_{i}.png {image.size} text regions {sum(text_regions(mask))}")
