"""Train the embedded text-only drafter: a 1-layer Qwen2 LM that learns the world's answers from prompts alone.

    python -m core train text-drafter [--steps N] [--batch B] [--lr LR] [--out DIR]

It shares the target's tokenizer and never sees an image, so it can only learn the answers' form and priors
(sentence structure, likely words): the honest baseline that image-aware drafters are measured against.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from transformers import AutoTokenizer, get_cosine_schedule_with_warmup

from core.models.embedded import EMBEDDED_PATHS, DrafterSize, new_text_drafter
from core.models.loading import recorded, save_bf16
from core.training.batches import answer_batch, per_sample_loss
from core.world import mix


@dataclass
class DrafterTrainConfig:
    steps: int = 1000
    batch: int = 64
    lr: float = 3e-3
    warmup: int = 50
    seed: int = 0
    target: str = str(EMBEDDED_PATHS["target"])  # whose tokenizer and chat template the drafter shares
    out: str = str(EMBEDDED_PATHS["text"])
    mix: str = "world,photos"  # the target's training images (core/world/mix.py): world or world,photos


def train(cfg: DrafterTrainConfig, size: DrafterSize = DrafterSize()):
    torch.manual_seed(cfg.seed)
    tokenizer = AutoTokenizer.from_pretrained(cfg.target)
    model = new_text_drafter(tokenizer, size).train()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01)
    sched = get_cosine_schedule_with_warmup(opt, cfg.warmup, cfg.steps)
    start, log = time.time(), []
    for step in range(1, cfg.steps + 1):
        batch = mix.samples("train", cfg.batch, start=step * cfg.batch, mix=cfg.mix)
        inputs = answer_batch(tokenizer, batch)
        labels = inputs.pop("labels")
        loss = per_sample_loss(model(**inputs).logits, labels).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        if step % 100 == 0:
            log.append({"step": step, "loss": round(loss.item(), 4), "seconds": round(time.time() - start)})
            print(log[-1], flush=True)
    out = Path(cfg.out)
    save_bf16(model.eval(), out)
    tokenizer.save_pretrained(out)
    (out / "training_log.json").write_text(json.dumps(recorded({"config": asdict(cfg), "size": asdict(size), "log": log}), indent=1))
    return model


def run(args) -> None:
    fields = DrafterTrainConfig.__dataclass_fields__
    train(DrafterTrainConfig(**{k: v for k, v in vars(args).items() if k in fields and v is not None}))
