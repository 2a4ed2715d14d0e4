"""Benchmark REAP against the other criteria and the merging baselines on the embedded MoE (or any MoE).

    python -m core bench-reap [--model M] [--calib mixed] [--ratios 0.25,0.5]
        [--methods reap,ean,frequency,random,hc-smoe,m-smoe] [--json PATH]

One run: time a plain forward and REAP scoring over the same calibration tokens (best of three each, since
the machine may be shared), score once per calibration set, then for each method and ratio prune or merge a
copy and measure per-domain held-out perplexity and task accuracy (core/reap/quality.py). REAP at the
largest ratio is also calibrated on each single domain (the calibration x evaluation matrix), and the
subspace view compares original, REAP-pruned and HC-SMoE-merged experts at that ratio.
"""

from __future__ import annotations

import copy
import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from core.reap import data
from core.reap.adapters import num_groups
from core.reap.embedded_moe import MOE_PATH
from core.reap.merge import MERGE_METHODS, expert_groups, merge_experts
from core.reap.observer import observe
from core.reap.prune import experts_to_keep, slice_experts
from core.reap.quality import QualityConfig, evaluate
from core.reap.scores import METHODS, ScoreConfig, load_model, load_scores, save_scores, score
from core.reap.subspace import subspace_view


@dataclass
class BenchConfig:
    model: str = str(MOE_PATH)
    calib: str = "mixed"
    ratios: str = "0.25,0.5"
    methods: str = "reap,ean,frequency,random,hc-smoe,m-smoe"
    tokens: int = 8192
    seq_len: int = 128
    json: str | None = None


# The sweep's evaluation set. core/reap/lab.py re-measures the baseline on it to tell whether a saved sweep was
# made on the model at hand.
QUALITY = QualityConfig(ppl_windows=32, task_items=128)


def _best_of(fn, n: int = 3) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


@torch.no_grad()
def _plain_forward(model, windows: torch.Tensor, batch: int) -> None:
    for chunk in windows.split(batch):
        model(input_ids=chunk, use_cache=False)


def reduced(model, method: str, ratio: float, scores: dict, cache: dict):
    """A pruned or merged copy of `model`."""
    out = copy.deepcopy(model)
    if method in MERGE_METHODS:
        merge_experts(out, expert_groups(method, cache, ratio, scores["top_k"]), cache["count"])
    else:
        slice_experts(out, experts_to_keep(scores["scores"][method], ratio, scores["top_k"], num_groups(model)))
    return out


def bench(cfg: BenchConfig) -> dict:
    torch.set_num_threads(1)
    methods, ratios = cfg.methods.split(","), [float(r) for r in cfg.ratios.split(",")]
    unknown = set(methods) - set(METHODS) - set(MERGE_METHODS)
    if unknown:
        raise ValueError(f"unknown methods {sorted(unknown)}; expected from {METHODS + MERGE_METHODS}")
    model, tokenizer = load_model(cfg.model)
    score_cfg = ScoreConfig(tokens=cfg.tokens, seq_len=cfg.seq_len)
    windows = {c: data.windows(tokenizer, c, "train", cfg.tokens, cfg.seq_len) for c in data.CALIBRATIONS}

    calib = windows[cfg.calib]
    _plain_forward(model, calib[: score_cfg.batch], score_cfg.batch)  # warm-up
    timing = {
        "plain_forward_s": _best_of(lambda: _plain_forward(model, calib, score_cfg.batch)),
        "reap_scoring_s": _best_of(lambda: observe(model, calib, score_cfg.batch)),
    }
    cached = {}
    with tempfile.TemporaryDirectory() as tmp:
        for c, w in windows.items():
            result, cache = score(model, w, score_cfg)
            save_scores(Path(tmp) / c, {"model": cfg.model, "calibration": c} | result, cache)
        cached = {c: load_scores(Path(tmp) / c) for c in windows}

        def reprune():  # what the UI slider costs: read the cache, choose, slice a copy
            scores, _ = load_scores(Path(tmp) / cfg.calib)
            kept = experts_to_keep(scores["scores"]["reap"], ratios[-1], scores["top_k"], num_groups(model))
            slice_experts(copy.deepcopy(model), kept)

        timing["reprune_s"] = _best_of(reprune)
    timing = {k: round(v, 4) for k, v in timing.items()} | {
        "scoring_over_forward": round(timing["reap_scoring_s"] / timing["plain_forward_s"], 3),
        "calibration_tokens": calib.numel(),
    }
    print("timing", json.dumps(timing), flush=True)

    baseline = evaluate(model, tokenizer, QUALITY)
    print("baseline", json.dumps(baseline), flush=True)
    runs = [(m, r, cfg.calib) for r in ratios for m in methods]
    runs += [("reap", ratios[-1], c) for c in data.CALIBRATIONS if c != cfg.calib]
    results = []
    for method, ratio, c in runs:
        scores, cache = cached[c]
        q = evaluate(reduced(model, method, ratio, scores, cache), tokenizer, QUALITY)
        results.append({"method": method, "ratio": ratio, "calibration": c, "quality": q})
        print("result", json.dumps(results[-1]), flush=True)

    scores, cache = cached[cfg.calib]
    variants = {"original": model, "pruned": reduced(model, "reap", ratios[-1], scores, cache)}
    if "hc-smoe" in methods:
        variants["merged"] = reduced(model, "hc-smoe", ratios[-1], scores, cache)
    view = subspace_view(variants, calib)
    out = {"model": cfg.model, "calibration": cfg.calib, "baseline": baseline, "results": results, "timing": timing,
           "subspace": {"ratio": ratios[-1], **view}}
    if cfg.json:
        Path(cfg.json).parent.mkdir(parents=True, exist_ok=True)
        Path(cfg.json).write_text(json.dumps(out, indent=1))
    return out


def run(args) -> None:
    bench(BenchConfig(**{k: v for k, v in vars(args).items() if k in BenchConfig.__dataclass_fields__ and v is not None}))
