"""The REAP lab: everything the app's REAP tab shows for (model, calibration, method, ratio, selection).

    python -m core.reap.lab --calib mixed --method reap --ratio 0.5 [--scope global] [--protect 4]   # view as JSON

`Lab(model)` scores a calibration set once (core/reap/scores.py), cached on disk under the weight files'
fingerprint, the calibration tokens and the scoring config (a retrained model or new data is rescored). A ratio is a
view of the one loaded model, pruned through the router mask or merged in place (core/reap/view.py), plus a
held-out quality evaluation cached per (method, experts removed, selection); only `export` materialises a reduced
copy. The quality-vs-ratio curve is assets/results/reap_bench.json's when its unpruned perplexities reproduce on
this model, else a live evaluation on a grid of ratios. Cache: $SPECULUM_CACHE/reap (default ~/.cache/speculum/reap).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Callable

import torch

from core.models.loading import LoadOptions
from core.models.presets import moe_preset
from core.reap import data
from core.reap.adapters import num_groups
from core.reap.bench import QUALITY as BENCH_QUALITY
from core.reap.checkpoint import atomic_save, load_model, recipe_for, save_zip, weights_fingerprint
from core.reap.inspect import domain_shares, expert_tokens, routing
from core.reap.merge import MERGE_METHODS
from core.reap.prune import SCOPES, Selection, experts_to_keep
from core.reap.quality import QualityConfig, continuations, evaluate, perplexity, task_items
from core.reap.results import Curve, CurvePoint, ExpertView, PruneView, Sample, Subspace, model_info
from core.reap.scores import METHODS, ScoreConfig, load_scores, save_scores, score
from core.reap.subspace import mean_routed, subspace_view
from core.reap.view import Reduction, reduce_in_place, reduced_view, reduction_for

ALL_METHODS = METHODS + MERGE_METHODS
# Merging has no per-expert score: the saliency map shows what M-SMoE ranks by (frequency picks its dominant
# experts) and, for HC-SMoE, which clusters expert outputs instead, REAP's score.
SALIENCY_OF = {"hc-smoe": "reap", "m-smoe": "frequency"}
BENCH_JSON = Path(__file__).resolve().parents[2] / "assets" / "results" / "reap_bench.json"

Progress = Callable[[float, str], None]


def _quiet(fraction: float, desc: str) -> None:
    pass


def default_cache_dir() -> Path:
    return Path(os.environ.get("SPECULUM_CACHE", Path.home() / ".cache" / "speculum")) / "reap"


@dataclass
class LabConfig:
    score: ScoreConfig = field(default_factory=ScoreConfig)
    # Task prompts are ~200 tokens, so the items cost most of an evaluation: 12 per domain keep a slider release
    # under a CPU second (scripts/bench_ui.py --parts reap); the saved sweep uses 128.
    live_quality: QualityConfig = field(default_factory=lambda: QualityConfig(ppl_windows=4, task_items=12))
    curve_ratios: tuple[float, ...] = (0.25, 0.5, 0.75)
    subspace_tokens: int = 1024
    sample_tokens: int = 16
    bench_json: Path = BENCH_JSON
    cache_dir: Path = field(default_factory=default_cache_dir)


@dataclass
class _Scored:
    result: dict
    cache: dict
    windows: torch.Tensor
    labels: list[str]  # the calibration part (domain or file) of each window
    directory: Path


def _digest(*parts: bytes | str) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()


def _write_json(path: Path, obj) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        json.dump(obj, f)
    os.replace(tmp, path)


class Lab:
    """One MoE model, loaded once; thread-safe (one computation at a time, since views change the model in place)."""

    def __init__(self, name_or_path: str = "embedded", cfg: LabConfig | None = None, load: LoadOptions | None = None):
        self.name = name_or_path
        self.preset = moe_preset(name_or_path)
        self.load = load or self.preset.load
        self.path = Path(self.preset.model)  # a directory, or a hub repo id
        self.cfg = cfg or LabConfig()
        self.model, self.tokenizer = load_model(self.preset.model, self.load)
        self.info = model_info(name_or_path)
        self.digest = weights_fingerprint(self.preset.model, self.load, self.cfg.cache_dir / "file-sha256.json")
        self._lock = threading.RLock()
        self._scored: dict[str, _Scored] = {}
        self._tables: dict[Path, dict] = {}
        self._curves: dict[str, Curve] = {}
        self._bench: dict | None = None
        self._bench_checked = False
        self._unpruned_samples: list[str] | None = None
        self._routing: dict[str, torch.Tensor] = {}  # per calibration: every token's experts (core/reap/inspect.py)

    def removed(self, ratio) -> int:
        """Experts removed per layer at `ratio`; ValueError for a ratio out of range or one leaving < top-k."""
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not math.isfinite(ratio):
            raise ValueError(f"ratio must be a finite number in [0, 1), got {ratio!r}")
        e = self.info.experts
        return e - len(experts_to_keep([[0.0] * e], ratio, self.info.top_k, num_groups(self.model))[0])

    @staticmethod
    def _check(calibration: str, method: str | None = None) -> None:
        try:
            data.mixture(calibration if isinstance(calibration, str) else "", files=False)  # the app reads no files
        except ValueError as e:
            raise ValueError(f"unknown calibration {calibration!r}: {e}; choose from {list(data.CALIBRATIONS)} or a "
                             "mixture such as code:0.5,math:0.5") from None
        if method is not None and method not in ALL_METHODS:
            raise ValueError(f"unknown method {method!r}; choose from {list(ALL_METHODS)}")

    def scores(self, calibration: str, progress: Progress = _quiet) -> _Scored:
        with self._lock:
            if calibration not in self._scored:
                self._check(calibration)
                cfg = self.cfg.score
                progress(0.0, f"tokenising the {calibration} calibration set")
                windows, labels = data.labelled_windows(self.tokenizer, calibration, "train", cfg.tokens, cfg.seq_len,
                                                        cfg.seed)
                key = _digest(self.digest, windows.numpy().tobytes(), repr(cfg))[:24]
                directory = self.cfg.cache_dir / key
                if not (directory / "scores.json").is_file():
                    progress(0.2, f"scoring experts on {windows.numel()} {calibration} tokens (once, then cached)")
                    result, cache = score(self.model, windows, cfg)
                    result = {"model": str(self.path), "calibration": calibration} | result
                    atomic_save(directory, lambda tmp: save_scores(tmp, result, cache))
                result, cache = load_scores(directory)
                self._scored[calibration] = _Scored(result, cache, windows, labels, directory)
            return self._scored[calibration]

    def _reduction(self, calibration: str, method: str, removed: int, selection: Selection = Selection()) -> Reduction:
        scored = self.scores(calibration)
        return reduction_for(self.model, scored.result, scored.cache, method, removed / self.info.experts, selection)

    def _view(self, calibration: str, method: str, removed: int, selection: Selection = Selection()):
        """The loaded model pruned or merged for a `with` block (core/reap/view.py); itself at 0 removed."""
        if not removed:
            return contextlib.nullcontext()
        reduction = self._reduction(calibration, method, removed, selection)
        return reduced_view(self.model, self.scores(calibration).cache, reduction)

    def _quality(self, calibration: str, method: str, removed: int, selection: Selection = Selection()) -> tuple[dict, bool]:
        """Live-set quality, cached on disk beside the scores (ratio 0 is the unpruned model for every method)."""
        scored = self.scores(calibration)
        file = scored.directory / f"quality-{_digest(repr(self.cfg.live_quality))[:12]}.json"
        if file not in self._tables:
            self._tables[file] = json.loads(file.read_text()) if file.is_file() else {}
        table, key = self._tables[file], f"{method}/{removed}{selection.key}" if removed else "unpruned"
        if key in table:
            return table[key], True
        with self._view(calibration, method, removed, selection):
            table[key] = evaluate(self.model, self.tokenizer, self.cfg.live_quality)
        _write_json(file, table)
        return table[key], False

    def view(self, calibration: str, method: str, ratio: float, progress: Progress = _quiet,
             selection: Selection = Selection()) -> PruneView:
        start = time.perf_counter()
        with self._lock:
            self._check(calibration, method)
            removed = self.removed(ratio)
            scored = self.scores(calibration, progress)
            progress(0.8, "pruning and evaluating")
            reduction = self._reduction(calibration, method, removed, selection)
            quality, cached = self._quality(calibration, method, removed, selection)
            baseline, _ = self._quality(calibration, method, 0)
        saliency = SALIENCY_OF.get(method, method)
        return PruneView(
            model=self.name, calibration=calibration, method=method, ratio=removed / self.info.experts,
            experts=self.info.experts, removed=removed, top_k=self.info.top_k, scope=selection.scope,
            protected=reduction.protected, layers=scored.result["layers"],
            saliency_method=saliency, saliency=scored.result["scores"][saliency],
            frequency=scored.result["routing"]["frequency"], kept=reduction.kept, merged_into=reduction.merged_into(),
            quality=quality, baseline=baseline, quality_items=self.cfg.live_quality.task_items,
            quality_windows=self.cfg.live_quality.ppl_windows, quality_cached=cached,
            seconds=time.perf_counter() - start,
        )

    def inspect(self, calibration: str, method: str, ratio: float, layer: int, expert: int,
                selection: Selection = Selection()) -> ExpertView:
        """One expert (core/reap/inspect.py): its scores, its routed tokens' domains and most frequent tokens,
        and what `method` at `ratio` does with it."""
        start = time.perf_counter()
        with self._lock:
            self._check(calibration, method)
            for value, name, limit in ((layer, "layer", self.info.layers), (expert, "expert", self.info.experts)):
                if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < limit:
                    raise ValueError(f"{name} must be a whole number in [0, {limit}), got {value!r}")
            removed = self.removed(ratio)
            scored = self.scores(calibration)
            reduction = self._reduction(calibration, method, removed, selection)
            if calibration not in self._routing:
                self._routing[calibration] = routing(self.model, scored.windows, self.cfg.score.batch)
            indices = self._routing[calibration][layer]
        result, saliency = scored.result, SALIENCY_OF.get(method, method)
        stat = lambda key: result["routing"][key][layer][expert]  # noqa: E731
        return ExpertView(
            layer=layer, layer_name=result["layers"][layer], expert=expert, method=method, saliency_method=saliency,
            saliency=result["scores"][saliency][layer][expert], reap=result["scores"]["reap"][layer][expert],
            frequency=stat("frequency"), mean_gate=stat("mean_gate"), max_activation=stat("max_activation"),
            domain_share=domain_shares(indices, expert, scored.labels, scored.windows.shape[1]),
            top_tokens=expert_tokens(indices, scored.windows, self.tokenizer, expert),
            fate=reduction.fate(layer, expert),
            seconds=time.perf_counter() - start,
        )

    def _matching_bench(self) -> dict | None:
        """The saved sweep, if its unpruned perplexities reproduce on this model (else it is another model's)."""
        if not self._bench_checked:
            self._bench_checked = True
            path = self.cfg.bench_json
            bench = json.loads(path.read_text()) if path.is_file() else None
            if bench and set(bench["baseline"]) == set(data.DOMAINS):
                q = BENCH_QUALITY
                same = (math.isclose(perplexity(self.model, data.windows(self.tokenizer, d, "heldout", q.ppl_windows *
                                                                         q.seq_len, q.seq_len, q.seed)),
                                     bench["baseline"][d]["ppl"], rel_tol=2e-3) for d in data.DOMAINS)
                self._bench = bench if all(same) else None
        return self._bench

    def curve(self, calibration: str, progress: Progress = _quiet) -> Curve:
        with self._lock:
            if calibration not in self._curves:
                self._check(calibration)
                progress(0.0, "checking the saved sweep against this model")
                bench = self._matching_bench()
                if bench and bench["calibration"] == calibration:
                    points = [CurvePoint(r["method"], r["ratio"], r["quality"]) for r in bench["results"]
                              if r["calibration"] == calibration and r.get("scope", "layer") == "layer"
                              and not r.get("protect")]
                    source = (f"{self.cfg.bench_json.name} (precomputed, {BENCH_QUALITY.ppl_windows} windows and "
                              f"{BENCH_QUALITY.task_items} task items per domain)")
                    self._curves[calibration] = Curve(calibration, source, bench["baseline"], points)
                else:
                    self._curves[calibration] = self._live_curve(calibration, progress)
            return self._curves[calibration]

    def _live_curve(self, calibration: str, progress: Progress) -> Curve:
        grid = sorted({self.removed(r) for r in self.cfg.curve_ratios if r <= self.info.max_ratio} - {0})
        runs = [(m, k) for m in ALL_METHODS for k in grid]
        points = []
        for i, (method, removed) in enumerate(runs):
            progress(i / len(runs), f"quality curve: {method} at {removed}/{self.info.experts} experts removed")
            points.append(CurvePoint(method, removed / self.info.experts, self._quality(calibration, method, removed)[0]))
        q = self.cfg.live_quality
        source = f"live evaluation ({q.ppl_windows} windows and {q.task_items} task items per domain), cached"
        return Curve(calibration, source, self._quality(calibration, "reap", 0)[0], points)

    def subspace(self, calibration: str, method: str, ratio: float, selection: Selection = Selection()) -> Subspace:
        """PCA view of original vs pruned vs merged at `ratio`: the chosen method fills its own slot, REAP
        (pruning) or HC-SMoE (merging) the other."""
        with self._lock:
            self._check(calibration, method)
            removed = self.removed(ratio)
            merging = method in MERGE_METHODS
            pruned, merged = ("reap", method) if merging else (method, "hc-smoe")
            windows = self.scores(calibration).windows[: max(1, self.cfg.subspace_tokens // self.cfg.score.seq_len)]
            means = {"original": mean_routed(self.model, windows)}
            with self._view(calibration, pruned, removed, Selection() if merging else selection):
                means["pruned"] = mean_routed(self.model, windows)
            with self._view(calibration, merged, removed):
                means["merged"] = mean_routed(self.model, windows)
            view = subspace_view(means)
        return Subspace(removed / self.info.experts, pruned, merged, view["layers"], view["spread"])

    def samples(self, calibration: str, method: str, ratio: float, selection: Selection = Selection()) -> list[Sample]:
        """Greedy continuations of one held-out task prompt per domain, unpruned and reduced."""
        with self._lock:
            self._check(calibration, method)
            removed = self.removed(ratio)
            q = self.cfg.live_quality
            prompts = [task_items(d, q.task_items, q.seed)[0].prompt for d in data.DOMAINS]
            if self._unpruned_samples is None:
                self._unpruned_samples = continuations(self.model, self.tokenizer, prompts, self.cfg.sample_tokens)
            with self._view(calibration, method, removed, selection):
                after = continuations(self.model, self.tokenizer, prompts, self.cfg.sample_tokens)
        return [Sample(*row) for row in zip(data.DOMAINS, prompts, self._unpruned_samples, after)]

    def export(self, calibration: str, method: str, ratio: float, out_dir: str | Path,
               selection: Selection = Selection()) -> Path:
        """The reduced model as a zip of its HF directory (stored dtype, tokenizer, recipe.yaml, card): the one moment
        a reduced copy exists (loaded afresh in its stored dtype, reduced, written, dropped)."""
        with self._lock:
            self._check(calibration, method)
            removed = self.removed(ratio)
            scored = self.scores(calibration)
            reduction = self._reduction(calibration, method, removed, selection)
            model, tokenizer = load_model(self.preset.model, replace(self.load, dtype="auto"))
            reduce_in_place(model, scored.cache, reduction)
        extra = {"merged_groups": dict(zip(scored.result["layers"], reduction.groups))} if reduction.groups else {}
        recipe = recipe_for(scored.result, method, removed / self.info.experts, reduction.kept, scope=selection.scope,
                            protected_super_experts=selection.protect, **extra)
        counts = sorted({len(k) for k in reduction.kept})
        name = f"{self.path.name}-{method}{selection.key.replace('/', '-')}-{counts[-1]}experts-{_file_part(calibration)}"
        return save_zip(model, tokenizer, out_dir, name, recipe)


def _file_part(calibration: str) -> str:
    """A calibration mixture as a file-name part: "code:0.5,math:0.5" -> "code0.5-math0.5"."""
    return calibration.replace(":", "").replace(",", "-")


@lru_cache(maxsize=2)
def lab_for(name_or_path: str) -> Lab:
    """The shared Lab of a model (loaded on first use)."""
    return Lab(name_or_path)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--calib", default="mixed", help="a domain, mixed, or a mixture such as code:0.5,math:0.5")
    parser.add_argument("--method", default="reap", choices=ALL_METHODS)
    parser.add_argument("--ratio", type=float, default=0.5)
    parser.add_argument("--scope", default="layer", choices=SCOPES)
    parser.add_argument("--protect", type=int, default=0, help="super experts never removed")
    args = parser.parse_args()
    view = lab_for(args.model).view(args.calib, args.method, args.ratio, lambda f, d: print(d, file=sys.stderr),
                                    Selection(args.scope, args.protect))
    print(json.dumps(asdict(view)))
