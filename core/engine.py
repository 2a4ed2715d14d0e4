"""The speculative decoding engine: prefill, plain decoding and draft-then-verify, as one stream of rounds.

    engine = SpeculativeEngine(target_vlm)
    for round in engine.stream(image, prompt, drafter=text_drafter, gamma=4):
        ...   # each Round says what was drafted, what the target accepted, and what it emitted

Each round feeds the target the last committed token plus the gamma drafted tokens in ONE forward, accepts
with the lossless rule in core/sampling.py, and crops the target's KV cache back to the accepted prefix. With no
drafter a round is one plain decode step, so autoregressive decoding (the baseline) runs through the same code.
The image is encoded once per request; drafters that use it read `session.image_features`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from PIL import Image
from transformers import DynamicCache

from core.drafters import Drafter
from core.sampling import SamplingConfig, distribution, sample, verify
from core.vlm import Request, VisionLanguageModel, decode_positions

MAX_GAMMA = 16


@dataclass
class Round:
    """One target forward and what it decided. `emitted` = accepted drafts + the target's own token."""

    index: int
    drafted: list[int]
    draft_probs: list[float]  # the drafter's probability of each drafted token
    target_probs: list[float]  # the target's probability of each drafted token
    accepted: int
    emitted: list[int]
    kind: str  # how the target's own token came: "prefill", "plain", "correction" (a draft was rejected), "bonus"
    draft_seconds: float
    verify_seconds: float

    @property
    def rejected(self) -> int | None:
        return self.drafted[self.accepted] if self.accepted < len(self.drafted) else None


@dataclass
class Session:
    """Everything one request needs; drafters read from it."""

    request: Request
    sampling: SamplingConfig
    generator: torch.Generator
    image_features: object | None
    generated: list[int] = field(default_factory=list)
    cache: DynamicCache | None = None
    rope_delta: int = 0


@dataclass
class Generation:
    text: str
    token_ids: list[int]
    rounds: list[Round]
    seconds: float

    @property
    def new_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def target_forwards(self) -> int:
        return len(self.rounds)

    @property
    def tau(self) -> float:
        """Tokens emitted per target forward (the bonus token included); 1.0 for plain decoding."""
        return self.new_tokens / max(1, self.target_forwards)

    def to_json(self) -> dict:
        return {
            "text": self.text,
            "token_ids": self.token_ids,
            "new_tokens": self.new_tokens,
            "target_forwards": self.target_forwards,
            "tau": self.tau,
            "rounds": [{"drafted": len(r.drafted), "accepted": r.accepted, "emitted": len(r.emitted)} for r in self.rounds],
            "seconds": self.seconds,
        }


class SpeculativeEngine:
    def __init__(self, target: VisionLanguageModel):
        self.target = target

    @torch.no_grad()
    def stream(
        self,
        image: Image.Image | None,
        prompt: str,
        drafter: Drafter | None = None,
        gamma: int = 4,
        sampling: SamplingConfig = SamplingConfig(),
        max_new_tokens: int = 64,
        seed: int = 0,
    ) -> Iterator[Round]:
        if not 1 <= gamma <= MAX_GAMMA:
            raise ValueError(f"gamma must be between 1 and {MAX_GAMMA}, got {gamma}")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        session = self.open(image, prompt, sampling, seed)
        start = time.perf_counter()
        first = self._prefill(session)
        yield Round(0, [], [], [], 0, [first], "prefill", 0.0, time.perf_counter() - start)
        run = drafter.start(session) if drafter is not None else None
        index = 0
        while not self._finished(session, max_new_tokens):
            index += 1
            room = max_new_tokens - len(session.generated)
            if run is None or room < 2:
                round_ = self._plain_round(session, max_new_tokens)
            else:
                round_ = self._speculative_round(session, run, min(gamma, room - 1), max_new_tokens)
            round_.index = index
            yield round_

    def generate(self, image, prompt, drafter=None, **kwargs) -> Generation:
        start = time.perf_counter()
        rounds = list(self.stream(image, prompt, drafter, **kwargs))
        ids = [t for r in rounds for t in r.emitted]
        return Generation(self.decode(ids), ids, rounds, time.perf_counter() - start)

    def decode(self, ids: list[int]) -> str:
        return self.target.tokenizer.decode(ids, skip_special_tokens=True).strip()

    # ------------------------------------------------------------ internals

    def open(self, image, prompt: str, sampling: SamplingConfig, seed: int) -> Session:
        request = self.target.prepare(image, prompt)
        generator = torch.Generator().manual_seed(seed)
        return Session(request, sampling, generator, self.target.encode_image(request))

    def _prefill(self, session: Session) -> int:
        model = self.target.model
        positions, session.rope_delta = self.target.rope_positions(session.request)
        session.cache = DynamicCache(config=model.config)
        extra = {"mm_encoder_outputs": {"image": session.image_features}} if session.image_features is not None else {}
        logits = model(
            input_ids=session.request.input_ids.to(model.device),
            position_ids=positions.to(model.device),
            cache=session.cache,
            use_cache=True,
            logits_to_keep=1,
            **extra,
        ).logits[0]
        token = sample(distribution(logits, session.sampling)[0], session.sampling, session.generator)
        session.generated.append(token)
        return token

    def _target_logits(self, session: Session, tokens: list[int]) -> torch.Tensor:
        """Target logits [len(tokens), V] for tokens appended after the cached prefix."""
        model = self.target.model
        start = session.cache.get_seq_length()
        return model(
            input_ids=torch.tensor([tokens], device=model.device),
            position_ids=decode_positions(start, len(tokens), session.rope_delta).to(model.device),
            cache=session.cache,
            use_cache=True,
        ).logits[0]

    def _plain_round(self, session: Session, max_new_tokens: int) -> Round:
        t0 = time.perf_counter()
        p = distribution(self._target_logits(session, session.generated[-1:]), session.sampling)
        token = sample(p[0], session.sampling, session.generator)
        emitted = self._commit(session, [token], max_new_tokens)
        return Round(0, [], [], [], 0, emitted, "plain", 0.0, time.perf_counter() - t0)

    def _speculative_round(self, session: Session, run, gamma: int, max_new_tokens: int) -> Round:
        t0 = time.perf_counter()
        proposal = run.propose(session, gamma)
        t1 = time.perf_counter()
        drafted = proposal.tokens
        p = distribution(self._target_logits(session, session.generated[-1:] + drafted), session.sampling)
        accepted, token = verify(drafted, proposal.probs, p, session.sampling, session.generator)
        session.cache.crop(accepted - gamma)  # drop the rejected drafts' keys and values
        emitted = self._commit(session, drafted[:accepted] + [token], max_new_tokens)
        rows = torch.arange(gamma)
        return Round(
            index=0,
            drafted=drafted,
            draft_probs=proposal.probs[rows, drafted].tolist(),
            target_probs=p[rows, drafted].tolist(),
            accepted=accepted,
            emitted=emitted,
            kind="bonus" if accepted == gamma else "correction",
            draft_seconds=t1 - t0,
            verify_seconds=time.perf_counter() - t1,
        )

    def _commit(self, session: Session, tokens: list[int], max_new_tokens: int) -> list[int]:
        """Append tokens, stopping after an end-of-sequence token or at the token budget."""
        kept = []
        for t in tokens[: max_new_tokens - len(session.generated)]:
            kept.append(t)
            if t in self.target.eos_token_ids:
                break
        session.generated += kept
        return kept

    def _finished(self, session: Session, max_new_tokens: int) -> bool:
        return len(session.generated) >= max_new_tokens or session.generated[-1] in self.target.eos_token_ids
