"""Prune experts from cached scores: choose, slice, save; or preview by masking the router live.

Each layer drops the same number of experts (the lowest scores), top-k is unchanged. Slicing cuts dim 0
(the expert) of every tensor of the router and the fused experts module and updates the expert count in
the config, so the result is a plain HF directory that `AutoModelForCausalLM.from_pretrained` loads with no
project code. The live mask instead hides pruned experts from the router (the family's own routing rule,
re-run with their logits at -inf): same outputs as the sliced model, no weights copied, for the UI slider.

    python -m core reap prune --model M --scores DIR --method reap --ratio 0.5 --out OUT
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import torch
import yaml

from core.reap.adapters import adapter_for, moe_blocks, num_groups, router_of
from core.reap.scores import load_model, load_scores


def experts_to_keep(scores: list[list[float]], ratio: float, top_k: int, groups: int = 1) -> list[list[int]]:
    """Per layer, the sorted indices of the experts kept when the lowest-scoring `ratio` of them go.

    With group-limited routing the same number goes from every group, so the groups stay equal in size.
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
    per_group = experts // groups
    kept = []
    for layer in scores:
        s = torch.tensor(layer, dtype=torch.float64).view(groups, per_group)
        best = s.argsort(dim=1, descending=True, stable=True)[:, : keep // groups]
        kept.append(sorted((best + torch.arange(groups)[:, None] * per_group).flatten().tolist()))
    return kept


def _slice_module(module: torch.nn.Module, index: torch.Tensor, experts: int) -> None:
    for name, tensor in list(module.named_parameters(recurse=True)) + list(module.named_buffers(recurse=True)):
        if tensor.dim() and tensor.shape[0] == experts:
            owner = module.get_submodule(name.rpartition(".")[0]) if "." in name else module
            attr = name.rpartition(".")[2]
            sliced = tensor.data[index].clone()
            if isinstance(tensor, torch.nn.Parameter):
                setattr(owner, attr, torch.nn.Parameter(sliced, requires_grad=tensor.requires_grad))
            else:
                owner.register_buffer(attr, sliced)
    for m in module.modules():
        if getattr(m, "num_experts", None) == experts:
            m.num_experts = len(index)


@torch.no_grad()
def slice_experts(model, kept: list[list[int]]) -> None:
    """In place: keep only `kept[layer]` experts in every sparse block and update the config."""
    adapter = adapter_for(model)
    blocks = moe_blocks(model)
    if len(kept) != len(blocks) or len({len(k) for k in kept}) != 1:
        raise ValueError(f"need the same number of kept experts for each of the {len(blocks)} sparse layers")
    for (_, block), keep in zip(blocks, kept):
        experts = block.experts.num_experts
        index = torch.tensor(keep)
        _slice_module(router_of(model, block), index, experts)
        _slice_module(block.experts, index, experts)
        if getattr(block, "num_experts", None) == experts:
            block.num_experts = len(keep)
    setattr(model.config, adapter.experts_key, len(kept[0]))


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


def atomic_save(out: str | Path, write) -> Path:
    """Call `write(tmpdir)` on a temporary directory next to `out`, then rename it into place.

    A crash leaves `out` as it was (old content or absent), never half-written.
    """
    out = Path(out).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        write(tmp)
        umask = os.umask(0)
        os.umask(umask)
        tmp.chmod(0o777 & ~umask)  # mkdtemp makes it private; the result should look like any saved model
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
            os.replace(out, old / out.name)
            os.replace(tmp, out)
            shutil.rmtree(old)
        else:
            os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def save_reduced(model, tokenizer, out: str | Path, recipe: dict) -> Path:
    """The model (in its stored dtype), tokenizer, recipe.yaml and a model card, written atomically."""
    card = (
        f"# {Path(out).name}\n\n"
        f"`{recipe['source_model']}` with {recipe['ratio']:.0%} of its routed experts removed per layer by "
        f"**{recipe['method']}**, calibrated on `{recipe['calibration']}` ({recipe['calibration_tokens']} tokens). "
        f"{recipe['experts_before']} -> {recipe['experts_after']} experts per layer, top-k {recipe['top_k']} unchanged.\n\n"
        "Loads with plain transformers:\n\n"
        "```python\nfrom transformers import AutoModelForCausalLM\n"
        f"model = AutoModelForCausalLM.from_pretrained(\"{Path(out).name}\")\n```\n\n"
        "Kept experts per layer are listed in `recipe.yaml`. Made with Speculum (`python -m core reap ...`).\n"
    )

    def write(tmp: Path) -> None:
        model.save_pretrained(tmp)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        (tmp / "recipe.yaml").write_text(yaml.safe_dump(recipe, sort_keys=False))
        (tmp / "README.md").write_text(card)

    return atomic_save(out, write)


def recipe_for(scores: dict, method: str, ratio: float, kept: list[list[int]], **extra) -> dict:
    return {
        "method": method,
        "ratio": ratio,
        "source_model": scores["model"],
        "calibration": scores["calibration"],
        "calibration_tokens": scores["num_tokens"],
        "experts_before": scores["num_experts"],
        "experts_after": len(kept[0]),
        "top_k": scores["top_k"],
        "kept_experts": {name: keep for name, keep in zip(scores["layers"], kept)},
        **extra,
    }


def run(args) -> None:
    scores, _ = load_scores(args.scores)
    if args.method not in scores["scores"]:
        raise ValueError(f"unknown method {args.method!r}; {args.scores} has {sorted(scores['scores'])}")
    model, tokenizer = load_model(args.model or scores["model"], dtype="auto")  # slicing keeps the stored dtype
    kept = experts_to_keep(scores["scores"][args.method], args.ratio, scores["top_k"], num_groups(model))
    slice_experts(model, kept)
    out = save_reduced(model, tokenizer, args.out, recipe_for(scores, args.method, args.ratio, kept))
    print(f"{args.method} {args.ratio:.0%}: {scores['num_experts']} -> {len(kept[0])} experts per layer -> {out}")
