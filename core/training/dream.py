"""Train the DREAM adapter by distilling the target's features on its own responses.

    python -m core train dream [--steps N] [--intermediate entropy|none|0.25|0.5|0.75] [--rollout R] [--data SET.json]
    python -m core train dream --data-dir DIR --target TARGET --out OUT      # on your own images
    python -m core train dream --init assets/models/dream --steps 600 --out runs/dream    # after the target's next run

1. Data: a self-distillation set (core/training/self_distill.py; MASSV phase 2's set is reused when it matches the target
   and the prompts), on the procedural world or on the user's examples (`--data-dir`, `--hf-dataset`:
   core/training/training_data.py).
2. Feature extraction, once: the target runs over prompt + response with eager attention and returns, per position,
   its input embedding (image features included), its last-layer feature, the intermediate feature the adapter's
   first block is pulled towards, and the attention its last layer gives each visual token.
   Intermediate layer ("entropy", DREAM's choice): per sample and position, the layer with the lowest attention
   entropy (over keys, mean over heads) among the first 40 % of layers; or a fixed depth; or none.
3. Training: loss = kl * KL(target || draft) + feature * SmoothL1(draft feature, target feature)
   + intermediate * SmoothL1(first-block state, intermediate feature) (both RMS-normalised), on the positions that
   predict response tokens. Each sample's cross-attention memory keeps a random share (keep_min..1) of its visual
   tokens, the most attended ones, as at inference; target features fed back as inputs get a little noise (EAGLE).
   With `rollout` R > 1 (EAGLE-3's training-time test) the KL and feature terms are averaged over R passes: pass d
   feeds back the adapter's own predictions of pass d-1 and, through its attention masks, sees exactly what the
   d+1-th draft of a chain sees at inference (committed positions computed from the target's features, then the
   drafted ones), so the adapter learns to draft from its own imperfect features, not only from the target's.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch.nn import functional as F
from transformers import get_cosine_schedule_with_warmup

from core.drafters.dream import AdapterCache, DreamAdapter, DreamConfig, DreamDrafter, keep_visual, visual_scores
from core.models.embedded import shipped_output
from core.models.loading import recorded
from core.models.vlm import VisionLanguageModel
from core.training import training_data
from core.training.batches import answer_batch
from core.training.self_distill import DistilledDrafterConfig, training_samples


@dataclass
class DreamTrainConfig(DistilledDrafterConfig):
    steps: int = 1500
    batch: int = 32
    lr: float = 1e-3
    seed: int = 0
    intermediate: str = "entropy"  # "entropy", "none", or a depth fraction such as "0.5"
    mlp_size: int = 0  # hidden size of the adapter's MLPs; 0: the target's intermediate size
    draft_vocab: int = 0  # propose only the N tokens the target answers with most often; 0: the whole vocabulary
    search_fraction: float = 0.4  # entropy search over the first 40 % of layers
    kl_weight: float = 1.0
    feature_weight: float = 0.2
    intermediate_weight: float = 0.2
    keep_min: float = 0.5
    feature_noise: float = 0.1  # uniform noise on fed-back features, relative to their RMS
    rollout: int = 1  # draft depths trained (training-time test); 1: every position from the target's features

    def __post_init__(self):
        self.out = shipped_output(self.out, "dream", self.target, bool(self.data_dir or self.hf_dataset))
        if not 1 <= self.rollout <= 8:
            raise ValueError(f"rollout must be between 1 and 8, got {self.rollout}")
        if self.intermediate not in ("entropy", "none"):
            try:
                fraction = float(self.intermediate)
            except ValueError:
                fraction = -1.0
            if not 0.0 < fraction <= 1.0:
                raise ValueError(f"intermediate must be 'entropy', 'none' or a depth in (0, 1], got {self.intermediate!r}")


@dataclass
class Batch:
    input_ids: torch.Tensor  # [B, T]
    attention_mask: torch.Tensor  # [B, T]
    predict: torch.Tensor  # [B, T] True where the next token is part of the response
    embeds: torch.Tensor  # [B, T, H] target input embeddings
    features: torch.Tensor  # [B, T, H] target last-layer features
    intermediate: torch.Tensor | None  # [B, T, H]
    visual_scores: list[tuple[torch.Tensor, torch.Tensor]]  # per sample: (visual positions, attention received)


def candidate_layers(layers: int, fraction: float) -> range:
    """Layers the entropy search looks at: 1 .. 40 % depth (layer 0 mostly mixes tokens locally)."""
    return range(1, max(2, round(fraction * layers)))


def attention_entropy(attention: torch.Tensor) -> torch.Tensor:
    """[B, T]: entropy of each query's attention over keys, averaged over heads ([B, heads, T, T] weights)."""
    return -(attention * attention.clamp_min(1e-12).log()).sum(-1).mean(1)


@torch.no_grad()
def extract(target: VisionLanguageModel, samples, cfg: DreamTrainConfig, chunk: int = 32) -> tuple[list[Batch], Counter]:
    """Run the target once over every sample; returns padded batches and how often each layer was chosen."""
    model = target.model
    original = model.config._attn_implementation
    model.set_attn_implementation("eager")  # attention weights for the entropy search and visual ranking
    layers = target.text_config.num_hidden_layers
    search = candidate_layers(layers, cfg.search_fraction)
    chosen = Counter()
    batches = []
    try:
        for start in range(0, len(samples), chunk):
            part = samples[start:start + chunk]
            inputs = {k: v.to(model.device) for k, v in answer_batch(target.tokenizer, part, target).items()}
            labels = inputs.pop("labels")
            out = model(**inputs, output_hidden_states=True, output_attentions=True)
            states = out.hidden_states  # [0] embeddings, [l + 1] output of layer l, [-1] final (normed)
            mask = inputs["attention_mask"].bool()
            if cfg.intermediate == "entropy":
                pick = torch.stack([attention_entropy(out.attentions[l]) for l in search]).argmin(0)  # [B, T]
                chosen.update((search[i] for i in pick[mask].tolist()))
                stacked = torch.stack([states[l + 1] for l in search])  # [candidates, B, T, H]
                intermediate = stacked.gather(0, pick[None, ..., None].expand(1, *stacked.shape[1:]))[0]
            elif cfg.intermediate == "none":
                intermediate = None
            else:
                layer = min(layers - 1, max(0, round(float(cfg.intermediate) * layers) - 1))
                chosen[layer] += int(mask.sum())
                intermediate = states[layer + 1]
            last = out.attentions[-1].mean(1)  # [B, T, T]
            image = inputs["mm_token_type_ids"].bool()
            scores = []
            for b in range(len(part)):
                visual = image[b].nonzero().view(-1)
                scores.append((visual, visual_scores(last[b], visual) if len(visual) else torch.empty(0)))
            predict = torch.zeros_like(mask)
            predict[:, :-1] = labels[:, 1:] != -100
            batches.append(Batch(inputs["input_ids"], inputs["attention_mask"], predict, states[0], states[-1],
                                 intermediate, scores))
    finally:
        model.set_attn_implementation(original)
    return batches, chosen


def draft_vocabulary(batches: list[Batch], size: int, stop_ids: list[int]) -> torch.Tensor:
    """EAGLE-3's reduced draft vocabulary: the (at most) `size` tokens the target's responses use most, end-of-sequence
    tokens always among them, sorted. The LM head over these rows alone is what a draft step pays for. Training still
    distils the full distribution; drafting renormalises it over these tokens (core/drafters/dream/drafter.py, to_vocab)."""
    counts = Counter()
    for batch in batches:
        counts.update(batch.input_ids[:, 1:][batch.predict[:, :-1]].tolist())
    ranked = list(dict.fromkeys([*stop_ids, *(token for token, _ in counts.most_common())]))
    return torch.tensor(sorted(ranked[:size]))


def readable_memory(batch: Batch, keep_min: float, rng: random.Random) -> torch.Tensor:
    """[B, T]: the positions whose target features the cross-attention may read: no padding, and of each sample's
    visual tokens a random share (keep_min..1), the most attended ones, as at inference."""
    readable = batch.attention_mask.bool().clone()
    for b, (visual, scores) in enumerate(batch.visual_scores):
        if len(visual):
            kept = visual[keep_visual(scores, rng.uniform(keep_min, 1.0))]
            readable[b, visual] = False
            readable[b, kept] = True
    return readable


class StackedKV:
    """Training's self-attention cache: each rollout pass's keys and values are concatenated after the earlier
    passes' (KVCache writes in place, which autograd cannot follow)."""

    def __init__(self):
        self.keys = self.values = None
        self.length = 0

    def append(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.keys is not None:
            keys, values = torch.cat([self.keys, keys], 2), torch.cat([self.values, values], 2)
        self.keys, self.values, self.length = keys, values, keys.shape[2]
        return keys, values


def rollout_masks(attention_mask: torch.Tensor, readable: torch.Tensor, depth: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Masks of rollout pass `depth`, whose query i stands for the (depth+1)-th draft of a chain that starts at the
    committed position c = i - depth. Self-attention [B, 1, T, (depth+1) T] over the passes' keys in order: pass 0's
    (from the target's features) up to c, then pass q's key at c + q, the drafted positions in between. Memory
    [B, 1, T, T]: the target features of positions before c, all the target has computed by then."""
    batch, length = attention_mask.shape
    i = torch.arange(length, device=attention_mask.device).view(-1, 1)
    j = i.view(1, -1)
    blocks = [(j <= i - depth)[None] & attention_mask.bool()[:, None, :]]
    blocks += [(j == i - depth + q).expand(batch, length, length) for q in range(1, depth + 1)]
    memory = (j < i - depth)[None] & readable[:, None, :]
    return torch.cat(blocks, -1).unsqueeze(1), memory.unsqueeze(1)


def chain_positions(predict: torch.Tensor, depth: int) -> torch.Tensor:
    """[B, T]: the positions a rollout pass `depth` is scored on: query i, the (depth+1)-th draft of a chain from
    committed position i - depth, where both predict the answer (a chain starting inside the prompt never occurs at
    inference: the target answers first)."""
    where = predict.clone()
    where[:, :depth] = False
    where[:, depth:] &= predict[:, : where.shape[1] - depth]
    return where


def rollout(adapter: DreamAdapter, batch: Batch, prev: torch.Tensor, readable: torch.Tensor, passes: int):
    """Yield (depth, first-block states, predicted features) for each rollout pass; pass 0 reads `prev` (the
    target's features of the previous positions), pass d the predictions of pass d-1."""
    positions = torch.arange(prev.shape[1], device=prev.device).expand(len(prev), -1)
    keys, values = adapter.cross.memory(batch.features)
    cache = AdapterCache(StackedKV)
    for depth in range(passes):
        self_mask, memory_mask = rollout_masks(batch.attention_mask, readable, depth)
        early, draft = adapter(batch.embeds, prev, positions, self_mask, keys, values, memory_mask, cache)
        yield depth, early, draft
        prev = torch.cat([torch.zeros_like(draft[:, :1]), draft[:, :-1]], dim=1)


def losses(adapter: DreamAdapter, lm_head, batch: Batch, cfg: DreamTrainConfig, rng: random.Random) -> dict:
    features = batch.features
    prev = torch.cat([torch.zeros_like(features[:, :1]), features[:, :-1]], dim=1)
    if cfg.feature_noise:
        rms = prev.pow(2).mean(-1, keepdim=True).sqrt()
        prev = prev + (torch.rand_like(prev) * 2 - 1) * cfg.feature_noise * rms
    out = {"kl": 0.0, "feature": 0.0}
    for depth, early, draft in rollout(adapter, batch, prev, readable_memory(batch, cfg.keep_min, rng), cfg.rollout):
        where = chain_positions(batch.predict, depth)
        if not where.any():  # no answer in the batch is this long
            continue
        target_logp = F.log_softmax(lm_head(features[where]).float(), -1)
        draft_logp = F.log_softmax(lm_head(draft[where]).float(), -1)
        out["kl"] = out["kl"] + F.kl_div(draft_logp, target_logp, log_target=True, reduction="batchmean") / cfg.rollout
        out["feature"] = out["feature"] + F.smooth_l1_loss(draft[where], features[where]) / cfg.rollout
        out["accuracy" if depth == 0 else f"accuracy_{depth + 1}"] = \
            (draft_logp.argmax(-1) == target_logp.argmax(-1)).float().mean()
        if depth == 0 and batch.intermediate is not None:
            # Compared RMS-normalised: raw residual-stream states are large (the term was ~8-30 against a KL of
            # 0.03-0.3 and drowned it); what the first block should learn is the intermediate layer's direction.
            unit = lambda x: F.rms_norm(x, x.shape[-1:])  # noqa: E731
            out["intermediate"] = F.smooth_l1_loss(unit(early[where]), unit(batch.intermediate[where]))
    return out


def train(cfg: DreamTrainConfig) -> DreamDrafter:
    torch.manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)
    target, dataset, examples = cfg.target_and_answers()
    out = Path(cfg.out)
    start = time.time()
    batches, chosen = extract(target, training_samples(dataset), cfg)
    extraction_seconds = time.time() - start
    print(f"features of {len(dataset['rows'])} responses in {extraction_seconds:.0f}s; intermediate layers chosen: "
          f"{dict(sorted(chosen.items()))}", flush=True)
    if cfg.init:  # its weights and draft vocabulary, continued on the (retrained) target's features
        adapter = DreamDrafter.from_pretrained(cfg.init, target).adapter.float().train()
    else:
        draft_ids = draft_vocabulary(batches, cfg.draft_vocab, target.eos_token_ids) if cfg.draft_vocab else None
        adapter = DreamAdapter(DreamConfig.for_target(target, cfg.mlp_size, intermediate_layer=cfg.intermediate,
                                                      draft_vocab=0 if draft_ids is None else len(draft_ids)))
        adapter = adapter.to(target.device).train()
        if draft_ids is not None:
            adapter.draft_ids.copy_(draft_ids)
    lm_head = target.model.get_output_embeddings()
    opt = torch.optim.AdamW(adapter.parameters(), lr=cfg.lr, weight_decay=0.01)
    sched = get_cosine_schedule_with_warmup(opt, 50, cfg.steps)
    weights = {"kl": cfg.kl_weight, "feature": cfg.feature_weight, "intermediate": cfg.intermediate_weight}
    log = []
    for step in range(1, cfg.steps + 1):
        parts = losses(adapter, lm_head, batches[rng.randrange(len(batches))], cfg, rng)
        loss = sum(weights[k] * v for k, v in parts.items() if k in weights)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(adapter.parameters(), 1.0)
        opt.step()
        sched.step()
        if step == 1 or step % 50 == 0 or step == cfg.steps:
            log.append({"step": step, "seconds": round(time.time() - start), **{k: round(v.item(), 4) for k, v in parts.items()}})
            print(log[-1], flush=True)
    drafter = DreamDrafter(adapter.eval(), target)
    total = sum(chosen.values())
    drafter.save_pretrained(out, recorded({"target": cfg.target, "distillation": dataset["metadata"]}))
    (out / "training_log.json").write_text(json.dumps(recorded({
        "config": asdict(cfg), "data": training_data.source_name(examples, cfg.mix),
        "extraction_seconds": round(extraction_seconds),
        "intermediate_layer_share": {int(k): round(v / total, 4) for k, v in sorted(chosen.items())} if total else {},
        "log": log,
    }), indent=1))
    return drafter


def run(args) -> None:
    fields = DreamTrainConfig.__dataclass_fields__
    train(DreamTrainConfig(**{k: v for k, v in vars(args).items() if k in fields and v is not None}))
