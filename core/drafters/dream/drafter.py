"""The DREAM drafter and one request's drafting with it.

`DreamDrafter` is the adapter plus the target's frozen LM head over the draft vocabulary (loading and saving
here). `DreamDraftRun` holds one request: the prompt's embeddings and the cross-attention memory at start, then per
round a catch-up on the committed positions with the target's real features and a chain, or an EAGLE-2 dynamic
tree, of drafts from the adapter's own predicted features.

    drafter = DreamDrafter.from_pretrained("assets/models/dream", target)
    run = drafter.start(context, prefill); proposal = run.propose(context, gamma)   # core/decoding/engine.py
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch.nn import functional as F

from core.decoding.session import DraftContext, PrefillRecord
from core.decoding.tree import TreeShape
from core.drafters.base import DraftProposal
from core.drafters.dream.adapter import AdapterCache, DreamAdapter, DreamConfig
from core.drafters.dream.keep import keep_visual, visual_scores
from core.drafters.state_drafting import draft_chain, grow_tree
from core.models.vlm import VisionLanguageModel, last_layer_attention, visual_features, with_image_features

WEIGHTS_FILE = "adapter.safetensors"
CONFIG_FILE = "dream_config.json"


class DreamDraftRun:
    """One request's drafting state. Cache entries computed from the target's real features are kept across
    rounds; entries computed from the adapter's own predicted features (drafted positions) are dropped."""

    def __init__(self, drafter: DreamDrafter, context: DraftContext, prefill: PrefillRecord, keep_ratio: float):
        self.drafter = drafter
        target = drafter.target
        request = context.request
        self.device = target.device
        self.prompt_ids = request.input_ids[0].tolist()
        token_embeds = target.model.get_input_embeddings()(request.input_ids.to(self.device))
        self.prompt_embeds = with_image_features(token_embeds, request.image_mask.unsqueeze(0),
                                                 visual_features(context.image_features))[0]
        self.cache = AdapterCache()
        self.real = 0  # cache entries computed from real target features
        # Cross-attention memory: which context positions it holds, and their keys / values.
        visual = request.image_mask.nonzero().view(-1)
        dropped = set()
        if len(visual) and keep_ratio < 1.0:
            after_image = int(visual.max()) + 1  # only these queries' rows are needed
            attention = last_layer_attention(target, prefill.hidden_states, prefill.positions, prefill.last_layer_keys,
                                             after_image)
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
    def propose(self, context: DraftContext, gamma: int) -> DraftProposal:
        ids = [*self.prompt_ids, *context.generated]
        last = len(ids) - 1  # the newest committed token; the target's features cover positions < last
        features = context.features
        self._grow_memory(features)
        self.cache.crop(self.real)
        # Catch up on committed positions with the target's real features (feature of position i-1 for input i).
        start = self.real
        prev = features[max(start - 1, 0):last]
        if start == 0:  # the first position has no previous feature
            prev = torch.cat([features.new_zeros(1, features.shape[1]), prev])
        predicted = self._step(self._embed(ids, start), prev, start)
        self.real = last  # position `last` is fed again next time: its output is the first draft's source
        if self.drafter.tree is not None and context.sampling.greedy:
            return grow_tree(self, context, self.drafter.tree, last, predicted[-1:], gamma)
        return draft_chain(self, context, last, predicted[-1:], gamma)

    # The chain's and the tree's view of this run (core/drafters/state_drafting.py).
    @property
    def cache_length(self) -> int:
        return len(self.cache)

    def logits(self, features: torch.Tensor) -> torch.Tensor:
        return self.drafter.head(features)

    def token_ids(self, indices: torch.Tensor) -> torch.Tensor:
        return self.drafter.token_ids(indices)

    def to_vocab(self, probs: torch.Tensor) -> torch.Tensor:
        return self.drafter.to_vocab(probs)

    def feed(self, tokens: list[int], prev: torch.Tensor, position: int, mask: torch.Tensor | None) -> torch.Tensor:
        embeds = self.drafter.target.model.get_input_embeddings()(torch.tensor(tokens, device=self.device))
        return self._forward(embeds, prev, torch.full((len(tokens),), position, device=self.device), mask)


class DreamDrafter:
    feature_layers = (-1,)  # the engine keeps the target's last-layer states for it (DraftContext.features)
    assistant_model = None  # no causal LM of its own: transformers' assisted generation cannot use it

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

    @property
    def drafts_trees(self) -> bool:
        return self.tree is not None

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

    @classmethod
    def from_pretrained(cls, path: str | Path, target: VisionLanguageModel, name: str = "dream",
                        keep_ratio: float | None = None) -> DreamDrafter:
        path = Path(path)
        cfg = DreamConfig(**json.loads((path / CONFIG_FILE).read_text())["adapter"])
        adapter = DreamAdapter(cfg)
        adapter.load_state_dict(load_file(path / WEIGHTS_FILE))
        return cls(adapter.to(target.device, target.model.dtype), target, name, keep_ratio)

    def save_pretrained(self, path: str | Path, metadata: dict | None = None) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        save_file({k: (v.to(torch.bfloat16) if v.is_floating_point() else v).contiguous()
                   for k, v in self.adapter.state_dict().items()},
                  path / WEIGHTS_FILE)
        (path / CONFIG_FILE).write_text(json.dumps({"adapter": asdict(self.adapter.cfg), **(metadata or {})}, indent=1))

    def start(self, context: DraftContext, prefill: PrefillRecord) -> DreamDraftRun:
        return DreamDraftRun(self, context, prefill, self.keep_ratio)
