"""The requests vLLM and the engine are compared and benched on: world samples of all four task families, whole
photographs, crops of them and odd aspect ratios (4:3, 1:3), each with its prompt.

    for r in serve_requests(12): client.complete(r.image, r.prompt)
"""

from __future__ import annotations

from dataclasses import dataclass

from PIL import Image

from core.world import photographs, photos, scenes

DESCRIBE = "Describe the image."


@dataclass(frozen=True)
class ServeRequest:
    name: str
    image: Image.Image
    prompt: str


def _fixed() -> list[ServeRequest]:
    out = [ServeRequest(f"world {s.task}", s.image, s.prompt)
           for s in (scenes.sample("heldout", i, task) for i, task in enumerate(scenes.TASKS))]
    out += [ServeRequest(f"photograph {name}", photographs.scikit_photo(name), DESCRIBE) for name in photographs.HELDOUT_PHOTOS]
    out += [ServeRequest(f"crop {i}", s.image, s.prompt)
            for i, s in enumerate(photos.sample("heldout", i, source="photo") for i in range(2))]
    astronaut = photographs.scikit_photo("astronaut")  # 512x512
    out.append(ServeRequest("4:3 crop", astronaut.crop((0, 64, 512, 448)), DESCRIBE))
    out.append(ServeRequest("1:3 crop", astronaut.crop((180, 0, 351, 512)), DESCRIBE))
    return out


def serve_requests(n: int = 12) -> list[ServeRequest]:
    """The first n of the twelve fixed requests, then more world samples and photograph crops, alternating."""
    out = _fixed()[:n]
    i = 0
    while len(out) < n:
        s = scenes.sample("heldout", 4 + i) if i % 2 == 0 else photos.sample("heldout", 4 + i, source="photo")
        out.append(ServeRequest(f"{'world' if i % 2 == 0 else 'crop'} {4 + i}", s.image, s.prompt))
        i += 1
    return out
