"""Models by name: the embedded default and the drafters that go with a target, loaded once and cached.

    from core.registry import load_target, load_drafter
    target = load_target("embedded"); drafter = load_drafter("text")
    dream = load_drafter("dream:keep=0.5,tree=4x32")      # options after a colon, for the drafters that take them

A target name not in the table is taken as a local directory holding a normal Hugging Face model.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

from core.dream import DreamDrafter
from core.drafters import Drafter, TextDrafter
from core.embedded import EMBEDDED_PATHS
from core.massv import MassvDrafter
from core.tree import TreeShape
from core.vlm import VisionLanguageModel

TARGETS = {"embedded": EMBEDDED_PATHS["target"]}


def _dream(target: VisionLanguageModel, name: str, keep: str | None = None, tree: str | None = None,
           weights: str | None = None) -> Drafter:
    return DreamDrafter.from_pretrained(weights or EMBEDDED_PATHS["dream"], target, name,
                                        keep_ratio=None if keep is None else float(keep),
                                        tree=None if tree in (None, "chain") else TreeShape.parse(tree))


# name -> loader(target, display name, **options) for the embedded target's drafters
DRAFTERS: dict[str, Callable[..., Drafter]] = {
    "text": lambda target, name: TextDrafter.from_pretrained(EMBEDDED_PATHS["text"], name),
    "massv-phase1": lambda target, name: MassvDrafter.from_pretrained(EMBEDDED_PATHS["massv-phase1"], name),
    "massv": lambda target, name: MassvDrafter.from_pretrained(EMBEDDED_PATHS["massv"], name),
    "dream": _dream,
}
NO_DRAFTER = "none"


def resolve(name_or_path: str, table: dict, kind: str = "model") -> Path:
    """A name from `table`, or a local directory holding a Hugging Face model."""
    if name_or_path in table:
        return Path(table[name_or_path])
    path = Path(name_or_path)
    if not (path / "config.json").is_file():
        raise ValueError(f"unknown {kind} {name_or_path!r}: not one of {sorted(table)} and not a model directory")
    return path


@lru_cache(maxsize=4)
def load_target(name_or_path: str = "embedded") -> VisionLanguageModel:
    return VisionLanguageModel.from_pretrained(resolve(name_or_path, TARGETS))


@lru_cache(maxsize=16)
def _load_drafter(spec: str, target_name: str) -> Drafter:
    name, _, options = spec.partition(":")
    kwargs = dict(option.split("=", 1) for option in options.split(",") if option)
    try:
        return DRAFTERS[name](load_target(target_name), spec, **kwargs)
    except TypeError:
        raise ValueError(f"drafter {name!r} does not take the options {sorted(kwargs)}") from None


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


def load_drafter(spec: str, target_name: str = "embedded") -> Drafter | None:
    """`spec` is a drafter name, optionally with options: "dream:keep=0.5,tree=4x32,weights=DIR"."""
    if spec == NO_DRAFTER:
        return None
    name, _, options = spec.partition(":")
    if name not in DRAFTERS:
        raise ValueError(f"unknown drafter {name!r}; choose from {[NO_DRAFTER, *DRAFTERS]}")
    if any("=" not in option for option in options.split(",") if option):
        raise ValueError(f"drafter options look like key=value,key=value; got {options!r}")
    try:
        return _load_drafter(spec, target_name)
    except OSError as exc:  # transformers' message for a missing directory talks about hub repo ids
        raise ValueError(f"the {name!r} drafter has no trained weights here ({exc.__class__.__name__})") from None
