"""Expert saliency scores from observed routing, computed once per (model, calibration) and cached on disk.

  reap                S_j = mean over tokens routed to j of g_j(x)·‖f_j(x)‖   (arXiv 2510.13999)
  ean                 Σ ‖f_j(x)‖ over routed tokens
  frequency           number of tokens routed to j
  weighted_frequency  Σ g_j(x)
  random              seeded uniform noise: the sanity baseline every method must beat

    python -m core reap score --model NAME_OR_PATH --calib DOMAIN_OR_TEXTFILE [--tokens N] [--seq-len L] --out DIR
    python -m core reap score --model Qwen/Qwen3-30B-A3B --layerwise cuda --out DIR   # held on the CPU, scored
                                                                                     # one layer at a time on the GPU

DIR/scores.json holds the scores, the routing statistics (frequency, mean gate and max activation per layer x expert)
and provenance; DIR/stats.safetensors holds what the merge baselines, super-expert protection and the subspace view
need (mean routed outputs, router-logit Gram matrices, max activations, every expert's mean output on a bounded token
subsample). Any ratio is then pruned from the cache without touching the calibration data again.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from core.reap import data
from core.reap.adapters import moe_blocks
from core.reap.checkpoint import load_model
from core.reap.observer import LayerStats, all_expert_outputs, observe, observe_layerwise, on_device

METHODS = ("reap", "ean", "frequency", "weighted_frequency", "random")


@dataclass
class ScoreConfig:
    tokens: int = 8192
    seq_len: int = 128
    batch: int = 8
    sample_tokens: int = 256  # per layer, for the all-experts pass of HC-SMoE
    seed: int = 0
    layerwise: str = ""  # a device (e.g. "cuda"): move one decoder layer there at a time; "": run the model where it is


def method_scores(stats: list[LayerStats], seed: int = 0) -> dict[str, list[list[float]]]:
    gen = torch.Generator().manual_seed(seed)
    per_method = {
        "reap": lambda s: s.reap_sum / s.count.clamp(min=1),  # never-routed experts score 0
        "ean": lambda s: s.norm_sum,
        "frequency": lambda s: s.count,
        "weighted_frequency": lambda s: s.gate_sum,
        "random": lambda s: torch.rand(len(s.count), generator=gen, dtype=torch.float64),
    }
    return {m: [f(s).tolist() for s in stats] for m, f in per_method.items()}


def score(model, windows: torch.Tensor, cfg: ScoreConfig = ScoreConfig()) -> tuple[dict, dict]:
    """(scores.json content without provenance, stats.safetensors content) for a model over [n, seq_len] windows."""
    t0 = time.perf_counter()
    if cfg.layerwise:
        stats = observe_layerwise(model, windows, cfg.layerwise, cfg.batch, cfg.sample_tokens)
    else:
        stats = observe(model, windows, cfg.batch, cfg.sample_tokens)
    observe_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    mean_all = []
    for (_, block), s in zip(moe_blocks(model), stats):
        sample = torch.cat(s.sample) if s.sample else torch.zeros(0, model.config.hidden_size)
        with on_device(block, cfg.layerwise):
            mean_all.append(all_expert_outputs(model, block, sample).double().mean(1).cpu())
    count = torch.stack([s.count for s in stats])
    max_activation = torch.stack([s.max_act for s in stats])
    result = {
        "num_tokens": windows.numel(),
        "seq_len": windows.shape[1],
        "layers": [name for name, _ in moe_blocks(model)],
        "num_experts": count.shape[1],
        "top_k": model.config.num_experts_per_tok,
        "seed": cfg.seed,
        "scores": method_scores(stats, cfg.seed),
        "routing": {
            "frequency": (count / count.sum(1, keepdim=True)).tolist(),
            "mean_gate": (torch.stack([s.gate_sum for s in stats]) / count.clamp(min=1)).tolist(),
            "max_activation": max_activation.tolist(),
        },
        "timing": {"observe_s": round(observe_s, 3), "all_experts_subsample_s": round(time.perf_counter() - t0, 3)},
    }
    cache = {
        "count": count,
        "mean_routed_output": torch.stack([s.out_sum for s in stats]) / count.clamp(min=1)[..., None],
        "logit_gram": torch.stack([s.logit_gram for s in stats]),
        "max_activation": max_activation,
        "mean_output_all": torch.stack(mean_all),  # [L, E, H] over the subsample, every expert
    }
    return result, cache


STATS = "stats.safetensors"


def save_scores(out: Path, result: dict, cache: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in cache.items()}, out / STATS)
    (out / "scores.json").write_text(json.dumps(result))


def load_scores(path: str | Path) -> tuple[dict, dict]:
    path = Path(path)
    if not (path / "scores.json").is_file() or not (path / STATS).is_file():
        missing = "scores.json" if not (path / "scores.json").is_file() else STATS
        raise ValueError(f"{path} has no {missing}; (re)create it with `python -m core reap score ... --out {path}`")
    return json.loads((path / "scores.json").read_text()), load_file(path / STATS)


def run(args) -> None:
    cfg = ScoreConfig(**{k: v for k, v in vars(args).items() if k in ScoreConfig.__dataclass_fields__ and v is not None})
    model, tokenizer = load_model(args.model)
    moe_blocks(model)  # fail fast on dense models, before tokenising anything
    windows = data.windows(tokenizer, args.calib, "train", cfg.tokens, cfg.seq_len, cfg.seed)
    result, cache = score(model, windows, cfg)
    result = {"model": str(args.model), "calibration": args.calib} | result
    save_scores(Path(args.out), result, cache)
    print(f"scored {result['num_tokens']} tokens in {result['timing']['observe_s']:.2f}s -> {args.out}/scores.json")
