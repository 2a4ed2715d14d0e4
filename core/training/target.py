"""Train the embedded target VLM (Qwen2.5-VL architecture, from scratch) on the procedural world.

    python -m core train target [--steps N] [--batch B] [--lr LR] [--vision-steps N] [--init DIR] [--out DIR]
        [--mix world,photos]      # also images beyond the world: any image's colour layout, text, honest answers

Learning a VLM from scratch on two CPU cores is slow, so the recipe is built for speed:
- dense vision supervision (`VisionProbe`, linear heads discarded after training): each visual token must say
  what its four patches hold, which cell it is, and for charts its column's label and value. Without it the LM
  learns the answers' form in a hundred steps, then plateaus for hundreds more before it looks at the image;
  without the cell, it has to tell the 3x3 grid apart by rotary positions alone, which it barely can;
- `--vision-steps`: the vision tower and probe first train alone, ten times cheaper per step than the full model;
- task sampling weighted by each family's running chance of a wrong answer, 1 - exp(-answer NLL): exact match
  needs every token, so a 40-token caption at a low per-token loss is still a hard family;
- loss on answer tokens only, a warmup + cosine LR with a high peak, images aligned with the visual tokens;
- `--init` continues a checkpoint (the shipped target is several such runs: README, "The embedded models").
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from transformers import get_cosine_schedule_with_warmup

from core.models.embedded import EMBEDDED_PATHS, TargetSize, new_target, save_vlm
from core.models.vlm import VisionLanguageModel
from core.training.batches import answer_batch, per_sample_loss
from core.world import describe, photos, scenes


@dataclass
class TargetTrainConfig:
    steps: int = 2000
    batch: int = 24
    lr: float = 2e-3
    warmup: int = 100
    weight_decay: float = 0.01
    seed: int = 0
    out: str = str(EMBEDDED_PATHS["target"])
    eval_every: int = 300
    eval_n: int = 40
    aux_weight: float = 0.5  # dense vision supervision (see the module docstring)
    vision_steps: int = 0  # first train the vision tower on the probe alone (fast: no LM forward)
    init: str = ""  # continue from this checkpoint instead of a fresh model
    mix: str = "world"  # "world", or "world,photos": also images beyond the world (core/world/photos.py)


PHOTOS = "photos/"  # the task names of core/world/photos.py's samples, as the sampler sees them


def task_names(mix: str) -> tuple[str, ...]:
    sources = mix.split(",")
    if not set(sources) <= {"world", "photos"} or "world" not in sources:
        raise ValueError(f"--mix must be 'world' or 'world,photos', got {mix!r}")
    return scenes.TASKS + (tuple(PHOTOS + t for t in photos.TASKS) if "photos" in sources else ())


def training_sample(task: str, index: int) -> scenes.Sample:
    """The index-th training sample of a task: a world scene, or (PHOTOS tasks) an image beyond the world."""
    if task.startswith(PHOTOS):
        return photos.sample("train", index, task.removeprefix(PHOTOS))
    return scenes.sample("train", index, task)


class VisionProbe(torch.nn.Module):
    """Linear heads (discarded after training) that read each visual token and predict what its cell holds:
    the classes of its four patches, which cell it is, and for charts the label and value of its column.
    Linear on purpose: facts the heads can read linearly are facts the LM's attention can match on, so the
    LM finds "the token of the top-right cell" by content instead of inferring it from rotary positions."""

    def __init__(self, hidden: int, merge: int = 2):
        super().__init__()
        self.merge = merge
        grid = scenes.PATCH_GRID // merge
        self.heads = torch.nn.ModuleDict({
            "patches": torch.nn.Linear(hidden, merge * merge * scenes.PATCH_CLASSES),
            "cell": torch.nn.Linear(hidden, grid * grid),
            "chart_label": torch.nn.Linear(hidden, len(scenes.CHART_LABELS)),
            "chart_value": torch.nn.Linear(hidden, 10),
        })

    def targets(self, batch: list[scenes.Sample]) -> dict[str, torch.Tensor]:
        """One row per visual token, in the image processor's order (merged tokens row-major, then the patches
        inside each); -100 where a sample has no such fact."""
        merge, grid = self.merge, scenes.PATCH_GRID
        cells = grid // merge
        order = [(r * merge + i) * grid + c * merge + j
                 for r in range(cells) for c in range(cells) for i in range(merge) for j in range(merge)]
        patches = [[s.patch_labels[k] for k in order] if s.patch_labels else [-100] * len(order) for s in batch]
        columns = [[s.chart_columns[k % cells] if s.chart_columns else None for k in range(cells * cells)] for s in batch]
        return {
            "patches": torch.tensor(patches).view(-1),
            "cell": torch.arange(cells * cells).repeat(len(batch)),
            "chart_label": torch.tensor([scenes.CHART_LABELS.index(c[0]) if c else -100 for row in columns for c in row]),
            "chart_value": torch.tensor([c[1] if c else -100 for row in columns for c in row]),
        }

    def losses(self, features: torch.Tensor, batch: list[scenes.Sample]) -> dict[str, torch.Tensor]:
        targets = self.targets(batch)
        out = {}
        for name, head in self.heads.items():
            if (targets[name] == -100).all():  # no sample of this batch has the fact (e.g. no chart): no loss, not NaN
                continue
            logits = head(features).view(targets[name].numel(), -1)
            out[name] = torch.nn.functional.cross_entropy(logits, targets[name], ignore_index=-100)
        return out


class ColourProbe(torch.nn.Module):
    """Linear heads (discarded after training) for images beyond the world, which have no patch labels: each visual
    token predicts the share of each basic colour term among the pixels it covers, and their mean lightness (the
    facts a colour-layout answer is made of, core/world/describe.py), read from the image as the processor resized it."""

    def __init__(self, hidden: int, patch: int = 16, merge: int = 2):
        super().__init__()
        self.patch, self.merge = patch, merge
        self.terms = torch.nn.Linear(hidden, len(describe.TERMS))
        self.lightness = torch.nn.Linear(hidden, 1)

    def targets(self, image, grid_thw: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """[tokens, terms] colour-term shares and [tokens] mean lightness, merged tokens in row-major order."""
        _, rows, cols = (int(v) for v in grid_thw)
        size = (cols * self.patch, rows * self.patch)
        rgb = np.asarray(image.convert("RGB").resize(size, Image.Resampling.BICUBIC), dtype=np.float64) / 255
        h, w, side = rows // self.merge, cols // self.merge, self.patch * self.merge
        onehot = np.eye(len(describe.TERMS))[describe.colour_terms(rgb)].reshape(h, side, w, side, -1)
        light = describe.light(rgb).reshape(h, side, w, side)
        return (torch.tensor(onehot.mean((1, 3)).reshape(h * w, -1), dtype=torch.float32),
                torch.tensor(light.mean((1, 3)).reshape(-1), dtype=torch.float32))

    def loss(self, features: list[torch.Tensor], images: list, grids: torch.Tensor) -> torch.Tensor:
        shares, light = zip(*(self.targets(image, grid) for image, grid in zip(images, grids)))
        seen = torch.cat(features)
        seen = torch.nn.functional.rms_norm(seen, seen.shape[-1:])  # the tower's outputs are large; keep this loss O(1)
        terms = torch.nn.functional.cross_entropy(self.terms(seen), torch.cat(shares))  # soft labels
        return terms + 10 * torch.nn.functional.mse_loss(self.lightness(seen).squeeze(-1), torch.cat(light))


class TaskSampler:
    """Draws tasks in proportion to their running chance of a wrong answer, so the families still being learned get
    the batches. `update` takes each sample's whole-answer NLL (per-token mean x answer length)."""

    def __init__(self, tasks=scenes.TASKS, floor: float = 0.1, seed: int = 0):
        self.wrong = {t: 1.0 for t in tasks}
        self.floor = floor
        self.rng = random.Random(seed)

    def draw(self, n: int) -> list[str]:
        weights = [max(v, self.floor) for v in self.wrong.values()]
        return self.rng.choices(list(self.wrong), weights=weights, k=n)

    def update(self, tasks: list[str], losses: torch.Tensor) -> None:
        for task in set(tasks):
            nll = losses[[i for i, t in enumerate(tasks) if t == task]]
            wrong = float((1 - torch.exp(-nll)).mean())
            self.wrong[task] = 0.9 * self.wrong[task] + 0.1 * wrong


def train(cfg: TargetTrainConfig, size: TargetSize = TargetSize()) -> VisionLanguageModel:
    from core.bench.evaluate import exact_match, on_photos

    torch.manual_seed(cfg.seed)
    vlm = VisionLanguageModel.from_pretrained(cfg.init) if cfg.init else new_target(size)
    model = vlm.model.train()
    probe = VisionProbe(vlm.text_config.hidden_size)
    vision = vlm.model.config.vision_config
    colour_probe = ColourProbe(vlm.text_config.hidden_size, vision.patch_size, vision.spatial_merge_size)
    pretrain_vision(vlm, probe, cfg)
    params = list(model.parameters()) + list(probe.parameters()) + list(colour_probe.parameters())
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.98))
    sched = get_cosine_schedule_with_warmup(opt, cfg.warmup, cfg.steps)
    sampler = TaskSampler(task_names(cfg.mix), seed=cfg.seed)
    log = []
    start = time.time()
    index = 0
    for step in range(1, cfg.steps + 1):
        tasks = sampler.draw(cfg.batch)
        batch = [training_sample(t, index + i) for i, t in enumerate(tasks)]
        index += cfg.batch
        inputs = answer_batch(vlm.tokenizer, batch, vlm)
        labels = inputs.pop("labels")
        # One vision pass feeds both the LM and the dense head.
        features = model.get_image_features(inputs.pop("pixel_values"), inputs["image_grid_thw"], return_dict=True)
        logits = model(**inputs, mm_encoder_outputs={"image": features}).logits
        losses = per_sample_loss(logits, labels)
        # The world probe reads the world's 3x3 visual tokens; other images have their own token grids and colours.
        world = [i for i, t in enumerate(tasks) if not t.startswith(PHOTOS)]
        beyond = [i for i, t in enumerate(tasks) if t.startswith(PHOTOS)]
        aux = torch.zeros(())
        if world and cfg.aux_weight:
            seen = torch.cat([features.pooler_output[i] for i in world])
            aux = sum(probe.losses(seen, [batch[i] for i in world]).values(), aux)
        if beyond and cfg.aux_weight:
            aux = aux + colour_probe.loss([features.pooler_output[i] for i in beyond], [batch[i].image for i in beyond],
                                          inputs["image_grid_thw"][beyond])
        loss = losses.mean() + cfg.aux_weight * aux
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        answer_tokens = (labels[:, 1:] != -100).sum(1)
        sampler.update(tasks, losses.detach() * answer_tokens)
        if step % 25 == 0:
            wrong = {k: round(v, 3) for k, v in sampler.wrong.items()}
            print(f"step {step} loss {loss.item():.3f} vision {aux.item():.3f} wrong {wrong} {time.time() - start:.0f}s",
                  flush=True)
        if step % cfg.eval_every == 0 or step == cfg.steps:
            model.eval()
            acc = exact_match(vlm, scenes.samples("heldout", cfg.eval_n, start=10_000))
            if "photos" in cfg.mix:
                beyond = on_photos(vlm, cfg.eval_n // 2)
                acc["photos"] = {part: {k: v for k, v in r.items() if k != "rows"} for part, r in beyond.items()}
            model.train()
            log.append({"step": step, "seconds": round(time.time() - start), "loss": loss.item(), **acc})
            print("eval", json.dumps(log[-1]), flush=True)
            save_vlm(vlm, Path(cfg.out))
    model.eval()
    out = Path(cfg.out)
    save_vlm(vlm, out)
    (out / "training_log.json").write_text(
        json.dumps({"config": asdict(cfg), "size": asdict(size), "log": log}, indent=1)
    )
    return vlm


def pretrain_vision(vlm: VisionLanguageModel, probe: VisionProbe, cfg: TargetTrainConfig) -> None:
    """Vision tower + probe alone: ten times cheaper per step than the full model, and it gives the LM visual
    tokens that already say what and where they are."""
    params = list(vlm.model.model.visual.parameters()) + list(probe.parameters())
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    start = time.time()
    for step in range(1, cfg.vision_steps + 1):
        batch = scenes.samples("train", cfg.batch, start=(step - 1) * cfg.batch + 7_000_000)
        pixels = vlm.image_processor(images=[s.image for s in batch], return_tensors="pt")
        features = vlm.model.get_image_features(pixels["pixel_values"], pixels["image_grid_thw"], return_dict=True)
        losses = probe.losses(torch.cat(features.pooler_output), batch)
        opt.zero_grad(set_to_none=True)
        sum(losses.values()).backward()
        opt.step()
        if step % 50 == 0:
            print(f"vision step {step} {({k: round(v.item(), 3) for k, v in losses.items()})} {time.time() - start:.0f}s", flush=True)


def run(args) -> None:
    cfg = TargetTrainConfig(**{k: v for k, v in vars(args).items() if k in TargetTrainConfig.__dataclass_fields__ and v is not None})
    train(cfg)
