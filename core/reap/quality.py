"""Quality of a (pruned) MoE per domain: held-out perplexity and a generative exact-match task each.

  code   next identifier in a held-out source file, one that already occurred in the last 400 characters
  prose  next word in a held-out docstring, likewise one that already occurred in the context
  math   the answer of a held-out addition or subtraction, after three solved examples

Everything is drawn from the held-out split with a fixed seed, so every model sees the same items.

    python -m core.reap.quality [--model DIR]     # prints {domain: {"ppl", "acc"}} (default: embedded MoE)
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
from dataclasses import dataclass
from functools import lru_cache, partial

import torch

from core.reap import data


@dataclass(frozen=True)
class Item:
    prompt: str
    answer: str


@dataclass
class QualityConfig:
    ppl_windows: int = 16
    seq_len: int = 128
    task_items: int = 64
    seed: int = 0


@torch.no_grad()
def perplexity(model, windows: torch.Tensor, batch: int = 16) -> float:
    total, count = 0.0, 0
    for chunk in windows.split(batch):
        logits = model(input_ids=chunk.to(model.device)).logits[:, :-1].float()
        # Logits come out where the last layer is: with device_map that need not be model.device.
        labels = chunk[:, 1:].to(logits.device)
        nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), labels, reduction="sum")
        total, count = total + nll.item(), count + chunk[:, 1:].numel()
    return math.exp(total / count)


def _next_word_items(domain: str, rng: random.Random, n: int) -> list[Item]:
    """A word (code: identifier) that already occurred in the context, as its next word.

    Requiring the earlier occurrence keeps the task within reach of a small model (recall, plus knowing
    where the word fits), so losing that skill under pruning shows up as a drop.
    The prompt stops before the separating space, which byte-level BPE attaches to the word itself.
    """
    word = r"[A-Za-z_][A-Za-z0-9_]{3,}" if domain == "code" else r"[A-Za-z]{4,}"
    candidates = []
    for doc in data.texts(domain, "heldout"):
        for m in re.finditer(rf"(?<=[ .(])({word})\b", doc):
            start = m.start() - (doc[m.start() - 1] == " ")
            context = doc[max(0, start - 400):start]
            if start >= 200 and re.search(rf"\b{m.group(1)}\b", context):
                candidates.append(Item(context, m.group(1)))
    return rng.sample(candidates, n)


def _math_items(rng: random.Random, n: int) -> list[Item]:
    lines = [line for doc in data.texts("math", "heldout") for line in doc.split("\n")]
    items = []
    for _ in range(n):
        shots = rng.sample(lines, 4)
        question, answer = shots[-1].split("=")
        items.append(Item("\n".join(shots[:-1]) + f"\n{question}=", answer))
    return items


@lru_cache(maxsize=4)
def task_items(domain: str, n: int, seed: int = 0) -> tuple[Item, ...]:
    makers = {"code": partial(_next_word_items, "code"), "prose": partial(_next_word_items, "prose"),
              "math": _math_items}
    return tuple(makers[domain](random.Random(f"{domain}/{seed}"), n))


def _extract(domain: str, text: str) -> str:
    if domain == "math":
        return text.split("\n")[0].strip()
    return re.match(r" ?([A-Za-z0-9_]*)", text).group(1)


@torch.no_grad()
def continuations(model, tokenizer, prompts: list[str], max_new_tokens: int) -> list[str]:
    """Greedy continuations of a batch of prompts (left-padded), new text only."""
    tokenizer.padding_side = "left"
    enc = tokenizer(prompts, return_tensors="pt", padding=True).to(model.device)
    out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    return tokenizer.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)


def exact_match(model, tokenizer, domain: str, items: tuple[Item, ...], max_new_tokens: int) -> float:
    texts = continuations(model, tokenizer, [it.prompt for it in items], max_new_tokens)
    return sum(_extract(domain, t) == it.answer for t, it in zip(texts, items)) / len(items)


# Tokens to generate per task: enough for the answer plus the newline or space that ends it.
MAX_NEW_TOKENS = {"code": 6, "prose": 6, "math": 5}


def evaluate(model, tokenizer, cfg: QualityConfig = QualityConfig(), domains=data.DOMAINS) -> dict:
    """{domain: {"ppl": held-out perplexity, "acc": task exact match}}."""
    model.eval()
    out = {}
    for d in domains:
        windows = data.windows(tokenizer, d, "heldout", cfg.ppl_windows * cfg.seq_len, cfg.seq_len, cfg.seed)
        items = task_items(d, cfg.task_items, cfg.seed)
        out[d] = {"ppl": round(perplexity(model, windows), 3),
                  "acc": round(exact_match(model, tokenizer, d, items, MAX_NEW_TOKENS[d]), 4)}
    return out


if __name__ == "__main__":
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from core.reap.embedded_moe import MOE_PATH

    torch.set_num_threads(1)
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=str(MOE_PATH))
    args = parser.parse_args()
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    print(json.dumps(evaluate(model, AutoTokenizer.from_pretrained(args.model))))
