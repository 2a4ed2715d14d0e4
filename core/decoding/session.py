"""What a drafter may see of one request: a read-only view onto the engine's state, and the prefill record.

The engine (core/decoding/engine.py) owns every request's state and is the only writer. A drafter's `start` gets
the request's `DraftContext` and, when it reads the target's own states, a `PrefillRecord`; each `propose` gets the
same context, whose committed tokens and features have grown since. Nothing here imports the engine or the
drafters, so both import it without a cycle.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from core.decoding.fast_path import FastPath
from core.decoding.sampling import SamplingConfig
from core.models.vlm import Request


@dataclass
class Committed:
    """What the engine has committed so far; written by the engine only."""

    tokens: list[int] = field(default_factory=list)  # new tokens, the prompt excluded
    features: torch.Tensor | None = None  # [positions, layers x H] the states the drafter reads, but the newest


@dataclass(frozen=True)
class PrefillRecord:
    """What the target computed over the prompt, handed once to a feature-reading drafter's `start`."""

    hidden_states: tuple[torch.Tensor, ...]  # every layer's states [1, P, H] (large on hub models: not kept)
    positions: torch.Tensor  # the prompt's rotary positions, as the target used them
    last_layer_keys: torch.Tensor  # the last layer's cached (rotated) keys over the prompt


@dataclass(frozen=True)
class DraftContext:
    """One request as a drafter sees it. The generator is shared on purpose: drafts are drawn from it, so a seeded
    request is reproducible and acceptance stays lossless."""

    request: Request
    sampling: SamplingConfig
    generator: torch.Generator
    image_features: object | None  # the target's image encoding (MASSV, DREAM reuse it)
    fast: FastPath  # how a drafter's own caches and steps run (static caches and CUDA graphs on a GPU)
    max_length: int  # positions a cache must hold: prompt + new tokens + the largest draft
    stop_ids: frozenset[int]  # end-of-sequence ids: nothing drafted past one is ever emitted
    min_draft_prob: float  # a chain stops early after a draft the drafter gives less than this
    committed: Committed = field(repr=False)

    @property
    def generated(self) -> tuple[int, ...]:
        """The new tokens committed so far."""
        return tuple(self.committed.tokens)

    @property
    def features(self) -> torch.Tensor | None:
        """The target's states the drafter reads (its `feature_layers`, concatenated) of every committed position but
        the newest."""
        return self.committed.features
