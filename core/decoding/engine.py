"""The speculative decoding engine: prefill, plain decoding and draft-then-verify, as one stream of rounds.

    engine = SpeculativeEngine(target_vlm)
    for round in engine.stream(image, prompt, drafter=text_drafter, gamma=4):
        ...   # each Round says what was drafted, what the target accepted, and what it emitted

    with engine.open(image, prompt, drafter=text_drafter, gamma=4) as session:   # the same, one step at a time
        while (round := session.step()) is not None:
            ...

Each round feeds the target the last committed token plus the gamma drafted tokens in ONE forward, accepts
with the lossless rule in core/decoding/sampling.py, and crops the target's KV cache back to the accepted prefix.
With no drafter a round is one plain decode step, so autoregressive decoding (the baseline) runs through the same
code. The image is encoded once per request. The engine owns each request's state (`DecodingSession`); drafters
read it through a `DraftContext` (core/decoding/session.py): the request, the image features, the committed tokens
and, for drafters that read the target's own states (`feature_layers`: DREAM's last layer, EAGLE-3's low, middle and
high ones), those states of every committed position, plus a `PrefillRecord` at start; for other drafters the
target returns no hidden states at all. On a GPU the steps run through core/decoding/fast_path.py (static caches,
CUDA graphs); on CPU they are plain eager calls.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import torch
from PIL import Image

from core.decoding.fast_path import FastPath, key_length
from core.decoding.limits import check_new_tokens
from core.decoding.rounds import Generation, Round
from core.decoding.sampling import SamplingConfig, distribution, match_vocab, sample, verify
from core.decoding.session import Committed, DraftContext, PrefillRecord
from core.decoding.tree import MAX_TREE_TOKENS, depths, greedy_path, is_chain, keep_rows, verify_mask
from core.drafters.base import Drafter, DraftProposal
from core.models.vlm import VisionLanguageModel, decode_positions

MAX_GAMMA = 16


def read_features(hidden_states: tuple[torch.Tensor, ...], layers: tuple[int, ...]) -> torch.Tensor:
    """[n, len(layers) x H]: the states a drafter reads, of the one sequence, concatenated in its order."""
    return torch.cat([hidden_states[i][0] for i in layers], dim=-1)


class DecodingSession:
    """One request, decoded round by round: `step()` returns the next Round (the first is the prefill) or None once
    the answer is complete; `close()` (or leaving a `with` block) frees its caches. The engine's own state:
    drafters see `context` only."""

    def __init__(self, engine: SpeculativeEngine, context: DraftContext, drafter: Drafter | None, gamma: int,
                 max_new_tokens: int):
        self.engine, self.context, self.drafter = engine, context, drafter
        self.gamma, self.max_new_tokens = gamma, max_new_tokens
        self.committed = context.committed
        self.feature_layers = () if drafter is None else tuple(drafter.feature_layers)
        self.reads_features = bool(self.feature_layers)
        self.cache = None  # the target's KV cache
        self.rope_delta = 0
        self.prefill: PrefillRecord | None = None  # for the drafter's start only: all layers' prompt states are large
        self.run = None  # the drafter's per-request state
        self.rounds = 0

    @property
    def generated(self) -> tuple[int, ...]:
        return tuple(self.committed.tokens)

    @property
    def done(self) -> bool:
        tokens = self.committed.tokens
        return bool(tokens) and (len(tokens) >= self.max_new_tokens or tokens[-1] in self.context.stop_ids)

    @torch.no_grad()
    def step(self) -> Round | None:
        if self.done:
            return None
        if self.cache is None:
            return self.engine._prefill(self)
        if self.drafter is not None and self.run is None:
            self.run = self.drafter.start(self.context, self.prefill)
            self.prefill = None
        room = self.max_new_tokens - len(self.committed.tokens)
        if self.run is None or room < 2:
            round_ = self.engine._plain_round(self)
        else:
            round_ = self.engine._speculative_round(self, min(self.gamma, room - 1))
        self.rounds += 1
        round_.index = self.rounds
        return round_

    def close(self) -> None:
        self.cache = self.run = self.prefill = None

    def __enter__(self) -> DecodingSession:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class SpeculativeEngine:
    def __init__(self, target: VisionLanguageModel, fast: FastPath | None = None):
        self.target = target
        self.fast = FastPath.auto(target.device) if fast is None else fast

    def stream(self, image: Image.Image | None, prompt: str, drafter: Drafter | None = None, **options) -> Iterator[Round]:
        """Every round of one request (`options` as for `open`)."""
        with self.open(image, prompt, drafter, **options) as session:
            while (round_ := session.step()) is not None:
                yield round_

    def generate(self, image, prompt, drafter=None, **kwargs) -> Generation:
        start = time.perf_counter()
        rounds = list(self.stream(image, prompt, drafter, **kwargs))
        ids = [t for r in rounds for t in r.emitted]
        return Generation(self.decode(ids), ids, rounds, time.perf_counter() - start)

    def decode(self, ids: list[int]) -> str:
        return self.target.tokenizer.decode(ids, skip_special_tokens=True).strip()

    def open(
        self,
        image: Image.Image | None,
        prompt: str,
        drafter: Drafter | None = None,
        gamma: int = 4,
        sampling: SamplingConfig = SamplingConfig(),
        max_new_tokens: int = 64,
        seed: int = 0,
        min_draft_prob: float = 0.0,
    ) -> DecodingSession:
        """A request checked, its image encoded, ready to `step()`."""
        if not 1 <= gamma <= MAX_GAMMA:
            raise ValueError(f"gamma must be between 1 and {MAX_GAMMA}, got {gamma}")
        if not 0.0 <= min_draft_prob < 1.0:
            raise ValueError(f"min_draft_prob must be in [0, 1), got {min_draft_prob}")
        context_length = self.target.text_config.max_position_embeddings
        check_new_tokens(max_new_tokens, context_length)
        request = self.target.prepare(image, prompt)
        if request.input_ids.shape[1] + max_new_tokens > context_length:
            raise ValueError(f"the prompt ({request.input_ids.shape[1]} tokens) plus {max_new_tokens} new tokens exceed "
                             f"the model's context of {context_length} tokens")
        generator = torch.Generator(self.target.device).manual_seed(seed)
        needed = request.input_ids.shape[1] + max_new_tokens + max(MAX_GAMMA, MAX_TREE_TOKENS) + 1
        context = DraftContext(request, sampling, generator, self.target.encode_image(request), self.fast, needed,
                               frozenset(self.target.eos_token_ids), min_draft_prob, Committed())
        return DecodingSession(self, context, drafter, gamma, max_new_tokens)

    # ------------------------------------------------------------ the steps

    def _prefill(self, session: DecodingSession) -> Round:
        start = time.perf_counter()
        model, context = self.target.model, session.context
        positions, session.rope_delta = self.target.rope_positions(context.request)
        session.cache = self.fast.new_cache(model, context.max_length)
        features = context.image_features
        out = model(
            input_ids=context.request.input_ids.to(model.device),
            position_ids=positions.to(model.device),
            cache=session.cache,
            use_cache=True,
            logits_to_keep=1,
            output_hidden_states=session.reads_features,
            **({"mm_encoder_outputs": {"image": features}} if features is not None else {}),
        )
        if session.reads_features:
            session.committed.features = read_features(out.hidden_states, session.feature_layers)
            session.prefill = PrefillRecord(out.hidden_states, positions, session.cache.layers[-1].keys)
        token = sample(distribution(out.logits[0], context.sampling)[0], context.sampling, context.generator)
        session.committed.tokens.append(token)
        return Round(0, [], [], [], 0, [token], "prefill", 0.0, time.perf_counter() - start)

    def _target_forward(self, session: DecodingSession, tokens: list[int], position_ids: torch.Tensor | None = None,
                        attention_mask: dict | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Target logits [n, V] and, when the drafter reads them, its layers' states [n, layers x H] for tokens appended
        after the cached prefix (a chain by default; a tree passes its own positions and mask)."""
        model = self.target.model
        if position_ids is None:
            start = int(session.cache.get_seq_length())  # a static cache returns its live counter tensor
            position_ids = decode_positions(start, len(tokens), session.rope_delta)
        out = self.fast.step(model)(
            input_ids=torch.tensor([tokens], device=model.device),
            position_ids=position_ids.to(model.device),
            cache=session.cache,
            use_cache=True,
            output_hidden_states=session.reads_features,
            **({"attention_mask": attention_mask} if attention_mask is not None else {}),
        )
        states = read_features(out.hidden_states, session.feature_layers) if session.reads_features else None
        return out.logits[0], states

    def _keep_features(self, session: DecodingSession, states: torch.Tensor | None) -> None:
        """Extend the committed features to every committed position but the newest (its state is not computed yet)."""
        if states is None:
            return
        committed = session.committed
        wanted = session.context.request.input_ids.shape[1] + len(committed.tokens) - 1
        committed.features = torch.cat([committed.features, states[: wanted - len(committed.features)]])

    def _plain_round(self, session: DecodingSession) -> Round:
        t0 = time.perf_counter()
        context = session.context
        logits, states = self._target_forward(session, session.committed.tokens[-1:])
        token = sample(distribution(logits, context.sampling)[0], context.sampling, context.generator)
        emitted = self._commit(session, [token])
        self._keep_features(session, states)
        return Round(0, [], [], [], 0, emitted, "plain", 0.0, time.perf_counter() - t0)

    def _speculative_round(self, session: DecodingSession, gamma: int) -> Round:
        t0 = time.perf_counter()
        context = session.context
        proposal = session.run.propose(context, gamma)
        t1 = time.perf_counter()
        # A tree that narrowed to one branch is verified as a chain: causal attention, no tree mask or cache compaction.
        if proposal.parents is not None and not is_chain(proposal.parents):
            return self._tree_round(session, proposal, t0, t1)
        drafted = proposal.tokens  # up to gamma: a chain may stop early (core/drafters/base.py, keep_drafting)
        logits, states = self._target_forward(session, session.committed.tokens[-1:] + drafted)
        p = distribution(logits, context.sampling)
        q = match_vocab(proposal.probs, p.shape[-1])
        accepted, token = verify(drafted, q, p, context.sampling, context.generator)
        session.cache.crop(accepted - len(drafted))  # drop the rejected drafts' keys and values
        emitted = self._commit(session, drafted[:accepted] + [token])
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

    def _tree_round(self, session: DecodingSession, proposal: DraftProposal, t0: float, t1: float) -> Round:
        """Verify a whole draft tree in one forward (tree attention mask, rotary position = depth) and keep the
        branch the target's greedy choices follow. Trees are drafted for greedy decoding only."""
        tokens, parents, context = proposal.tokens, proposal.parents, session.context
        start = int(session.cache.get_seq_length())  # a static cache returns its live counter tensor
        mask = verify_mask(parents, start).to(self.target.device)
        width = key_length(session.cache)
        if width is not None:  # a static cache shows attention all its slots; the unused ones stay masked
            mask = torch.nn.functional.pad(mask, (0, width - mask.shape[-1]), value=False)
        logits, states = self._target_forward(
            session, session.committed.tokens[-1:] + tokens,
            decode_positions(start, torch.tensor([0, *depths(parents)]), session.rope_delta),
            {kind: mask for kind in set(self.target.text_config.layer_types)})
        p = distribution(logits, context.sampling)
        path, token = greedy_path(tokens, parents, p.argmax(-1).tolist())
        rows = [0] + [i + 1 for i in path]  # the root and the accepted branch
        keep_rows(session.cache, start, rows)
        emitted = self._commit(session, [tokens[i] for i in path] + [token])
        self._keep_features(session, None if states is None else states[rows])
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

    def _commit(self, session: DecodingSession, tokens: list[int]) -> list[int]:
        """Append tokens, stopping after an end-of-sequence token or at the token budget."""
        committed = session.committed.tokens
        kept = []
        for t in tokens[: session.max_new_tokens - len(committed)]:
            kept.append(t)
            if t in session.context.stop_ids:
                break
        committed += kept
        return kept
