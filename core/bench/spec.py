"""Speculative decoding benchmark on held-out world samples: tau, acceptance, wall-clock speedup over AR.

    python -m core bench-spec --drafters text --n 40 --gamma 4 --json runs/bench_spec.json

Every sample runs plain autoregressive decoding and each drafter back to back, in the same process, so the
speedup is a ratio measured under the same machine noise. With `--repeats R` each of those generations runs R times
and keeps its fastest (as timeit does: other tenants only ever add time); tokens are identical across repeats.
Definitions (vLLM's, and the rejections this project counts):
  tau                     tokens emitted per target forward, the bonus token included (AR: 1.0)
  acceptance_rate         accepted drafts / drafted tokens
  per_position_acceptance P(draft i accepted), over rounds that drafted at least i+1 deep (trees: depth)
  speedup                 AR wall time / drafter wall time over the same samples
  rejections              drafts the target turned down
  near_tie_rejections     share of them the target itself gave >= 0.2 (near-ties: core/decoding/metrics.py)
  lossless_mismatches     greedy outputs that differ from AR (must be 0; null when sampling)
"""

from __future__ import annotations

import json
import platform
import time
from collections import defaultdict
from pathlib import Path

import torch

from core.decoding.engine import SpeculativeEngine
from core.decoding.metrics import RunStats
from core.decoding.rounds import Generation
from core.decoding.sampling import SamplingConfig
from core.models.loading import recorded
from core.models.registry import load_drafter, load_target, split_drafters
from core.training.training_data import from_folder
from core.world import scenes


def _stats(gens: list[Generation], ar_seconds: float) -> dict:
    stats = RunStats.of([r for g in gens for r in g.rounds], sum(g.seconds for g in gens))
    return {
        "tau": stats.tau,
        "acceptance_rate": stats.acceptance,
        "per_position_acceptance": stats.position_acceptance,
        "mean_accepted_length": stats.mean_accepted_length,
        "rejections": stats.rejections,
        "near_tie_rejections": stats.near_tie_share,
        "speedup": ar_seconds / stats.seconds,  # the same requests decoded plainly: the same work
        "tokens_per_s": stats.tokens_per_second,
        "tokens": stats.tokens,
        "seconds": stats.seconds,
    }


def _hf_assisted(target, drafter, sample) -> dict:
    """transformers' own assisted generation on the same pair, where it runs at all."""
    request = target.prepare(sample.image, sample.prompt)
    try:
        target.model.generate(
            input_ids=request.input_ids, attention_mask=torch.ones_like(request.input_ids),
            mm_token_type_ids=request.mm_token_type_ids, pixel_values=request.pixel_values,
            image_grid_thw=request.image_grid_thw, assistant_model=drafter.assistant_model, max_new_tokens=8,
            do_sample=False,
        )
    except Exception as exc:  # report, don't crash the benchmark: this is transformers' limitation
        return {"supported": False, "error": f"{type(exc).__name__}: {str(exc)[:200]}"}
    return {"supported": True}


def bench(
    drafters: list[str],
    n: int = 40,
    gamma: int = 4,
    min_draft_prob: float = 0.0,
    sampling: SamplingConfig = SamplingConfig(),
    tasks: tuple[str, ...] = scenes.TASKS,
    max_new_tokens: int = 64,
    model: str = "embedded",
    seed: int = 0,
    repeats: int = 1,
    images: str = "",
    prompt: str = "",
) -> dict:
    """`images`: a folder of your own (core/training/training_data.py: optional metadata.jsonl), its first n images,
    each asked its own prompt or `prompt`; otherwise n held-out world samples of `tasks`."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    if images:
        samples = [scenes.Sample(s.image, s.task, prompt or s.prompt, s.answer) for s in from_folder(images)[:n]]
    else:
        samples = scenes.samples("heldout", n, tasks)
    target = load_target(model)
    engine = SpeculativeEngine(target)
    loaded = {name: load_drafter(name, model) for name in drafters}
    kwargs = dict(sampling=sampling, max_new_tokens=max_new_tokens, seed=seed)
    drafting = dict(gamma=gamma, min_draft_prob=min_draft_prob)
    warm = samples[0]
    for d in [None, *loaded.values()]:
        engine.generate(warm.image, warm.prompt, d, **drafting, **kwargs)

    def fastest(sample, drafter, extra) -> Generation:
        return min((engine.generate(sample.image, sample.prompt, drafter, **extra, **kwargs) for _ in range(repeats)),
                   key=lambda g: g.seconds)

    ar: list[Generation] = []
    runs: dict[str, list[Generation]] = defaultdict(list)
    for s in samples:
        ar.append(fastest(s, None, {}))
        for name, d in loaded.items():
            runs[name].append(fastest(s, d, drafting))

    ar_seconds = sum(g.seconds for g in ar)
    ar_tokens = sum(g.new_tokens for g in ar)
    report = {
        "config": {
            "model": model, "n": n, "gamma": gamma, "min_draft_prob": min_draft_prob,
            "temperature": sampling.temperature, "top_p": sampling.top_p, "top_k": sampling.top_k,
            "tasks": sorted({s.task for s in samples}), "images": images or None, "prompt": prompt or None,
            "max_new_tokens": max_new_tokens, "seed": seed, "repeats": repeats,
            "torch_threads": torch.get_num_threads(), "machine": platform.processor() or platform.machine(),
        },
        "ar": {"tokens_per_s": ar_tokens / ar_seconds, "tokens": ar_tokens, "seconds": ar_seconds},
        "drafters": {},
    }
    by_task = defaultdict(list)
    for i, s in enumerate(samples):
        by_task[s.task].append(i)
    for name, gens in runs.items():
        entry = _stats(gens, ar_seconds)
        entry["lossless_mismatches"] = (
            sum(g.token_ids != a.token_ids for g, a in zip(gens, ar)) if sampling.greedy else None
        )
        entry["per_task"] = {
            task: {k: v for k, v in _stats([gens[i] for i in idx], sum(ar[i].seconds for i in idx)).items()
                   if k in ("tau", "speedup", "acceptance_rate")}
            for task, idx in by_task.items()
        }
        if loaded[name].assistant_model is not None:
            entry["hf_assisted"] = _hf_assisted(target, loaded[name], warm)
        report["drafters"][name] = entry
    return report


def run(args) -> None:
    t0 = time.time()
    report = bench(
        drafters=split_drafters(args.drafters),
        n=args.n,
        gamma=args.gamma,
        min_draft_prob=args.min_draft_prob,
        sampling=SamplingConfig(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k),
        tasks=tuple(args.tasks.split(",")) if args.tasks else scenes.TASKS,
        max_new_tokens=args.max_new_tokens,
        model=args.model,
        seed=args.seed,
        repeats=args.repeats,
        images=args.images or "",
        prompt=args.prompt or "",
    )
    report["wall_seconds"] = round(time.time() - t0, 1)
    text = json.dumps(recorded(report), indent=1)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(text)
    print(text)
