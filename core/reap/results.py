"""What the REAP lab returns, as dataclasses the app renders (core/reap/lab.py computes them), and what a MoE's
config alone says (expert count, top-k, depth) to size the app's controls before any weights load.

    model_info("embedded").max_ratio
"""

from __future__ import annotations

from dataclasses import dataclass

from transformers import AutoConfig

from core.models.presets import moe_preset
from core.reap.adapters import ADAPTERS


@dataclass(frozen=True)
class ModelInfo:
    experts: int
    top_k: int
    layers: int

    @property
    def max_ratio(self) -> float:
        """The largest ratio that still leaves top-k experts per layer."""
        return (self.experts - self.top_k) / self.experts


@dataclass
class PruneView:
    """What one (calibration, method, ratio) does: the maps behind the heatmaps and quality against unpruned."""

    model: str
    calibration: str
    method: str
    ratio: float  # the ratio actually applied: removed / experts
    experts: int
    removed: int  # experts removed (or merged away) per layer; with a global ranking, per layer on average
    top_k: int
    scope: str  # "layer": the same count in every layer; "global": one ranking across layers
    protected: list[list[int]]  # [layer] super experts kept whatever they score
    layers: list[str]
    saliency_method: str  # the score `saliency` holds (SALIENCY_OF for merge methods)
    saliency: list[list[float]]  # [layer][expert]
    frequency: list[list[float]]  # [layer][expert], share of the layer's routed tokens
    kept: list[list[int]]  # [layer] kept (merging: representative) experts
    merged_into: list[dict[int, int]]  # [layer] merged-away expert -> the expert it was merged into
    quality: dict  # {domain: {"ppl", "acc"}} on the live evaluation set
    baseline: dict  # the same for the unpruned model
    quality_items: int  # task items per domain behind each accuracy
    quality_windows: int  # held-out windows per domain behind each perplexity
    quality_cached: bool
    seconds: float


@dataclass
class ExpertView:
    """One expert of one layer: its numbers on the calibration set, where its routed tokens come from, the tokens
    routed to it most, and what the current method does with it."""

    layer: int
    layer_name: str
    expert: int
    method: str
    saliency_method: str
    saliency: float  # the method's score (SALIENCY_OF for merge methods)
    reap: float
    frequency: float  # share of the layer's routed tokens
    mean_gate: float
    max_activation: float
    domain_share: dict[str, float]  # share of its routed tokens per calibration part
    top_tokens: list[dict]  # {"token", "count", "contexts"}
    fate: str  # "kept", "removed", "merged into expert N", "kept (protected super expert)", ...
    seconds: float


@dataclass
class CurvePoint:
    method: str
    ratio: float
    quality: dict


@dataclass
class Curve:
    """Quality against ratio for every method, one calibration; ratio 0 is `baseline`."""

    calibration: str
    source: str  # where the numbers come from, for the caption
    baseline: dict
    points: list[CurvePoint]


@dataclass
class Subspace:
    """core/reap/subspace.py's view of the original, a pruned and a merged model at one ratio."""

    ratio: float
    pruned_method: str
    merged_method: str
    layers: list[dict]  # [layer] {variant: [[x, y] per expert]}
    spread: dict  # {variant: [per layer]}


@dataclass
class Sample:
    domain: str
    prompt: str
    unpruned: str
    pruned: str



def model_info(name_or_path: str) -> ModelInfo:
    """Expert count, top-k and depth from the config alone (no weights), e.g. to size a ratio slider."""
    preset = moe_preset(name_or_path)
    config = AutoConfig.from_pretrained(preset.model, **preset.load.file_kwargs())
    if config.model_type not in ADAPTERS:
        raise ValueError(f"{name_or_path!r} is a {config.model_type!r} model, not a supported MoE family")
    return ModelInfo(getattr(config, ADAPTERS[config.model_type].experts_key), config.num_experts_per_tok,
                     config.num_hidden_layers)
