"""Self-data distillation sets: the target's own responses to training prompts, which MASSV phase 2 and DREAM
train on, so a drafter learns what the target says rather than what the ground truth says.

    python -m core.training.self_distill --prompts 64 --out /tmp/distill.json     # writes a small set and its agreement

A set is JSON: {"metadata": generation settings + agreement with ground truth, "rows": [{split, index, task,
prompt, response, ground_truth, draw}]}; images are not stored, they are a pure function of (split, index, task).
A set made on the user's examples (core/training/training_data.py) has rows [{image, task, prompt, response, ground_truth,
draw}] instead, `image` saying where the image is, and its metadata names the source and fingerprints the examples.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from core.models.embedded import EMBEDDED_PATHS
from core.models.loading import recorded_path
from core.models.registry import load_target
from core.models.vlm import VisionLanguageModel
from core.training import training_data
from core.training.training_data import Example, TrainingData
from core.world import mix, scenes

FIRST_INDEX = 1_000_000  # train-split indices no training script draws its own ground-truth batches from
# The target's answers the shipped DREAM and EAGLE-3 learn from (MASSV's phase 2: twice as many, the same first ones):
# half of the prompts are world scenes (with 2048, 1024 world, the drafters' world τ fell 8-12 %), answers up to 128
# tokens (a colour layout is up to ~100), the target's mix.
PROMPTS, MAX_NEW_TOKENS, MIX = 6144, 128, "world,photos"
DISTILL_BATCH = 32  # prompts the target answers together (left-padded): a set's prefix in whole batches is reusable


@dataclass
class DistilledDrafterConfig:
    """Where a drafter that trains on the target's own answers (DREAM, EAGLE-3) gets them, and where it is written."""

    target: str = str(EMBEDDED_PATHS["target"])
    data: str = str(EMBEDDED_PATHS["massv"] / "distillation_set.json")  # reused when it matches; else generated
    prompts: int = PROMPTS
    max_new_tokens: int = MAX_NEW_TOKENS  # the longest response kept
    mix: str = MIX  # the prompts' images without the user's examples (core/world/mix.py)
    data_dir: str = ""  # the user's examples (core/training/training_data.py); neither: the procedural world
    hf_dataset: str = ""
    out: str = ""  # default: the shipped drafter, allowed only when retraining it (embedded target, procedural data)
    init: str = ""  # continue from this drafter (weights, draft vocabulary): a retrained target's drafter in fewer steps

    def target_and_answers(self) -> tuple[VisionLanguageModel, dict, TrainingData | None]:
        """The frozen target (a preset loads with its dtype, device map and quantization), its answers to the
        training prompts (a set, reused when it matches), and the user's examples if any."""
        examples = training_data.load(self.data_dir, self.hf_dataset)
        target = load_target(self.target)
        target.model.requires_grad_(False)
        distill = DistillConfig(self.target, self.prompts, max_new_tokens=self.max_new_tokens, mix=self.mix)
        return target, load_or_make(self.data, target, distill, examples), examples


@dataclass
class DistillConfig:
    target: str = str(EMBEDDED_PATHS["target"])
    prompts: int = PROMPTS
    samples_per_prompt: int = 1
    temperature: float = 0.0  # 0 = the target's greedy answer
    max_new_tokens: int = MAX_NEW_TOKENS
    mix: str = MIX  # world, or world,photos (core/world/mix.py); ignored with the user's examples


@torch.no_grad()
def distillation_set(target: VisionLanguageModel, cfg: DistillConfig, examples: TrainingData | None = None) -> dict:
    """The target's own responses to training prompts (the mix's train split, or the first cfg.prompts of the user's
    `examples`), batched with left padding (the processor gives each image of a batch its own grid)."""
    cfg = _capped(cfg, examples)
    tok = target.tokenizer
    rows = []
    for start in range(0, cfg.prompts, DISTILL_BATCH):
        count = min(DISTILL_BATCH, cfg.prompts - start)
        if examples is None:
            samples = mix.samples("train", count, start=FIRST_INDEX + start, mix=cfg.mix)
            where = [{"split": "train", "index": FIRST_INDEX + start + i} for i in range(count)]
        else:
            samples = examples[start:start + count]
            where = [{"image": e.image} for e in examples.examples[start:start + count]]
        requests = [target.prepare(s.image, s.prompt) for s in samples]
        texts = [tok.decode(r.input_ids[0]) for r in requests]
        enc = tok(texts, return_tensors="pt", padding=True, padding_side="left").to(target.device)
        for k in range(cfg.samples_per_prompt):
            out = target.model.generate(
                **enc,
                mm_token_type_ids=(enc["input_ids"] == target.image_token_id).long(),
                pixel_values=torch.cat([r.pixel_values for r in requests]).to(target.device, target.model.dtype),
                image_grid_thw=torch.cat([r.image_grid_thw for r in requests]).to(target.device),
                max_new_tokens=cfg.max_new_tokens,
                do_sample=cfg.temperature > 0,
                temperature=cfg.temperature if cfg.temperature > 0 else None,
            )
            for i, s in enumerate(samples):
                response = tok.decode(out[i, enc["input_ids"].shape[1]:], skip_special_tokens=True).strip()
                rows.append({**where[i], "task": s.task, "prompt": s.prompt, "response": response,
                             "ground_truth": s.answer, "draw": k})
    metadata = {**asdict(cfg), "target": recorded_path(cfg.target), "target_fingerprint": fingerprint(target),
                "agreement_with_ground_truth": _agreement(rows),
                **source_metadata(examples, cfg.prompts)}
    return {"metadata": metadata, "rows": rows}


def _agreement(rows: list[dict]) -> float | None:
    known = [r for r in rows if r["ground_truth"] is not None]
    return sum(r["response"] == r["ground_truth"] for r in known) / len(known) if known else None


def _capped(cfg: DistillConfig, examples: TrainingData | None) -> DistillConfig:
    """With the user's examples, `prompts` is at most how many there are."""
    return cfg if examples is None else replace(cfg, prompts=min(cfg.prompts, len(examples)))


def source_metadata(examples: TrainingData | None, prompts: int) -> dict:
    """What a set made on the user's examples records about them (a world set records nothing: its keys stay)."""
    if examples is None:
        return {}
    used = json.dumps([asdict(e) for e in examples.examples[:prompts]], sort_keys=True)
    return {"source": examples.source, "source_fingerprint": hashlib.sha256(used.encode()).hexdigest()[:16]}


FINGERPRINT_SAMPLES = 4096


def fingerprint(target: VisionLanguageModel) -> str:
    """Identifies the target's weights (a retrained model at the same path gets a new one): every tensor's name and
    an evenly strided sample of its values, so a run that trains one part alone (the tower, `train target
    --freeze-language`, leaves the token embeddings as they were) gets a new one too, at a cost that stays small for
    hub-sized models."""
    digest = hashlib.sha256()
    for name, tensor in target.model.state_dict().items():
        flat = tensor.detach().reshape(-1)
        sample = flat[::max(1, flat.numel() // FINGERPRINT_SAMPLES)].float().cpu().contiguous()
        digest.update(name.encode())
        digest.update(sample.numpy().tobytes())
    return digest.hexdigest()[:16]


def training_samples(dataset: dict) -> Sequence[scenes.Sample]:
    """The set's rows as samples whose answer is the target's response (rows of the user's images read them
    when a sample is taken)."""
    rows = dataset["rows"]
    if rows and "image" in rows[0]:
        return TrainingData(dataset["metadata"]["source"],
                            [Example(r["image"], r["task"], r["prompt"], r["response"]) for r in rows])
    return [scenes.Sample(mix.sample(r["split"], r["index"], r["task"]).image, r["task"], r["prompt"], r["response"])
            for r in rows]


def load_or_make(path: str, target: VisionLanguageModel, cfg: DistillConfig,
                 examples: TrainingData | None = None) -> dict:
    """Reuse a saved set when it was generated by the same target with the same settings on the same prompts (the
    world's, or the same user examples), or on more of the world's prompts (their first cfg.prompts are the same
    prompts, answered in the same batches); else generate one."""
    cfg = _capped(cfg, examples)
    if path and Path(path).is_file():
        dataset = json.loads(Path(path).read_text())
        # the fingerprint, not the path, says which target made it: a clone elsewhere has another path
        settings = {k: v for k, v in asdict(cfg).items() if k != "target"}
        wanted = {**settings, "target_fingerprint": fingerprint(target), **source_metadata(examples, cfg.prompts)}
        saved = {k: dataset["metadata"].get(k) for k in wanted}
        same_source = dataset["metadata"].get("source") == wanted.get("source")  # None: the world's prompts
        if saved == wanted and same_source:
            return dataset
        if examples is None and same_source and (saved["prompts"] or 0) > cfg.prompts \
                and saved == {**wanted, "prompts": saved["prompts"]} and cfg.prompts % DISTILL_BATCH == 0:
            rows = [r for r in dataset["rows"] if r["index"] < FIRST_INDEX + cfg.prompts]
            return {"metadata": {**dataset["metadata"], "prompts": cfg.prompts, "agreement_with_ground_truth":
                                 _agreement(rows)}, "rows": rows}
        print(f"{path}: generated by another target, with other settings or on other prompts; generating a new set",
              flush=True)
    return distillation_set(target, cfg, examples=examples)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    cfg = DistillConfig(prompts=args.prompts)
    data = distillation_set(load_target(cfg.target), cfg)
    Path(args.out).write_text(json.dumps(data))
    print(data["metadata"])
