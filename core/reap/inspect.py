"""One expert up close: where the calibration tokens routed to it come from, and which tokens they are.

`routing(model, windows)` records, in one forward over the calibration windows, the experts each token was routed
to in every sparse layer (the router's own top-k, as the model ran it). From that, `expert_tokens` counts the
tokens most often routed to one expert, with a few occurrences in context, and `domain_shares` splits its routed
tokens by the calibration part (domain or file) each window came from. core/reap/lab.py adds the expert's scores
and what the current method does with it.

    indices = routing(model, windows)                  # [layers, tokens, top_k]
    expert_tokens(indices[1], windows, tokenizer, 7)
"""

from __future__ import annotations

from collections import Counter

import torch

from core.reap.adapters import moe_blocks, router_of

CONTEXT_TOKENS = 8  # tokens shown before an occurrence


@torch.no_grad()
def routing(model, windows: torch.Tensor, batch: int = 8) -> torch.Tensor:
    """[sparse layers, n * seq_len, top_k] expert indices of every calibration token, in window order."""
    per_layer: list[list[torch.Tensor]] = [[] for _ in moe_blocks(model)]
    handles = [router_of(model, block).register_forward_hook(
        lambda module, inputs, output, i=i: per_layer[i].append(output[2].detach().cpu()))
        for i, (_, block) in enumerate(moe_blocks(model))]
    try:
        for chunk in windows.split(batch):
            model(input_ids=chunk.to(model.device), use_cache=False)
    finally:
        for h in handles:
            h.remove()
    return torch.stack([torch.cat(chunks).reshape(windows.numel(), -1) for chunks in per_layer])


def routed_to(indices: torch.Tensor, expert: int) -> torch.Tensor:
    """[tokens] bool: the tokens one layer's router sent to `expert` (`indices`: [tokens, top_k] of that layer)."""
    return (indices == expert).any(-1)


def domain_shares(indices: torch.Tensor, expert: int, labels: list[str], seq_len: int) -> dict[str, float]:
    """Share of the expert's routed tokens per calibration part (the windows' labels)."""
    hits = routed_to(indices, expert).view(len(labels), seq_len).sum(1)
    totals = Counter()
    for label, n in zip(labels, hits.tolist()):
        totals[label] += n
    routed = sum(totals.values())
    return {label: round(totals[label] / routed, 4) if routed else 0.0 for label in dict.fromkeys(labels)}


def expert_tokens(indices: torch.Tensor, windows: torch.Tensor, tokenizer, expert: int, top: int = 8,
                  contexts: int = 2) -> list[dict]:
    """The tokens most often routed to `expert`: {"token", "count", "contexts": [text before «token»]}."""
    flat = windows.reshape(-1)
    where = routed_to(indices, expert).nonzero().view(-1)
    counts = Counter(flat[where].tolist())
    seq_len = windows.shape[1]
    out = []
    for token, count in counts.most_common(top):
        shown = []
        for pos in where[flat[where] == token][:contexts].tolist():
            start = max(pos - CONTEXT_TOKENS, pos - pos % seq_len)  # never across a window's start
            before = tokenizer.decode(flat[start:pos].tolist())
            shown.append(f"{before}«{tokenizer.decode([token])}»")
        out.append({"token": tokenizer.decode([token]), "count": count, "contexts": shown})
    return out
