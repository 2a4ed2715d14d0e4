"""Exact-match accuracy of a target VLM on held-out world samples, per task family.

    python -m core eval-target [--model PATH] [--n 200] [--json PATH]
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import torch

from core.models.vlm import VisionLanguageModel
from core.world import scenes


@torch.no_grad()
def answer(vlm: VisionLanguageModel, image, prompt: str, max_new_tokens: int = 80) -> str:
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


def run(args) -> None:
    vlm = VisionLanguageModel.from_pretrained(args.model)
    result = exact_match(vlm, scenes.samples("heldout", args.n))
    result |= {"model": str(args.model), "n": args.n}
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        Path(args.json).write_text(text)
