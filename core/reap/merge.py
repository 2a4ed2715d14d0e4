"""Expert-merging baselines REAP is compared with: HC-SMoE and M-SMoE, from the same cached statistics.

  hc-smoe  experts described by their mean output over calibration tokens (every expert on a bounded
           subsample), euclidean distance, average-linkage hierarchical clustering into the target count
  m-smoe   the most frequently routed experts are the dominant ones; every other expert joins the dominant
           expert whose router logits are most similar (cosine over calibration tokens)
Members of a group are averaged weighted by how often they were routed to; the merged expert takes the place
(and router row) of the group's most frequent member. The result is saved like a pruned model; `merged_view` applies
the merge to the loaded model for a `with` block instead (the app and the benchmark evaluate merges that way).

    python -m core reap merge --model M --scores DIR --method hc-smoe --ratio 0.5 --out OUT
"""

from __future__ import annotations

import contextlib

import torch
from scipy.cluster.hierarchy import cut_tree, linkage

from core.reap.adapters import moe_blocks, num_groups
from core.reap.checkpoint import load_model, recipe_for, save_reduced, slice_experts
from core.reap.prune import LiveMask, experts_to_keep
from core.reap.scores import load_scores

MERGE_METHODS = ("hc-smoe", "m-smoe")


def hc_smoe_groups(mean_output: torch.Tensor, keep: int) -> list[list[int]]:
    labels = cut_tree(linkage(mean_output.numpy(), method="average", metric="euclidean"), n_clusters=keep)[:, 0]
    return [sorted(torch.nonzero(torch.tensor(labels) == c).flatten().tolist()) for c in range(keep)]


def m_smoe_groups(logit_gram: torch.Tensor, count: torch.Tensor, keep: int) -> list[list[int]]:
    norms = logit_gram.diagonal().clamp(min=1e-12).sqrt()
    similarity = logit_gram / norms[:, None] / norms[None, :]
    dominant = count.argsort(descending=True, stable=True)[:keep].tolist()
    groups = {d: [d] for d in dominant}
    for j in range(len(count)):
        if j not in groups:
            groups[dominant[int(similarity[j, dominant].argmax())]].append(j)
    return [sorted(g) for g in groups.values()]


def expert_groups(method: str, cache: dict, ratio: float, top_k: int) -> list[list[list[int]]]:
    """Per layer, the groups of experts merged into one."""
    if method not in MERGE_METHODS:
        raise ValueError(f"unknown merge method {method!r}; expected one of {MERGE_METHODS}")
    experts = cache["count"].shape[1]
    keep = len(experts_to_keep([[0.0] * experts], ratio, top_k)[0])  # same count and validation as pruning
    if method == "hc-smoe":
        return [hc_smoe_groups(m, keep) for m in cache["mean_output_all"]]
    return [m_smoe_groups(g, c, keep) for g, c in zip(cache["logit_gram"], cache["count"])]


def representative(group: list[int], freq: torch.Tensor) -> int:
    """The member whose slot (and router row) a merged group takes: the most frequently routed one."""
    return group[int(freq[torch.tensor(group)].argmax())]


def _expert_tensors(block) -> list[torch.Tensor]:
    experts = block.experts.num_experts
    return [t for t in list(block.experts.parameters()) + list(block.experts.buffers())
            if t.dim() and t.shape[0] == experts]


@torch.no_grad()
def _average_into_representatives(model, groups: list[list[list[int]]], count: torch.Tensor):
    """In place: each group's frequency-weighted average written into its most frequent member's slot.

    Returns (the representatives per layer, [(tensor, slot, its weights before)] for every slot overwritten).
    """
    if num_groups(model) > 1:
        raise ValueError("merging across routing groups (n_group > 1) is not supported; prune instead")
    kept, overwritten = [], []
    for (_, block), layer_groups, freq in zip(moe_blocks(model), groups, count):
        reps = []
        for group in layer_groups:
            members = torch.tensor(group)
            w = freq[members].double()
            w = w / w.sum() if w.sum() > 0 else torch.full_like(w, 1 / len(group))
            rep = representative(group, freq)
            if len(group) > 1:
                for tensor in _expert_tensors(block):
                    index = members.to(tensor.device)
                    weights = w.to(tensor.device).view(-1, *[1] * (tensor.dim() - 1))
                    overwritten.append((tensor, rep, tensor.data[rep].clone()))
                    tensor.data[rep] = (tensor.data[index].double() * weights).sum(0).to(tensor.dtype)
            reps.append(rep)
        kept.append(sorted(reps))
    return kept, overwritten


def merge_experts(model, groups: list[list[list[int]]], count: torch.Tensor) -> list[list[int]]:
    """In place: frequency-weighted average of each group into its most frequent member, then slice.

    Returns the kept (representative) experts per layer.
    """
    kept, _ = _average_into_representatives(model, groups, count)
    slice_experts(model, kept)
    return kept


@contextlib.contextmanager
def merged_view(model, groups: list[list[list[int]]], count: torch.Tensor):
    """`model` behaves as `merge_experts` would make it inside the block, and is itself again after it.

    Only the representatives' slots are overwritten (their weights kept aside: at most half the experts) and the
    merged-away experts are hidden from the router, so no second copy of the model is made. Yields the kept experts.
    """
    mask = LiveMask(model)
    kept, overwritten = _average_into_representatives(model, groups, count)
    try:
        mask.set(kept)
        yield kept
    finally:
        mask.clear()
        with torch.no_grad():
            for tensor, slot, before in reversed(overwritten):
                tensor.data[slot] = before


def run(args) -> None:
    scores, cache = load_scores(args.scores)
    groups = expert_groups(args.method, cache, args.ratio, scores["top_k"])
    model, tokenizer = load_model(args.model or scores["model"], dtype="auto")  # averages run in float64
    kept = merge_experts(model, groups, cache["count"])
    named = {name: g for name, g in zip(scores["layers"], groups)}
    out = save_reduced(model, tokenizer, args.out, recipe_for(scores, args.method, args.ratio, kept, merged_groups=named))
    print(f"{args.method} {args.ratio:.0%}: {scores['num_experts']} -> {len(kept[0])} experts per layer -> {out}")
