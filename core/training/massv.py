"""Train the MASSV drafter in its two phases.

    python -m core train massv --phase 1     # projector alignment: LM and vision frozen, ground-truth answers
    python -m core train massv --phase 2     # self-data distillation: the target answers the training prompts,
                                             # then projector + LM are fine-tuned on those answers
    python -m core train massv --phase 2 --data-dir DIR --target TARGET --out OUT   # on your own images

Phase 1 starts from the text-only drafter's LM (MASSV adapts an existing small LM); phase 2 starts from phase 1.
Phase 2 first gets its dataset (target responses, with the generation settings in its metadata: `--data`, the
shipped drafter's set by default, is reused when the same target made it with the same settings, else generated)
and writes it next to the output, so a run can be inspected and repeated. Both phases draw from the procedural world
unless `--data-dir` or `--hf-dataset` names the user's examples (core/training/training_data.py); phase 1 then needs
their ground-truth answers.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, get_cosine_schedule_with_warmup

from core.drafters.massv import MassvDrafter, multimodal_embeds
from core.models.embedded import EMBEDDED_PATHS, shipped_output
from core.models.loading import recorded
from core.models.registry import load_target
from core.models.vlm import VisionLanguageModel, visual_features
from core.training import training_data
from core.training.batches import answer_batch, per_sample_loss
from core.training.self_distill import MAX_NEW_TOKENS, MIX, PROMPTS, DistillConfig, load_or_make, training_samples
from core.world import mix, scenes

# Phase 2 on twice the other drafters' answers (their set is its first half): 6144 -> 12288 answers, 2400 -> 3600
# steps raised τ on 32 held-out photograph views from 6.07 to 6.41 (one bench run; docs/experiments.md).
PHASE2_PROMPTS = 2 * PROMPTS


@dataclass
class MassvTrainConfig:
    phase: int = 1
    steps: int = 0  # 0: the phase's default
    batch: int = 32
    lr: float = 0.0  # 0: the phase's default
    seed: int = 0
    target: str = str(EMBEDDED_PATHS["target"])
    text_drafter: str = str(EMBEDDED_PATHS["text"])  # phase 1 starts from this LM
    phase1: str = str(EMBEDDED_PATHS["massv-phase1"])  # phase 2 starts from this checkpoint
    out: str = ""  # default: the shipped drafter, allowed only when retraining it (embedded target, procedural data)
    data_dir: str = ""  # the user's examples (core/training/training_data.py); neither: the procedural world
    hf_dataset: str = ""
    # phase 2 data: reused when it matches, else generated
    data: str = str(EMBEDDED_PATHS["massv"] / "distillation_set.json")
    prompts: int = PHASE2_PROMPTS
    samples_per_prompt: int = 1
    temperature: float = 0.0
    max_new_tokens: int = MAX_NEW_TOKENS
    mix: str = MIX  # without the user's examples, both phases' images (core/world/mix.py)

    def __post_init__(self):
        if self.phase not in (1, 2):
            raise ValueError(f"phase must be 1 or 2, got {self.phase}")
        self.steps = self.steps or (600 if self.phase == 1 else 3600)
        self.lr = self.lr or (2e-3 if self.phase == 1 else 1e-3)
        self.out = shipped_output(self.out, "massv-phase1" if self.phase == 1 else "massv", self.target,
                                  bool(self.data_dir or self.hf_dataset))


def _train_loop(drafter: MassvDrafter, target: VisionLanguageModel, data: Sequence[scenes.Sample], params, cfg) -> list:
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.01)
    sched = get_cosine_schedule_with_warmup(opt, 50, cfg.steps)
    lm, projector = drafter.model, drafter.projector
    log, start = [], time.time()
    for step in range(1, cfg.steps + 1):
        first = (step - 1) * cfg.batch % len(data)
        batch = [data[(first + i) % len(data)] for i in range(cfg.batch)]
        inputs = {k: v.to(target.device) for k, v in answer_batch(target.tokenizer, batch, target).items()}
        with torch.no_grad():
            features = visual_features(target.model.get_image_features(
                inputs["pixel_values"].to(target.model.dtype), inputs["image_grid_thw"], return_dict=True)).float()
        embeds = multimodal_embeds(lm, projector, inputs["input_ids"], inputs["mm_token_type_ids"].bool(), features)
        logits = lm(inputs_embeds=embeds, attention_mask=inputs["attention_mask"]).logits
        loss = per_sample_loss(logits, inputs["labels"]).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        if step % 50 == 0:
            log.append({"step": step, "loss": round(loss.item(), 4), "seconds": round(time.time() - start)})
            print(log[-1], flush=True)
    return log


def train(cfg: MassvTrainConfig) -> MassvDrafter:
    torch.manual_seed(cfg.seed)
    examples = training_data.load(cfg.data_dir, cfg.hf_dataset)
    if examples is not None and cfg.phase == 1:
        examples.require_answers("massv phase 1 aligns the projector on ground-truth answers")
    target = load_target(cfg.target)  # a preset loads with its dtype, device map and quantization
    vision_width = target.model.config.vision_config.out_hidden_size
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    if cfg.phase == 1:
        lm = AutoModelForCausalLM.from_pretrained(cfg.text_drafter, dtype=torch.float32)
        drafter = MassvDrafter.from_text_drafter(lm, vision_width)
        lm.requires_grad_(False)
        params = list(drafter.projector.parameters())
        # the mix: different indices from the text drafter's and phase 2's data
        data = examples if examples is not None else mix.Samples("train", cfg.steps * cfg.batch, 2_000_000, cfg.mix)
        extra = {}
    else:
        drafter = MassvDrafter.from_pretrained(cfg.phase1)
        dataset = load_or_make(cfg.data, target, DistillConfig(cfg.target, cfg.prompts, cfg.samples_per_prompt,
                                                               cfg.temperature, cfg.max_new_tokens, cfg.mix), examples)
        (out / "distillation_set.json").write_text(json.dumps(dataset))
        data = training_samples(dataset)
        params = list(drafter.model.parameters()) + list(drafter.projector.parameters())
        extra = {"distillation": dataset["metadata"]}
        print("distillation set:", dataset["metadata"], flush=True)
    drafter.model.to(target.device).train()  # trained where the target's vision features are
    drafter.projector.to(target.device).train()
    log = _train_loop(drafter, target, data, params, cfg)
    drafter.model.eval()
    drafter.projector.eval()
    source = training_data.source_name(examples, cfg.mix)
    drafter.save_pretrained(out, recorded({"phase": cfg.phase, "target": cfg.target, "data": source}))
    target.tokenizer.save_pretrained(out)
    (out / "training_log.json").write_text(json.dumps(recorded({"config": asdict(cfg), "data": source, "log": log, **extra}),
                                                      indent=1))
    return drafter


def run(args) -> None:
    fields = MassvTrainConfig.__dataclass_fields__
    train(MassvTrainConfig(**{k: v for k, v in vars(args).items() if k in fields and v is not None}))
