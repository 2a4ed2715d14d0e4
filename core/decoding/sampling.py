"""Token distributions and the lossless acceptance rule of speculative decoding.

Temperature, top-k and top-p are applied by transformers' own logits warpers, identically to the target's and
the drafter's logits, so the rejection-sampling rule below is exact for the warped target distribution:

  greedy (temperature 0): accept the longest drafted prefix that matches the target's argmax, then emit the
      target's argmax at the first mismatch (or the bonus position);
  sampling: accept draft x with probability min(1, p(x)/q(x)); on rejection resample from max(0, p - q)
      normalised; if all are accepted draw a bonus token from p (Leviathan et al. 2023, Chen et al. 2023).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper


@dataclass(frozen=True)
class SamplingConfig:
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0

    def __post_init__(self):
        if not math.isfinite(self.temperature) or self.temperature < 0:
            raise ValueError(f"temperature must be a finite number >= 0, got {self.temperature}")
        if not (0.0 < self.top_p <= 1.0):
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 disables it), got {self.top_k}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def warpers(self) -> LogitsProcessorList:
        warpers = LogitsProcessorList()
        if not self.greedy:
            warpers.append(TemperatureLogitsWarper(self.temperature))
            if self.top_k:
                warpers.append(TopKLogitsWarper(self.top_k))
            if self.top_p < 1.0:
                warpers.append(TopPLogitsWarper(self.top_p))
        return warpers


def distribution(logits: torch.Tensor, cfg: SamplingConfig) -> torch.Tensor:
    """[n, V] probabilities. Greedy decoding picks the argmax; its softmax is kept for display only."""
    logits = logits.float()
    return torch.softmax(cfg.warpers()(None, logits), dim=-1)


def sample(probs: torch.Tensor, cfg: SamplingConfig, generator: torch.Generator) -> int:
    if cfg.greedy:
        return int(probs.argmax(-1))
    return int(torch.multinomial(probs, 1, generator=generator))


def match_vocab(q: torch.Tensor, size: int) -> torch.Tensor:
    """A drafter's [n, V'] distributions over the target's V ids. Qwen2.5-1.5B has 151936 rows, Qwen2.5-VL-7B 152064:
    the ids only the target has get draft probability 0; ids only the drafter has are padding no tokenizer emits."""
    if q.shape[-1] < size:
        return torch.nn.functional.pad(q, (0, size - q.shape[-1]))
    return q[..., :size]


def verify(
    drafted: list[int], q: torch.Tensor, p: torch.Tensor, cfg: SamplingConfig, generator: torch.Generator
) -> tuple[int, int]:
    """Lossless acceptance. q: [γ, V] drafter distributions; p: [γ+1, V] target distributions at the same
    positions plus one. Returns (number of drafts accepted, the target's own next token)."""
    gamma = len(drafted)
    if cfg.greedy:
        target = p.argmax(-1).tolist()
        n = next((i for i in range(gamma) if drafted[i] != target[i]), gamma)
        return n, target[n]
    idx = torch.tensor(drafted, device=p.device)
    rows = torch.arange(gamma, device=p.device)
    ratio = p[rows, idx] / q[rows, idx]  # q[x] > 0: x was drawn from q
    uniform = torch.rand(gamma, generator=generator, device=p.device)
    rejected = (uniform >= ratio).nonzero()
    if len(rejected) == 0:
        return gamma, sample(p[gamma], cfg, generator)
    n = int(rejected[0])
    residual = (p[n] - q[n]).clamp(min=0)
    if residual.sum() <= 0:  # p == q up to rounding: rejection had probability ~0, p is the right law
        residual = p[n]
    return n, int(torch.multinomial(residual / residual.sum(), 1, generator=generator))
