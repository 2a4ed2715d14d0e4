"""Draft trees: their shape, the attention mask and positions that let the target verify a whole tree in one
forward, greedy acceptance of the best branch, and compaction of a KV cache to the accepted branch.

A tree is a list of drafted tokens with `parents[i]` = the index of node i's parent, or -1 when its parent is the
root (the newest committed token). Parents come before their children. Verifying it, the target reads the root
followed by the nodes; each node attends to the committed prefix, its ancestors and itself, at the rotary
position of its depth, so every branch sees exactly what it would see as a plain sequence.

    python -m pytest tests/test_tree.py
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers.cache_utils import Cache

MAX_TREE_TOKENS = 64


@dataclass(frozen=True)
class TreeShape:
    """EAGLE-2-style dynamic tree: expand the top_k best nodes per level (depth = the engine's gamma), keep the
    `total` best nodes overall by cumulative draft log-probability."""

    top_k: int = 4
    total: int = 32

    def __post_init__(self):
        if not 1 <= self.top_k <= 8:
            raise ValueError(f"tree top_k must be between 1 and 8, got {self.top_k}")
        if not 1 <= self.total <= MAX_TREE_TOKENS:
            raise ValueError(f"tree total tokens must be between 1 and {MAX_TREE_TOKENS}, got {self.total}")

    @classmethod
    def parse(cls, spec: str) -> TreeShape:
        """'4x32' -> top_k 4, total 32."""
        try:
            top_k, total = (int(x) for x in spec.lower().split("x"))
        except ValueError:
            raise ValueError(f"tree must look like TOPKxTOTAL (e.g. 4x32), got {spec!r}") from None
        return cls(top_k, total)


def depths(parents: list[int]) -> list[int]:
    """Depth of each node (children of the root have depth 1)."""
    out: list[int] = []
    for p in parents:
        out.append(1 if p < 0 else out[p] + 1)
    return out


def is_chain(parents: list[int]) -> bool:
    """Whether the tree is a single branch (each node the child of the one before)."""
    return all(p == i - 1 for i, p in enumerate(parents))


def ancestry(parents: list[int]) -> torch.Tensor:
    """[N, N] bool: node i may attend to node j (j is i or one of its ancestors)."""
    n = len(parents)
    mask = torch.eye(n, dtype=torch.bool)
    for i, p in enumerate(parents):
        if p >= 0:
            mask[i] |= mask[p]
    return mask


def verify_mask(parents: list[int], prefix: int) -> torch.Tensor:
    """[1, 1, N+1, prefix+N+1] for the root followed by the nodes, after `prefix` cached positions."""
    n = len(parents)
    tree = torch.zeros(n + 1, n + 1, dtype=torch.bool)
    tree[:, 0] = True  # everyone sees the root
    tree[1:, 1:] = ancestry(parents)
    return torch.cat([torch.ones(n + 1, prefix, dtype=torch.bool), tree], dim=1)[None, None]


def greedy_path(tokens: list[int], parents: list[int], argmax: list[int]) -> tuple[list[int], int]:
    """Walk from the root, each step to the child holding the target's argmax. `argmax[0]` is the target's choice
    after the root, `argmax[i + 1]` after node i. Returns (accepted node indices, the target's next token)."""
    path: list[int] = []
    row, node = 0, -1
    while True:
        child = next((i for i, p in enumerate(parents) if p == node and tokens[i] == argmax[row]), None)
        if child is None:
            return path, argmax[row]
        path.append(child)
        node, row = child, child + 1


def keep_rows(cache: Cache, start: int, rows: list[int]) -> None:
    """Keep the first `start` cached positions plus `rows` (offsets after start), in that order. The kept rows are
    written in place and the rest cropped, so a static cache keeps its addresses (core/decoding/fast_path.py)."""
    index = torch.tensor(rows, dtype=torch.long) + start
    for layer in cache.layers:
        for states in (layer.keys, layer.values):
            states[:, :, start:start + len(rows)] = states[:, :, index.to(states.device)]
    cache.crop(start + len(rows) - int(cache.get_seq_length()))
