"""Observer: what each MoE layer really did on calibration tokens, recorded from the forward the model runs anyway.

Per sparse block it wraps the fused experts module for the duration of a `with` block. The model calls
`experts(hidden, top_k_index, top_k_weights)` with the routing it actually chose (after softmax or sigmoid,
correction bias, groups, renormalisation and scaling: whatever the family does), so that is what is
recorded. The wrapper hands the module each (token, slot) pair as its own row with weight 1, which costs
the same expert FLOPs as the normal call, and gets back every routed expert's unweighted output f_j(x);
it records ‖f_j(x)‖ and then applies the gate weights itself, so the model's output is unchanged. No
expert runs on a token it was not routed to.

Accumulated per layer (E experts, H hidden):
  count [E]       tokens routed to j                  gate_sum [E]    Σ g_j(x)
  norm_sum [E]    Σ ‖f_j(x)‖ (EAN)                    reap_sum [E]    Σ g_j(x)·‖f_j(x)‖
  out_sum [E, H]  Σ f_j(x) (mean routed output, for the subspace view)
  logit_gram [E, E]  Σ_x l(x) l(x)ᵀ of router logits (M-SMoE similarity)
  max_act [E]     max over routed tokens of max_i |f_j(x)_i|: "super experts" stand out by it
  sample [S, H]   the first S block inputs (HC-SMoE runs every expert on this bounded subsample only)

`observe_layerwise` gathers the same statistics with one decoder layer on the accelerator at a time, for a model
that fits in CPU memory but not on the GPU (`python -m core reap score --layerwise cuda`).

    python -m core.reap.observer        # observes a tiny random Qwen3-MoE and prints layer 0's counts
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch

from core.reap.adapters import moe_blocks, router_of


@dataclass
class LayerStats:
    count: torch.Tensor
    gate_sum: torch.Tensor
    norm_sum: torch.Tensor
    reap_sum: torch.Tensor
    out_sum: torch.Tensor
    logit_gram: torch.Tensor
    max_act: torch.Tensor
    sample: list[torch.Tensor] = field(default_factory=list)

    @classmethod
    def empty(cls, experts: int, hidden: int) -> "LayerStats":
        z = lambda *s: torch.zeros(*s, dtype=torch.float64)  # noqa: E731  (float64: sums over many tokens)
        return cls(z(experts), z(experts), z(experts), z(experts), z(experts, hidden), z(experts, experts), z(experts))


class Observer:
    """`with Observer(model, sample_tokens=256) as obs: model(ids)` fills `obs.stats` (one LayerStats per block)."""

    def __init__(self, model, sample_tokens: int = 0):
        self.model = model
        self.blocks = moe_blocks(model)
        self.sample_tokens = sample_tokens
        self.stats: list[LayerStats] = []
        self._handles = []

    def __enter__(self) -> "Observer":
        for _, block in self.blocks:
            experts = block.experts
            self.stats.append(LayerStats.empty(experts.num_experts, self.model.config.hidden_size))
            stats = self.stats[-1]
            experts.forward = self._observed(experts.forward, stats)
            self._handles.append(router_of(self.model, block).register_forward_hook(self._logit_hook(stats)))
        return self

    def __exit__(self, *exc) -> None:
        for _, block in self.blocks:
            del block.experts.forward  # back to the class's forward
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def _observed(self, forward, stats: LayerStats):
        def run(hidden: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor) -> torch.Tensor:
            tokens, k = top_k_index.shape
            rows = forward(hidden.repeat_interleave(k, dim=0), top_k_index.reshape(-1, 1),
                           torch.ones(tokens * k, 1, dtype=top_k_weights.dtype, device=hidden.device))
            with torch.no_grad():
                idx, gate = top_k_index.reshape(-1), top_k_weights.reshape(-1, 1).float()
                norms = rows.float().norm(dim=-1, keepdim=True)
                # One scatter per call for all sums (float32 within a batch, float64 across batches).
                per_row = torch.cat([rows.float(), torch.ones_like(gate), gate, norms, gate * norms], dim=1)
                sums = torch.zeros(len(stats.count), per_row.shape[1], device=idx.device).index_add_(0, idx, per_row)
                sums = sums.double().cpu()
                peaks = torch.zeros(len(stats.count), device=idx.device).scatter_reduce_(
                    0, idx, rows.detach().abs().amax(dim=-1).float(), "amax")
                torch.maximum(stats.max_act, peaks.double().cpu(), out=stats.max_act)
                stats.out_sum += sums[:, :-4]
                stats.count += sums[:, -4]
                stats.gate_sum += sums[:, -3]
                stats.norm_sum += sums[:, -2]
                stats.reap_sum += sums[:, -1]
                have = sum(len(s) for s in stats.sample)
                if have < self.sample_tokens:
                    stats.sample.append(hidden[: self.sample_tokens - have].detach().cpu().clone())
            return (rows.view(tokens, k, -1) * top_k_weights[..., None].to(rows.dtype)).sum(1)

        return run

    @staticmethod
    def _logit_hook(stats: LayerStats):
        def hook(module, inputs, output):
            logits = output[0].detach().float().reshape(-1, stats.logit_gram.shape[0])
            stats.logit_gram += (logits.T @ logits).double().cpu()

        return hook


@torch.no_grad()
def all_expert_outputs(model, block, hidden: torch.Tensor) -> torch.Tensor:
    """[E, S, H]: every expert of a block on S tokens (bounded: only used on the observer's subsample)."""
    experts = block.experts
    n, s, device = experts.num_experts, len(hidden), next(experts.parameters()).device
    index = torch.arange(n, device=device).repeat_interleave(s)[:, None]
    rows = experts(hidden.to(device).repeat(n, 1), index, torch.ones(n * s, 1, dtype=hidden.dtype, device=device))
    return rows.view(n, s, -1)


@torch.no_grad()
def observe(model, windows: torch.Tensor, batch: int = 8, sample_tokens: int = 0) -> list[LayerStats]:
    """Run the model over [n, seq_len] token windows and return per-layer statistics."""
    model.eval()
    with Observer(model, sample_tokens) as obs:
        for chunk in windows.split(batch):
            model(input_ids=chunk.to(model.device), use_cache=False)
    return obs.stats


@contextlib.contextmanager
def on_device(module: torch.nn.Module, device: str | torch.device | None):
    """`module` moved to `device` for the block, then back where it was (no-op for None or "")."""
    if not device:
        yield module
        return
    home = next(module.parameters()).device
    module.to(device)
    try:
        yield module
    finally:
        module.to(home)


def _to(obj, device):
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, (tuple, list)):
        return type(obj)(_to(o, device) for o in obj)
    if isinstance(obj, dict):
        return {k: _to(v, device) for k, v in obj.items()}
    return obj


@torch.no_grad()
def observe_layerwise(model, windows: torch.Tensor, device: str | torch.device, batch: int = 8,
                      sample_tokens: int = 0) -> list[LayerStats]:
    """`observe`, with one decoder layer on `device` at a time and hidden states kept in CPU memory between layers,
    so every weight crosses to the device once. A first pass with each layer standing in as the identity records
    what the model passes every layer (masks and rotary embeddings differ between layer types); then each layer
    runs on all chunks before the next one moves in."""
    model.eval()
    decoder = model.get_decoder()
    layers = decoder.layers
    calls: list[list[tuple[tuple, dict]]] = [[] for _ in layers]
    hidden: list[torch.Tensor] = []  # per chunk: the current layer's input

    def stand_in(i: int):
        def record(states, *args, **kwargs):
            calls[i].append((args, kwargs))
            if i == 0:
                hidden.append(states)
            return states

        return record

    for i, layer in enumerate(layers):
        layer.forward = stand_in(i)
    try:
        for chunk in windows.split(batch):
            decoder(input_ids=chunk.to(model.device), use_cache=False)
    finally:
        for layer in layers:
            del layer.forward  # back to the class's forward
    with Observer(model, sample_tokens) as obs:
        for layer, layer_calls in zip(layers, calls):
            with on_device(layer, device):
                for c, (args, kwargs) in enumerate(layer_calls):
                    out = layer(hidden[c].to(device), *_to(args, device), **_to(kwargs, device))
                    hidden[c] = (out[0] if isinstance(out, tuple) else out).to(hidden[c].device)
            layer_calls.clear()
    return obs.stats


if __name__ == "__main__":
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    cfg = Qwen3MoeConfig(vocab_size=256, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, moe_intermediate_size=32, num_experts=8, num_experts_per_tok=2)
    stats = observe(Qwen3MoeForCausalLM(cfg), torch.randint(0, 256, (4, 32)))
    print("layer 0 tokens per expert:", stats[0].count.tolist())
