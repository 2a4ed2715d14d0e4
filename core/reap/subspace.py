"""Subspace view: per layer, a 2-D PCA of each expert's mean routed output, original vs pruned vs merged.

The paper's picture of "functional subspace collapse": pruning keeps a subset of the original points,
merging replaces groups by averages that sit between them, so the spread shrinks. Each variant is observed
on the same calibration tokens (`mean_routed`, e.g. inside core/reap/view.py's `reduced_view`); all variants of a
layer are projected on the original's two principal axes so the plots share coordinates. `spread` is the mean
squared distance of the experts' mean outputs to their centroid in the full hidden space (the number the paper
reports shrinking).

    subspace_view({"original": mean_routed(model, windows), "pruned": ..., "merged": ...})
"""

from __future__ import annotations

import torch

from core.reap.observer import observe


def mean_routed(model, windows: torch.Tensor) -> list[torch.Tensor]:
    """Per layer, the mean routed output of every expert some calibration token reached."""
    stats = observe(model, windows)
    # Experts that no calibration token reached have no mean output: they are not drawn.
    return [(s.out_sum / s.count.clamp(min=1)[:, None])[s.count > 0] for s in stats]


def subspace_view(means: dict[str, list[torch.Tensor]]) -> dict:
    """{"layers": [{variant: [[x, y] per expert]}], "spread": {variant: [per layer]}} from each variant's
    `mean_routed`; "original" is required."""
    if "original" not in means:
        raise ValueError(f"subspace_view needs an 'original' variant, got {sorted(means)}")
    layers, spread = [], {name: [] for name in means}
    for layer, ref in enumerate(means["original"]):
        center = ref.mean(0)
        axes = torch.linalg.svd(ref - center, full_matrices=False).Vh[:2]  # PCA on the original experts
        points = {}
        for name, per_layer in means.items():
            m = per_layer[layer]
            points[name] = ((m - center) @ axes.T).round(decimals=5).tolist()
            spread[name].append(round(float(((m - m.mean(0)) ** 2).sum(1).mean()), 6))
        layers.append(points)
    return {"layers": layers, "spread": spread}
