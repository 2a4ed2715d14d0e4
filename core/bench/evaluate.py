"""Accuracy of a target VLM: exact match on held-out world samples per task family, or, on a folder of your own
images, agreement with what their pixels say (core/world/describe.py).

    python -m core eval-target [--model PATH] [--n 200] [--json PATH]
    python -m core eval-target --images DIR [--prompt P] [--json PATH]
    python -m core eval-target --photos N [--json PATH]     # held-out images beyond the world (core/world/photos.py)

With --images, each image is asked its metadata.jsonl prompt (or "Describe the image.", or --prompt for all) and
scored against the metadata's answer where one is given, else against the pixels' answer (to any paraphrase the
embedded models learned: `photos.reference`): `exact_match` over all, `region_agreement` (share of the 9 regions
whose colour term the target's description names as the pixels do, light / dark ignored), `header_exact` (share of
those descriptions whose first sentence, the tone and main colours, is the pixels' word for word), and where answers
say what is written: `text_exact` (images with text) and `no_text_precision` (images whose answer is "There is no
text.").
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import torch
from PIL import Image

from core.models.loading import recorded
from core.models.vlm import VisionLanguageModel
from core.training.training_data import TrainingData, from_folder
from core.training.training_data import describe as describe_source
from core.world import photos, scenes
from core.world.describe import described_header, described_regions, region_agreement
from core.world.photos import NO_TEXT


@torch.no_grad()
def answer(vlm: VisionLanguageModel, image, prompt: str, max_new_tokens: int = 128) -> str:
    """The target's greedy answer; 128 new tokens hold any reference answer (a colour layout is up to ~100: this
    world-trained tokenizer spends three tokens on a colour word), so no answer is scored cut short."""
    request = vlm.prepare(image, prompt)
    out = vlm.model.generate(
        input_ids=request.input_ids,
        attention_mask=torch.ones_like(request.input_ids),
        mm_token_type_ids=request.mm_token_type_ids,
        pixel_values=request.pixel_values,
        image_grid_thw=request.image_grid_thw,
        max_new_tokens=max_new_tokens,
        do_sample=False,
    )
    return vlm.tokenizer.decode(out[0, request.input_ids.shape[1]:], skip_special_tokens=True).strip()


def exact_match(vlm: VisionLanguageModel, samples: list[scenes.Sample]) -> dict:
    hits = defaultdict(list)
    for s in samples:
        hits[s.task].append(answer(vlm, s.image, s.prompt) == s.answer)
    per_task = {task: sum(v) / len(v) for task, v in hits.items()}
    return {"exact_match": sum(map(sum, hits.values())) / len(samples), "per_task": per_task}


@dataclass
class Item:
    label: str  # where the image came from, for the report
    image: Image.Image
    prompt: str
    reference: str | None  # the answer it is scored against (None: reported, not scored)
    reads_text: bool  # the question asks what is written: scored for text_exact / no_text_precision


def scored(vlm: VisionLanguageModel, items: list[Item]) -> dict:
    """The target's answers against the references: exact_match, region_agreement and header_exact (references that
    are a 3x3 layout), text_exact (text to read) and no_text_precision (nothing to read), and a row per item."""
    rows, regions, headers, with_text, without_text = [], [], [], [], []
    for item in items:
        said = answer(vlm, item.image, item.prompt)
        row = {"image": item.label, "prompt": item.prompt, "reference": item.reference, "answer": said,
               "exact": item.reference is not None and said == item.reference}
        if item.reference is not None and described_regions(item.reference) is not None:
            row["region_agreement"] = region_agreement(item.reference, said)
            regions.append(row["region_agreement"])
            row["header_exact"] = described_header(said) == described_header(item.reference)
            headers.append(row["header_exact"])
        if item.reads_text and item.reference is not None:
            (without_text if item.reference == NO_TEXT else with_text).append(row["exact"])
        rows.append(row)
    scored_rows = [r["exact"] for r in rows if r["reference"] is not None]
    mean = lambda xs: sum(xs) / len(xs) if xs else None  # noqa: E731
    return {"images": len(rows), "scored": len(scored_rows), "exact_match": mean(scored_rows),
            "region_agreement": mean(regions), "header_exact": mean(headers), "text_exact": mean(with_text),
            "no_text_precision": mean(without_text),
            "rows": rows}


def on_images(vlm: VisionLanguageModel, examples: TrainingData, prompt: str | None = None) -> dict:
    """A folder's images against their metadata answers, else against what their pixels say."""
    items = []
    for i, example in enumerate(examples.examples):
        sample = examples[i]
        asked = prompt or sample.prompt
        reference = sample.answer if sample.answer is not None and not prompt else photos.reference(sample.image, asked)
        reads = photos.asks_to_read(asked)
        items.append(Item(describe_source(example.image), sample.image, asked, reference, reads))
    return {"source": examples.source} | scored(vlm, items)


def on_photos(vlm: VisionLanguageModel, n: int) -> dict:
    """Held-out images beyond the world (core/world/photos.py), n per part: generated ones (procedural and
    rendered text) and the held-out photographs."""
    parts = {"generated": ("procedural", "text"), "photographs": ("photo",)}
    out = {}
    for part, sources in parts.items():
        tasks = photos.TASKS
        samples = [photos.sample("heldout", i, tasks[i % len(tasks)], sources[i // len(tasks) % len(sources)])
                   for i in range(n)]
        out[part] = scored(vlm, [Item(f"photos:heldout:{i}", s.image, s.prompt, s.answer, s.task == "read")
                                 for i, s in enumerate(samples)])
    return out


def run(args) -> None:
    vlm = VisionLanguageModel.from_pretrained(args.model)
    if args.images:
        result = on_images(vlm, from_folder(args.images), args.prompt)
    elif args.photos:
        result = on_photos(vlm, args.photos)
    else:
        result = exact_match(vlm, scenes.samples("heldout", args.n)) | {"n": args.n}
    result |= {"model": str(args.model)}
    text = json.dumps(recorded(result), indent=1)
    print(text)
    if args.json:
        Path(args.json).write_text(text)
