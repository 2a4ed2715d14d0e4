"""How far is a target's reading answer from naming a world word? A measurement, not part of the app.

    python scripts/notice_margins.py --images runs/notices --models assets/models/target,runs/target-50 [--json PATH]

For every image of an `eval-target --images` folder (metadata.jsonl: file name and prompt), the probability the
target gives "There" as its answer's first token: both honest reading answers ("There is text here, but I cannot read
it." and "There is no text.") start with it, and a world word (`WINDOW`, `CLOUD`) does not. Greedy decoding names a
world word once another first token outweighs it, so an image at 0.41 is a coin's throw from inventing where one at
0.99 is not; eval-target's count of world words shows only which side each image fell on.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from PIL import Image

from core.models.vlm import VisionLanguageModel
from core.training.training_data import TrainingData, from_folder

THRESHOLDS = (0.5, 0.7, 0.9)


@torch.no_grad()
def first_token_probability(vlm: VisionLanguageModel, image: Image.Image, prompt: str, token_id: int) -> float:
    """The prefill of core/decoding/engine.py, without a cache: the distribution of the answer's first token."""
    request = vlm.prepare(image, prompt)
    positions, _ = vlm.rope_positions(request)
    logits = vlm.model(input_ids=request.input_ids, position_ids=positions, logits_to_keep=1,
                       mm_encoder_outputs={"image": vlm.encode_image(request)}).logits[0, -1]
    return float(logits.softmax(-1)[token_id])


def margins(model: str, images: TrainingData) -> dict:
    vlm = VisionLanguageModel.from_pretrained(model)
    there = vlm.tokenizer.convert_tokens_to_ids("There")
    p = {example.image["file_name"]: first_token_probability(vlm, sample.image, sample.prompt, there)
         for example, sample in zip(images.examples, images)}
    values = torch.tensor(list(p.values()))
    return {
        "model": model,
        "images": len(p),
        "mean": float(values.mean()),
        "below": {str(t): int((values < t).sum()) for t in THRESHOLDS},
        "least_sure": [[name, round(value, 4)] for name, value in sorted(p.items(), key=lambda kv: kv[1])[:5]],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=Path, required=True, help="a folder with metadata.jsonl (eval-target --images)")
    parser.add_argument("--models", required=True, help="comma-separated checkpoints")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    images = from_folder(args.images)  # eval-target --images's reader: the same checks, the same prompts
    results = [margins(model, images) for model in args.models.split(",")]
    for r in results:
        least = ", ".join(f"{name} {p:.2f}" for name, p in r["least_sure"][:3])
        print(f"{r['model']}: P(There) mean {r['mean']:.3f}, below 0.5 / 0.7 / 0.9: "
              f"{' / '.join(str(n) for n in r['below'].values())} of {r['images']}; least sure: {least}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
