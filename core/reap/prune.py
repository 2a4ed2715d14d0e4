"""Choose which experts go, from cached scores, and preview the result live by masking the router.

Each layer drops the same number of experts (the lowest scores), top-k is unchanged; options (`Selection`) rank
experts across layers instead, or protect the super experts (the largest max activations) from removal. The live
mask hides pruned experts from the router (the family's own routing rule, re-run with their logits at -inf): same
outputs as the sliced model (core/reap/checkpoint.py), no weights copied, which is how the app and the benchmark
evaluate every ratio on the one loaded model.

    python -m core reap prune --model M --scores DIR --method reap --ratio 0.5 [--scope global]
        [--protect-super-experts K] --out OUT
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from core.reap.adapters import adapter_for, moe_blocks, num_groups, router_of
from core.reap.checkpoint import load_model, recipe_for, save_reduced, slice_experts
from core.reap.scores import load_scores

SCOPES = ("layer", "global")


@dataclass(frozen=True)
class Selection:
    """How experts are chosen from a method's scores, beyond the ratio.

    scope "layer": each layer drops its lowest-scoring experts, the same count everywhere (the paper's setting);
    "global": one ranking across layers by score over the layer's mean score, the lowest go wherever they are
    (same total as "layer", each layer keeps at least top-k). `protect`: the `protect` experts with the largest
    max activation in the whole model (super experts) are never removed.
    """

    scope: str = "layer"
    protect: int = 0

    def __post_init__(self):
        if self.scope not in SCOPES:
            raise ValueError(f"scope must be one of {SCOPES}, got {self.scope!r}")
        if isinstance(self.protect, bool) or not isinstance(self.protect, int) or self.protect < 0:
            raise ValueError(f"super experts to protect must be a whole number >= 0, got {self.protect!r}")

    @property
    def key(self) -> str:
        """"" for the default; otherwise what tells this selection apart in cache keys and labels."""
        parts = [f"/{self.scope}"] if self.scope != "layer" else []
        if self.protect:
            parts.append(f"/protect{self.protect}")
        return "".join(parts)


def super_experts(max_activation: list[list[float]] | torch.Tensor, k: int) -> list[list[int]]:
    """Per layer, the experts among the `k` with the largest max activation anywhere in the model."""
    peaks = torch.as_tensor(max_activation, dtype=torch.float64)
    if k > peaks.numel():
        raise ValueError(f"cannot protect {k} super experts: the model has {peaks.numel()} routed experts")
    top = peaks.flatten().argsort(descending=True, stable=True)[:k]
    return [sorted((top[top // peaks.shape[1] == layer] % peaks.shape[1]).tolist()) for layer in range(len(peaks))]


def experts_to_keep(scores: list[list[float]], ratio: float, top_k: int, groups: int = 1,
                    protected: list[list[int]] | None = None, scope: str = "layer") -> list[list[int]]:
    """Per layer, the sorted indices of the experts kept when the lowest-scoring `ratio` of them go.

    With group-limited routing the same number goes from every group, so the groups stay equal in size.
    `protected[layer]` experts are kept whatever they score; `scope` as in `Selection`.
    """
    if not 0 <= ratio < 1:
        raise ValueError(f"ratio must be in [0, 1), got {ratio}")
    experts = len(scores[0])
    drop = int(experts * ratio + 1e-9)
    drop -= drop % groups
    keep = experts - drop
    if keep < top_k:
        raise ValueError(f"ratio {ratio} keeps {keep} of {experts} experts, fewer than top-k = {top_k}")
    if groups > 1 and keep // groups < 2:
        raise ValueError(f"ratio {ratio} keeps {keep // groups} experts per group; group routing needs at least 2")
    protected = protected or [[] for _ in scores]
    if scope == "global":
        if groups > 1:
            raise ValueError("a global ranking needs plain top-k routing; group-limited routing prunes per group")
        return _keep_global(scores, drop * len(scores), top_k, protected)
    per_group = experts // groups
    kept = []
    for i, (layer, guard) in enumerate(zip(scores, protected)):
        s = torch.tensor(layer, dtype=torch.float64)
        s[guard] = float("inf")  # protected experts rank first
        s = s.view(groups, per_group)
        if (s == float("inf")).sum(1).max() > keep // groups:
            raise ValueError(f"layer {i} has {len(guard)} protected experts, more than the {keep} it keeps")
        best = s.argsort(dim=1, descending=True, stable=True)[:, : keep // groups]
        kept.append(sorted((best + torch.arange(groups)[:, None] * per_group).flatten().tolist()))
    return kept


def _keep_global(scores: list[list[float]], drop: int, top_k: int, protected: list[list[int]]) -> list[list[int]]:
    s = torch.tensor(scores, dtype=torch.float64)
    layers, experts = s.shape
    # Scores grow with depth (outputs get larger), so each is compared with its own layer's mean.
    relative = s / s.mean(1, keepdim=True).clamp(min=1e-30)
    gone: list[set[int]] = [set() for _ in range(layers)]
    removed = 0
    for flat in relative.flatten().argsort(stable=True).tolist():
        if removed == drop:
            break
        layer, j = divmod(flat, experts)
        if j not in protected[layer] and experts - len(gone[layer]) > top_k:
            gone[layer].add(j)
            removed += 1
    if removed < drop:
        raise ValueError(f"cannot remove {drop} experts while keeping top-k = {top_k} per layer and the protected ones")
    return [sorted(set(range(experts)) - g) for g in gone]


class LiveMask:
    """Hide experts from the router without touching weights: `mask.set(kept)`, `mask.clear()`."""

    def __init__(self, model):
        self.model = model
        self.adapter = adapter_for(model)
        self.blocks = moe_blocks(model)
        self._handles = []

    def set(self, kept: list[list[int]]) -> None:
        self.clear()
        for (_, block), keep in zip(self.blocks, kept):
            mask = torch.zeros(block.experts.num_experts, dtype=torch.bool)
            mask[keep] = True
            self._handles.append(router_of(self.model, block).register_forward_hook(self._hook(mask)))

    def _hook(self, keep: torch.Tensor):
        route = self.adapter.route

        def hook(router, inputs, output):
            logits, weights, _ = output
            new_weights, index = route(router, logits.reshape(-1, len(keep)), keep.to(logits.device))
            return logits, new_weights.to(weights.dtype), index

        return hook

    def clear(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()


def kept_experts(scores: dict, cache: dict, method: str, ratio: float, groups: int,
                 selection: Selection = Selection()) -> list[list[int]]:
    """The experts a pruning criterion keeps at `ratio` under `selection`, from `reap score`'s output."""
    protected = super_experts(cache["max_activation"], selection.protect) if selection.protect else None
    return experts_to_keep(scores["scores"][method], ratio, scores["top_k"], groups, protected, selection.scope)


def run(args) -> None:
    scores, cache = load_scores(args.scores)
    if args.method not in scores["scores"]:
        raise ValueError(f"unknown method {args.method!r}; {args.scores} has {sorted(scores['scores'])}")
    selection = Selection(args.scope, args.protect)
    model, tokenizer = load_model(args.model or scores["model"], dtype="auto")  # slicing keeps the stored dtype
    kept = kept_experts(scores, cache, args.method, args.ratio, num_groups(model), selection)
    slice_experts(model, kept)
    recipe = recipe_for(scores, args.method, args.ratio, kept, scope=selection.scope,
                        protected_super_experts=selection.protect)
    out = save_reduced(model, tokenizer, args.out, recipe)
    counts = sorted({len(k) for k in kept})
    left = counts[0] if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    print(f"{args.method} {args.ratio:.0%}: {scores['num_experts']} -> {left} experts per layer -> {out}")
