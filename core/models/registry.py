"""Loading models by name: a target VLM preset (core/models/presets.py) or local directory, and its drafters, each loaded
once and cached.

    from core.models.registry import load_target, load_drafter
    target = load_target("embedded"); drafter = load_drafter("text")
    dream = load_drafter("dream:keep=0.5,tree=4x32")      # options after a colon, for the drafters that take them
    mine = load_drafter("massv:weights=runs/massv", "path/to/target")   # any drafter kind, weights from a directory

A drafter name is one of the target preset's drafters, or a drafter kind (text, massv, dream, eagle3) with `weights=`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

from safetensors import SafetensorError

from core.decoding.tree import TreeShape
from core.drafters.base import Drafter
from core.drafters.dream import DreamDrafter
from core.drafters.eagle3.drafter import Eagle3Drafter
from core.drafters.massv import MassvDrafter
from core.drafters.text import TextDrafter
from core.models.loading import LoadOptions, is_repo_id, presets_only
from core.models.presets import EMBEDDED, VLM_PRESETS, DrafterSource, vlm_preset
from core.models.vlm import VisionLanguageModel


def _dream(target: VisionLanguageModel, weights: str, name: str, load: LoadOptions, keep: str | None = None) -> Drafter:
    return DreamDrafter.from_pretrained(weights, target, name, keep_ratio=None if keep is None else float(keep))


# kind -> loader(target, weights, display name, load options, **options); every kind also takes `tree` (_load_drafter)
DRAFTER_KINDS: dict[str, Callable[..., Drafter]] = {
    "text": lambda target, weights, name, load: TextDrafter.from_pretrained(weights, name, load),
    "massv": lambda target, weights, name, load: MassvDrafter.from_pretrained(weights, name, load),
    "dream": _dream,
    "eagle3": lambda target, weights, name, load: Eagle3Drafter.from_pretrained(weights, target, name,
                                                                               cache_dir=load.cache_dir),
}
# The embedded target's drafters by name (what the app and the benchmarks offer by default).
DRAFTERS: dict[str, DrafterSource] = VLM_PRESETS[EMBEDDED].drafters
NO_DRAFTER = "none"
LOCAL_KINDS = ("massv", "dream")  # trained by this project, so never on the hub: weights are a local directory


@lru_cache(maxsize=4)
def load_target(name_or_path: str = EMBEDDED) -> VisionLanguageModel:
    preset = vlm_preset(name_or_path)
    try:
        return VisionLanguageModel.from_pretrained(preset.target, preset.load)
    except (OSError, SafetensorError) as exc:  # neither cached nor downloadable, a broken directory or a corrupt file
        raise ValueError(f"cannot load {name_or_path!r}: {str(exc).strip()}".splitlines()[0]) from None


def split_drafters(specs: str) -> list[str]:
    """"text,dream:keep=0.5,tree=4x32" -> ["text", "dream:keep=0.5,tree=4x32"]: a key=value part belongs to the
    drafter before it."""
    out: list[str] = []
    for part in (p.strip() for p in specs.split(",") if p.strip()):
        if out and "=" in part and ":" not in part:
            out[-1] += "," + part
        else:
            out.append(part)
    return out


def parse_spec(spec: str, target_name: str = EMBEDDED) -> tuple[DrafterSource, dict[str, str]]:
    """The drafter source a spec names and its options, or ValueError saying what is wrong."""
    name, _, options = spec.partition(":")
    if any("=" not in option for option in options.split(",") if option):
        raise ValueError(f"drafter options look like key=value,key=value; got {options!r}")
    kwargs = dict(option.split("=", 1) for option in options.split(",") if option)
    drafters = vlm_preset(target_name).drafters
    weights = kwargs.pop("weights", None)
    if weights is not None and presets_only():
        raise ValueError("this server loads drafters only from its presets (weights= is turned off)")
    if name in drafters:
        source = drafters[name]
    elif name in DRAFTER_KINDS and weights is not None:
        source = DrafterSource(name, weights)
    else:
        raise ValueError(f"unknown drafter {name!r}; choose from {[NO_DRAFTER, *drafters]}, or a kind "
                         f"({', '.join(DRAFTER_KINDS)}) with weights=DIR")
    return DrafterSource(source.kind, weights or source.weights, source.note), kwargs


def _without_tree(spec: str) -> str:
    name, _, options = spec.partition(":")
    kept = [option for option in options.split(",") if option and not option.startswith("tree=")]
    return f"{name}:{','.join(kept)}" if kept else name


@lru_cache(maxsize=16)
def _load_drafter(spec: str, target_name: str) -> Drafter:
    source, kwargs = parse_spec(spec, target_name)
    if "tree" in kwargs:  # a tree drafts with the chain drafter's weights: one copy of them in memory
        shape = None if kwargs["tree"] == "chain" else TreeShape.parse(kwargs["tree"])
        drafter = copy.copy(_load_drafter(_without_tree(spec), target_name))
        drafter.tree, drafter.name = shape, spec
        return drafter
    target = load_target(target_name)
    load = vlm_preset(target_name).load
    try:
        return DRAFTER_KINDS[source.kind](target, source.weights, spec, load, **kwargs)
    except TypeError:
        raise ValueError(f"drafter {spec.partition(':')[0]!r} does not take the options {sorted(kwargs)}") from None


def load_drafter(spec: str, target_name: str = EMBEDDED) -> Drafter | None:
    """`spec` is a drafter name, optionally with options: "dream:keep=0.5,tree=4x32,weights=DIR"."""
    if spec == NO_DRAFTER:
        return None
    name = spec.partition(":")[0]
    source, _ = parse_spec(spec, target_name)  # bad names and options fail before any loading
    local = source.kind in LOCAL_KINDS or not is_repo_id(source.weights)
    if local and not Path(source.weights).is_dir():
        raise ValueError(f"the {name!r} drafter has no trained weights here ({source.weights}); "
                         f"`python -m core train {source.kind} --target {target_name}` makes them")
    try:
        return _load_drafter(spec, target_name)
    except OSError as exc:  # transformers' message for a missing directory talks about hub repo ids
        raise ValueError(f"the {name!r} drafter has no trained weights here ({exc.__class__.__name__})") from None
    except SafetensorError as exc:  # a damaged weights file
        raise ValueError(f"cannot load the {name!r} drafter: {str(exc).strip()}".splitlines()[0]) from None
