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
import math
from dataclasses import asdict
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch.nn import functional as F

from core.decoding.sampling import distribution, sample
from core.decoding.session import DraftContext, PrefillRecord
from core.decoding.tree import TreeShape, depths
from core.drafters.base import DraftProposal, keep_drafting
from core.drafters.dream.adapter import AdapterCache, DreamAdapter, DreamConfig
from core.drafters.dream.keep import keep_visual, visual_scores
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
            return self._tree(context, last, predicted[-1:], gamma)
        tokens, probs = [], []
        feature, position = predicted[-1:], last + 1
        for k in range(gamma):
            q = self.drafter.draft_distribution(feature, context.sampling)[0]
            token = sample(q, context.sampling, context.generator)
            tokens.append(token)
            probs.append(q)
            if k + 1 == gamma or not keep_drafting(context, token, q):
                break
            feature = self._step(self._embed([*ids, *tokens], position), feature, position)
            position += 1
        return DraftProposal(tokens, torch.stack(probs))

    def _tree(self, context: DraftContext, last: int, root_feature: torch.Tensor, depth: int) -> DraftProposal:
        """EAGLE-2 dynamic tree: each level expands the top_k nodes by cumulative log-probability, all in one
        adapter forward; the `total` best nodes overall become the tree. The cache holds positions 0..last.
        With `context.min_draft_prob`, a node's children are its best child plus those the drafter gives at least
        that probability, and only those expand further: a confident drafter's tree narrows to a chain (top_k 1
        is exactly the chain's rule, core/drafters.keep_drafting) and branches only where it is unsure."""
        shape = self.drafter.tree
        floor = math.log(context.min_draft_prob) if context.min_draft_prob > 0 else -math.inf
        drafter = self.drafter
        embed = drafter.target.model.get_input_embeddings()
        tokens, parents, scores, own, probs, slots = [], [], [], [], [], []  # slots: node -> cache index once fed
        frontier, features, frontier_scores = [-1], root_feature, torch.zeros(1)
        node_features: dict[int, torch.Tensor] = {}
        for level in range(1, depth + 1):
            logits = drafter.head(features)
            logp = torch.log_softmax(logits.float(), -1)
            shown = drafter.to_vocab(distribution(logits, context.sampling))
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
            expandable = (c for c in children if tokens[c] not in context.stop_ids and own[c] >= floor)
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
    reads_target_features = True  # the engine keeps the target's last-layer states for it (DraftContext.features)
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

    def start(self, context: DraftContext, prefill: PrefillRecord) -> DreamDraftRun:
        return DreamDraftRun(self, context, prefill, self.keep_ratio)
