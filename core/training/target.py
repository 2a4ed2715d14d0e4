"""Train the embedded target VLM (Qwen2.5-VL architecture, from scratch) on the procedural world.

    python -m core train target [--steps N] [--batch B] [--lr LR] [--vision-steps N] [--init DIR [--probe-steps N]]
        [--other-forms P [--form-weights upper:3,...]] [--paired P] [--freeze-vision | --freeze-language]
        [--boost TASK:FACTOR,...] [--out DIR]
        [--mix world,photos [--world-share 0.5]]   # also images beyond the world (core/world/mix.py): any image's
                                                   # colour layout, text, honest answers

Learning a VLM from scratch on two CPU cores is slow, so the recipe is built for speed:
- dense vision supervision (`VisionProbe`, linear heads discarded after training): each visual token must say
  what its four patches hold, which cell it is, and for charts its column's label and value. Without it the LM
  learns the answers' form in a hundred steps, then plateaus for hundreds more before it looks at the image;
  without the cell, it has to tell the 3x3 grid apart by rotary positions alone, which it barely can;
- beyond the world (`RegionProbe`): the target sees every image as a 192x192 square (`image_side`), so its 3x3 visual
  tokens are the 3x3 regions a colour layout names, and each token must say which region it is and that region's
  colour term, shade and lightness: the answer's facts, readable linearly;
- `--vision-steps`: the vision tower and probes first train alone, ten times cheaper per step than the full model;
- task sampling weighted by each family's running chance of a wrong answer, 1 - exp(-answer NLL): exact match
  needs every token, so a 40-token caption at a low per-token loss is still a hard family; with photos, world
  scenes keep `--world-share` of every batch, or the far more often wrong new families starve them (forgetting);
- loss on answer tokens only, a warmup + cosine LR with a high peak, images aligned with the visual tokens;
- `--boost photos/read:3`: a task drawn three times as often (a sparse answer, as whether an image holds text,
  learns too slowly at its share of the batch); `--by-source` weighs each photos task per image source
  ("photos/read@sign", boosted by "photos/read", "@sign" or itself), so the one source whose reading answers are
  still wrong gets the batches instead of a tenth of the task's; a name that weighs no task is refused;
- `--paired P`: that share of reading and describing samples followed by their image asked the other question (the
  two typed in one form), since their wordings differ in a word or two ("What's in the image?" / "What text is in the
  image?");
- `--other-forms P`: that share of prompts typed another way (lower / upper case, no closing mark), since users do;
  `--form-weights upper:3` draws one form that many times as often as the others (upper case is a new token sequence
  for every wording, the one the describe question confuses longest with a reading one);
  `--freeze-vision` trains the language model alone, so drafters that read the tower (MASSV) keep their inputs;
  `--freeze-language` trains the tower alone (and the probes beside it) through the language model's own answers:
  its tokens move toward what this language model already answers right, where a tower leg (tower.py) moves them
  toward its probes' facts and leaves the language model to learn them again;
- `--init` continues a checkpoint (the shipped target is several such runs: docs/models.md), and its
  probe heads when they were saved beside it (`probes.safetensors`, not part of the model): fresh heads cost a
  continued run ~100 steps of large vision losses that disturb what the tower had learned.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from safetensors.torch import load_file, save_file
from transformers import get_cosine_schedule_with_warmup
from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import get_vision_window_index

from core.models.embedded import EMBEDDED_PATHS, TargetSize, new_target, resized_target, save_vlm, target_size
from core.models.loading import recorded
from core.models.vlm import VisionLanguageModel
from core.training.batches import answer_batch, per_sample_loss
from core.world import describe, image_sources, mix, photos, scenes

PROBES = "probes.safetensors"  # beside a training checkpoint; not copied with the shipped model


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
    mix: str = "world"  # "world", or "world,photos": also images beyond the world (core/world/mix.py)
    world_share: float = 0.5  # with photos, the share of each batch that is world scenes
    probe_steps: int = 0  # first the probe heads alone on the frozen model (for a checkpoint without them)
    other_forms: float = 0.0  # share of prompts asked in another form (mix.FORMS: case, closing mark)
    form_weights: str = ""  # "upper:3": that form drawn three times as often as each other one
    freeze_vision: bool = False  # train the language model only: the drafters reading the tower stay valid
    freeze_language: bool = False  # train the tower only, through the frozen language model's answers
    boost: str = ""  # "photos/read:3,...": a task drawn that many times as often as its chance of a wrong answer says
    by_source: bool = False  # photos tasks weighed per image source ("photos/read@sign"), not over all sources at once
    paired: float = 0.0  # share of reading / describing samples followed by their image asked the other (mix.partner)
    text_weight: float = 4.0  # RegionProbe's text loss against its colour losses
    patch_text_weight: float = 1.0  # PatchTextProbe's: each patch says whether it holds ink of text


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
        targets = {name: target.to(features.device) for name, target in self.targets(batch).items()}
        out = {}
        for name, head in self.heads.items():
            if (targets[name] == -100).all():  # no sample of this batch has the fact (e.g. no chart): no loss, not NaN
                continue
            logits = head(features).view(targets[name].numel(), -1)
            out[name] = torch.nn.functional.cross_entropy(logits, targets[name], ignore_index=-100)
        return out


class RegionProbe(torch.nn.Module):
    """Linear heads (discarded after training) for images beyond the world, which have no patch labels: the target
    sees every image as a square (`image_side`), so its 3x3 visual tokens are the layout's 3x3 regions, and each
    token must say which region it is and that region's answer as core/world/describe.py computes it: the colour term,
    light / plain / dark, and the mean lightness (which the brightest-region answer compares). The answers' facts,
    readable linearly, so the LM finds "the top-left token" by content (as VisionProbe's cell head does in the world)
    and copies its colour instead of deriving it. Which regions hold text weighs `text_weight` times the others, and
    the most text-like token must also say whether the image holds any: at 1x the tower learned the colours and not
    a slide's line of text (docs/experiments.md, "can the tower of target run 15 learn where text is?")."""

    SHADES = ("", "light ", "dark ")

    def __init__(self, hidden: int, text_weight: float = 4.0):
        super().__init__()
        self.text_weight = text_weight
        self.heads = torch.nn.ModuleDict({"cell": torch.nn.Linear(hidden, len(scenes.POSITIONS)),
                                          "term": torch.nn.Linear(hidden, len(describe.TERMS)),
                                          "shade": torch.nn.Linear(hidden, len(self.SHADES)),
                                          "lightness": torch.nn.Linear(hidden, 1),
                                          "text": torch.nn.Linear(hidden, 2)})

    def targets(self, samples: list[scenes.Sample]) -> dict[str, torch.Tensor]:
        """One row per visual token (9 per image, reading order); "text" is -100 where not known."""
        layouts = [describe.layout(s.image) for s in samples]
        texts = [int(t) for s in samples for t in (s.text_regions or (-100,) * len(scenes.POSITIONS))]
        colours = [colour.split() for lay in layouts for colour in lay.regions]  # "light blue" -> ["light", "blue"]
        return {"cell": torch.arange(len(scenes.POSITIONS)).repeat(len(samples)),
                "term": torch.tensor([describe.TERMS.index(c[-1]) for c in colours]),
                "shade": torch.tensor([self.SHADES.index(c[0] + " ") if len(c) == 2 else 0 for c in colours]),
                "lightness": torch.tensor([v for lay in layouts for v in lay.lightness], dtype=torch.float32),
                "text": torch.tensor(texts)}

    def losses(self, features: torch.Tensor, samples: list[scenes.Sample]) -> dict[str, torch.Tensor]:
        targets = {name: target.to(features.device) for name, target in self.targets(samples).items()}
        if features.shape[0] != targets["term"].shape[0]:
            raise ValueError(f"{features.shape[0]} visual tokens for {len(samples)} images: the probe needs 3x3 "
                             "tokens per image (a config whose image_side is 3 merged patches)")
        seen = torch.nn.functional.rms_norm(features, features.shape[-1:])  # the tower's outputs are large
        out = {"cell": torch.nn.functional.cross_entropy(self.heads["cell"](seen), targets["cell"]),
               "term": torch.nn.functional.cross_entropy(self.heads["term"](seen), targets["term"]),
               "shade": torch.nn.functional.cross_entropy(self.heads["shade"](seen), targets["shade"]),
               "lightness": 10 * torch.nn.functional.mse_loss(self.heads["lightness"](seen).squeeze(-1),
                                                              targets["lightness"])}
        per_image = targets["text"].view(-1, len(scenes.POSITIONS))
        if (per_image[:, 0] != -100).any():  # which regions hold text: what a reading answer must first know
            out["text"] = self.text_weight * text_presence_loss(self.heads["text"](seen), per_image)
        return out

    @torch.no_grad()
    def term_accuracy(self, features: torch.Tensor, samples: list[scenes.Sample]) -> float:
        seen = torch.nn.functional.rms_norm(features, features.shape[-1:])
        return float((self.heads["term"](seen).argmax(-1).cpu() == self.targets(samples)["term"]).float().mean())

    @torch.no_grad()
    def text_margin(self, features: torch.Tensor) -> torch.Tensor:
        """Each image's "holds text" margin [N] from its 9 visual tokens' features [N * 9, hidden]."""
        return image_text_margin(self.heads["text"](torch.nn.functional.rms_norm(features, features.shape[-1:])))


class PatchTextProbe(torch.nn.Module):
    """A linear head (discarded after training) on the tower's patches before the merger: whether each holds ink of
    text (INK of its pixels), where an image's text mask is drawn (`Sample.text_mask`) or it is known to hold no text
    (all 0). Dense supervision, as VisionProbe's patch classes are in the world: with region labels alone a fresh tower
    of 8-pixel patches found 0.06-0.08 of signs, with these its AUC was 0.81 (docs/experiments.md, "which vision
    tower can see a sign?")."""

    INK = 0.02

    def __init__(self, hidden: int, weight: float = 1.0):
        super().__init__()
        self.weight = weight
        self.head = torch.nn.Linear(hidden, 2)

    def targets(self, samples: list[scenes.Sample], side: int, grid: int, merge: int) -> torch.Tensor:
        """One label per patch of the grid x grid square, in the image processor's order (merged tokens row-major,
        then the patches inside each); -100 for an image whose text is not known."""
        rows = []
        for s in samples:
            if s.text_mask is None:
                known_empty = s.text_regions is not None and not any(s.text_regions)
                rows.append(torch.full((grid * grid,), 0 if known_empty else -100))
                continue
            ink = torch.from_numpy(np.asarray(s.text_mask.convert("L").resize((side, side), Image.Resampling.BOX),
                                              dtype=np.float32) / 255)
            cell = side // grid
            inked = ink.view(grid, cell, grid, cell).mean((1, 3)) > self.INK
            rows.append(inked.view(grid // merge, merge, grid // merge, merge).permute(0, 2, 1, 3).reshape(-1).long())
        return torch.cat(rows)

    def loss(self, patches: torch.Tensor, samples: list[scenes.Sample], side: int, merge: int) -> torch.Tensor:
        grid = round((patches.shape[0] / len(samples)) ** 0.5)
        labels = self.targets(samples, side, grid, merge).to(patches.device)
        if (labels == -100).all():
            return torch.zeros(())
        seen = torch.nn.functional.rms_norm(patches, patches.shape[-1:])
        return self.weight * torch.nn.functional.cross_entropy(self.head(seen), labels, ignore_index=-100)


def patch_states(visual: torch.nn.Module, out, grid_thw: torch.Tensor) -> torch.Tensor:
    """The tower's patch states before the merger [patches, vision hidden], in the image processor's order: the tower
    computes them in its windows' order."""
    unit = visual.spatial_merge_size ** 2
    window_index, _ = get_vision_window_index(grid_thw, visual.spatial_merge_size, visual.window_size,
                                              visual.patch_size)
    hidden = out.last_hidden_state
    return hidden.view(-1, unit, hidden.shape[-1])[torch.argsort(window_index).to(hidden.device)].view(hidden.shape)


def text_presence_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Which regions hold text: per-token cross-entropy of the text head's `logits` [N * 9, 2] against `labels`
    [N, 9] (-100 rows where not known), plus an image-level loss on each known image's most text-like token."""
    regions = torch.nn.functional.cross_entropy(logits, labels.view(-1), ignore_index=-100)
    known = labels[:, 0] != -100
    holds = (labels[known] == 1).any(1).float()
    return regions + torch.nn.functional.binary_cross_entropy_with_logits(image_text_margin(logits)[known], holds)


def image_text_margin(logits: torch.Tensor) -> torch.Tensor:
    """Each image's "holds text" margin [N]: the text head's largest region margin (text minus none) of its 9 rows
    of `logits` [N * 9, 2]."""
    return (logits[:, 1] - logits[:, 0]).view(-1, len(scenes.POSITIONS)).max(1).values


class TaskSampler:
    """Draws tasks in proportion to their running chance of a wrong answer, so the families still being learned get
    the batches. `update` takes each sample's whole-answer NLL (per-token mean x answer length)."""

    def __init__(self, tasks=scenes.TASKS, floor: float = 0.1, seed: int = 0, boost: dict[str, float] | None = None):
        self.wrong = {t: 1.0 for t in tasks}
        self.floor = floor
        self.boost = boost or {}
        self.rng = random.Random(seed)

    def factor(self, task: str) -> float:
        """A task's boost: the product of its own ("photos/read@sign"), its task's ("photos/read") and its source's
        ("@sign") factors."""
        return float(np.prod([self.boost.get(k, 1.0) for k in boost_names(task)]))

    def draw(self, n: int) -> list[str]:
        weights = [max(v, self.floor) * self.factor(t) for t, v in self.wrong.items()]
        return self.rng.choices(list(self.wrong), weights=weights, k=n)

    def update(self, tasks: list[str], losses: torch.Tensor) -> None:
        for task in set(tasks):
            nll = losses[[i for i, t in enumerate(tasks) if t == task]]
            wrong = float((1 - torch.exp(-nll)).mean())
            self.wrong[task] = 0.9 * self.wrong[task] + 0.1 * wrong


def boost_names(task: str) -> set[str]:
    """The --boost names that weigh `task`: itself, its task across sources and its source."""
    name, at, source = task.partition(mix.AT)
    return {task, name} | ({at + source} if at else set())


def check_boost(boost: dict[str, float], mixture: str, by_source: bool) -> None:
    """A misspelt --boost name would weigh nothing and say nothing: every name must weigh some task of the mix."""
    tasks = [t for s in mix.sources(mixture) for t in mix.tasks(mixture, s, by_source)]
    if unknown := set(boost) - set().union(*map(boost_names, tasks)):
        names = sorted({t.partition(mix.AT)[0] for t in tasks})
        per_source = "TASK@SOURCE or @SOURCE" if by_source else "TASK@SOURCE needs --by-source"
        raise ValueError(f"--boost: {sorted(unknown)} weigh no task of the mix {mixture!r}; the tasks are {names} "
                         f"({per_source})")


def factors(spec: str) -> dict[str, float]:
    """The syntax of --boost and --form-weights, "photos/read:3,chart:2", as {name: factor}."""
    return {name: float(factor) for name, factor in (item.rsplit(":", 1) for item in spec.split(",") if item)}


def train(cfg: TargetTrainConfig, size: TargetSize = TargetSize()) -> VisionLanguageModel:
    from core.bench.evaluate import exact_match, on_photos

    if cfg.freeze_vision and cfg.freeze_language:
        raise ValueError("--freeze-vision and --freeze-language together leave nothing to train")
    boost = factors(cfg.boost)
    check_boost(boost, cfg.mix, cfg.by_source)
    torch.manual_seed(cfg.seed)
    # A checkpoint of another image side (runs 1-15: 96x96, 16-pixel patches) continues as one of `size`'s; one of
    # the same side keeps its own tower (a new one from core/training/tower.py).
    vlm = VisionLanguageModel.from_pretrained(cfg.init) if cfg.init else new_target(size)
    if cfg.init and getattr(vlm.model.config, "image_side", None) != size.side:
        vlm = resized_target(vlm, size)
    model = vlm.model.train()
    probes = new_probes(vlm, cfg)
    if cfg.init and (Path(cfg.init) / PROBES).is_file():  # a head added since (text) starts fresh
        probes.load_state_dict(load_file(Path(cfg.init) / PROBES), strict=False)
    warm_up_probes(vlm, probes, cfg)
    pretrain_vision(vlm, probes, cfg)
    if cfg.freeze_vision:
        model.model.visual.requires_grad_(False)
    if cfg.freeze_language:
        model.requires_grad_(False)
        model.model.visual.requires_grad_(True)
    params = [p for p in model.parameters() if p.requires_grad]
    if not cfg.freeze_vision:  # the probes only shape the tower
        params += list(probes.parameters())
    forms, pairs = random.Random(f"forms/{cfg.seed}"), random.Random(f"pairs/{cfg.seed}")
    other_form = mix.form_drawer(factors(cfg.form_weights))
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.98))
    sched = get_cosine_schedule_with_warmup(opt, cfg.warmup, cfg.steps)
    # One sampler per source: world scenes keep their share of every batch, so learning photographs (whose families
    # start far more often wrong) does not starve the world's families and make the target forget them.
    samplers = {source: TaskSampler(mix.tasks(cfg.mix, source, cfg.by_source), seed=cfg.seed, boost=boost)
                for source in mix.sources(cfg.mix)}
    n_world = cfg.batch if len(samplers) == 1 else round(cfg.batch * cfg.world_share)
    log = []
    start = time.time()
    index = 0
    for step in range(1, cfg.steps + 1):
        tasks = samplers["world"].draw(n_world)
        if "photos" in samplers:
            tasks += samplers["photos"].draw(cfg.batch - n_world)
        batch = [mix.sample("train", index + i, t) for i, t in enumerate(tasks)]  # named without a source
        if cfg.paired:
            batch, tasks = with_partners(batch, tasks, cfg.paired, pairs, index, samplers["photos"].factor)
        # A sample and its partner (which shares its image object) are typed in one form: asked in two, the form
        # itself would tell the two questions apart (run 34: "DESCRIBE THE IMAGE." answered "There is no text.").
        typed = [other_form(forms) if forms.random() < cfg.other_forms else None for _ in batch]
        first = {}
        typed = [typed[first.setdefault(id(s.image), i)] for i, s in enumerate(batch)]
        batch = [replace(s, prompt=form(s.prompt)) if form else s for s, form in zip(batch, typed)]
        index += cfg.batch
        inputs = answer_batch(vlm.tokenizer, batch, vlm)
        labels = inputs.pop("labels")
        # One vision pass feeds both the LM and the dense heads.
        features = model.get_image_features(inputs.pop("pixel_values"), inputs["image_grid_thw"], return_dict=True)
        logits = model(**inputs, mm_encoder_outputs={"image": features}).logits
        losses = per_sample_loss(logits, labels)
        aux = torch.zeros(())
        if cfg.aux_weight and not cfg.freeze_vision:
            aux = vision_losses(vlm, probes, features, inputs["image_grid_thw"], batch)
        loss = losses.mean() + cfg.aux_weight * aux
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        answer_tokens = (labels[:, 1:] != -100).sum(1)
        for sampler in samplers.values():
            mine = [i for i, t in enumerate(tasks) if t in sampler.wrong]
            sampler.update([tasks[i] for i in mine], (losses.detach() * answer_tokens)[mine])
        if step % 25 == 0:
            wrong = {k: round(v, 3) for sampler in samplers.values() for k, v in sampler.wrong.items()}
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
            save_checkpoint(vlm, probes, Path(cfg.out))
    model.eval()
    out = Path(cfg.out)
    save_checkpoint(vlm, probes, out)
    (out / "training_log.json").write_text(
        json.dumps(recorded({"config": asdict(cfg), "size": asdict(target_size(vlm.model.config)),
                             "photo_packages": image_sources.summary(), "log": log}), indent=1)
    )
    return vlm


def with_partners(batch: list[scenes.Sample], tasks: list[str], share: float, rng: random.Random, index: int,
                  factor=lambda task: 1.0) -> tuple[list[scenes.Sample], list[str]]:
    """A `share` of the reading and describing samples each followed by its image asked the other question
    (mix.partner), in place of the batch's last samples so that the batch keeps its size; never a partner task that
    `factor` (the sampler's boost) weighs 0, which the run leaves out on purpose."""
    out = []
    for i, (sample, task) in enumerate(zip(batch, tasks)):
        out.append((sample, task))
        pair = mix.partner(sample, task, "train", index + i) if rng.random() < share else None
        if pair and factor(pair[1]):
            out.append(pair)
    out = out[:len(batch)]
    return [s for s, _ in out], [t for _, t in out]


def save_checkpoint(vlm: VisionLanguageModel, probes: torch.nn.Module, out: Path) -> None:
    """The model, and beside it the probe heads a continued run (`--init`) picks up."""
    save_vlm(vlm, out)
    save_file(probes.state_dict(), out / PROBES)


def vision_losses(vlm: VisionLanguageModel, probes: torch.nn.ModuleDict, out, grid_thw: torch.Tensor,
                  batch: list[scenes.Sample]) -> torch.Tensor:
    """The dense heads' loss on the tower's output `out` (get_image_features' with return_dict): world scenes by their
    patch labels, other images (photos/ tasks) by their regions' answers and their patches' ink of text."""
    world = [i for i, s in enumerate(batch) if not s.task.startswith(mix.PHOTOS)]
    beyond = [i for i, s in enumerate(batch) if s.task.startswith(mix.PHOTOS)]
    features = out.pooler_output
    total = torch.zeros(())
    if world:
        total = sum(probes["world"].losses(torch.cat([features[i] for i in world]), [batch[i] for i in world]).values(),
                    total)
    if beyond:
        total = sum(probes["beyond"].losses(torch.cat([features[i] for i in beyond]),
                                            [batch[i] for i in beyond]).values(), total)
        if probes["patches"].weight:
            visual = vlm.model.model.visual
            states = patch_states(visual, out, grid_thw)
            states = states.view(len(batch), -1, states.shape[-1])[beyond].flatten(0, 1)
            total = total + probes["patches"].loss(states, [batch[i] for i in beyond], vlm.model.config.image_side,
                                                   visual.spatial_merge_size)
    return total


def _vision_batch(cfg: TargetTrainConfig, step: int, base: int) -> list[scenes.Sample]:
    """World scenes and (with photos) other images for the vision-only steps, from their own range of indices."""
    beyond = "photos" in mix.sources(cfg.mix)
    n_world = round(cfg.batch * cfg.world_share) if beyond else cfg.batch
    base += (step - 1) * cfg.batch
    batch = scenes.samples("train", n_world, start=base)
    if beyond:
        own = mix.tasks(cfg.mix, "photos")
        batch += [mix.sample("train", base + i, own[i % len(own)]) for i in range(cfg.batch - n_world)]
    return batch


def new_probes(vlm: VisionLanguageModel, cfg: TargetTrainConfig) -> torch.nn.ModuleDict:
    return torch.nn.ModuleDict({"world": VisionProbe(vlm.text_config.hidden_size),
                                "beyond": RegionProbe(vlm.text_config.hidden_size, cfg.text_weight),
                                "patches": PatchTextProbe(vlm.model.config.vision_config.hidden_size,
                                                          cfg.patch_text_weight)})


def warm_up_probes(vlm: VisionLanguageModel, probes: torch.nn.ModuleDict, cfg: TargetTrainConfig) -> None:
    """The probe heads alone on the frozen model: a continued run whose checkpoint has no heads (the shipped model
    carries none) then starts without the large vision losses of fresh heads, which would disturb what the tower
    has learned."""
    opt = torch.optim.AdamW(probes.parameters(), lr=5e-3, weight_decay=cfg.weight_decay)
    start = time.time()
    for step in range(1, cfg.probe_steps + 1):
        batch = _vision_batch(cfg, step, 8_000_000)
        pixels = vlm.pixels([s.image for s in batch])
        with torch.no_grad():
            out = vlm.model.get_image_features(pixels["pixel_values"], pixels["image_grid_thw"], return_dict=True)
        loss = vision_losses(vlm, probes, out, pixels["image_grid_thw"], batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 50 == 0:
            print(f"probe step {step} loss {loss.item():.3f} {time.time() - start:.0f}s", flush=True)


def pretrain_vision(vlm: VisionLanguageModel, probes: torch.nn.ModuleDict, cfg: TargetTrainConfig) -> None:
    """Vision tower + probes alone: ten times cheaper per step than the full model, and it gives the LM visual
    tokens that already say what and where they are (and beyond the world, their region's colour)."""
    params = list(vlm.model.model.visual.parameters()) + list(probes.parameters())
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    beyond = "photos" in mix.sources(cfg.mix)
    heldout = [photos.sample("heldout", i, "layout", ("procedural", "photo")[i % 2]) for i in range(60 * beyond)]
    start = time.time()
    for step in range(1, cfg.vision_steps + 1):
        batch = _vision_batch(cfg, step, 7_000_000)
        pixels = vlm.pixels([s.image for s in batch])
        out = vlm.model.get_image_features(pixels["pixel_values"], pixels["image_grid_thw"], return_dict=True)
        loss = vision_losses(vlm, probes, out, pixels["image_grid_thw"], batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 50 == 0:
            line = f"vision step {step} loss {loss.item():.3f}"
            if beyond:
                with torch.no_grad():
                    pixels = vlm.pixels([s.image for s in heldout])
                    seen = vlm.model.get_image_features(pixels["pixel_values"], pixels["image_grid_thw"]).pooler_output
                line += f" held-out region term accuracy {probes['beyond'].term_accuracy(torch.cat(seen), heldout):.3f}"
            print(f"{line} {time.time() - start:.0f}s", flush=True)


def run(args) -> None:
    cfg = TargetTrainConfig(**{k: v for k, v in vars(args).items() if k in TargetTrainConfig.__dataclass_fields__ and v is not None})
    train(cfg)
