"""Give a trained target a new vision tower: a fresh tower of finer patches learns the old tower's visual tokens, and
beside them where text is. The language model is copied unchanged.

    python -m core train tower --init assets/models/target --out runs/tower [--vision-depth 6] [--vision-hidden 64]
    python -m core train target --init runs/tower --mix world,photos ...   # then the whole model, as usual
    python -m core train tower --init runs/target --out runs/tower-more --continue-tower --first-image 100000 ...
        # a target that already has such a tower: that tower, of its own size, trains on (its first tokens the teacher),
        # on images of the range it has not seen (the shipped tower saw the first 72 000)
    python -m core train tower ... --device cuda --seconds 420 --workers 15 --batch 96
        # on a lent GPU, for a time budget: scripts/device_tower.sh runs this there

Why: the target's tower of 32-pixel patches cannot learn where free text and signs are, while a fresh tower of
8-pixel patches merged 8x8, told which of its patches hold ink of text, learns it (docs/experiments.md, "which vision
tower can see a sign?"). A fresh tower's tokens mean nothing to the language model, which took hours to learn the
world from the old tower's; so the new tower is distilled: on world scenes and on images without text, where the
old tower's tokens serve the language model's answers, it learns to give the same tokens (mean squared error scaled
by the old tokens' mean square); on images with text it is free to differ, and everywhere it learns the probes'
facts (core/training/target.py: the world's patch classes and cells, the regions' colours and text, each patch's
ink of text). Images are drawn by `--workers` processes ahead of the training step, every step a new batch: more
distinct images than the experiments' 19200, after which the tower stopped improving. On a CPU the 6 x 64 tower's own
step is what takes the time (1.7 s of one core at batch 24, the drawing under half a core): a GPU takes the step, and
the machine's other cores draw.
"""

from __future__ import annotations

import copy
import json
import math
import multiprocessing
import os
import time
from collections import deque
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch
from PIL import Image
from safetensors.torch import load_file
from transformers import Qwen2_5_VLConfig, Qwen2_5_VLVisionConfig, Qwen2VLImageProcessor

from core.models.embedded import TargetSize, image_processor, target_size, vision_fields
from core.models.loading import recorded
from core.models.vlm import VisionLanguageModel, model_input
from core.training.target import PROBES, TargetTrainConfig, new_probes, save_checkpoint, vision_losses
from core.world import image_sources, mix, photos, scenes

TRAIN_BASE = 6_000_000  # the tower's own range of training indices (the target's runs use 7-9 million)
TRAIN_RANGE = 1_000_000  # its size: the target's indices start where it ends


def fine_tower() -> TargetSize:
    """8-pixel patches merged 8x8 (still 3x3 visual tokens of 192x192), windows of one region, 6 blocks x 64: at
    equal steps it learns the old tokens five times closer and text better than 6 x 32 or 4 x 32, at twice the step
    of 6 x 32 on a CPU (docs/experiments.md, target run 20)."""
    return TargetSize(patch=8, merge=8, window=64, vision_hidden=64, vision_depth=6, vision_heads=4)


@dataclass
class TowerTrainConfig:
    init: str = ""  # the target whose language model stays and whose tower the new one learns from
    out: str = "runs/tower"
    steps: int = 3000
    batch: int = 24
    lr: float = 1e-3
    probe_lr: float = 5e-3
    warmup: int = 100
    weight_decay: float = 0.01
    seed: int = 0
    world_share: float = 0.3  # the text to learn is beyond the world
    distill_weight: float = 30.0  # the probes' losses start ~20x the distillation's: at 10 they held it near 0.7
    text_weight: float = 4.0
    patch_text_weight: float = 1.0
    workers: int = 2
    device: str = ""  # "": cuda where there is one, else cpu
    seconds: float = 0  # a time budget (a GPU lease): training stops there, its schedule run over it; 0: none
    eval_every: int = 250
    heldout: int = 24  # held-out images of every source beyond the world, and world scenes, scored every eval
    continue_tower: bool = False  # start from init's own tower (and probes) instead of a fresh one: more text steps
    first_image: int = 0  # images of the range to skip: a continued tower learns from images it has not seen
    size: TargetSize = field(default_factory=fine_tower)


def with_new_tower(vlm: VisionLanguageModel, size: TargetSize) -> VisionLanguageModel:
    """A copy of `vlm` whose tower is a fresh one of `size` (random weights) and whose image processor cuts its
    patches; the language model's weights are copied."""
    config = copy.deepcopy(vlm.model.config)
    config.vision_config = Qwen2_5_VLVisionConfig(**vision_fields(size))
    model = type(vlm.model)(config)
    missing, unexpected = model.load_state_dict({k: v for k, v in vlm.model.state_dict().items() if ".visual." not in k},
                                                strict=False)
    assert all(".visual." in k for k in missing) and not unexpected, (missing, unexpected)
    model.generation_config = copy.deepcopy(vlm.model.generation_config)
    return VisionLanguageModel(model, vlm.tokenizer, image_processor(size))


def draw_batch(step: int, cfg: TowerTrainConfig) -> list[scenes.Sample]:
    """The step-th training batch: world scenes (`world_share`) and images beyond the world, every task (and so every
    source) in turn; a pure function of the step."""
    start = TRAIN_BASE + cfg.first_image + step * cfg.batch
    n_world = round(cfg.batch * cfg.world_share)
    own = mix.tasks("world,photos", "photos")
    return (scenes.samples("train", n_world, start=start)
            + [mix.sample("train", start + i, own[i % len(own)]) for i in range(cfg.batch - n_world)])


def distill_loss(student: torch.Tensor, teacher: torch.Tensor, batch: list[scenes.Sample]) -> torch.Tensor:
    """The old tower's tokens [N * 9, hidden] on the images whose answers do not depend on text."""
    tokens = student.shape[0] // len(batch)
    keep = torch.tensor([not s.holds_text for s in batch], device=student.device).repeat_interleave(tokens)
    if not keep.any():
        return torch.zeros(())
    return torch.nn.functional.mse_loss(student[keep], teacher[keep]) / teacher[keep].pow(2).mean()


@torch.no_grad()
def evaluate(new: VisionLanguageModel, old: VisionLanguageModel, probes: torch.nn.ModuleDict,
             world: list[scenes.Sample], beyond: dict[str, list[scenes.Sample]]) -> dict:
    """The distillation loss on held-out world scenes, and per source beyond the world the share of images whose
    "holds text" (the region probe's most text-like token, margin > 0) is right."""
    out = {"world_distill": round(float(distill_loss(tokens(new, world), tokens(old, world), world)), 4)}
    for source, samples in beyond.items():
        known = [s for s in samples if s.text_regions is not None]  # a photograph that may show text is not
        if not known:
            continue
        says_text = (probes["beyond"].text_margin(tokens(new, known)) > 0).cpu()
        out[source] = round(float((says_text == torch.tensor([bool(s.holds_text) for s in known])).float().mean()), 3)
    return out


def tokens(vlm: VisionLanguageModel, batch: list[scenes.Sample], pixels=None) -> torch.Tensor:
    if pixels is None:
        pixels = vlm.pixels([s.image for s in batch]).to(vlm.device)
    return torch.cat(vlm.model.get_image_features(pixels["pixel_values"], pixels["image_grid_thw"]).pooler_output)


def square_pixels(vlm: VisionLanguageModel, device: torch.device):
    """The image processor's tensors, on `device`, for images already the square the model sees (draw_squares'): on
    a CPU vlm.pixels; on a GPU the processor's torchvision twin, run there (same settings, the same pixels within
    float rounding on such squares: tests/test_tower.py), since the PIL processor would hold every step to the CPU."""
    if device.type == "cpu":
        return vlm.pixels
    twin = torchvision_twin(vlm.image_processor)
    return lambda images: twin(images=images, return_tensors="pt", device=device)


def torchvision_twin(processor) -> Qwen2VLImageProcessor:
    return Qwen2VLImageProcessor(**{k: v for k, v in processor.to_dict().items()
                                    if k not in ("image_processor_type", "processor_class")})


def train(cfg: TowerTrainConfig) -> VisionLanguageModel:
    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, (os.cpu_count() or 1) - cfg.workers))  # the drawing processes have the other cores
    try:
        return _train(cfg)
    finally:
        torch.set_num_threads(threads)


def _train(cfg: TowerTrainConfig) -> VisionLanguageModel:
    torch.manual_seed(cfg.seed)
    device = torch.device(cfg.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True  # a GPU's fp32 matrix products at TF32: the tower is small
    old = VisionLanguageModel.from_pretrained(cfg.init)
    old.model.requires_grad_(False)
    new = copy.deepcopy(old) if cfg.continue_tower else with_new_tower(old, cfg.size)
    old.model.to(device)
    new.model.to(device)
    visual = new.model.model.visual.train()
    new.model.requires_grad_(False)
    visual.requires_grad_(True)
    probes = new_probes(new, TargetTrainConfig(text_weight=cfg.text_weight, patch_text_weight=cfg.patch_text_weight))
    if cfg.continue_tower and (Path(cfg.init) / PROBES).is_file():
        probes.load_state_dict(load_file(Path(cfg.init) / PROBES))
    probes.to(device)
    opt = torch.optim.AdamW([{"params": visual.parameters(), "lr": cfg.lr},
                             {"params": probes.parameters(), "lr": cfg.probe_lr}], weight_decay=cfg.weight_decay)
    log, start = [], time.time()
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: lr_factor(step, cfg, time.time() - start))
    old_pixels, new_pixels = square_pixels(old, device), square_pixels(new, device)
    world = scenes.samples("heldout", cfg.heldout, start=20_000)
    beyond = {source: [photos.sample("heldout", 60_000 + i, "read", source) for i in range(cfg.heldout)]
              for source in photos.SOURCES}
    with multiprocessing.get_context("fork").Pool(cfg.workers) as pool:
        # A few batches drawn ahead, no more: batches waiting in memory would grow without bound.
        ahead = deque(pool.apply_async(draw_squares, (step, cfg, new.model.config.image_side))
                      for step in range(min(2 * cfg.workers, cfg.steps)))
        for step in range(1, cfg.steps + 1):
            batch = ahead.popleft().get()
            if step + len(ahead) < cfg.steps:
                ahead.append(pool.apply_async(draw_squares, (step + len(ahead), cfg, new.model.config.image_side)))
            images = [s.image for s in batch]
            with torch.no_grad():
                teacher = tokens(old, batch, old_pixels(images))
            pixels = new_pixels(images)
            out = new.model.get_image_features(pixels["pixel_values"], pixels["image_grid_thw"], return_dict=True)
            distill = distill_loss(torch.cat(out.pooler_output), teacher, batch)
            probe = vision_losses(new, probes, out, pixels["image_grid_thw"], batch)
            loss = cfg.distill_weight * distill + probe
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(list(visual.parameters()) + list(probes.parameters()), 1.0)
            opt.step()
            sched.step()
            if step % 25 == 0:
                print(f"tower step {step} distill {distill.item():.4f} probes {probe.item():.3f} "
                      f"{time.time() - start:.0f}s", flush=True)
            last = step == cfg.steps or bool(cfg.seconds and time.time() - start >= cfg.seconds)
            if step % cfg.eval_every == 0 or last:
                visual.eval()
                log.append({"step": step, "seconds": round(time.time() - start), "distill": round(distill.item(), 4),
                            "probes": round(probe.item(), 3), "heldout": evaluate(new, old, probes, world, beyond)})
                visual.train()
                print("eval", json.dumps(log[-1]), flush=True)
                save_checkpoint(new, probes, Path(cfg.out))
            if last:
                break
    new.model.eval()
    save_checkpoint(new, probes, Path(cfg.out))
    (Path(cfg.out) / "training_log.json").write_text(json.dumps(recorded(
        {"config": asdict(cfg), "device": str(device), "photo_packages": image_sources.summary(), "log": log}),
        indent=1))
    return new


def lr_factor(step: int, cfg: TowerTrainConfig, elapsed: float) -> float:
    """Linear warmup, then a cosine to 0 over the steps or, with a time budget, over whichever runs out first."""
    if step < cfg.warmup:
        return step / max(1, cfg.warmup)
    done = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    if cfg.seconds:
        done = max(done, elapsed / cfg.seconds)
    return 0.5 * (1 + math.cos(math.pi * min(1.0, done)))


def draw_squares(step: int, cfg: TowerTrainConfig, side: int) -> list[scenes.Sample]:
    """The step-th batch with every image (and text mask) already the side x side square both towers see: cheaper
    to send between processes, and the same pixels."""
    return [replace(s, image=model_input(s.image, side),
                    text_mask=None if s.text_mask is None else s.text_mask.resize((side, side), Image.Resampling.BOX))
            for s in draw_batch(step, cfg)]


def config(args) -> TowerTrainConfig:
    """The command line's TowerTrainConfig: its fields by name, the new tower's blocks and width (heads of 16
    channels) from --vision-depth and --vision-hidden."""
    cfg = TowerTrainConfig(**{k: v for k, v in vars(args).items() if k in TowerTrainConfig.__dataclass_fields__
                              and k != "size" and v is not None})
    if args.vision_depth:
        cfg.size = replace(cfg.size, vision_depth=args.vision_depth)
    if args.vision_hidden:
        cfg.size = replace(cfg.size, vision_hidden=args.vision_hidden, vision_heads=max(1, args.vision_hidden // 16))
    if not cfg.init:
        raise ValueError("--init is required: the target whose language model keeps its tokens")
    if cfg.continue_tower and (Path(cfg.init) / "config.json").is_file():
        own = target_size(Qwen2_5_VLConfig.from_pretrained(cfg.init))
        if any(asked and asked != held for asked, held in ((args.vision_depth, own.vision_depth),
                                                           (args.vision_hidden, own.vision_hidden))):
            raise ValueError(f"--continue-tower trains --init's own tower ({own.vision_depth} blocks x "
                             f"{own.vision_hidden}): leave out --vision-depth and --vision-hidden")
        cfg.size = own  # what the training log records
    if cfg.first_image + (cfg.steps + 1) * cfg.batch > TRAIN_RANGE:
        raise ValueError(f"--first-image {cfg.first_image} and {cfg.steps} steps of {cfg.batch} run past the tower's "
                         f"{TRAIN_RANGE} training images")
    if Path(cfg.out).resolve() == Path(cfg.init).resolve():
        raise ValueError("--out must not be --init: the old tower is what the new one learns from")
    return cfg


def run(args) -> None:
    train(config(args))
