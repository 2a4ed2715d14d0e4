"""Train the embedded target VLM (Qwen2.5-VL architecture, from scratch) on the procedural world.

    python -m core train target [--steps N] [--batch B] [--lr LR] [--out DIR]

Learning a VLM from scratch on two CPU cores is slow, so the recipe is built for speed:
- dense vision supervision: a linear head (discarded after training) reads each visual token and predicts what
  its four patches hold (object class, OCR character, background); without it the LM learns the answers' form
  in a hundred steps, then plateaus for hundreds more before it starts to look at the image;
- task sampling weighted by each family's running loss (hard families get more batches);
- loss on answer tokens only, a warmup + cosine LR with a high peak, images aligned with the visual tokens.
A run takes about an hour on 2 CPU cores.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from transformers import get_cosine_schedule_with_warmup

from core import world
from core.embedded import EMBEDDED_PATHS, TargetSize, new_target, save_vlm
from core.vlm import VisionLanguageModel, chat_prompt


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
    init: str = ""  # continue from this checkpoint instead of a fresh model


def answer_batch(tok, batch: list[world.Sample], vlm: VisionLanguageModel | None = None) -> dict:
    """Prompt + answer + end-of-turn, right-padded; labels only on the answer (what the model must produce).
    With a `vlm`, the images go in through its image processor; without, the prompts are text-only."""
    with_image = vlm is not None
    rows, labels, types = [], [], []
    if with_image:
        pixels = vlm.image_processor(images=[s.image for s in batch], return_tensors="pt")
    for i, s in enumerate(batch):
        if with_image:
            text = vlm.image_prompt_text(s.prompt, pixels["image_grid_thw"][i])
        else:
            text = chat_prompt(tok, s.prompt, False)
        prompt_ids = tok(text)["input_ids"]
        answer_ids = tok(s.answer)["input_ids"] + [tok.eos_token_id]
        rows.append(prompt_ids + answer_ids)
        labels.append([-100] * len(prompt_ids) + answer_ids)
        types.append([int(with_image and t == vlm.image_token_id) for t in prompt_ids] + [0] * len(answer_ids))
    width = max(map(len, rows))
    pad = lambda xs, v: [x + [v] * (width - len(x)) for x in xs]  # noqa: E731
    out = {
        "input_ids": torch.tensor(pad(rows, tok.pad_token_id)),
        "labels": torch.tensor(pad(labels, -100)),
        "attention_mask": torch.tensor(pad([[1] * len(r) for r in rows], 0)),
    }
    if with_image:
        out |= {
            "mm_token_type_ids": torch.tensor(pad(types, 0)),
            "pixel_values": pixels["pixel_values"],
            "image_grid_thw": pixels["image_grid_thw"],
        }
    return out


def per_sample_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    shift_logits, shift_labels = logits[:, :-1].float(), labels[:, 1:]
    loss = torch.nn.functional.cross_entropy(
        shift_logits.transpose(1, 2), shift_labels, ignore_index=-100, reduction="none"
    )
    mask = shift_labels != -100
    return (loss * mask).sum(1) / mask.sum(1).clamp(min=1)


def patch_targets(batch: list[world.Sample], merge: int = 2) -> torch.Tensor:
    """[n_visual_tokens, merge**2] patch classes in the image processor's order (merged tokens row-major, then the
    patches inside each), -100 where a sample has no labels."""
    grid = world.PATCH_GRID
    order = [(r * merge + i) * grid + c * merge + j
             for r in range(grid // merge) for c in range(grid // merge) for i in range(merge) for j in range(merge)]
    rows = [[s.patch_labels[k] for k in order] if s.patch_labels else [-100] * len(order) for s in batch]
    return torch.tensor(rows).view(-1, merge * merge)


class TaskSampler:
    """Draws tasks in proportion to their running loss, so the families still being learned get the batches."""

    def __init__(self, tasks=world.TASKS, floor: float = 0.1, seed: int = 0):
        self.loss = {t: 1.0 for t in tasks}
        self.floor = floor
        self.rng = random.Random(seed)

    def draw(self, n: int) -> list[str]:
        weights = [max(v, self.floor) for v in self.loss.values()]
        return self.rng.choices(list(self.loss), weights=weights, k=n)

    def update(self, tasks: list[str], losses: torch.Tensor) -> None:
        for task in set(tasks):
            mean = float(losses[[i for i, t in enumerate(tasks) if t == task]].mean())
            self.loss[task] = 0.9 * self.loss[task] + 0.1 * mean


def train(cfg: TargetTrainConfig, size: TargetSize = TargetSize()) -> VisionLanguageModel:
    from core.evaluate import exact_match

    torch.manual_seed(cfg.seed)
    vlm = VisionLanguageModel.from_pretrained(cfg.init) if cfg.init else new_target(size)
    model = vlm.model.train()
    aux_head = torch.nn.Linear(vlm.text_config.hidden_size, 4 * world.PATCH_CLASSES)
    params = list(model.parameters()) + list(aux_head.parameters())
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.98))
    sched = get_cosine_schedule_with_warmup(opt, cfg.warmup, cfg.steps)
    sampler = TaskSampler(seed=cfg.seed)
    log = []
    start = time.time()
    index = 0
    for step in range(1, cfg.steps + 1):
        tasks = sampler.draw(cfg.batch)
        batch = [world.sample("train", index + i, t) for i, t in enumerate(tasks)]
        index += cfg.batch
        inputs = answer_batch(vlm.tokenizer, batch, vlm)
        labels = inputs.pop("labels")
        # One vision pass feeds both the LM and the dense head.
        features = model.get_image_features(inputs.pop("pixel_values"), inputs["image_grid_thw"], return_dict=True)
        logits = model(**inputs, mm_encoder_outputs={"image": features}).logits
        losses = per_sample_loss(logits, labels)
        aux_logits = aux_head(torch.cat(features.pooler_output)).view(-1, world.PATCH_CLASSES)
        aux = torch.nn.functional.cross_entropy(aux_logits, patch_targets(batch).view(-1), ignore_index=-100)
        loss = losses.mean() + cfg.aux_weight * aux
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        sampler.update(tasks, losses.detach())
        if step % 25 == 0:
            print(f"step {step} loss {loss.item():.3f} vision {aux.item():.3f} per-task {({k: round(v, 3) for k, v in sampler.loss.items()})} "
                  f"{time.time() - start:.0f}s", flush=True)
        if step % cfg.eval_every == 0 or step == cfg.steps:
            model.eval()
            acc = exact_match(vlm, world.samples("heldout", cfg.eval_n, start=10_000))
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


def run(args) -> None:
    cfg = TargetTrainConfig(**{k: v for k, v in vars(args).items() if k in TargetTrainConfig.__dataclass_fields__ and v is not None})
    train(cfg)
