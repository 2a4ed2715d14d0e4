"""DREAM drafter (arXiv 2505.19201): an EAGLE-like adapter that reads the target's features through cross-attention.

    drafter = DreamDrafter.from_pretrained("assets/models/dream", target)     # target: a VisionLanguageModel
    engine.generate(image, prompt, drafter)

The adapter has the target's width and borrows its token embeddings (image features included) and LM head,
both frozen. At position i its input fuses the embedding of token i with the target's last-layer feature of
position i-1 (its own predicted feature once it drafts past what the target has seen); it predicts the target's
feature of position i, whose LM-head logits give token i+1. Three blocks:

  self-attention decoder layer   (its output is distilled towards a target intermediate layer, see train_dream)
  cross-attention block          queries from the draft states; keys/values from the target's last-layer
                                 features of the context (visual tokens included), RMSNorm on q and k,
                                 tanh gates initialised at 0 so training starts from a plain EAGLE drafter
  self-attention decoder layer

The MLPs may be narrower than the target's (`intermediate_size`), and the LM head may be restricted to the tokens
the target answers with most (`draft_vocab`, EAGLE-3's reduced draft vocabulary): both make a draft step cheaper.
Only the visual tokens the target's last layer attends to most at prefill (`keep_ratio`, default 0.75) enter
the cross-attention memory; the target itself still sees every visual token. Drafting is a chain, or with `tree`
(greedy decoding) an EAGLE-2 dynamic tree that the engine verifies in one forward (core/decoding/tree.py).
Training: core/training/dream.py.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from torch.nn import functional as F
from transformers.models.qwen2.modeling_qwen2 import rotate_half

from core.decoding.sampling import distribution, sample
from core.decoding.tree import TreeShape, depths
from core.drafters.base import DraftProposal, keep_drafting
from core.drafters.massv import visual_features
from core.models.vlm import VisionLanguageModel, last_layer_attention

WEIGHTS_FILE = "adapter.safetensors"
CONFIG_FILE = "dream_config.json"


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


def target_embeds(target: VisionLanguageModel, ids: torch.Tensor, image_mask: torch.Tensor,
                  features: torch.Tensor | None) -> torch.Tensor:
    """The target's own input embeddings: token embeddings, image features at the placeholders."""
    embeds = target.model.get_input_embeddings()(ids)
    if features is None:
        return embeds
    return embeds.masked_scatter(image_mask.unsqueeze(-1), features.to(embeds.dtype))


class DreamDraftRun:
    """One request's drafting state. Cache entries computed from the target's real features are kept across
    rounds; entries computed from the adapter's own predicted features (drafted positions) are dropped."""

    def __init__(self, drafter: DreamDrafter, session, keep_ratio: float):
        self.drafter = drafter
        target = drafter.target
        request = session.request
        self.device = target.device
        self.prompt_ids = request.input_ids[0].tolist()
        self.prompt_embeds = target_embeds(target, request.input_ids.to(self.device),
                                           request.image_mask.unsqueeze(0).to(self.device),
                                           visual_features(session.image_features))[0]
        self.cache = AdapterCache()
        self.real = 0  # cache entries computed from real target features
        # Cross-attention memory: which context positions it holds, and their keys / values.
        visual = request.image_mask.nonzero().view(-1)
        dropped = set()
        if len(visual) and keep_ratio < 1.0:
            after_image = int(visual.max()) + 1  # only these queries' rows are needed
            attention = last_layer_attention(target, session.prefill_states, session.prefill_positions,
                                             session.cache.layers[-1].keys, after_image)
            scores = visual_scores(attention, visual, after_image)
            kept = set(visual[keep_visual(scores, keep_ratio)].tolist())
            dropped = set(visual.tolist()) - kept
        self.dropped = dropped
        dtype = target.model.dtype
        self.memory_positions = torch.empty(0, dtype=torch.long, device=self.device)
        h, heads = drafter.adapter.cfg.hidden_size, drafter.adapter.cfg.num_heads
        self.keys = self.values = torch.empty(1, heads, 0, h // heads, device=self.device, dtype=dtype)
        self.memory_seen = 0

    def _grow_memory(self, features: torch.Tensor) -> None:
        new = [p for p in range(self.memory_seen, len(features)) if p not in self.dropped]
        self.memory_seen = len(features)
        if not new:
            return
        keys, values = self.drafter.adapter.cross.memory(features[new].unsqueeze(0))
        self.keys, self.values = torch.cat([self.keys, keys], 2), torch.cat([self.values, values], 2)
        self.memory_positions = torch.cat([self.memory_positions, torch.tensor(new, device=self.device)])

    def _embed(self, ids: list[int], start: int) -> torch.Tensor:
        """Embeddings of sequence positions start.. (prompt positions come from the prompt, image included)."""
        from_prompt = self.prompt_embeds[start:len(self.prompt_ids)]
        rest = ids[max(start, len(self.prompt_ids)):]
        if not rest:
            return from_prompt
        return torch.cat([from_prompt, self.drafter.target.model.get_input_embeddings()(torch.tensor(rest, device=self.device))])

    def _step(self, embeds: torch.Tensor, prev: torch.Tensor, start: int) -> torch.Tensor:
        """Feed positions start..start+n-1 (after `start` cached entries); returns predicted features [n, H]."""
        n = len(embeds)
        positions = torch.arange(start, start + n, device=self.device)
        # One new position sees every cached entry: no mask, the cheapest attention call (most draft steps).
        causal = None if n == 1 else positions.view(-1, 1) >= torch.arange(start + n, device=self.device).view(1, -1)
        return self._forward(embeds, prev, positions, causal)

    def _forward(self, embeds, prev, positions: torch.Tensor, self_mask: torch.Tensor | None) -> torch.Tensor:
        # The memory holds positions below memory_seen: queries at or past it read all of it (mask None).
        memory = None
        if not len(self.memory_positions) or self.memory_seen > int(positions[0]):
            memory = (self.memory_positions.view(1, -1) < positions.view(-1, 1))[None, None]
        _, out = self.drafter.adapter(embeds.unsqueeze(0), prev.unsqueeze(0), positions.unsqueeze(0),
                                      None if self_mask is None else self_mask[None, None], self.keys, self.values,
                                      memory, self.cache)
        return out[0]

    @torch.no_grad()
    def propose(self, session, gamma: int) -> DraftProposal:
        ids = self.prompt_ids + session.generated
        last = len(ids) - 1  # the newest committed token; the target's features cover positions < last
        features = session.features
        self._grow_memory(features)
        self.cache.crop(self.real)
        # Catch up on committed positions with the target's real features (feature of position i-1 for input i).
        start = self.real
        prev = features[max(start - 1, 0):last]
        if start == 0:  # the first position has no previous feature
            prev = torch.cat([features.new_zeros(1, features.shape[1]), prev])
        predicted = self._step(self._embed(ids, start), prev, start)
        self.real = last  # position `last` is fed again next time: its output is the first draft's source
        if self.drafter.tree is not None and session.sampling.greedy:
            return self._tree(session, last, predicted[-1:], gamma)
        tokens, probs = [], []
        feature, position = predicted[-1:], last + 1
        for k in range(gamma):
            q = self.drafter.draft_distribution(feature, session.sampling)[0]
            token = sample(q, session.sampling, session.generator)
            tokens.append(token)
            probs.append(q)
            if k + 1 == gamma or not keep_drafting(session, token, q):
                break
            feature = self._step(self._embed([*ids, *tokens], position), feature, position)
            position += 1
        return DraftProposal(tokens, torch.stack(probs))

    def _tree(self, session, last: int, root_feature: torch.Tensor, depth: int) -> DraftProposal:
        """EAGLE-2 dynamic tree: each level expands the top_k nodes by cumulative log-probability, all in one
        adapter forward; the `total` best nodes overall become the tree. The cache holds positions 0..last.
        With `session.min_draft_prob`, a node's children are its best child plus those the drafter gives at least
        that probability, and only those expand further: a confident drafter's tree narrows to a chain (top_k 1
        is exactly the chain's rule, core/drafters.keep_drafting) and branches only where it is unsure."""
        shape = self.drafter.tree
        floor = math.log(session.min_draft_prob) if session.min_draft_prob > 0 else -math.inf
        drafter = self.drafter
        embed = drafter.target.model.get_input_embeddings()
        tokens, parents, scores, own, probs, slots = [], [], [], [], [], []  # slots: node -> cache index once fed
        frontier, features, frontier_scores = [-1], root_feature, torch.zeros(1)
        node_features: dict[int, torch.Tensor] = {}
        for level in range(1, depth + 1):
            logits = drafter.head(features)
            logp = torch.log_softmax(logits.float(), -1)
            shown = drafter.to_vocab(distribution(logits, session.sampling))
            top = logp.topk(min(shape.top_k, logp.shape[-1]), dim=-1)
            top_ids = drafter.token_ids(top.indices)
            children = []
            for row, node in enumerate(frontier):
                for rank, (lp, token) in enumerate(zip(top.values[row].tolist(), top_ids[row].tolist())):
                    if rank > 0 and lp < floor:
                        break
                    children.append(len(tokens))
                    tokens.append(token)
                    parents.append(node)
                    scores.append(float(frontier_scores[row]) + lp)
                    own.append(lp)
                    probs.append(shown[row])
                    slots.append(None)
            if level == depth:
                break
            # Nothing after an end-of-sequence token is ever emitted, so such a node is a leaf.
            expandable = (c for c in children if tokens[c] not in session.stop_ids and own[c] >= floor)
            frontier = sorted(expandable, key=lambda i: -scores[i])[: shape.top_k]
            if not frontier:
                break
            fed_from = len(self.cache)
            mask = torch.zeros(len(frontier), fed_from + len(frontier), dtype=torch.bool, device=self.device)
            mask[:, : last + 1] = True  # the committed prefix, root included
            for row, node in enumerate(frontier):
                slots[node] = fed_from + row
                ancestor = node
                while ancestor >= 0:
                    mask[row, slots[ancestor]] = True
                    ancestor = parents[ancestor]
            prev = torch.stack([root_feature[0] if parents[n] < 0 else node_features[parents[n]] for n in frontier])
            out = self._forward(embed(torch.tensor([tokens[n] for n in frontier], device=self.device)), prev,
                                torch.full((len(frontier),), last + level, device=self.device),
                                None if mask.all() else mask)  # one branch so far: a plain step
            node_features.update(zip(frontier, out))
            features, frontier_scores = out, torch.tensor([scores[n] for n in frontier])
        chosen = set(sorted(range(len(tokens)), key=lambda i: -scores[i])[: shape.total])
        for node in list(chosen):  # a kept node's ancestors stay too (ties in score could drop one)
            while parents[node] >= 0:
                node = parents[node]
                chosen.add(node)
        depth_of = depths(parents)
        order = sorted(chosen, key=lambda i: (depth_of[i], -scores[i]))
        new_index = {old: new for new, old in enumerate(order)}
        return DraftProposal([tokens[i] for i in order], torch.stack([probs[i] for i in order]),
                             [new_index[parents[i]] if parents[i] >= 0 else -1 for i in order])


class DreamDrafter:
    reads_target_features = True  # the engine keeps the target's last-layer states for it (session.features)

    def __init__(self, adapter: DreamAdapter, target: VisionLanguageModel, name: str = "dream",
                 keep_ratio: float | None = None, tree: TreeShape | None = None):
        self.adapter = adapter.eval()
        self.target = target
        self.name = name
        self.tree = tree  # None: chain drafting
        self.keep_ratio = adapter.cfg.keep_ratio if keep_ratio is None else keep_ratio
        keep_visual(torch.ones(1), self.keep_ratio)  # validates the ratio
        lm_head = target.model.get_output_embeddings()
        self.vocab_size = lm_head.weight.shape[0]
        self.draft_ids = adapter.draft_ids  # None: the whole vocabulary
        rows = slice(None) if self.draft_ids is None else self.draft_ids
        self.head_weight = lm_head.weight[rows].detach()
        self.head_bias = None if lm_head.bias is None else lm_head.bias[rows].detach()

    def head(self, features: torch.Tensor) -> torch.Tensor:
        """Logits [n, K] over the draft vocabulary: the target's LM head, restricted to its rows."""
        return F.linear(features, self.head_weight, self.head_bias)

    def token_ids(self, indices: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary indices -> token ids."""
        return indices if self.draft_ids is None else self.draft_ids[indices]

    def to_vocab(self, probs: torch.Tensor) -> torch.Tensor:
        """[n, K] -> [n, V] probabilities, zero for the tokens outside the draft vocabulary."""
        if self.draft_ids is None:
            return probs
        return probs.new_zeros(len(probs), self.vocab_size).index_copy_(1, self.draft_ids, probs)

    def draft_distribution(self, features: torch.Tensor, sampling) -> torch.Tensor:
        """[n, V]: what the drafter samples from (the verification's q)."""
        return self.to_vocab(distribution(self.head(features), sampling))

    @classmethod
    def from_pretrained(cls, path: str | Path, target: VisionLanguageModel, name: str = "dream",
                        keep_ratio: float | None = None, tree: TreeShape | None = None) -> DreamDrafter:
        path = Path(path)
        cfg = DreamConfig(**json.loads((path / CONFIG_FILE).read_text())["adapter"])
        adapter = DreamAdapter(cfg)
        adapter.load_state_dict(load_file(path / WEIGHTS_FILE))
        return cls(adapter.to(target.device, target.model.dtype), target, name, keep_ratio, tree)

    def save_pretrained(self, path: str | Path, metadata: dict | None = None) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        save_file({k: (v.to(torch.bfloat16) if v.is_floating_point() else v).contiguous()
                   for k, v in self.adapter.state_dict().items()},
                  path / WEIGHTS_FILE)
        (path / CONFIG_FILE).write_text(json.dumps({"adapter": asdict(self.adapter.cfg), **(metadata or {})}, indent=1))

    def start(self, session) -> DreamDraftRun:
        return DreamDraftRun(self, session, self.keep_ratio)
