"""Which visual tokens enter DREAM's cross-attention memory: the share the target's last layer attends to most at
prefill (`keep_ratio`); the target itself still sees every visual token.

    kept = keep_visual(visual_scores(attention, visual_positions), 0.75)
"""

from __future__ import annotations

import torch


def visual_scores(attention: torch.Tensor, visual: torch.Tensor, first_query: int = 0) -> torch.Tensor:
    """Attention each visual token receives ([Q, L] head-averaged, rows = queries first_query.., `visual` = their
    positions), averaged over the queries after the image: they all see every visual token, so no token is favoured
    by its place."""
    return attention[int(visual.max()) + 1 - first_query:, visual].mean(0)


def keep_visual(scores: torch.Tensor, keep_ratio: float) -> torch.Tensor:
    """Indices (into the visual tokens) of the top `keep_ratio` share by received attention, in original order."""
    if not 0.0 < keep_ratio <= 1.0:
        raise ValueError(f"keep_ratio must be in (0, 1], got {keep_ratio}")
    k = max(1, round(keep_ratio * len(scores)))
    return scores.topk(k).indices.sort().values
