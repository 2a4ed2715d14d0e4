"""The loaded model seen pruned or merged for the length of a `with` block, then itself again.

Pruning hides the removed experts from the router (core/reap/prune.py `LiveMask`); merging writes each group's
average into its representative's slot and hides the rest (core/reap/merge.py `merged_view`). Both give the outputs
the sliced or merged checkpoint gives, and neither copies the model, so the app and the benchmark evaluate every
method and ratio on the one model they loaded. Only saving materialises a reduced copy (core/reap/checkpoint.py).

    with reduced_view(model, cache, reduction_for(model, scores, cache, "reap", 0.5)): evaluate(model, ...)
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from core.reap.adapters import num_groups
from core.reap.checkpoint import slice_experts
from core.reap.merge import MERGE_METHODS, expert_groups, merge_experts, merged_view, representative
from core.reap.prune import LiveMask, Selection, kept_experts, super_experts


@dataclass
class Reduction:
    kept: list[list[int]]  # [layer] kept (merging: representative) experts
    groups: list[list[list[int]]] | None  # merging only: [layer] the groups merged into one
    protected: list[list[int]]  # [layer] super experts kept whatever they score

    def merged_into(self) -> list[dict[int, int]]:
        """[layer] merged-away expert -> the expert it was merged into (empty when pruning)."""
        return [{j: rep for group in layer for rep in set(group) & set(keep) for j in group if j != rep}
                for layer, keep in zip(self.groups or [[] for _ in self.kept], self.kept)]

    def fate(self, layer: int, expert: int) -> str:
        """What this reduction does with one expert, in words."""
        group = next((g for g in self.groups[layer] if expert in g), [expert]) if self.groups else [expert]
        if expert not in self.kept[layer]:
            return "removed" if self.groups is None else f"merged into expert {self.merged_into()[layer][expert]}"
        if expert in self.protected[layer]:
            return "kept (a protected super expert)"
        if len(group) > 1:
            return f"kept, and experts {', '.join(str(j) for j in group if j != expert)} are merged into it"
        return "kept"


def reduction_for(model, scores: dict, cache: dict, method: str, ratio: float,
                  selection: Selection = Selection()) -> Reduction:
    """Which experts `method` keeps (and, merging, merges) at `ratio`; nothing is changed yet."""
    if method in MERGE_METHODS:
        if selection != Selection():
            raise ValueError("super-expert protection and the global ranking apply to the pruning criteria; "
                             "merging keeps the same count in every layer")
        groups = expert_groups(method, cache, ratio, scores["top_k"])
        kept = [sorted(representative(g, freq) for g in layer) for layer, freq in zip(groups, cache["count"])]
        return Reduction(kept, groups, [[] for _ in kept])
    return Reduction(kept_experts(scores, cache, method, ratio, num_groups(model), selection), None,
                     super_experts(cache["max_activation"], selection.protect))


@contextlib.contextmanager
def reduced_view(model, cache: dict, reduction: Reduction):
    """`model` pruned or merged as `reduction` says inside the block, itself again after it."""
    if reduction.groups is not None:
        with merged_view(model, reduction.groups, cache["count"]):
            yield
        return
    mask = LiveMask(model)
    mask.set(reduction.kept)
    try:
        yield
    finally:
        mask.clear()


def reduce_in_place(model, cache: dict, reduction: Reduction) -> None:
    """Make `model` the reduced checkpoint for good (to save it): merge, then slice."""
    if reduction.groups is not None:
        merge_experts(model, reduction.groups, cache["count"])
    else:
        slice_experts(model, reduction.kept)
