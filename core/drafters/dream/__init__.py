"""DREAM drafter (arXiv 2505.19201): an EAGLE-like adapter that reads the target's features through cross-attention.

    drafter = DreamDrafter.from_pretrained("assets/models/dream", target)     # target: a VisionLanguageModel
    engine.generate(image, prompt, drafter)

The adapter has the target's width and borrows its token embeddings (image features included) and LM head,
both frozen. At position i its input fuses the embedding of token i with the target's last-layer feature of
position i-1 (its own predicted feature once it drafts past what the target has seen); it predicts the target's
feature of position i, whose LM-head logits give token i+1. Three blocks:

  self-attention decoder layer   (its output is distilled towards a target intermediate layer, see train_dream)
  cross-attention block          queries from the draft states; keys/values from the target's last-layer
                                 features of the context (visual tokens included), RMSNorm on q and k,
                                 tanh gates initialised at 0 so training starts from a plain EAGLE drafter
  self-attention decoder layer

The MLPs may be narrower than the target's (`intermediate_size`), and the LM head may be restricted to the tokens
the target answers with most (`draft_vocab`, EAGLE-3's reduced draft vocabulary): both make a draft step cheaper.
Only the visual tokens the target's last layer attends to most at prefill (`keep_ratio`, default 0.75) enter
the cross-attention memory; the target itself still sees every visual token. Drafting is a chain, or with `tree`
(greedy decoding) an EAGLE-2 dynamic tree that the engine verifies in one forward (core/decoding/tree.py).
Training: core/training/dream.py.

  adapter.py   the adapter: config, its blocks and caches
  keep.py      which visual tokens enter the cross-attention memory
  drafter.py   the drafter (LM head over the draft vocabulary, loading, saving) and one request's drafting:
               catch-up on committed features, then a chain or an EAGLE-2 tree
"""
from core.drafters.dream.adapter import AdapterCache, DreamAdapter, DreamConfig
from core.drafters.dream.drafter import DreamDrafter
from core.drafters.dream.keep import keep_visual, visual_scores

__all__ = ["AdapterCache", "DreamAdapter", "DreamConfig", "DreamDrafter", "keep_visual", "visual_scores"]
