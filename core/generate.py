"""One request through the engine from the command line.

    python -m core generate --image photo.png --prompt "Describe the image." --drafter text --gamma 4 --json
"""

from __future__ import annotations

import json

from PIL import Image, UnidentifiedImageError

from core.engine import SpeculativeEngine
from core.registry import load_drafter, load_target
from core.sampling import SamplingConfig


def open_image(path: str | None) -> Image.Image | None:
    if path is None:
        return None
    try:
        with Image.open(path) as image:
            image.load()
            return image.convert("RGB")
    except FileNotFoundError:
        raise ValueError(f"image not found: {path}") from None
    except (UnidentifiedImageError, OSError) as exc:
        raise ValueError(f"not a readable image: {path} ({exc})") from None


def run(args) -> None:
    sampling = SamplingConfig(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k)
    target = load_target(args.model)
    drafter = load_drafter(args.drafter, args.model)
    out = SpeculativeEngine(target).generate(
        open_image(args.image), args.prompt, drafter,
        gamma=args.gamma, sampling=sampling, max_new_tokens=args.max_new_tokens, seed=args.seed,
    )
    if args.json:
        print(json.dumps(out.to_json()))
    else:
        print(out.text)
        print(f"[{out.new_tokens} tokens, {out.target_forwards} target forwards, tau {out.tau:.2f}, {out.seconds:.2f}s]")
