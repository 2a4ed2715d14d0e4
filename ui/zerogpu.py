"""`gpu`: Hugging Face ZeroGPU's `@spaces.GPU` where the `spaces` package is installed, a no-op elsewhere.

    from ui.zerogpu import gpu
    @gpu
    def generate(...): ...

On a ZeroGPU Space a GPU is attached only while a decorated call runs; everywhere else (CPU, Docker, a local
GPU) the function runs as written.
"""

from __future__ import annotations

try:
    import spaces
except ImportError:
    spaces = None


def gpu(fn):
    return spaces.GPU(fn) if spaces is not None else fn
