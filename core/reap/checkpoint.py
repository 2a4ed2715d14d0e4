"""Reduced MoE checkpoints: load a model for REAP, slice experts out of it, and write the result atomically.

Slicing cuts dim 0 (the expert) of every tensor of the router and the fused experts module and updates the expert
count in the config, so a checkpoint with the same count in every layer is a plain HF directory that
`AutoModelForCausalLM.from_pretrained` (and vLLM) loads with no project code. A global ranking keeps different counts
per layer, which no stock transformers config can say: the config then holds the largest count and
`layer_experts` lists each sparse layer's own, and `load_model` here builds that shape before reading the weights.

    from core.reap.checkpoint import load_model; model, tokenizer = load_model("runs/moe-reap50")

`weights_fingerprint` names a model's weights cheaply and wherever they are loaded: each weight file's SHA-256 (a
Hugging Face cache names its blobs by it; a local file's is computed once and remembered by path, size and mtime).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

import torch
import yaml
from safetensors.torch import load_file
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from core.models.cards import write_card
from core.models.loading import DTYPES, LoadOptions, recorded_path
from core.reap.adapters import adapter_for, moe_blocks, router_of

LAYER_EXPERTS = "layer_experts"  # config field of a checkpoint whose sparse layers keep different expert counts
_SHA256 = re.compile(r"[0-9a-f]{64}")


def _file_sha256(path: Path, memo: Path) -> str:
    real = path.resolve()
    if path.is_symlink() and _SHA256.fullmatch(real.name):
        return real.name  # a hub cache blob: its name is the file's SHA-256
    stat = real.stat()
    key = f"{real}|{stat.st_size}|{stat.st_mtime_ns}"
    known = json.loads(memo.read_text()) if memo.is_file() else {}
    if key not in known:
        h = hashlib.sha256()
        with real.open("rb") as f:
            for block in iter(lambda: f.read(1 << 24), b""):
                h.update(block)
        known[key] = h.hexdigest()
        memo.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{memo.name}.", dir=memo.parent)
        with os.fdopen(fd, "w") as out:
            json.dump(known, out)
        os.replace(tmp, memo)
    return known[key]


def weights_fingerprint(name_or_path: str, load: LoadOptions, memo: Path) -> str:
    """SHA-256 over the config, the load dtype and quantization, and every weight file's SHA-256 (`memo`: the JSON
    file that remembers local files' hashes). Reads no weights into memory and touches no device."""
    path = Path(name_or_path)
    if not path.is_dir():
        from huggingface_hub import snapshot_download  # the files from_pretrained just resolved, from the cache

        path = Path(snapshot_download(name_or_path, cache_dir=load.cache_dir, local_files_only=True))
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise ValueError(f"{name_or_path} has no .safetensors weights")
    h = hashlib.sha256()
    for part in [(path / "config.json").read_text(), load.dtype, str(load.quantization),
                 *(f"{f.name}:{_file_sha256(f, memo)}" for f in files)]:
        h.update(part.encode() + b"\0")
    return h.hexdigest()


def load_model(name_or_path: str, load: LoadOptions = LoadOptions(), dtype: str | None = None):
    """A MoE model and its tokenizer; `dtype` overrides the load options' (e.g. "auto": keep the stored one)."""
    load = load if dtype is None else replace(load, dtype=dtype)
    tokenizer = AutoTokenizer.from_pretrained(name_or_path, **load.file_kwargs())
    config = AutoConfig.from_pretrained(name_or_path, **load.file_kwargs())
    counts = getattr(config, LAYER_EXPERTS, None)
    if counts is None:
        return AutoModelForCausalLM.from_pretrained(name_or_path, **load.kwargs()).eval(), tokenizer
    return _load_uneven(Path(name_or_path), config, counts, load).eval(), tokenizer


def _load_uneven(path: Path, config, counts: list[int], load: LoadOptions):
    if load.device_map or load.quantization or not path.is_dir():
        raise ValueError(f"{path} keeps different expert counts per layer: it loads from a local directory, "
                         "without device_map or quantization")
    dtype = config.dtype if load.dtype == "auto" else DTYPES[load.dtype]
    model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, str(dtype).removeprefix("torch.")))
    slice_experts(model, [list(range(n)) for n in counts])
    index = path / "model.safetensors.index.json"
    files = sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.is_file() else ["model.safetensors"]
    state = {k: v for f in files for k, v in load_file(path / f).items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    loaded = {id(p) for name, p in model.named_parameters() if name in state}
    untied = [k for k in missing if id(model.get_parameter(k)) not in loaded]  # tied weights are saved once
    if untied or unexpected:
        raise ValueError(f"{path}: weights do not match its layer_experts (missing {untied}, unexpected {unexpected})")
    return model


def _slice_module(module: torch.nn.Module, index: torch.Tensor, experts: int) -> None:
    for name, tensor in list(module.named_parameters(recurse=True)) + list(module.named_buffers(recurse=True)):
        if tensor.dim() and tensor.shape[0] == experts:
            owner = module.get_submodule(name.rpartition(".")[0]) if "." in name else module
            attr = name.rpartition(".")[2]
            sliced = tensor.data[index.to(tensor.device)].clone()
            if isinstance(tensor, torch.nn.Parameter):
                setattr(owner, attr, torch.nn.Parameter(sliced, requires_grad=tensor.requires_grad))
            else:
                owner.register_buffer(attr, sliced)
    for m in module.modules():
        if getattr(m, "num_experts", None) == experts:
            m.num_experts = len(index)


@torch.no_grad()
def slice_experts(model, kept: list[list[int]]) -> None:
    """In place: keep only `kept[layer]` experts in every sparse block and update the config (different counts per
    layer are recorded in its `layer_experts`)."""
    adapter = adapter_for(model)
    blocks = moe_blocks(model)
    if len(kept) != len(blocks):
        raise ValueError(f"need the kept experts of each of the {len(blocks)} sparse layers, got {len(kept)}")
    for (_, block), keep in zip(blocks, kept):
        experts = block.experts.num_experts
        index = torch.tensor(keep)
        _slice_module(router_of(model, block), index, experts)
        _slice_module(block.experts, index, experts)
        if getattr(block, "num_experts", None) == experts:
            block.num_experts = len(keep)
    counts = [len(k) for k in kept]
    setattr(model.config, adapter.experts_key, max(counts))
    if len(set(counts)) > 1:
        setattr(model.config, LAYER_EXPERTS, counts)
    elif hasattr(model.config, LAYER_EXPERTS):
        delattr(model.config, LAYER_EXPERTS)


def atomic_save(out: str | Path, write) -> Path:
    """Call `write(tmpdir)` on a temporary directory next to `out`, then rename it into place.

    A crash leaves `out` as it was (old content or absent), never half-written.
    """
    out = Path(out).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        write(tmp)
        umask = os.umask(0)
        os.umask(umask)
        tmp.chmod(0o777 & ~umask)  # mkdtemp makes it private; the result should look like any saved model
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
            os.replace(out, old / out.name)
            os.replace(tmp, out)
            shutil.rmtree(old)
        else:
            os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def save_reduced(model, tokenizer, out: str | Path, recipe: dict) -> Path:
    """The model (in its own dtype), tokenizer, recipe.yaml and a model card, written atomically."""

    # Uneven counts are stored as transformers 5 holds them in memory (fused experts), which `load_model` reads back
    # directly; even ones in the family's original layout, for every other loader.
    uneven = hasattr(model.config, LAYER_EXPERTS)

    def write(tmp: Path) -> None:
        model.save_pretrained(tmp, save_original_format=not uneven)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        (tmp / "recipe.yaml").write_text(yaml.safe_dump(recipe, sort_keys=False))
        write_card(tmp, name=recorded_path(Path(out).resolve()))

    return atomic_save(out, write)


def recipe_for(scores: dict, method: str, ratio: float, kept: list[list[int]], **extra) -> dict:
    counts = [len(k) for k in kept]
    return {
        "method": method,
        "ratio": ratio,
        "source_model": recorded_path(scores["model"]),
        "calibration": scores["calibration"],
        "calibration_tokens": scores["num_tokens"],
        "experts_before": scores["num_experts"],
        "experts_after": counts[0] if len(set(counts)) == 1 else counts,
        "top_k": scores["top_k"],
        "kept_experts": {name: keep for name, keep in zip(scores["layers"], kept)},
        **extra,
    }


def save_zip(model, tokenizer, out_dir: str | Path, name: str, recipe: dict) -> Path:
    """`save_reduced` as `out_dir/name.zip`; directory and zip are written under temporary names and renamed, so a
    reader never sees half a file."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{name}.", dir=out_dir) as tmp:
        save_reduced(model, tokenizer, Path(tmp) / name, recipe)
        archive = shutil.make_archive(str(Path(tmp) / name), "zip", root_dir=tmp, base_dir=name)
        os.replace(archive, out_dir / f"{name}.zip")
    return out_dir / f"{name}.zip"
