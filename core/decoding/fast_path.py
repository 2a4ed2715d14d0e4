"""The GPU fast path: static KV caches and CUDA graphs for the target's decode / verify steps and the drafters' steps.

On a GPU, one eager transformers decode step costs 16-22 ms for every size from 0.5B to 7B: the time goes to
launching hundreds of small kernels, not to reading the weights (0.23 ms for 0.5B, 3.5 ms for 7B at H200
bandwidth). A 0.5B drafter then costs as much as a 7B target and speculation cannot pay. The fast path keeps the
KV cache at fixed addresses (transformers' StaticCache, sized in whole buckets so graphs are reused across
requests) and compiles each step with `torch.compile(mode="reduce-overhead")`, which records one CUDA graph per
input length (1 for plain decoding, γ+1 for a chain, the tree's size) and replays it. Prefills stay eager: their
length changes with every prompt. Rolling back rejected drafts is the same `crop` on either cache, so results are
unchanged (tests/test_fast_path.py checks token-for-token equality).

    engine = SpeculativeEngine(target, FastPath.auto(target.device))    # on CPU `auto` is plain eager
    python -m core bench-gpu                                          # eager vs fast path, on a GPU
"""

from __future__ import annotations

from dataclasses import dataclass
from weakref import WeakKeyDictionary

import torch
from transformers import DynamicCache, PreTrainedModel, StaticCache
from transformers.cache_utils import Cache

_COMPILED: WeakKeyDictionary = WeakKeyDictionary()  # model -> its compiled forward, shared by every request


@dataclass(frozen=True)
class FastPath:
    static_cache: bool = False
    compile: bool = False
    bucket: int = 1024  # static caches hold a whole number of buckets, so most requests share one size

    @classmethod
    def auto(cls, device: torch.device | str) -> FastPath:
        """Everything on CUDA; eager with dynamic caches elsewhere (CPU kernels are not launch-bound)."""
        on_gpu = torch.device(device).type == "cuda"
        return cls(static_cache=on_gpu, compile=on_gpu)

    def new_cache(self, model: PreTrainedModel, needed: int) -> Cache:
        """A cache for `needed` positions of `model`."""
        config = model.config.get_text_config(decoder=True) if hasattr(model.config, "get_text_config") else model.config
        if not self.static_cache:
            return DynamicCache(config=config)
        return StaticCache(config=config, max_cache_len=-(-needed // self.bucket) * self.bucket)

    def step(self, model: PreTrainedModel):
        """The callable for a cached step of a few tokens: the model itself, or its compiled forward."""
        if not self.compile:
            return model
        if model not in _COMPILED:
            # Every distinct step length is one graph; the default of 8 recompilations would fall back to eager.
            torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
            _COMPILED[model] = torch.compile(model.forward, mode="reduce-overhead", dynamic=False, fullgraph=False)
        return _COMPILED[model]


def key_length(cache: Cache) -> int | None:
    """How many key positions attention sees: a static cache's full size, None for a dynamic cache (as many as it
    holds). Explicit attention masks (tree verification) must be that wide."""
    layer = cache.layers[0]
    return getattr(layer, "max_cache_len", None) if isinstance(cache, StaticCache) else None
