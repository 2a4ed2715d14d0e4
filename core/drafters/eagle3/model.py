"""EAGLE-3's draft model (arXiv 2503.01840), as vLLM and SGLang serve it: `fc` fuses the target's low, middle and
high layer states, one decoder layer reads [normed token embedding; normed state], an LM head over a reduced draft
vocabulary (`d2t`: target id = draft index + d2t[index]; `t2d`: which target ids it holds).

    model = Eagle3Model(Eagle3Config.for_target(target, draft_vocab_size=256))
    state = model.fuse(aux_states)                        # [B, T, 3 H_target] -> [B, T, H]
    out = model(input_ids, state, positions, mask, cache) # [B, T, H] pre-norm: the next draft step's input state
    logits = model.logits(out)                             # [B, T, draft vocab]

The computation follows vLLM's `llama_eagle3.py` (core/drafters/eagle3/formats.py maps its weight names):
  e = input_layernorm(embed);  h = hidden_norm(state);  residual = h if norm_before_residual else state
  x = residual + o(attention(qkv([e; h])));  out = x + mlp(post_attention_layernorm(x));  logits = lm_head(norm(out))
Projections are fused here (one matmul for q, k, v and one for gate, up: per-op overhead is the cost at these
widths on a CPU) and split on export. Rotary positions are 1-D, or with `mrope_section` the target's multimodal
positions (three rows: temporal, height, width), as the target itself rotates them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F
from transformers.models.qwen2.modeling_qwen2 import rotate_half

from core.drafters.dream.adapter import KVCache
from core.models.vlm import VisionLanguageModel


def default_layer_ids(layers: int) -> tuple[int, int, int]:
    """vLLM's and SpecForge's default low / middle / high layers. vLLM collects the residual stream entering these
    decoder layers, which is transformers' `hidden_states[i]` (index 0 = the embeddings). A model too shallow for
    that formula (tests' tiny targets) reads its embeddings, middle and last states."""
    return (2, layers // 2, layers - 3) if layers >= 6 else (0, layers // 2, layers)


@dataclass
class Eagle3Config:
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    target_hidden_size: int
    vocab_size: int  # the target's
    draft_vocab_size: int
    layer_ids: tuple[int, ...]  # the target's hidden_states indices fused by fc, low to high
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    mrope_section: tuple[int, ...] | None = None  # rotate by the target's multimodal positions (a VL target)
    norm_before_residual: bool = False

    def __post_init__(self):
        self.layer_ids = tuple(self.layer_ids)
        self.mrope_section = None if self.mrope_section is None else tuple(self.mrope_section)
        if self.mrope_section is not None and 2 * sum(self.mrope_section) != self.head_dim:
            raise ValueError(f"mrope_section {self.mrope_section} must cover half the head dim {self.head_dim}")

    @classmethod
    def for_target(cls, target: VisionLanguageModel, draft_vocab_size: int = 0, mlp_size: int = 0,
                   **overrides) -> Eagle3Config:
        """A drafter as wide as the target, with its attention shape, rotary base and multimodal sections."""
        text = target.text_config
        rope = getattr(text, "rope_parameters", None) or {}
        fields = dict(
            hidden_size=text.hidden_size, num_heads=text.num_attention_heads, num_kv_heads=text.num_key_value_heads,
            head_dim=getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads,
            intermediate_size=mlp_size or text.intermediate_size, target_hidden_size=text.hidden_size,
            vocab_size=text.vocab_size, draft_vocab_size=draft_vocab_size or text.vocab_size,
            layer_ids=default_layer_ids(text.num_hidden_layers), rms_norm_eps=text.rms_norm_eps,
            rope_theta=rope.get("rope_theta", 10000.0), mrope_section=rope.get("mrope_section"))
        return cls(**(fields | overrides))


class Eagle3Layer(nn.Module):
    """The one decoder layer: attention over [embedding; state] (2 H wide in, no biases, as Llama), then SwiGLU."""

    def __init__(self, cfg: Eagle3Config):
        super().__init__()
        self.cfg = cfg
        h, d = cfg.hidden_size, cfg.head_dim
        self.input_layernorm = nn.RMSNorm(h, cfg.rms_norm_eps)
        self.hidden_norm = nn.RMSNorm(h, cfg.rms_norm_eps)
        self.qkv = nn.Linear(2 * h, (cfg.num_heads + 2 * cfg.num_kv_heads) * d, bias=False)
        self.o = nn.Linear(cfg.num_heads * d, h, bias=False)
        self.post_attention_layernorm = nn.RMSNorm(h, cfg.rms_norm_eps)
        self.gate_up = nn.Linear(h, 2 * cfg.intermediate_size, bias=False)
        self.down = nn.Linear(cfg.intermediate_size, h, bias=False)

    def forward(self, embeds, state, rope, mask, cache: KVCache | None) -> torch.Tensor:
        cfg = self.cfg
        batch, length, _ = embeds.shape
        normed = self.hidden_norm(state)
        residual = normed if cfg.norm_before_residual else state
        qkv = self.qkv(torch.cat([self.input_layernorm(embeds), normed], -1))
        qkv = qkv.view(batch, length, -1, cfg.head_dim).transpose(1, 2)
        cos, sin = rope
        qk = qkv[:, : cfg.num_heads + cfg.num_kv_heads]
        q, k = (qk * cos + rotate_half(qk) * sin).split([cfg.num_heads, cfg.num_kv_heads], dim=1)
        v = qkv[:, cfg.num_heads + cfg.num_kv_heads:]
        if cache is not None:
            k, v = cache.append(k, v)
        attended = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        x = residual + self.o(attended.transpose(1, 2).reshape(batch, length, -1))
        gate, up = self.gate_up(self.post_attention_layernorm(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


class Eagle3Model(nn.Module):
    def __init__(self, cfg: Eagle3Config):
        super().__init__()
        self.cfg = cfg
        # Its own copy of the token embeddings (the target's, frozen, when trained here), as vLLM loads them.
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size).requires_grad_(False)
        self.fc = nn.Linear(len(cfg.layer_ids) * cfg.target_hidden_size, cfg.hidden_size, bias=False)
        self.layer = Eagle3Layer(cfg)
        self.norm = nn.RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(cfg.draft_vocab_size, dtype=torch.long))
        self.register_buffer("t2d", torch.ones(cfg.vocab_size, dtype=torch.bool) if cfg.draft_vocab_size ==
                             cfg.vocab_size else torch.zeros(cfg.vocab_size, dtype=torch.bool))
        d = cfg.head_dim
        self.register_buffer("inv_freq", 1.0 / cfg.rope_theta ** (torch.arange(0, d, 2) / d), persistent=False)

    def set_draft_vocab(self, token_ids: torch.Tensor) -> None:
        """The sorted target ids the LM head's rows stand for."""
        self.d2t.copy_(token_ids - torch.arange(len(token_ids), device=token_ids.device))
        self.t2d.zero_()
        self.t2d[token_ids] = True

    @property
    def draft_token_ids(self) -> torch.Tensor:
        return torch.arange(len(self.d2t), device=self.d2t.device) + self.d2t

    def fuse(self, aux_states: torch.Tensor) -> torch.Tensor:
        """The target's concatenated layer states [..., 3 H_target] -> the layer's input state [..., H]."""
        return self.fc(aux_states)

    def rope(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin [B, 1, T, head_dim] for positions [B, T] or, with mrope_section, [3, B, T]."""
        angles = positions[..., None].float() * self.inv_freq
        angles = torch.cat([angles, angles], dim=-1)
        if self.cfg.mrope_section is not None:  # each band of frequencies takes its own position row
            bands = angles.split(list(self.cfg.mrope_section) * 2, dim=-1)
            angles = torch.cat([band[i % 3] for i, band in enumerate(bands)], dim=-1)
        angles = angles[:, None]
        return angles.cos().to(dtype), angles.sin().to(dtype)

    def forward(self, input_ids, state, positions, mask=None, cache: KVCache | None = None) -> torch.Tensor:
        """input_ids [B, T]; state [B, T, H]; positions as for `rope`; mask [B, 1, T, cached + T] (True = attend; None:
        every cached entry, for a single new position). Returns the pre-norm output state [B, T, H]."""
        embeds = self.embed_tokens(input_ids)
        return self.layer(embeds, state, self.rope(positions, embeds.dtype), mask, cache)

    def logits(self, out: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.norm(out))
