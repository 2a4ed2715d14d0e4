"""The speculative decoding engine: prefill, plain decoding and draft-then-verify, as one stream of rounds.

    engine = SpeculativeEngine(target_vlm)
    for round in engine.stream(image, prompt, drafter=text_drafter, gamma=4):
        ...   # each Round says what was drafted, what the target accepted, and what it emitted

Each round feeds the target the last committed token plus the gamma drafted tokens in ONE forward, accepts
with the lossless rule in core/decoding/sampling.py, and crops the target's KV cache back to the accepted prefix. With no
drafter a round is one plain decode step, so autoregressive decoding (the baseline) runs through the same code.
The image is encoded once per request; drafters that use it read `session.image_features`. Drafters that read
the target's own states (DREAM: `reads_target_features = True`) find its last-layer features of every committed
position in `session.features` and, while `Drafter.start` runs, all layers' states at prefill in
`session.prefill_states`; for other drafters the target returns no hidden states at all. On a GPU the steps run
through core/decoding/fast_path.py (static caches, CUDA graphs); on CPU they are plain eager calls.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from PIL import Image
from transformers.cache_utils import Cache

from core.decoding.fast_path import FastPath, key_length
from core.decoding.limits import check_new_tokens
from core.decoding.sampling import SamplingConfig, distribution, match_vocab, sample, verify
from core.decoding.tree import MAX_TREE_TOKENS, depths, greedy_path, is_chain, keep_rows, verify_mask
from core.drafters.base import Drafter, DraftProposal
from core.models.vlm import Request, VisionLanguageModel, decode_positions

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
    parents: list[int] | None = None  # tree rounds: the drafted tree (core/decoding/tree.py)
    path: list[int] | None = None  # tree rounds: indices of the accepted branch's nodes

    def branch(self) -> list[int]:
        """Indices into `drafted` read as a chain: all of a chain; in a tree, the accepted branch followed by the
        draft the target turned down there (the best child of the branch's last node), if any."""
        if self.parents is None:
            return list(range(len(self.drafted)))
        tip = self.path[-1] if self.path else -1
        turned_down = next((i for i, p in enumerate(self.parents) if p == tip), None)
        return self.path + ([] if turned_down is None else [turned_down])

    @property
    def depth(self) -> int:
        """How many tokens deep the draft went: a chain's length, a tree's depth."""
        return max(depths(self.parents), default=0) if self.parents is not None else len(self.drafted)

    @property
    def rejected(self) -> int | None:
        branch = self.branch()
        return self.drafted[branch[self.accepted]] if self.accepted < len(branch) else None


@dataclass
class Session:
    """Everything one request needs; drafters read from it."""

    request: Request
    sampling: SamplingConfig
    generator: torch.Generator
    image_features: object | None
    fast: FastPath = FastPath()
    max_length: int = 0  # positions a cache must hold: prompt + new tokens + the largest draft
    reads_features: bool = False  # whether to collect `features` / `prefill_states` (the drafter reads them)
    stop_ids: frozenset[int] = frozenset()  # end-of-sequence ids: nothing drafted past one is ever emitted
    min_draft_prob: float = 0.0  # a chain stops early after a draft the drafter gives less than this (core/drafters/base.py)
    generated: list[int] = field(default_factory=list)
    cache: Cache | None = None
    rope_delta: int = 0
    features: torch.Tensor | None = None  # [positions, H] target last-layer states, all but the newest token
    prefill_states: tuple[torch.Tensor, ...] | None = None  # every layer's states at prefill; only during start
    prefill_positions: torch.Tensor | None = None


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
            "rounds": [{"drafted": len(r.drafted), "accepted": r.accepted, "emitted": len(r.emitted),
                        **({"tree": {"parents": r.parents, "path": r.path}} if r.parents is not None else {})}
                       for r in self.rounds],
            "seconds": self.seconds,
        }


class SpeculativeEngine:
    def __init__(self, target: VisionLanguageModel, fast: FastPath | None = None):
        self.target = target
        self.fast = FastPath.auto(target.device) if fast is None else fast

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
        min_draft_prob: float = 0.0,
    ) -> Iterator[Round]:
        if not 1 <= gamma <= MAX_GAMMA:
            raise ValueError(f"gamma must be between 1 and {MAX_GAMMA}, got {gamma}")
        session = self.open(image, prompt, sampling, seed, max_new_tokens, drafter, min_draft_prob)
        start = time.perf_counter()
        first = self._prefill(session)
        yield Round(0, [], [], [], 0, [first], "prefill", 0.0, time.perf_counter() - start)
        run = drafter.start(session) if drafter is not None else None
        session.prefill_states = None  # all layers' prompt states: large on hub models, needed only by start
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

    def open(self, image, prompt: str, sampling: SamplingConfig, seed: int, max_new_tokens: int = 64,
             drafter: Drafter | None = None, min_draft_prob: float = 0.0) -> Session:
        if not 0.0 <= min_draft_prob < 1.0:
            raise ValueError(f"min_draft_prob must be in [0, 1), got {min_draft_prob}")
        context = self.target.text_config.max_position_embeddings
        check_new_tokens(max_new_tokens, context)
        request = self.target.prepare(image, prompt)
        if request.input_ids.shape[1] + max_new_tokens > context:
            raise ValueError(f"the prompt ({request.input_ids.shape[1]} tokens) plus {max_new_tokens} new tokens exceed "
                             f"the model's context of {context} tokens")
        generator = torch.Generator(self.target.device).manual_seed(seed)
        needed = request.input_ids.shape[1] + max_new_tokens + max(MAX_GAMMA, MAX_TREE_TOKENS) + 1
        return Session(request, sampling, generator, self.target.encode_image(request), self.fast, needed,
                       reads_features=getattr(drafter, "reads_target_features", False),
                       stop_ids=frozenset(self.target.eos_token_ids), min_draft_prob=min_draft_prob)

    def _prefill(self, session: Session) -> int:
        model = self.target.model
        positions, session.rope_delta = self.target.rope_positions(session.request)
        session.cache = self.fast.new_cache(model, session.max_length)
        extra = {"mm_encoder_outputs": {"image": session.image_features}} if session.image_features is not None else {}
        out = model(
            input_ids=session.request.input_ids.to(model.device),
            position_ids=positions.to(model.device),
            cache=session.cache,
            use_cache=True,
            logits_to_keep=1,
            output_hidden_states=session.reads_features,
            **extra,
        )
        if session.reads_features:
            session.features = out.hidden_states[-1][0]
            session.prefill_states, session.prefill_positions = out.hidden_states, positions
        token = sample(distribution(out.logits[0], session.sampling)[0], session.sampling, session.generator)
        session.generated.append(token)
        return token

    def _target_forward(self, session: Session, tokens: list[int]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Target logits [n, V] and, when the drafter reads them, last-layer states [n, H] for tokens appended after
        the cached prefix."""
        model = self.target.model
        start = int(session.cache.get_seq_length())  # a static cache returns its live counter tensor
        out = self.fast.step(model)(
            input_ids=torch.tensor([tokens], device=model.device),
            position_ids=decode_positions(start, len(tokens), session.rope_delta).to(model.device),
            cache=session.cache,
            use_cache=True,
            output_hidden_states=session.reads_features,
        )
        return out.logits[0], out.hidden_states[-1][0] if session.reads_features else None

    def _keep_features(self, session: Session, states: torch.Tensor | None) -> None:
        """Extend session.features to every committed position but the newest (whose state is not computed yet)."""
        if states is None:
            return
        wanted = session.request.input_ids.shape[1] + len(session.generated) - 1
        have = len(session.features)
        session.features = torch.cat([session.features, states[: wanted - have]])

    def _plain_round(self, session: Session, max_new_tokens: int) -> Round:
        t0 = time.perf_counter()
        logits, states = self._target_forward(session, session.generated[-1:])
        token = sample(distribution(logits, session.sampling)[0], session.sampling, session.generator)
        emitted = self._commit(session, [token], max_new_tokens)
        self._keep_features(session, states)
        return Round(0, [], [], [], 0, emitted, "plain", 0.0, time.perf_counter() - t0)

    def _speculative_round(self, session: Session, run, gamma: int, max_new_tokens: int) -> Round:
        t0 = time.perf_counter()
        proposal = run.propose(session, gamma)
        t1 = time.perf_counter()
        # A tree that narrowed to one branch is verified as a chain: causal attention, no tree mask or cache compaction.
        if proposal.parents is not None and not is_chain(proposal.parents):
            return self._tree_round(session, proposal, max_new_tokens, t0, t1)
        drafted = proposal.tokens  # up to gamma: a chain may stop early (core/drafters/base.py, keep_drafting)
        logits, states = self._target_forward(session, session.generated[-1:] + drafted)
        p = distribution(logits, session.sampling)
        q = match_vocab(proposal.probs, p.shape[-1])
        accepted, token = verify(drafted, q, p, session.sampling, session.generator)
        session.cache.crop(accepted - len(drafted))  # drop the rejected drafts' keys and values
        emitted = self._commit(session, drafted[:accepted] + [token], max_new_tokens)
        self._keep_features(session, states)
        rows = torch.arange(len(drafted))
        return Round(
            index=0,
            drafted=drafted,
            draft_probs=q[rows, drafted].tolist(),
            target_probs=p[rows, drafted].tolist(),
            accepted=accepted,
            emitted=emitted,
            kind="bonus" if accepted == len(drafted) else "correction",
            draft_seconds=t1 - t0,
            verify_seconds=time.perf_counter() - t1,
        )

    def _tree_round(self, session: Session, proposal: DraftProposal, max_new_tokens: int, t0: float, t1: float) -> Round:
        """Verify a whole draft tree in one forward (tree attention mask, rotary position = depth) and keep the
        branch the target's greedy choices follow. Trees are drafted for greedy decoding only."""
        model = self.target.model
        tokens, parents = proposal.tokens, proposal.parents
        start = int(session.cache.get_seq_length())  # a static cache returns its live counter tensor
        text = (start + torch.tensor([0, *depths(parents)])).view(1, 1, -1)
        mask = verify_mask(parents, start).to(model.device)
        width = key_length(session.cache)
        if width is not None:  # a static cache shows attention all its slots; the unused ones stay masked
            mask = torch.nn.functional.pad(mask, (0, width - mask.shape[-1]), value=False)
        out = self.fast.step(model)(
            input_ids=torch.tensor([session.generated[-1:] + tokens], device=model.device),
            position_ids=torch.cat([text, (text + session.rope_delta).expand(3, 1, -1)]).to(model.device),
            attention_mask={kind: mask for kind in set(self.target.text_config.layer_types)},
            cache=session.cache,
            use_cache=True,
            output_hidden_states=session.reads_features,
        )
        p = distribution(out.logits[0], session.sampling)
        path, token = greedy_path(tokens, parents, p.argmax(-1).tolist())
        rows = [0] + [i + 1 for i in path]  # the root and the accepted branch
        keep_rows(session.cache, start, rows)
        emitted = self._commit(session, [tokens[i] for i in path] + [token], max_new_tokens)
        self._keep_features(session, out.hidden_states[-1][0][rows] if session.reads_features else None)
        index = torch.arange(len(tokens))
        reached_leaf = bool(path) and all(q != path[-1] for q in parents)
        return Round(
            index=0,
            drafted=tokens,
            draft_probs=proposal.probs[index, tokens].tolist(),
            target_probs=p[torch.tensor(parents) + 1, tokens].tolist(),  # each node under its parent's row
            accepted=len(path),
            emitted=emitted,
            kind="bonus" if reached_leaf else "correction",
            draft_seconds=t1 - t0,
            verify_seconds=time.perf_counter() - t1,
            parents=parents,
            path=path,
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
