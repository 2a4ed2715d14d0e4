"""How models load: from_pretrained options (dtype, device_map, bitsandbytes 4/8-bit, cache) and the operator's
security switches, read from the environment at load time.

    python -m core.models.loading        # prints the switches as this server sees them

- SPECULUM_TRUST_REMOTE_CODE=1: let models run code from their repository (off by default);
- SPACE_ID (set by Hugging Face Spaces): a public server, so only presets load (core/models/presets.py) unless
  SPECULUM_ALLOW_ANY_MODEL=1;
- weights are read from safetensors only (never pickle).

`save_bf16` writes a model in the shipped format (bfloat16 safetensors) without changing its dtype in memory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

DTYPES = {"auto": "auto", "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
QUANTIZATIONS = ("4bit", "8bit")


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").lower() in ("1", "true", "yes")


def trust_remote_code() -> bool:
    return env_flag("SPECULUM_TRUST_REMOTE_CODE")


def presets_only() -> bool:
    """On a public Space only presets load, so visitors cannot make the server read arbitrary directories."""
    return bool(os.environ.get("SPACE_ID")) and not env_flag("SPECULUM_ALLOW_ANY_MODEL")


@dataclass(frozen=True)
class LoadOptions:
    """How from_pretrained loads a model. device_map "auto" (accelerate) spreads a model over the GPUs and offloads
    what does not fit to CPU, moving each offloaded layer onto the GPU only while it runs."""

    dtype: str = "float32"
    device_map: str | None = None
    quantization: str | None = None  # "4bit" | "8bit": bitsandbytes, GPU only
    cache_dir: str | None = None  # the Hugging Face cache to read (and fill, when the hub is reachable)

    def __post_init__(self):
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {self.dtype!r}")
        if self.quantization not in (None, *QUANTIZATIONS):
            raise ValueError(f"quantization must be one of {QUANTIZATIONS} or none, got {self.quantization!r}")

    def kwargs(self) -> dict:
        """Keyword arguments for a model's from_pretrained."""
        out = {"dtype": DTYPES[self.dtype], "use_safetensors": True, "trust_remote_code": trust_remote_code(),
               "cache_dir": self.cache_dir}
        if self.device_map:
            out["device_map"] = self.device_map
        if self.quantization:
            from transformers import BitsAndBytesConfig

            compute = DTYPES[self.dtype] if self.dtype not in ("auto", "float32") else torch.bfloat16
            out["quantization_config"] = BitsAndBytesConfig(
                load_in_4bit=self.quantization == "4bit", load_in_8bit=self.quantization == "8bit",
                bnb_4bit_compute_dtype=compute, bnb_4bit_quant_type="nf4")
        return out

    def file_kwargs(self) -> dict:
        """Keyword arguments for tokenizers and processors (no weights, so no dtype or device)."""
        return {"trust_remote_code": trust_remote_code(), "cache_dir": self.cache_dir}


def is_repo_id(name: str) -> bool:
    """Whether a model name is a hub repo id (owner/name) rather than a local directory."""
    return name.count("/") == 1 and not name.startswith((".", "/", "~")) and not os.path.exists(name)


def save_bf16(model, path) -> None:
    """save_pretrained in bfloat16, leaving `model` in its own dtype. Its weights are then exactly the ones written
    (rounded to bfloat16), so what a training run evaluates after saving is what ships."""
    dtype = model.dtype
    model.to(torch.bfloat16).save_pretrained(path)
    model.to(dtype)


if __name__ == "__main__":
    print({"trust_remote_code": trust_remote_code(), "presets_only": presets_only(),
           "default": LoadOptions().kwargs()})
