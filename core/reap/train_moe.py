"""Train the embedded MoE (core/reap/embedded_moe.py) from scratch on the code / prose / math domains.

    python -m core train moe [--steps N] [--batch B] [--lr LR] [--seed S] [--out DIR]

Every batch holds the same number of windows from each domain, so experts get a reason to specialise; the
model's own load-balancing loss (router_aux_loss_coef) keeps all 16 in use. It runs on one thread so it can
share a small machine; the default recipe (3000 steps) takes about 20 minutes there. The output directory gets the bf16
model, the tokenizer and training_log.json with per-domain held-out perplexity and task accuracy.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from transformers import get_cosine_schedule_with_warmup

from core.models.loading import recorded, save_bf16
from core.reap import data
from core.reap.embedded_moe import MOE_PATH, MoeSize, new_moe, train_tokenizer
from core.reap.quality import evaluate, perplexity


@dataclass
class MoeTrainConfig:
    steps: int = 3000
    batch: int = 15  # a multiple of the number of domains
    seq_len: int = 128
    lr: float = 3e-3
    warmup: int = 100
    weight_decay: float = 0.01
    seed: int = 0
    out: str = str(MOE_PATH)
    eval_every: int = 250


def _batch(streams: dict[str, torch.Tensor], cfg: MoeTrainConfig, gen: torch.Generator) -> torch.Tensor:
    rows = []
    for stream in streams.values():
        starts = torch.randint(0, len(stream) - cfg.seq_len, (cfg.batch // len(streams),), generator=gen)
        rows.extend(stream[s:s + cfg.seq_len] for s in starts.tolist())
    return torch.stack(rows)


def train(cfg: MoeTrainConfig, size: MoeSize = MoeSize()) -> None:
    torch.set_num_threads(1)  # share the machine: other jobs keep their cores
    torch.manual_seed(cfg.seed)
    if cfg.batch % len(data.DOMAINS):
        raise ValueError(f"--batch must be a multiple of {len(data.DOMAINS)} (one share per domain), got {cfg.batch}")
    tokenizer = train_tokenizer(size.vocab)
    model = new_moe(tokenizer, size).train()
    streams = {d: data.token_stream(tokenizer, data.texts(d, "train")) for d in data.DOMAINS}
    heldout = {d: data.windows(tokenizer, d, "heldout", 16 * cfg.seq_len, cfg.seq_len) for d in data.DOMAINS}
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.95))
    sched = get_cosine_schedule_with_warmup(opt, cfg.warmup, cfg.steps)
    gen = torch.Generator().manual_seed(cfg.seed)
    log, start = [], time.time()
    for step in range(1, cfg.steps + 1):
        ids = _batch(streams, cfg, gen)
        out = model(input_ids=ids, labels=ids, output_router_logits=True)  # loss includes the balancing term
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 25 == 0:
            print(f"step {step} loss {out.loss.item():.3f} aux {out.aux_loss.item():.3f} {time.time() - start:.0f}s",
                  flush=True)
        if step % cfg.eval_every == 0 or step == cfg.steps:
            model.eval()
            ppl = {d: round(perplexity(model, w), 3) for d, w in heldout.items()}
            model.train()
            log.append({"step": step, "seconds": round(time.time() - start), "loss": out.loss.item(), "ppl": ppl})
            print("eval", json.dumps(log[-1]), flush=True)
    model.eval()
    out_dir = Path(cfg.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    save_bf16(model, out_dir)
    tokenizer.save_pretrained(out_dir)
    final = evaluate(model, tokenizer)
    print("final", json.dumps(final), flush=True)
    (out_dir / "training_log.json").write_text(
        json.dumps(recorded({"config": asdict(cfg), "size": asdict(size), "log": log, "final": final,
                             "params": sum(p.numel() for p in model.parameters()),
                             "chance_ppl": len(tokenizer)}),  # perplexity of a uniform guess over the vocabulary
                   indent=1)
    )


def run(args) -> None:
    fields = MoeTrainConfig.__dataclass_fields__
    train(MoeTrainConfig(**{k: v for k, v in vars(args).items() if k in fields and v is not None}))
