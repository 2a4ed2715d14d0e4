"""Accuracy of a target VLM: exact match on held-out world samples per task family, or, on a folder of your own
images, agreement with what their pixels say (core/world/describe.py).

    python -m core eval-target [--model PATH] [--n 200] [--json PATH]
    python -m core eval-target --images DIR [--prompt P] [--json PATH]
    python -m core eval-target --photos N [--json PATH]     # held-out images beyond the world (core/world/photos.py)
    python -m core eval-target --sources N [--source-list text,document] [--json PATH]   # never inventing, per source
    python -m core eval-target --wordings N [--source-list ...] [--json PATH]   # the same answers to wordings never
                                                                                 # trained on?

With --images, each image is asked its metadata.jsonl prompt (or "Describe the image.", or --prompt for all) and
scored against the metadata's answer where one is given, else against the pixels' answer (to any paraphrase the
embedded models learned: `photos.reference`): `exact_match` over all, `region_agreement` (share of the 9 regions
whose colour term the target's description names as the pixels do, light / dark ignored), `header_exact` (share of
those descriptions whose first sentence, the tone and main colours, is the pixels' word for word), and where answers
say what is written: `text_exact` (images with text) and `no_text_precision` (images whose answer is "There is no
text.").

Never inventing (`--sources N`: N held-out images of every source of core/world/photos.py, each asked a reading
question and "Describe the image."; `--images DIR` where metadata.jsonl says `has_text`):
- `text_presence_recall`: images holding text whose reading answer is not "There is no text.";
- `no_text_precision`: images without text answered exactly "There is no text.";
- `invented_rate`: answers that invent, of all answers: a reading answer naming words (beyond the world the target
  reads none: only "There is text here, but I cannot read it." and "There is no text." are honest), "There is no
  text." for an image holding text, and a describe answer that is not a colour layout (a world caption) for an image
  that is not a world scene. A layout is told by its first words (`LAYOUT_START`), so text images' describe answers
  are generated only that far; photographs' in full, for `region_agreement`. `upper_case_layout`: the share of
  held-out photographs asked "DESCRIBE THE IMAGE." that get a layout.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import torch
from PIL import Image

from core.models.loading import recorded
from core.models.vlm import VisionLanguageModel
from core.training.training_data import TrainingData, from_folder
from core.training.training_data import describe as describe_source
from core.world import image_sources, photographs, photos, scenes
from core.world.describe import described_header, described_regions, region_agreement
from core.world.photos import NO_TEXT
from core.world.reference import looks_like_world, reading_invents

LAYOUT_START = re.compile(r"A (bright|dark|mid-toned) image, mostly ")  # how every colour layout begins
DESCRIBE = "Describe the image."
# Sources whose describe answers are generated in full and scored region by region; the others only until a layout
# can be told from a caption.
PHOTOGRAPH_SOURCES = ("procedural", "photo", "collage", "wallpaper")
SHORT_ANSWER = 16  # new tokens: a reading answer, or the first words of a layout


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


def describing_invents(said: str, image) -> bool:
    """A describe answer that is not a colour layout, for an image that is not a world scene (there a caption is
    the answer)."""
    return not looks_like_world(image) and LAYOUT_START.match(said) is None


def mean(xs: list) -> float | None:
    """The mean of a list of scores (booleans count as 0 / 1); None for no scores."""
    return sum(xs) / len(xs) if xs else None


def text_scores(rows: list[dict]) -> dict:
    """The never-inventing figures of rows {holds_text, read (the reading answer) or None, described or None}."""
    reads = [r for r in rows if r.get("read") is not None]
    described = [r for r in rows if r.get("described") is not None]
    with_text = [r for r in reads if r["holds_text"]]
    without = [r for r in reads if not r["holds_text"]]
    invented = sum(r["read_invents"] for r in reads) + sum(r["describe_invents"] for r in described)
    answers = len(reads) + len(described)
    return {"images": len(rows), "with_text": len(with_text), "without_text": len(without),
            "text_presence_recall": mean([r["read"] != NO_TEXT for r in with_text]),
            "no_text_precision": mean([r["read"] == NO_TEXT for r in without]),
            "invented": invented, "invented_rate": invented / answers if answers else None,
            "region_agreement": mean([r["region_agreement"] for r in described if "region_agreement" in r])}


def _source_rows(vlm: VisionLanguageModel, source: str, n: int) -> list[dict]:
    rows = []
    full = source in PHOTOGRAPH_SOURCES
    for i in range(n):
        sample = photos.sample("heldout", i, "read", source)
        asked = photos.PARAPHRASES["read"][i % len(photos.PARAPHRASES["read"])]
        read = answer(vlm, sample.image, asked, SHORT_ANSWER)
        described = answer(vlm, sample.image, DESCRIBE, 128 if full else SHORT_ANSWER)
        row = {"image": f"{source}:heldout:{i}", "holds_text": bool(sample.holds_text), "prompt": asked, "read": read,
               "read_invents": reading_invents(read, bool(sample.holds_text)), "described": described,
               "describe_invents": describing_invents(described, sample.image)}
        if full:
            row["region_agreement"] = region_agreement(photos.reference(sample.image, DESCRIBE), described)
        rows.append(row)
    return rows


def _unavailable(source: str) -> str | None:
    """Why a source cannot be evaluated on this machine (it would fall back to procedural images), or None."""
    if source == "wallpaper" and not image_sources.split_photographs("heldout"):
        return "the held-out wallpaper package is not installed: python -m core.world.image_sources --install"
    if source == "photo":
        try:
            photographs.scikit_photo(photographs.HELDOUT_PHOTOS[0])
        except ImportError:
            return "scikit-image is not installed (the photos extra)"
    return None


def _check_sources(sources: tuple[str, ...]) -> None:
    unknown = [s for s in sources if s not in photos.SOURCES]
    if unknown:
        raise ValueError(f"unknown sources {unknown}; expected some of {photos.SOURCES}")


def on_sources(vlm: VisionLanguageModel, n: int, sources: tuple[str, ...] = photos.SOURCES,
               upper_case: int = 50) -> dict:
    """Never inventing, per source and overall: n held-out images of each source, each asked a reading question and
    "Describe the image."; and `upper_case` held-out photographs asked "DESCRIBE THE IMAGE."."""
    _check_sources(sources)
    out, pooled = {"per_source": {}}, []
    for source in sources:
        why = _unavailable(source)
        if why:
            out["per_source"][source] = {"skipped": why}
            continue
        rows = _source_rows(vlm, source, n)
        pooled += rows
        out["per_source"][source] = text_scores(rows) | {"examples": rows[:3]}
    out["overall"] = text_scores(pooled)
    if upper_case and _unavailable("photo") is None:
        layouts = []
        for i in range(upper_case):
            image = photos.sample("heldout", i, "layout", "photo").image
            said = answer(vlm, image, DESCRIBE.upper())
            layouts.append((LAYOUT_START.match(said) is not None,
                            region_agreement(photos.reference(image, DESCRIBE), said)))
        out["upper_case_layout"] = {"images": upper_case, "layout_share": sum(a for a, _ in layouts) / upper_case,
                                    "region_agreement": sum(r for _, r in layouts) / upper_case}
    return out


def on_wordings(vlm: VisionLanguageModel, n: int, sources: tuple[str, ...] = photos.SOURCES) -> dict:
    """Whether an answer holds under another wording: n held-out images of every source, each asked, for every task
    of photos.HELDOUT_WORDINGS (wordings never trained on), one of its wordings (cycling) and the task's first
    paraphrase. Per task: `agreement`, the share answered exactly as the paraphrase is, and `invented`, the answers
    that invent as on_sources counts them (a reading answer; a describe answer that is not a layout); per source the
    agreement over its tasks."""
    _check_sources(sources)
    per_task, per_source, invented = defaultdict(list), defaultdict(list), defaultdict(int)
    for source in sources:
        if _unavailable(source):
            continue
        for i in range(n):
            sample = photos.sample("heldout", i, "read", source)
            for task, wordings in photos.HELDOUT_WORDINGS.items():
                tokens = SHORT_ANSWER if task == "read" else 128
                said = answer(vlm, sample.image, wordings[i % len(wordings)], tokens)
                agrees = said == answer(vlm, sample.image, photos.PARAPHRASES[task][0], tokens)
                per_task[task].append(agrees)
                per_source[source].append(agrees)
                if task == "read":
                    invented[task] += reading_invents(said, bool(sample.holds_text))
                elif task == "layout":
                    invented[task] += describing_invents(said, sample.image)
    return {"per_task": {task: {"agreement": mean(v), "invented": invented[task], "answers": len(v)}
                         for task, v in per_task.items()},
            "per_source": {source: mean(v) for source, v in per_source.items()},
            "agreement": mean([a for v in per_task.values() for a in v]),
            "wordings": photos.HELDOUT_WORDINGS}


@dataclass
class Item:
    label: str  # where the image came from, for the report
    image: Image.Image
    prompt: str
    reference: str | None  # the answer it is scored against (None: reported, not scored)
    reads_text: bool  # the question asks what is written: scored for text_exact / no_text_precision
    holds_text: bool | None = None  # whether the image holds text, where known: scored for never inventing


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
        if item.holds_text is not None:
            row["holds_text"] = item.holds_text
            if item.reads_text:
                row["read"], row["read_invents"] = said, reading_invents(said, item.holds_text)
            elif photos.reference(item.image, item.prompt) == photos.reference(item.image, DESCRIBE):
                row["described"], row["describe_invents"] = said, describing_invents(said, item.image)
        rows.append(row)
    scored_rows = [r["exact"] for r in rows if r["reference"] is not None]
    return {"images": len(rows), "scored": len(scored_rows), "exact_match": mean(scored_rows),
            "region_agreement": mean(regions), "header_exact": mean(headers), "text_exact": mean(with_text),
            "no_text_precision": mean(without_text),
            **({"never_inventing": text_scores([r for r in rows if "holds_text" in r])}
               if any("holds_text" in r for r in rows) else {}),
            "rows": rows}


def on_images(vlm: VisionLanguageModel, examples: TrainingData, prompt: str | None = None) -> dict:
    """A folder's images against their metadata answers, else against what their pixels say."""
    items = []
    for i, example in enumerate(examples.examples):
        sample = examples[i]
        asked = prompt or sample.prompt
        reference = sample.answer if sample.answer is not None and not prompt else photos.reference(sample.image, asked)
        reads = photos.asks_to_read(asked)
        items.append(Item(describe_source(example.image), sample.image, asked, reference, reads, sample.holds_text))
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
    chosen = tuple(args.source_list.split(",")) if args.source_list else photos.SOURCES
    if args.images:
        result = on_images(vlm, from_folder(args.images), args.prompt)
    elif args.photos:
        result = on_photos(vlm, args.photos)
    elif args.wordings:
        result = on_wordings(vlm, args.wordings, chosen) | {"n_per_source": args.wordings}
    elif args.sources:
        result = on_sources(vlm, args.sources, chosen) | {"n_per_source": args.sources}
    else:
        result = exact_match(vlm, scenes.samples("heldout", args.n)) | {"n": args.n}
    result |= {"model": str(args.model)}
    text = json.dumps(recorded(result), indent=1)
    print(text)
    if args.json:
        Path(args.json).write_text(text)
