"""DREAM's adapter (core/drafters/dream/__init__.py): its config, two lean self-attention blocks around a gated
cross-attention block, and their KV caches. Written out rather than built from transformers' decoder layers: at
these widths per-op overhead, not arithmetic, is the cost (one block measured ~2x faster on a CPU).

    adapter = DreamAdapter(DreamConfig(hidden_size=192, ...))
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F
from transformers.models.qwen2.modeling_qwen2 import rotate_half

from core.models.vlm import VisionLanguageModel


@dataclass
class DreamConfig:
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int  # the adapter's MLPs; the target's own size by default, smaller drafts faster
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    draft_vocab: int = 0  # tokens the drafter may propose (the target's most frequent answers); 0: all of them
    keep_ratio: float = 0.75  # share of visual tokens in the cross-attention memory at inference
    intermediate_layer: str = "entropy"  # what the first block was distilled towards (recorded for ablations)

    @classmethod
    def for_target(cls, target: VisionLanguageModel, mlp_size: int = 0, **overrides) -> DreamConfig:
        text = target.text_config
        return cls(text.hidden_size, text.num_attention_heads, text.num_key_value_heads,
                   mlp_size or text.intermediate_size, text.rms_norm_eps, **overrides)

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads


class SwiGLU(nn.Module):
    """Qwen2's MLP, with gate and up projections fused into one matrix."""

    def __init__(self, cfg: DreamConfig):
        super().__init__()
        self.gate_up = nn.Linear(cfg.hidden_size, 2 * cfg.intermediate_size, bias=False)
        self.down = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return self.down(F.silu(gate) * up)


class KVCache:
    """One attention layer's keys and values [B, kv_heads, capacity, head_dim], written in order. Rolling back is
    lowering `length`: the entries past it are overwritten by the next append."""

    def __init__(self):
        self.keys = self.values = None
        self.length = 0

    def append(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        end = self.length + keys.shape[2]
        if self.keys is None or end > self.keys.shape[2]:
            grown = keys.new_zeros(*keys.shape[:2], max(256, 2 * end), keys.shape[3])
            old_keys, old_values = self.keys, self.values
            self.keys, self.values = grown, grown.clone()
            if old_keys is not None:
                self.keys[:, :, : self.length] = old_keys[:, :, : self.length]
                self.values[:, :, : self.length] = old_values[:, :, : self.length]
        self.keys[:, :, self.length:end] = keys
        self.values[:, :, self.length:end] = values
        self.length = end
        return self.keys[:, :, :end], self.values[:, :, :end]


class AdapterCache:
    """The adapter's two self-attention caches, always the same length. `layer_cache`: KVCache at inference;
    training's rollout passes use one that concatenates, which autograd can follow (core/training/dream.py)."""

    def __init__(self, layer_cache=KVCache):
        self.first, self.last = layer_cache(), layer_cache()

    def __len__(self) -> int:
        return self.first.length

    def crop(self, length: int) -> None:
        self.first.length = self.last.length = length


class SelfAttentionBlock(nn.Module):
    """Qwen2's decoder layer (RMSNorm, grouped-query self-attention with rotary positions and q/k/v bias, SwiGLU),
    written out with fused projections: at the embedded width per-op overhead dominates on CPU, where one block
    measured about twice as fast as transformers' Qwen2DecoderLayer with its generic cache and mask handling."""

    def __init__(self, cfg: DreamConfig):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.attn_norm = nn.RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.qkv = nn.Linear(cfg.hidden_size, (cfg.num_heads + 2 * cfg.num_kv_heads) * cfg.head_dim, bias=True)
        self.o = nn.Linear(cfg.hidden_size, cfg.hidden_size, bias=False)
        self.mlp_norm = nn.RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = SwiGLU(cfg)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], mask: torch.Tensor | None,
                cache: KVCache | None) -> torch.Tensor:
        batch, length, _ = x.shape
        qkv = self.qkv(self.attn_norm(x)).view(batch, length, -1, self.head_dim).transpose(1, 2)
        cos, sin = rope
        qk = qkv[:, : self.heads + self.kv_heads]  # queries' and keys' heads rotated together: half the ops
        q, k = (qk * cos + rotate_half(qk) * sin).split([self.heads, self.kv_heads], dim=1)
        v = qkv[:, self.heads + self.kv_heads:]
        if cache is not None:
            k, v = cache.append(k, v)
        attended = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        x = x + self.o(attended.transpose(1, 2).reshape(x.shape))
        return x + self.mlp(self.mlp_norm(x))


class CrossAttentionBlock(nn.Module):
    """Gated cross-attention + gated MLP, as in Flamingo-style fusion; both gates start closed."""

    def __init__(self, cfg: DreamConfig):
        super().__init__()
        h, self.heads, self.head_dim = cfg.hidden_size, cfg.num_heads, cfg.head_dim
        self.norm = nn.RMSNorm(h, cfg.rms_norm_eps)
        self.memory_norm = nn.RMSNorm(h, cfg.rms_norm_eps)
        self.q, self.k, self.v, self.o = (nn.Linear(h, h, bias=False) for _ in range(4))
        self.q_norm = nn.RMSNorm(self.head_dim, cfg.rms_norm_eps)
        self.k_norm = nn.RMSNorm(self.head_dim, cfg.rms_norm_eps)
        self.attn_gate = nn.Parameter(torch.zeros(1))
        self.mlp_norm = nn.RMSNorm(h, cfg.rms_norm_eps)
        self.mlp = SwiGLU(cfg)
        self.mlp_gate = nn.Parameter(torch.zeros(1))

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(*x.shape[:2], self.heads, self.head_dim).transpose(1, 2)

    def memory(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values [B, heads, M, head_dim] for target features [B, M, H]; computed once per feature."""
        x = self.memory_norm(features)
        return self.k_norm(self._heads(self.k(x))), self._heads(self.v(x))

    def forward(self, x: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                mask: torch.Tensor | None) -> torch.Tensor:
        """mask [B, 1, T, M], True where a query may read a memory entry (None: every entry); rows with no entry
        read nothing."""
        q = self.q_norm(self._heads(self.q(self.norm(x))))
        attended = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
        if mask is not None:
            attended = torch.nan_to_num(attended) * mask.any(-1, keepdim=True)  # an empty row gives 0, not NaN
        x = x + torch.tanh(self.attn_gate) * self.o(attended.transpose(1, 2).reshape(x.shape))
        return x + torch.tanh(self.mlp_gate) * self.mlp(self.mlp_norm(x))


class DreamAdapter(nn.Module):
    def __init__(self, cfg: DreamConfig):
        super().__init__()
        self.cfg = cfg
        self.fuse = nn.Linear(2 * cfg.hidden_size, cfg.hidden_size, bias=False)
        self.first = SelfAttentionBlock(cfg)
        self.cross = CrossAttentionBlock(cfg)
        self.last = SelfAttentionBlock(cfg)
        self.norm = nn.RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        # EAGLE-3's reduced draft vocabulary: the LM head's rows for these ids only (set by training; None: all).
        self.register_buffer("draft_ids", torch.zeros(cfg.draft_vocab, dtype=torch.long) if cfg.draft_vocab else None)
        self.register_buffer("inv_freq", 1.0 / cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2) / cfg.head_dim),
                             persistent=False)

    def rope(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin [B, 1, T, head_dim] for positions [B, T] (rotate-half layout, as Qwen2)."""
        angles = positions[:, None, :, None].float() * self.inv_freq
        angles = torch.cat([angles, angles], dim=-1)
        return angles.cos().to(dtype), angles.sin().to(dtype)

    def forward(self, embeds, prev_features, positions, self_mask, keys, values, memory_mask,
                cache: AdapterCache | None = None):
        """embeds, prev_features [B, T, H]; positions [B, T]; self_mask [B, 1, T, cached + T] (True = attend; None:
        every cached entry and itself, a single new position). Returns (first-block states, predicted target
        features), both [B, T, H]."""
        x = self.fuse(torch.cat([embeds, prev_features], dim=-1))
        rope = self.rope(positions, x.dtype)
        early = self.first(x, rope, self_mask, None if cache is None else cache.first)
        x = self.cross(early, keys, values, memory_mask)
        x = self.last(x, rope, self_mask, None if cache is None else cache.last)
        return early, self.norm(x)
