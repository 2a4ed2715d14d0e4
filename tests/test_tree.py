"""Draft trees: mask, depths and greedy branch selection on a hand-made tree; one-forward tree verification in the
engine (3-D rotary positions, cache compaction) against plain decoding, with an oracle drafter whose right branch
is never the first child, and with the DREAM drafter's own dynamic trees."""

from __future__ import annotations

import copy

import pytest
import torch

from core.decoding.engine import SpeculativeEngine
from core.decoding.sampling import SamplingConfig
from core.decoding.tree import TreeShape, ancestry, depths, greedy_path, is_chain, verify_mask
from core.drafters.base import DraftProposal
from core.drafters.dream import DreamDrafter
from core.models.registry import load_drafter, load_target
from core.world import photos, scenes

#        root
#       /    \
#      0(5)   1(7)
#      |      /  \
#      2(6) 3(8) 4(9)
PARENTS = [-1, -1, 0, 1, 1]
TOKENS = [5, 7, 6, 8, 9]


def test_depths_and_ancestry():
    assert depths(PARENTS) == [1, 1, 2, 2, 2]
    assert ancestry(PARENTS).tolist() == [
        [True, False, False, False, False],
        [False, True, False, False, False],
        [True, False, True, False, False],
        [False, True, False, True, False],
        [False, True, False, False, True],
    ]
    mask = verify_mask(PARENTS, prefix=3)[0, 0]
    assert mask.shape == (6, 9)
    assert mask[:, :4].all()  # every row sees the prefix and the root
    assert mask[4, 3:].tolist() == [True, False, True, False, True, False]  # node 3: root, node 1, itself


@pytest.mark.parametrize("argmax, path, token", [
    ([7, 0, 9, 0, 0, 0], [1, 4], 0),  # root -> 7 (node 1) -> 9 (node 4), then the target's own token
    ([5, 6, 0, 1, 0, 0], [0, 2], 1),
    ([3, 0, 0, 0, 0, 0], [], 3),  # nothing accepted: the correction
])
def test_greedy_path_follows_the_targets_choices(argmax, path, token):
    assert greedy_path(TOKENS, PARENTS, argmax) == (path, token)


@pytest.mark.parametrize("spec", ["4", "0x8", "4x0", "9x32", "axb"])
def test_bad_tree_shapes_are_rejected(spec):
    with pytest.raises(ValueError, match="tree"):
        TreeShape.parse(spec)


class OracleTreeDrafter:
    """Knows the target's greedy continuation; drafts a tree in which the right token is always the second child
    and the right branch stops being right after `correct_depth` levels."""

    name = "oracle-tree"
    feature_layers = ()
    drafts_trees = True
    assistant_model = None

    def __init__(self, continuation: list[int], vocab: int, correct_depth: int = 3):
        self.continuation, self.vocab, self.correct_depth = continuation, vocab, correct_depth

    def start(self, context, prefill):
        return self

    def propose(self, context, gamma):
        done = len(context.generated)
        tokens, parents, parent = [], [], -1
        for level in range(gamma):
            right = self.continuation[done + level] if done + level < len(self.continuation) else 0
            if level >= self.correct_depth:
                right = (right + 1) % self.vocab
            tokens += [(right + 2) % self.vocab, right]  # a wrong first child, then the right one
            parents += [parent, parent]
            parent = len(tokens) - 1
        return DraftProposal(tokens, torch.full((len(tokens), self.vocab), 1 / self.vocab), parents)


def test_tree_verification_is_lossless_and_compacts_the_cache(tiny_target):
    engine = SpeculativeEngine(tiny_target)
    vocab = tiny_target.model.config.get_text_config().vocab_size
    for s in scenes.samples("heldout", 3):
        plain = engine.generate(s.image, s.prompt, max_new_tokens=24)
        oracle = OracleTreeDrafter(plain.token_ids, vocab)
        spec = engine.generate(s.image, s.prompt, oracle, gamma=5, max_new_tokens=24)
        assert spec.token_ids == plain.token_ids
        tree_rounds = [r for r in spec.rounds if r.parents is not None]
        assert tree_rounds and all(r.accepted == len(r.path) for r in tree_rounds)
        assert max(r.accepted for r in tree_rounds) == 3  # the right branch, as deep as the oracle keeps it right
        assert spec.tau > 2

    # After tree rounds (compacted caches) the target's cache is that of plain decoding of the same tokens.
    with engine.open(s.image, s.prompt, oracle, gamma=5) as session, engine.open(s.image, s.prompt) as plain:
        for _ in range(4):  # the prefill, then three tree rounds
            session.step()
        while len(plain.generated) < len(session.generated):
            plain.step()
        assert plain.generated == session.generated
        for tree_layer, plain_layer in zip(session.cache.layers, plain.cache.layers):
            torch.testing.assert_close(tree_layer.keys, plain_layer.keys, atol=1e-5, rtol=1e-4)
            torch.testing.assert_close(tree_layer.values, plain_layer.values, atol=1e-5, rtol=1e-4)


def test_dream_trees_are_lossless_and_shaped_as_asked(tiny_target, tiny_dream):
    engine = SpeculativeEngine(tiny_target)
    drafter = DreamDrafter(tiny_dream.adapter, tiny_target, tree=TreeShape(top_k=3, total=10))
    cases = [(s.image, s.prompt) for s in scenes.samples("heldout", 2)] + [(None, "Describe the image.")]
    for image, prompt in cases:
        plain = engine.generate(image, prompt, max_new_tokens=16)
        spec = engine.generate(image, prompt, drafter, gamma=4, max_new_tokens=16)
        assert spec.token_ids == plain.token_ids
        for r in spec.rounds[1:]:
            if r.parents is None:
                continue
            assert len(r.drafted) <= 10 and max(depths(r.parents)) <= 4
            assert all(p < i for i, p in enumerate(r.parents))  # parents come first


def test_sampling_drafts_chains_even_with_a_tree(tiny_target, tiny_dream):
    engine = SpeculativeEngine(tiny_target)
    drafter = DreamDrafter(tiny_dream.adapter, tiny_target, tree=TreeShape(top_k=2, total=6))
    gen = engine.generate(None, "Describe the image.", drafter, gamma=3, max_new_tokens=10,
                          sampling=SamplingConfig(temperature=1.0))
    assert all(r.parents is None for r in gen.rounds)


def test_a_one_wide_tree_drafts_what_the_chain_drafts(tiny_target, tiny_dream):
    """min_draft_prob prunes a tree by the chain's rule: with top_k 1 the tree is the chain, node for node."""
    engine = SpeculativeEngine(tiny_target)
    one_wide = DreamDrafter(tiny_dream.adapter, tiny_target, tree=TreeShape(top_k=1, total=8))
    s = scenes.sample("heldout", 1)
    lengths = set()
    for min_draft_prob in (0.0, 0.002, 0.01):
        drafts = []
        for drafter in (tiny_dream, one_wide):
            session = engine.open(s.image, s.prompt, drafter, min_draft_prob=min_draft_prob)
            session.step()  # the prefill
            drafts.append(drafter.start(session.context, session.prefill).propose(session.context, 6))
        chain, tree = drafts
        assert tree.tokens == chain.tokens and tree.parents == list(range(-1, len(chain.tokens) - 1))
        lengths.add(len(chain.tokens))
    assert len(lengths) > 1  # the bar did cut some drafts short


def test_a_tree_that_narrowed_to_one_branch_is_verified_as_a_chain(tiny_target, tiny_dream):
    engine = SpeculativeEngine(tiny_target)
    one_wide = DreamDrafter(tiny_dream.adapter, tiny_target, tree=TreeShape(top_k=1, total=8))
    s = scenes.sample("heldout", 1)
    chain = engine.generate(s.image, s.prompt, tiny_dream, gamma=4, max_new_tokens=16)
    tree = engine.generate(s.image, s.prompt, one_wide, gamma=4, max_new_tokens=16)
    assert tree.token_ids == chain.token_ids
    assert [(r.drafted, r.accepted, r.kind, r.parents) for r in tree.rounds] == \
        [(r.drafted, r.accepted, r.kind, None) for r in chain.rounds]


def test_min_draft_prob_narrows_dream_trees_and_stays_lossless(tiny_target, tiny_dream):
    engine = SpeculativeEngine(tiny_target)
    drafter = DreamDrafter(tiny_dream.adapter, tiny_target, tree=TreeShape(top_k=4, total=16))
    s = scenes.sample("heldout", 2)
    plain = engine.generate(s.image, s.prompt, max_new_tokens=16)
    wide = engine.generate(s.image, s.prompt, drafter, gamma=4, max_new_tokens=16)
    narrow = engine.generate(s.image, s.prompt, drafter, gamma=4, max_new_tokens=16, min_draft_prob=0.005)
    assert wide.token_ids == narrow.token_ids == plain.token_ids
    size = lambda gen: sum(len(r.drafted) for r in gen.rounds) / (len(gen.rounds) - 1)  # noqa: E731
    assert size(narrow) < size(wide)


def _branch(parents: list[int], node: int) -> list[int]:
    """Node indices from the root's child down to `node`."""
    out = []
    while node >= 0:
        out.append(node)
        node = parents[node]
    return out[::-1]


@pytest.mark.parametrize("name", ["text", "massv"])
def test_a_causal_lm_tree_scores_each_node_as_its_branch_read_plainly(name):
    """Text and MASSV trees: every node's distribution is the LM's on the committed sequence plus that node's branch,
    fed as a plain sequence (the tree mask and positions hide siblings and cousins), and after drafting the LM's cache
    holds the committed sequence again. The trained drafters: a random LM's attention is too flat to tell a wrong
    mask or position apart."""
    engine = SpeculativeEngine(load_target())
    chain = load_drafter(name)
    drafter = copy.copy(chain)
    drafter.tree = TreeShape(top_k=2, total=10)
    for s in scenes.sample("heldout", 5, "caption"), photos.sample("heldout", 0, "layout"):
        session = engine.open(s.image, s.prompt, drafter)
        for _ in range(3):  # the prefill and two tree rounds: the next tree grows from a cache they have cropped
            session.step()
        run = session.run
        proposal = run.propose(session.context, 4)
        assert len(proposal.tokens) == 10 and max(depths(proposal.parents)) >= 3 and not is_chain(proposal.parents)
        committed = [*run.prompt_ids, *session.context.generated]
        assert run.cache_length == len(committed) == len(run.prefix.held)
        for node in range(len(proposal.tokens)):
            plain = chain.start(session.context, session.prefill)  # a chain run, with a cache of its own
            ancestors = [proposal.tokens[i] for i in _branch(proposal.parents, node)[:-1]]
            feed = plain.prefix.pending(committed + ancestors)
            logits = plain.model(input_ids=torch.tensor([feed]), cache=plain.prefix.cache, use_cache=True).logits
            torch.testing.assert_close(proposal.probs[node], torch.softmax(logits[0, -1].float(), -1),
                                       atol=1e-5, rtol=1e-4)
        session.close()


def test_causal_lm_trees_are_lossless(tiny_target, tiny_text_drafter, twin_drafter, tiny_massv):
    engine = SpeculativeEngine(tiny_target)
    s = scenes.sample("heldout", 6)
    for chain in (tiny_text_drafter, twin_drafter, tiny_massv):
        drafter = copy.copy(chain)
        drafter.tree = TreeShape(top_k=2, total=8)
        for image in (s.image, None):
            plain = engine.generate(image, s.prompt, max_new_tokens=20)
            tree = engine.generate(image, s.prompt, drafter, gamma=4, max_new_tokens=20)
            assert tree.token_ids == plain.token_ids
            assert any(r.parents is not None and not is_chain(r.parents) for r in tree.rounds)


@pytest.mark.parametrize("name", ["text", "massv", "dream", "eagle3"])
def test_a_tree_spec_drafts_with_the_chain_drafters_weights(name):
    chain, tree = load_drafter(name), load_drafter(f"{name}:tree=2x8")
    weights = lambda d: d.adapter if name == "dream" else d.model  # noqa: E731
    assert weights(tree) is weights(chain)  # one copy in memory
    assert (chain.tree, chain.drafts_trees) == (None, False) and (tree.tree, tree.drafts_trees) == (TreeShape(2, 8), True)
    assert load_drafter(f"{name}:tree=chain").tree is None
    with pytest.raises(ValueError, match="tree"):
        load_drafter(f"{name}:tree=9x8")
