"""Drafting for drafters that carry a state from each drafted token to the next (DREAM, EAGLE-3): a chain, or
EAGLE-2's dynamic draft tree.

A chain draws each token from the drafter's distribution and stops where core/drafters/base.keep_drafting says.
In a tree, each level expands the top_k nodes by cumulative log-probability, all in one drafter forward; the `total` best
nodes overall become the tree (core/decoding/tree.py verifies it). With `context.min_draft_prob`, a node's children
are its best child plus those the drafter gives at least that probability, and only those expand further: a
confident drafter's tree narrows to a chain (top_k 1 is exactly the chain's rule, core/drafters/base.keep_drafting)
and branches only where it is unsure.

    proposal = draft_chain(run, context, last, root_state, gamma)
    proposal = grow_tree(run, context, shape, last, root_state, depth)
"""

from __future__ import annotations

import math
from typing import Protocol

import torch

from core.decoding.sampling import distribution, sample
from core.decoding.session import DraftContext
from core.decoding.tree import TreeShape, depths
from core.drafters.base import DraftProposal, keep_drafting


class StateDraftRun(Protocol):
    """What a request's drafting state offers a chain or a tree. States are what the drafter carries from a token to the
    next (DREAM: predicted target features; EAGLE-3: its layer's pre-norm output)."""

    cache_length: int  # entries in the drafter's self-attention cache

    def logits(self, states: torch.Tensor) -> torch.Tensor: ...  # [n, K] over the draft vocabulary

    def token_ids(self, indices: torch.Tensor) -> torch.Tensor: ...  # draft-vocabulary indices -> token ids

    def to_vocab(self, probs: torch.Tensor) -> torch.Tensor: ...  # [n, K] -> [n, V]

    def feed(self, tokens: list[int], prev_states: torch.Tensor, position: int,
             mask: torch.Tensor | None) -> torch.Tensor: ...  # new states [n, H]; the n tokens' sequence index


def draft_chain(run: StateDraftRun, context: DraftContext, last: int, state: torch.Tensor, gamma: int) -> DraftProposal:
    """Up to gamma drafts after the newest committed token (sequence index `last`, whose state is state [1, H]),
    each drawn from the distribution it is returned with (the engine's acceptance stays lossless)."""
    tokens, probs = [], []
    for k in range(gamma):
        q = run.to_vocab(distribution(run.logits(state), context.sampling))[0]
        token = sample(q, context.sampling, context.generator)
        tokens.append(token)
        probs.append(q)
        if k + 1 == gamma or not keep_drafting(context, token, q):
            break
        state = run.feed([token], state, last + k + 1, None)
    return DraftProposal(tokens, torch.stack(probs))


def grow_tree(run: StateDraftRun, context: DraftContext, shape: TreeShape, last: int, root_state: torch.Tensor,
              depth: int) -> DraftProposal:
    """A tree of at most shape.total drafts, `depth` levels below the newest committed token (sequence index `last`,
    whose state is root_state [1, H]); the drafter's cache holds just the committed prefix when it is called."""
    floor = math.log(context.min_draft_prob) if context.min_draft_prob > 0 else -math.inf
    tokens, parents, scores, own, probs, slots = [], [], [], [], [], []  # slots: node -> cache index once fed
    frontier, states, frontier_scores = [-1], root_state, torch.zeros(1)
    node_states: dict[int, torch.Tensor] = {}
    committed = run.cache_length
    for level in range(1, depth + 1):
        logits = run.logits(states)
        logp = torch.log_softmax(logits.float(), -1)
        shown = run.to_vocab(distribution(logits, context.sampling))
        top = logp.topk(min(shape.top_k, logp.shape[-1]), dim=-1)
        top_ids = run.token_ids(top.indices)
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
        fed_from = run.cache_length
        mask = torch.zeros(len(frontier), fed_from + len(frontier), dtype=torch.bool, device=root_state.device)
        mask[:, :committed] = True  # the committed prefix, root included
        for row, node in enumerate(frontier):
            slots[node] = fed_from + row
            ancestor = node
            while ancestor >= 0:
                mask[row, slots[ancestor]] = True
                ancestor = parents[ancestor]
        prev = torch.stack([root_state[0] if parents[n] < 0 else node_states[parents[n]] for n in frontier])
        out = run.feed([tokens[n] for n in frontier], prev, last + level,
                       None if mask.all() else mask)  # one branch so far: a plain step
        node_states.update(zip(frontier, out))
        states, frontier_scores = out, torch.tensor([scores[n] for n in frontier])
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
