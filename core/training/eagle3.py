"""Train an EAGLE-3 drafter (core/drafters/eagle3/) on the target's own responses, with the training-time test.

    python -m core train eagle3 [--steps N] [--rollout R] [--draft-vocab K] [--mlp-size M] [--layers 2,6,9]
    python -m core train eagle3 --target REPO --data-dir DIR --out OUT       # a hub target, your images
    python -m core train eagle3 --init assets/models/eagle3 --steps 600 --out runs/eagle3   # after the target's next run

1. Data: the same self-distillation set as DREAM (core/training/self_distill.py), on the world or your examples.
2. Feature extraction, once, batched on the target's device: per position the states of the drafter's low / middle
   / high layers and the last layer's (whose LM-head distribution is the teacher), and the target's rotary
   positions. Kept on the CPU; each step moves one batch to the device. Slots pair token s + 1 with the state of
   position s at s's rotary position, as vLLM feeds the drafter (core/drafters/eagle3/drafter.py).
3. Draft vocabulary: the K tokens the responses use most (d2t / t2d); the LM head starts from the target's rows,
   the token embeddings are the target's (frozen).
4. Training-time test (EAGLE-3): pass 0 drafts every slot from the target's fused states; pass d feeds back the
   drafter's own outputs of pass d-1 and, through its attention mask, sees exactly what the (d+1)-th draft of a chain
   sees at inference (core/training/dream.py, rollout_masks). Loss: cross-entropy against the target's
   distribution over the draft vocabulary (EAGLE-3's), averaged over passes, on slots that predict the response.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
from torch.nn import functional as F
from transformers import get_cosine_schedule_with_warmup

from core.drafters.eagle3.drafter import Eagle3Drafter
from core.drafters.eagle3.formats import load_model, save_speculators
from core.drafters.eagle3.model import Eagle3Config, Eagle3Model
from core.models.embedded import shipped_output
from core.models.loading import recorded
from core.models.vlm import VisionLanguageModel
from core.training import training_data
from core.training.batches import answer_batch
from core.training.dream import StackedKV, chain_positions, draft_vocabulary, rollout_masks
from core.training.self_distill import DistilledDrafterConfig, training_samples


@dataclass
class Eagle3TrainConfig(DistilledDrafterConfig):
    steps: int = 2400
    batch: int = 32
    lr: float = 1e-3
    seed: int = 0
    mlp_size: int = 0  # 0: the target's intermediate size
    draft_vocab: int = 256  # 0: the whole vocabulary
    rollout: int = 5  # training-time test depth (5 drafts deep: τ 3.55 against 3.02 with 3 at γ 8)
    feature_noise: float = 0.1  # uniform noise on the target's fused states, relative to their RMS (EAGLE)
    layers: str = ""  # the target layers fc fuses, "2,6,9" (hidden_states indices); default vLLM's (2, L/2, L-3)

    def __post_init__(self):
        self.out = shipped_output(self.out, "eagle3", self.target, bool(self.data_dir or self.hf_dataset))
        if not 1 <= self.rollout <= 8:
            raise ValueError(f"rollout must be between 1 and 8, got {self.rollout}")


@dataclass
class Batch:
    """Slot space: slot s stands for token s + 1, which reads the target's state of position s."""

    input_ids: torch.Tensor  # [B, T] (draft_vocabulary reads these two)
    predict: torch.Tensor  # [B, T] True where the next token is part of the response
    attention_mask: torch.Tensor  # [B, T - 1] slots
    aux: torch.Tensor  # [B, T - 1, 3 H] the target's layer states of positions 0..T-2
    teacher: torch.Tensor  # [B, T - 1, H] the target's last-layer states of positions 1..T-1 (predict token s + 2)
    positions: torch.Tensor  # [B, T - 1] or [3, B, T - 1] the target's rotary positions of 0..T-2

    @property
    def slot_ids(self) -> torch.Tensor:
        return self.input_ids[:, 1:]

    def to(self, device, dtype: torch.dtype | None = None) -> Batch:
        """On `device`, states in `dtype` (kept as the target made them: bf16 for a hub target, half the memory)."""
        moved = (getattr(self, f.name) for f in fields(self))
        return Batch(*(t.to(device, dtype or t.dtype) if t.is_floating_point() else t.to(device) for t in moved))


@torch.no_grad()
def extract(target: VisionLanguageModel, samples, layer_ids: tuple[int, ...], mrope: bool, chunk: int = 32) -> list[Batch]:
    model, device = target.model, target.device
    batches = []
    for start in range(0, len(samples), chunk):
        inputs = {k: v.to(device) for k, v in answer_batch(target.tokenizer, samples[start:start + chunk], target).items()}
        labels = inputs.pop("labels")
        states = model(**inputs, output_hidden_states=True).hidden_states
        mask = inputs["attention_mask"]
        predict = torch.zeros_like(mask, dtype=torch.bool)
        predict[:, :-1] = labels[:, 1:] != -100
        # The target's multimodal positions [3, B, T]; a 1-D drafter reads their first row, as at inference.
        positions, _ = model.model.get_rope_index(inputs["input_ids"], mm_token_type_ids=inputs["mm_token_type_ids"],
                                                  image_grid_thw=inputs["image_grid_thw"], attention_mask=mask)
        positions = (positions if mrope else positions[0])[..., :-1]
        aux = torch.cat([states[i] for i in layer_ids], -1)
        batches.append(Batch(inputs["input_ids"], predict, mask[:, 1:], aux[:, :-1], states[-1][:, 1:],
                             positions).to("cpu"))
    return batches


def losses(model: Eagle3Model, lm_head, batch: Batch, cfg: Eagle3TrainConfig) -> dict:
    draft_ids = model.draft_token_ids
    aux = batch.aux
    if cfg.feature_noise:
        rms = aux.pow(2).mean(-1, keepdim=True).sqrt()
        aux = aux + (torch.rand_like(aux) * 2 - 1) * cfg.feature_noise * rms
    state = model.fuse(aux)
    head = lm_head.weight  # the target's, wherever its device map put it
    teacher = lm_head(batch.teacher.to(head.device, head.dtype)).float().to(aux.device)
    in_vocab = model.t2d[teacher.argmax(-1)]  # EAGLE-3 skips slots whose target token the draft vocabulary lacks
    target_p = F.softmax(teacher[..., draft_ids], -1)
    predict = batch.predict[:, 1:]  # slot s predicts token s + 2
    cache = StackedKV()
    out = {"loss": torch.zeros((), device=aux.device)}
    for depth in range(cfg.rollout):
        self_mask, _ = rollout_masks(batch.attention_mask, batch.attention_mask, depth)
        drafted = model(batch.slot_ids, state, batch.positions, self_mask, cache)
        # Slot s at pass d is the (d+1)-th draft of a chain from committed slot s - d, inside the response.
        where = chain_positions(predict, depth) & in_vocab
        if where.any():
            logp = F.log_softmax(model.logits(drafted[where]).float(), -1)
            out["loss"] = out["loss"] + -(target_p[where] * logp).sum(-1).mean() / cfg.rollout
            out["accuracy" if depth == 0 else f"accuracy_{depth + 1}"] = \
                (logp.argmax(-1) == target_p[where].argmax(-1)).float().mean()
        state = torch.cat([torch.zeros_like(drafted[:, :1]), drafted[:, :-1]], dim=1)
    return out


def train(cfg: Eagle3TrainConfig) -> Eagle3Drafter:
    torch.manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)
    target, dataset, examples = cfg.target_and_answers()
    start = time.time()
    layers = {"layer_ids": tuple(int(i) for i in cfg.layers.split(","))} if cfg.layers else {}
    model_cfg = Eagle3Config.for_target(target, mlp_size=cfg.mlp_size, **layers)
    # vLLM captures a layer's input, so the last decoder layer's input is the highest state it can serve.
    if cfg.layers and not all(0 <= i < target.text_config.num_hidden_layers for i in model_cfg.layer_ids):
        raise ValueError(f"--layers must lie in 0..{target.text_config.num_hidden_layers - 1}, got {cfg.layers!r}")
    batches = extract(target, training_samples(dataset), model_cfg.layer_ids, model_cfg.mrope_section is not None)
    extraction_seconds = time.time() - start
    print(f"features of {len(dataset['rows'])} responses in {extraction_seconds:.0f}s", flush=True)
    device = target.device
    lm_head = target.model.get_output_embeddings()
    if cfg.init:  # its layers and draft vocabulary; the embeddings are the (retrained) target's
        model = load_model(cfg.init, target).float().to(device)
        if model.cfg.layer_ids != model_cfg.layer_ids:
            raise ValueError(f"--init {cfg.init} fuses layers {model.cfg.layer_ids}, not {model_cfg.layer_ids}")
        with torch.no_grad():
            model.embed_tokens.weight.copy_(target.model.get_input_embeddings().weight)
    else:
        draft_ids = draft_vocabulary(batches, cfg.draft_vocab, target.eos_token_ids) if cfg.draft_vocab else \
            torch.arange(model_cfg.vocab_size)
        model_cfg.draft_vocab_size = len(draft_ids)
        model = Eagle3Model(model_cfg).to(device)
        model.set_draft_vocab(draft_ids.to(device))
        with torch.no_grad():  # the target's embeddings, and its head rows to start from
            model.embed_tokens.weight.copy_(target.model.get_input_embeddings().weight)
            model.lm_head.weight.copy_(lm_head.weight[draft_ids.to(lm_head.weight.device)])
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01)
    sched = get_cosine_schedule_with_warmup(opt, 50, cfg.steps)
    log = []
    for step in range(1, cfg.steps + 1):
        batch = batches[rng.randrange(len(batches))].to(device, torch.float32)
        with torch.autocast(device.type, torch.bfloat16, enabled=device.type == "cuda"):
            parts = losses(model, lm_head, batch, cfg)
        opt.zero_grad(set_to_none=True)
        if parts["loss"].requires_grad:  # else no slot of this batch has a target token the drafter can propose
            parts["loss"].backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        sched.step()
        if step == 1 or step % 50 == 0 or step == cfg.steps:
            log.append({"step": step, "seconds": round(time.time() - start),
                        **{k: round(float(v.detach()), 4) for k, v in parts.items()}})
            print(log[-1], flush=True)
    model.eval()
    out = Path(cfg.out)
    save_speculators(model, out, verifier=cfg.target, architectures=target.model.config.architectures,
                     dtype=torch.bfloat16, metadata=recorded({"distillation": dataset["metadata"]}))
    (out / "training_log.json").write_text(json.dumps(recorded({
        "config": asdict(cfg), "data": training_data.source_name(examples, cfg.mix),
        "extraction_seconds": round(extraction_seconds), "log": log}), indent=1))
    return Eagle3Drafter(model, target)


def run(args) -> None:
    fields = Eagle3TrainConfig.__dataclass_fields__
    train(Eagle3TrainConfig(**{k: v for k, v in vars(args).items() if k in fields and v is not None}))
