"""Benchmark REAP against the other criteria and the merging baselines on the embedded MoE (or any MoE).

    python -m core bench-reap [--model M] [--calib mixed] [--ratios 0.25,0.5]
        [--methods reap,ean,frequency,random,hc-smoe,m-smoe] [--protect 4] [--mixture code:0.5,math:0.5] [--json PATH]

One run: time a plain forward and REAP scoring over the same calibration tokens (best of three each, since
the machine may be shared), score once per calibration set, then for each method and ratio prune or merge the
loaded model for the evaluation (core/reap/view.py: router mask, merged slots put back after) and measure
per-domain held-out perplexity and task accuracy (core/reap/quality.py). REAP's own options get rows of their own at
every ratio: `--protect K` super experts kept, and the global (non-uniform) ranking. REAP at the largest ratio is
also calibrated on each single domain and on the weighted `--mixture` (the calibration x evaluation matrix), and the
subspace view compares original, REAP-pruned and HC-SMoE-merged experts at that ratio.
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from core.models.loading import recorded
from core.reap import data
from core.reap.adapters import num_groups
from core.reap.checkpoint import load_model
from core.reap.embedded_moe import MOE_PATH
from core.reap.merge import MERGE_METHODS
from core.reap.observer import observe
from core.reap.prune import LiveMask, Selection, kept_experts, super_experts
from core.reap.quality import QualityConfig, evaluate
from core.reap.scores import METHODS, ScoreConfig, load_scores, save_scores, score
from core.reap.subspace import mean_routed, subspace_view
from core.reap.view import reduced_view, reduction_for


@dataclass
class BenchConfig:
    model: str = str(MOE_PATH)
    calib: str = "mixed"
    ratios: str = "0.25,0.5"
    methods: str = "reap,ean,frequency,random,hc-smoe,m-smoe"
    tokens: int = 8192
    seq_len: int = 128
    protect: int = 4  # super experts kept in the protection rows (0: no such rows)
    mixture: str = "code:0.5,math:0.5"  # the weighted calibration row
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
        model(input_ids=chunk.to(model.device), use_cache=False)


def bench(cfg: BenchConfig) -> dict:
    torch.set_num_threads(1)
    methods, ratios = cfg.methods.split(","), [float(r) for r in cfg.ratios.split(",")]
    unknown = set(methods) - set(METHODS) - set(MERGE_METHODS)
    if unknown:
        raise ValueError(f"unknown methods {sorted(unknown)}; expected from {METHODS + MERGE_METHODS}")
    model, tokenizer = load_model(cfg.model)
    score_cfg = ScoreConfig(tokens=cfg.tokens, seq_len=cfg.seq_len)
    calibrations = dict.fromkeys([*data.CALIBRATIONS, cfg.calib, *([cfg.mixture] if cfg.mixture else [])])
    windows = {c: data.windows(tokenizer, c, "train", cfg.tokens, cfg.seq_len) for c in calibrations}

    calib = windows[cfg.calib]
    _plain_forward(model, calib[: score_cfg.batch], score_cfg.batch)  # warm-up
    timing = {
        "plain_forward_s": _best_of(lambda: _plain_forward(model, calib, score_cfg.batch)),
        "reap_scoring_s": _best_of(lambda: observe(model, calib, score_cfg.batch)),
    }
    with tempfile.TemporaryDirectory() as tmp:
        for c, w in windows.items():
            result, cache = score(model, w, score_cfg)
            save_scores(Path(tmp) / c, {"model": cfg.model, "calibration": c} | result, cache)
        cached = {c: load_scores(Path(tmp) / c) for c in windows}

        def reprune():  # what the UI slider costs: read the cache, choose, mask the router
            scores, cache = load_scores(Path(tmp) / cfg.calib)
            mask = LiveMask(model)
            mask.set(kept_experts(scores, cache, "reap", ratios[-1], num_groups(model)))
            mask.clear()

        timing["reprune_s"] = _best_of(reprune)
    timing = {k: round(v, 4) for k, v in timing.items()} | {
        "scoring_over_forward": round(timing["reap_scoring_s"] / timing["plain_forward_s"], 3),
        "calibration_tokens": calib.numel(),
    }
    print("timing", json.dumps(timing), flush=True)

    baseline = evaluate(model, tokenizer, QUALITY)
    print("baseline", json.dumps(baseline), flush=True)
    options = [Selection(protect=cfg.protect)] * (cfg.protect > 0) + [Selection("global")]
    runs = [(m, r, cfg.calib, Selection()) for r in ratios for m in methods]
    runs += [("reap", r, cfg.calib, s) for r in ratios for s in options]
    runs += [("reap", ratios[-1], c, Selection()) for c in windows if c != cfg.calib]
    results = []
    for method, ratio, c, selection in runs:
        scores, cache = cached[c]
        reduction = reduction_for(model, scores, cache, method, ratio, selection)
        with reduced_view(model, cache, reduction):
            q = evaluate(model, tokenizer, QUALITY)
        results.append({"method": method, "ratio": ratio, "calibration": c, "scope": selection.scope,
                        "protect": selection.protect, "kept_per_layer": [len(k) for k in reduction.kept], "quality": q})
        print("result", json.dumps(results[-1]), flush=True)

    scores, cache = cached[cfg.calib]
    peaks = cache["max_activation"]
    protected = super_experts(peaks, cfg.protect) if cfg.protect else []
    supers = {"protect": cfg.protect, "median_max_activation": round(float(peaks.median()), 4),
              "protected": [[layer, j, round(float(peaks[layer, j]), 4)] for layer, js in enumerate(protected) for j in js]}
    means = {"original": mean_routed(model, calib)}
    variants = {"pruned": "reap"} | ({"merged": "hc-smoe"} if "hc-smoe" in methods else {})
    for name, method in variants.items():
        with reduced_view(model, cache, reduction_for(model, scores, cache, method, ratios[-1])):
            means[name] = mean_routed(model, calib)
    view = subspace_view(means)
    out = {"model": cfg.model, "calibration": cfg.calib, "baseline": baseline, "results": results, "timing": timing,
           "super_experts": supers, "subspace": {"ratio": ratios[-1], **view}}
    if cfg.json:
        Path(cfg.json).parent.mkdir(parents=True, exist_ok=True)
        Path(cfg.json).write_text(json.dumps(recorded(out), indent=1))
    return out


def run(args) -> None:
    bench(BenchConfig(**{k: v for k, v in vars(args).items() if k in BenchConfig.__dataclass_fields__ and v is not None}))
