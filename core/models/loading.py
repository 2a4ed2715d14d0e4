"""How models load: from_pretrained options (dtype, device_map, bitsandbytes 4/8-bit, cache) and the operator's
security switches, read from the environment at load time.

    python -m core.models.loading        # prints the switches as this server sees them

- SPECULUM_TRUST_REMOTE_CODE=1: let models run code from their repository (off by default);
- SPACE_ID (set by Hugging Face Spaces): a public server, so only presets load (core/models/presets.py) unless
  SPECULUM_ALLOW_ANY_MODEL=1;
- weights are read from safetensors only (never pickle).

`save_bf16` writes a model in the shipped format (bfloat16 safetensors) without changing its dtype in memory.
`recorded` is how every training log, shipped config and result JSON names a path: relative to the repository, so
a committed file names no machine; `repo_relative` is how a file that must find a path again names it (a
distillation set's images, an EAGLE-3 config's verifier), and `in_repo` reads either back from any directory.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import torch

DTYPES = {"auto": "auto", "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
QUANTIZATIONS = ("4bit", "8bit")
REPO = Path(__file__).resolve().parents[2]
# An absolute path inside a string: at its start or after a space, '=', ':' or a quote ("data-dir:/x", "weights=/x",
# "--out /x"); a URL's "//" is not one.
_EMBEDDED_ABSOLUTE = re.compile(r"(?:^|(?<=[\s=:(\"']))(?:~/|/(?!/))[^\s,;'\"()]+")


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


def repo_relative(path: str | Path) -> str:
    """A path a file must find again: relative to the repository when inside it, else absolute."""
    real = Path(path).expanduser().resolve()
    return real.relative_to(REPO).as_posix() if real.is_relative_to(REPO) else str(real)


def in_repo(path: str | Path) -> Path:
    """A path as `repo_relative` or `recorded` wrote it, wherever the reader runs: a relative one is the repository's."""
    path = Path(path)
    return path if path.is_absolute() else REPO / path


def recorded_path(path: str | Path) -> str:
    """How a log or a shipped config names a path: relative to the repository inside it; a relative path or a hub id
    as given; anywhere else, its name only (a temporary directory of one machine means nothing on another)."""
    text = str(path)
    if not text.startswith(("/", "~")):
        return text
    relative = repo_relative(text)
    return Path(relative).name if Path(relative).is_absolute() else relative


def recorded(value):
    """`value` (JSON: dicts, lists, strings) with every absolute path in its keys and strings as `recorded_path`."""
    if isinstance(value, dict):
        return {recorded(k): recorded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [recorded(v) for v in value]
    if isinstance(value, str):
        return _EMBEDDED_ABSOLUTE.sub(lambda m: recorded_path(m.group()), value)
    return value


def save_bf16(model, path) -> None:
    """save_pretrained in bfloat16, leaving `model` in its own dtype. Its weights are then exactly the ones written
    (rounded to bfloat16), so what a training run evaluates after saving is what ships."""
    dtype = model.dtype
    model.to(torch.bfloat16).save_pretrained(path)
    model.to(dtype)


if __name__ == "__main__":
    print({"trust_remote_code": trust_remote_code(), "presets_only": presets_only(),
           "default": LoadOptions().kwargs()})
