"""Per-architecture differences of transformers-5 MoE families, in one table.

Every supported family has the same shape in transformers 5: a sparse block with a router (returning
`(logits, top-k weights, top-k indices)`) and a fused experts module called as
`experts(hidden, top_k_index, top_k_weights)`, whose tensors all have the expert on dim 0. What differs is
where the expert count lives in the config, what the router attribute is called, and the routing rule,
which the live preview mask must reproduce with pruned experts removed. Shared experts (Qwen2-MoE,
DeepSeek, GLM) sit beside the routed ones and are never touched.

    python -m core.reap.adapters        # lists the supported families
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Callable

import torch


def softmax_topk(router, logits: torch.Tensor, keep: torch.Tensor, renorm: bool | None = None):
    """softmax over all experts, top-k, optional renormalisation (Qwen, Mixtral, OLMoE, DeepSeek-V2)."""
    probs = torch.softmax(logits.float().masked_fill(~keep, float("-inf")), dim=-1)
    weights, index = torch.topk(probs, router.top_k, dim=-1)
    if getattr(router, "norm_topk_prob", True) if renorm is None else renorm:
        weights = weights / weights.sum(-1, keepdim=True)
    return weights * getattr(router, "routed_scaling_factor", 1.0), index


def sigmoid_bias(router, logits: torch.Tensor, keep: torch.Tensor):
    """sigmoid scores, selection on scores + correction bias within the best groups (DeepSeek-V3, GLM4-MoE)."""
    scores = logits.float().sigmoid()
    choice = (scores + router.e_score_correction_bias).masked_fill(~keep, float("-inf"))
    groups = choice.view(len(choice), router.num_group, -1)
    group_scores = groups.topk(2, dim=-1)[0].sum(-1)
    best = group_scores.topk(router.topk_group, dim=-1)[1]
    group_mask = torch.zeros_like(group_scores).scatter_(1, best, 1).bool()
    choice = groups.masked_fill(~group_mask[..., None], float("-inf")).flatten(1)
    index = choice.topk(router.top_k, dim=-1)[1]
    weights = scores.gather(1, index)
    if router.norm_topk_prob:
        weights = weights / (weights.sum(-1, keepdim=True) + 1e-20)
    return weights * router.routed_scaling_factor, index


def topk_softmax(router, logits: torch.Tensor, keep: torch.Tensor):
    """top-k of the raw logits, softmax over the k (GPT-OSS, Granite-MoE)."""
    top, index = logits.float().masked_fill(~keep, float("-inf")).topk(router.top_k, dim=-1)
    return torch.softmax(top, dim=-1), index


@dataclass(frozen=True)
class Adapter:
    experts_key: str  # config field with the number of routed experts per layer
    route: Callable  # (router, logits, keep mask [E] bool) -> (top-k weights, top-k indices)
    router_attr: str = "gate"
    groups_attr: str | None = None  # config field of group-limited routing: experts are pruned evenly per group
    requires: tuple[tuple[str, object], ...] = ()  # config values the routing rule above assumes


ADAPTERS: dict[str, Adapter] = {
    "qwen3_moe": Adapter("num_experts", softmax_topk),
    "qwen2_moe": Adapter("num_experts", softmax_topk),
    "olmoe": Adapter("num_experts", softmax_topk),
    "flex_olmo": Adapter("num_experts", softmax_topk),
    "mixtral": Adapter("num_local_experts", partial(softmax_topk, renorm=True)),
    "minimax": Adapter("num_local_experts", partial(softmax_topk, renorm=True)),
    # Its "group_limited_greedy" mode is not reproduced by the mask, so only plain greedy top-k is accepted.
    "deepseek_v2": Adapter("n_routed_experts", partial(softmax_topk, renorm=False),
                           requires=(("topk_method", "greedy"),)),
    "deepseek_v3": Adapter("n_routed_experts", sigmoid_bias, groups_attr="n_group"),
    "glm4_moe": Adapter("n_routed_experts", sigmoid_bias, groups_attr="n_group"),
    "dots1": Adapter("n_routed_experts", sigmoid_bias, groups_attr="n_group"),
    "gpt_oss": Adapter("num_local_experts", topk_softmax, router_attr="router"),
    "granitemoe": Adapter("num_local_experts", topk_softmax, router_attr="router"),
}


def adapter_for(model) -> Adapter:
    model_type = model.config.model_type
    if model_type not in ADAPTERS:
        raise ValueError(
            f"model type {model_type!r} is not a supported MoE family (dense models have no experts to prune); "
            f"supported: {sorted(ADAPTERS)}"
        )
    adapter = ADAPTERS[model_type]
    for key, value in adapter.requires:
        if getattr(model.config, key) != value:
            raise ValueError(f"{model_type} with {key}={getattr(model.config, key)!r} is not supported (needs {value!r})")
    return adapter


def moe_blocks(model) -> list[tuple[str, torch.nn.Module]]:
    """(name, block) of every sparse block, in layer order; dense layers (e.g. DeepSeek's first_k_dense) are skipped."""
    router_attr = adapter_for(model).router_attr
    blocks = [(n, m) for n, m in model.named_modules() if hasattr(m, "experts") and hasattr(m, router_attr)]
    if not blocks:
        raise ValueError(f"{model.config.model_type!r} model has no sparse MoE block (router {router_attr!r} + experts)")
    return blocks


def router_of(model, block) -> torch.nn.Module:
    return getattr(block, adapter_for(model).router_attr)


def num_groups(model) -> int:
    attr = adapter_for(model).groups_attr
    return getattr(model.config, attr) if attr else 1


if __name__ == "__main__":
    for name, a in ADAPTERS.items():
        route = getattr(a.route, "func", a.route).__name__
        print(f"{name:12s} experts={a.experts_key:18s} router={a.router_attr:7s} route={route}")
