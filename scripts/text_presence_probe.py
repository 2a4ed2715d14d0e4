"""Which vision tower can learn where text is, given text presence alone? A probe, not part of the app.

    python scripts/text_presence_probe.py [--variants tower,tower-dense,dense,cnn] [--steps 1200] [--json PATH]
    python scripts/text_presence_probe.py --score runs/target-17,...   # trained checkpoints' own text heads, and
                                                                       # their language models' reading answers

Each variant trains on RegionProbe's text term (core/training/target.py: which of the 3x3 visual tokens' regions hold
text, and the most text-like token whether the image holds any), with none of the colour losses beside it that the
target's own training has. The first eight start from the shipped target's tower (assets/models/target):
  frozen   the tower as shipped, the head alone: what its visual tokens carry linearly
  frozen-mlp  the same with a two-layer head (GELU, 4x the width): whether they carry more than a linear head reads
  patches  the tower as shipped, a linear head on each patch's state before the merger, a region's logits the
           log-sum-exp of its 64 patches': what the patch states carry, before the merger pools them
  merger   the blocks as shipped, the merger trains with the head: whether a merger alone passes on more of it
  tower    the tower trains too
  deeper   the tower grown by `--grow` blocks first, copies of its last block whose output projections start at zero,
           so the grown tower computes exactly the shipped one's features before its first step
  wider    every block's MLP `--widen` times as wide, the new units' output weights at zero (the same features too)
  tower-dense  `tower`, each of its patches (before the merger) also saying whether it holds ink of text (weight
           `--dense`): dense supervision, as the world's VisionProbe gives each patch its class
  fine     a fresh tower (random weights, `--grow` + 2 blocks) of 16-pixel patches merged 4x4: a 12x12 patch grid of
           the same 192x192 square, still 3x3 visual tokens, each patch a quarter of the shipped one's pixels
  fine8    a fresh tower as `fine`, of 8-pixel patches merged 8x8 (a 24x24 grid), 32 wide (its merger, 32 x 64 wide,
           stays near `fine`'s size), the blocks before the last attending within one region
  dense    `fine8` with `tower-dense`'s per-patch loss on its 24x24 patches
  cnn      not a Qwen2.5-VL tower: five strided 3x3 / 5x5 convolutions from the 192x192 square to 3x3 features of
           the target's width, a reference for whether the images and labels can be learned at this budget at all
Every variant sees the same training images (every source of core/world/photos.py in turn, the "read" task); each is
scored every `--eval-every` steps on `--heldout` held-out images of every source (indices 50000..), on as many of the
training split's that no variant trains on (`unseen`: its fonts and photographs, new draws) and on the first 480
training images (`score`: accuracy of "holds text" and a threshold-free AUC, per source). Held out against unseen
tells what fails to carry to other photographs from what fails to carry to other images.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import multiprocessing
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
from PIL import Image  # noqa: E402
import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

from core.models.embedded import EMBEDDED_PATHS, TargetSize, image_processor, vision_fields  # noqa: E402
from core.models.vlm import VisionLanguageModel, model_input  # noqa: E402
from core.world import photos  # noqa: E402
from core.training.batches import answer_batch, per_sample_loss  # noqa: E402
from core.training.target import (  # noqa: E402
    PROBES, PatchTextProbe, RegionProbe, image_text_margin, patch_states, text_presence_loss)
from transformers import Qwen2_5_VLVisionConfig  # noqa: E402  (after core: it makes torchvision import)

REGIONS = 9


def _drawn(split: str, i: int) -> tuple:
    """(square, region labels, source, the sample with its square and text mask at 192x192)."""
    source = photos.SOURCES[i % len(photos.SOURCES)]
    sample = photos.sample(split, i, "read", source)
    mask = None if sample.text_mask is None else sample.text_mask.resize((192, 192), Image.Resampling.BOX)
    square = model_input(sample.image, 192)
    # A photograph that may show text is not scored (-100).
    regions = [int(t) for t in sample.text_regions] if sample.text_regions else [-100] * REGIONS
    return square, regions, source, dataclasses.replace(sample, image=square, text_mask=mask)


def images_of(split: str, indices: range, pool) -> tuple[list, torch.Tensor, list[str], list]:
    """The squares the target sees, their region labels [N, 9] (-100 where unknown), sources (cycling) and samples
    (with their text masks)."""
    squares, labels, sources, samples = zip(*pool.starmap(_drawn, [(split, i) for i in indices], chunksize=8))
    return list(squares), torch.tensor(labels), list(sources), list(samples)


def grow(visual: torch.nn.Module, blocks: int) -> None:
    """Append copies of the last block whose residual outputs (attention and MLP projections) are zero."""
    for _ in range(blocks):
        block = copy.deepcopy(visual.blocks[-1])
        torch.nn.init.zeros_(block.attn.proj.weight)
        torch.nn.init.zeros_(block.attn.proj.bias)
        torch.nn.init.zeros_(block.mlp.down_proj.weight)
        torch.nn.init.zeros_(block.mlp.down_proj.bias)
        visual.blocks.append(block)
    visual.config.depth += blocks


def widen(visual: torch.nn.Module, factor: int) -> None:
    """Every block's MLP `factor` times as wide: the new hidden units start random, their output weights at zero."""
    for block in visual.blocks:
        mlp = block.mlp
        width = mlp.gate_proj.out_features
        for name in ("gate_proj", "up_proj"):
            old = getattr(mlp, name)
            new = torch.nn.Linear(old.in_features, width * factor)
            new.weight.data[:width], new.bias.data[:width] = old.weight.data, old.bias.data
            setattr(mlp, name, new)
        old = mlp.down_proj
        new = torch.nn.Linear(width * factor, old.out_features)
        torch.nn.init.zeros_(new.weight)
        new.weight.data[:, :width], new.bias.data[:] = old.weight.data, old.bias.data
        mlp.down_proj = new
    visual.config.intermediate_size *= factor


def refine(vlm: VisionLanguageModel, size: TargetSize) -> None:
    """Replace the tower by a fresh one of `size`'s (random weights) and the image processor by one of its patches
    and merge; the language model stays."""
    config = Qwen2_5_VLVisionConfig(**vision_fields(size))
    vlm.model.model.visual = type(vlm.model.model.visual)._from_config(config)
    vlm.image_processor = image_processor(size)


class ConvEncoder(torch.nn.Module):
    """The cnn reference: the square to one feature per 64x64 region, [N * 9, width] in reading order."""

    def __init__(self, width: int):
        super().__init__()
        channels = (3, 32, 64, 64, 128, width)
        layers = []
        for i, (a, b) in enumerate(zip(channels, channels[1:])):
            layers += [torch.nn.Conv2d(a, b, 5 if i == 0 else 3, stride=2, padding=2 if i == 0 else 1),
                       torch.nn.GELU()]
        self.net = torch.nn.Sequential(*layers, torch.nn.AvgPool2d(2))  # 192 -> 6 -> 3

    def forward(self, squares: list) -> torch.Tensor:
        pixels = torch.stack([torch.from_numpy(np.asarray(sq, dtype=np.float32)) for sq in squares]).permute(0, 3, 1, 2)
        return self.net(pixels / 127.5 - 1).flatten(2).transpose(1, 2).reshape(-1, self.net[-3].out_channels)


def tower_encoder(vlm: VisionLanguageModel):
    """The visual tokens [N * 9, width]; `encode.patches` keeps the patches' states before the merger, in the image
    processor's order, for the dense variants."""
    def encode(squares: list) -> torch.Tensor:
        pixels = vlm.pixels(squares)
        out = vlm.model.get_image_features(pixels["pixel_values"], pixels["image_grid_thw"], return_dict=True)
        encode.patches = patch_states(vlm.model.model.visual, out, pixels["image_grid_thw"])
        return torch.cat(out.pooler_output)
    return encode


def region_logits(name: str, head, encode):
    """The variant's text logits [N * 9, 2] of the visual tokens `encode` returned: the head on each token, or for
    `patches` on each of the token's patches, pooled."""
    def read(features: torch.Tensor) -> torch.Tensor:
        if name != "patches":
            return head(torch.nn.functional.rms_norm(features, features.shape[-1:]))
        logits = head(torch.nn.functional.rms_norm(encode.patches, encode.patches.shape[-1:]))
        return logits.view(features.shape[0], -1, 2).logsumexp(1)
    return read


@torch.no_grad()
def score(encode, read, squares, labels, sources) -> dict[str, dict[str, float]]:
    """Per source: `accuracy`, the share whose "holds text" (any region's margin > 0) is right, and `auc`, how often
    an image's margin (its largest region's) ranks on the right side of an image of the other kind (text against no
    text, of every source): separation whatever the threshold."""
    return separation(image_text_margin(read(encode(squares))), labels, sources)


def separation(margin: torch.Tensor, labels: torch.Tensor, sources: list[str]) -> dict[str, dict[str, float]]:
    """`score`'s accuracy and AUC of any per-image "holds text" margin [N]."""
    truth = (labels == 1).any(1)
    known = labels[:, 0] != -100
    out = {}
    for source in photos.SOURCES:
        mine = [i for i, s in enumerate(sources) if s == source and known[i]]
        if not mine:
            continue
        has_text = bool(truth[mine[0]])
        others = margin[known & (truth != has_text)]
        sign = 1 if has_text else -1
        pairs = sign * (margin[mine][:, None] - others[None, :])
        out[source] = {"accuracy": round(float(((margin[mine] > 0) == truth[mine]).float().mean()), 3),
                       "auc": round(float((pairs > 0).float().mean() + 0.5 * (pairs == 0).float().mean()), 3)}
    return out


@torch.no_grad()
def reading_log_odds(vlm: VisionLanguageModel, samples: list, batch: int = 48) -> torch.Tensor:
    """The language model's own "holds text" margin [N]: the log-odds of answering each sample's reading prompt with
    photos.CANNOT_READ rather than photos.NO_TEXT (whole answers, teacher-forced)."""
    nll = {}
    for answer in (photos.CANNOT_READ, photos.NO_TEXT):
        parts = []
        for k in range(0, len(samples), batch):
            inputs = answer_batch(vlm.tokenizer, [dataclasses.replace(s, answer=answer) for s in samples[k:k + batch]],
                                  vlm)
            labels = inputs.pop("labels")
            parts.append(per_sample_loss(vlm.model(**inputs).logits, labels) * (labels[:, 1:] != -100).sum(1))
        nll[answer] = torch.cat(parts)
    return nll[photos.NO_TEXT] - nll[photos.CANNOT_READ]


def run_variant(name: str, args, train_batches, heldout, unseen) -> dict:
    # How well it fits images it trains on (the first 20 batches): whether the tower can tell text at all.
    first = train_batches[:20]
    fit = ([sq for batch in first for sq in batch[0]], torch.cat([batch[1] for batch in first]),
           [source for batch in first for source in batch[2]], [m for batch in first for m in batch[3]])
    torch.manual_seed(args.seed)
    vlm = VisionLanguageModel.from_pretrained(EMBEDDED_PATHS["target"])
    visual = vlm.model.model.visual
    if name == "deeper":
        grow(visual, args.grow)
    if name == "wider":
        widen(visual, args.widen)
    depth = len(visual.blocks) + args.grow
    if name == "fine":
        refine(vlm, dataclasses.replace(TargetSize(), patch=16, merge=4, vision_depth=depth))
    if name in ("fine8", "dense"):
        refine(vlm, dataclasses.replace(TargetSize(), patch=8, merge=8, window=64, vision_hidden=32, vision_heads=2,
                                        vision_depth=depth))
    visual = vlm.model.model.visual
    fresh = name in ("fine", "fine8", "dense", "cnn")
    dense = PatchTextProbe(visual.config.hidden_size, args.dense) if name in ("dense", "tower-dense") else None
    if name == "cnn":
        visual = ConvEncoder(vlm.text_config.hidden_size)
    encode = visual if name == "cnn" else tower_encoder(vlm)
    width = visual.config.hidden_size if name == "patches" else vlm.text_config.hidden_size
    head = (torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(), torch.nn.Linear(4 * width, 2))
            if name == "frozen-mlp" else torch.nn.Linear(width, 2))
    read = region_logits(name, head, encode)
    visual.requires_grad_(not name.startswith("frozen") and name not in ("patches", "merger"))
    if name == "merger":
        visual.merger.requires_grad_(True)
    tower = [p for p in visual.parameters() if p.requires_grad]
    heads = list(head.parameters()) + (list(dense.parameters()) if dense else [])
    params = heads + tower
    opt = torch.optim.AdamW([{"params": heads, "lr": args.head_lr},
                             {"params": tower, "lr": args.fresh_lr if fresh else args.lr}], weight_decay=0.01)
    log, start = [], time.time()
    for step in range(1, args.steps + 1):
        squares, labels, _, samples = train_batches[(step - 1) % len(train_batches)]
        features = encode(squares)
        loss = text_presence_loss(read(features), labels)
        if dense:
            loss = loss + dense.loss(encode.patches, samples, 192, visual.spatial_merge_size)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if step % args.eval_every == 0:
            log.append({"step": step, "loss": round(loss.item(), 3), "seconds": round(time.time() - start),
                        "heldout": score(encode, read, *heldout[:3]), "unseen": score(encode, read, *unseen[:3]),
                        "train": score(encode, read, *fit[:3])})
            print(name, json.dumps(log[-1]), flush=True)
    return {"variant": name, "parameters": sum(p.numel() for p in visual.parameters()), "log": log}


def scored_checkpoint(path: str, heldout) -> dict:
    """A target trained elsewhere (`train target`, `train tower`), scored by the region probe's text head saved
    beside it (probes.safetensors; None for a checkpoint without, as the shipped one) on the same held-out images,
    and by its language model's reading answer (`answer`: whether the answers follow what the tower's head can
    tell)."""
    vlm = VisionLanguageModel.from_pretrained(path)
    vlm.model.eval()
    squares, labels, sources, samples = heldout
    answers = separation(reading_log_odds(vlm, samples), labels, sources)
    if not (Path(path) / PROBES).is_file():
        return {"head": None, "answer": answers}
    region = RegionProbe(vlm.text_config.hidden_size)
    region.load_state_dict({k.removeprefix("beyond."): v for k, v in load_file(Path(path) / PROBES).items()
                            if k.startswith("beyond.")})
    with torch.no_grad():
        features = tower_encoder(vlm)(squares)
    return {"head": separation(region.text_margin(features), labels, sources), "answer": answers}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--variants", default="tower,tower-dense,dense,cnn")
    parser.add_argument("--steps", type=int, default=1200)
    parser.add_argument("--batches", type=int, default=400, help="distinct training batches drawn (drawing is the "
                                                                   "slow part); the steps cycle over them")
    parser.add_argument("--batch", type=int, default=24)
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--fresh-lr", type=float, default=1e-3, help="the fresh towers' and the cnn's")
    parser.add_argument("--head-lr", type=float, default=5e-3)
    parser.add_argument("--grow", type=int, default=2, help="blocks the deeper variant adds")
    parser.add_argument("--widen", type=int, default=4, help="how many times wider the wider variant's MLPs are")
    parser.add_argument("--eval-every", type=int, default=400)
    parser.add_argument("--heldout", type=int, default=48, help="held-out images of each source")
    parser.add_argument("--workers", type=int, default=2, help="processes drawing the images")
    parser.add_argument("--dense", type=float, default=1.0, help="the dense variants' per-patch loss weight")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--score", default="", help="DIR,...: instead of training, score these checkpoints' saved "
                                                      "text heads")
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    start = time.time()
    # The images are drawn once (drawing dominates a step's cost) and every variant trains on the same ones.
    with multiprocessing.Pool(args.workers) as pool:
        batches = 0 if args.score else min(args.batches, args.steps)
        train = [images_of("train", range(9_000_000 + b * args.batch, 9_000_000 + (b + 1) * args.batch), pool)
                 for b in range(batches)]
        heldout = images_of("heldout", range(50_000, 50_000 + args.heldout * len(photos.SOURCES)), pool)
        unseen = (None if args.score else
                  images_of("train", range(9_900_000, 9_900_000 + args.heldout * len(photos.SOURCES)), pool))
    print(f"images drawn in {time.time() - start:.0f}s", flush=True)
    if args.score:
        report = {"args": vars(args), "checkpoints": {path: scored_checkpoint(path, heldout) for path in
                                                      args.score.split(",")}}
        print(json.dumps(report["checkpoints"]), flush=True)
    else:
        report = {"args": vars(args),
                  "variants": [run_variant(v, args, train, heldout, unseen) for v in args.variants.split(",")]}
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
