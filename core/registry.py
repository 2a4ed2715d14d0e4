"""Models by name: the embedded default and the drafters that go with a target, loaded once and cached.

    from core.registry import load_target, load_drafter
    target = load_target("embedded"); drafter = load_drafter("text", target)

A name not in the tables is taken as a local directory holding a normal Hugging Face model.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

from core.drafters import Drafter, TextDrafter
from core.embedded import EMBEDDED_PATHS
from core.massv import MassvDrafter
from core.vlm import VisionLanguageModel

TARGETS = {"embedded": EMBEDDED_PATHS["target"]}

# name -> loader(target) for the embedded target's drafters
DRAFTERS: dict[str, Callable[[VisionLanguageModel], Drafter]] = {
    "text": lambda target: TextDrafter.from_pretrained(EMBEDDED_PATHS["text"], "text"),
    "massv-phase1": lambda target: MassvDrafter.from_pretrained(EMBEDDED_PATHS["massv-phase1"], "massv-phase1"),
    "massv": lambda target: MassvDrafter.from_pretrained(EMBEDDED_PATHS["massv"], "massv"),
}
NO_DRAFTER = "none"


def _resolve(name_or_path: str, table: dict) -> Path:
    if name_or_path in table:
        return Path(table[name_or_path])
    path = Path(name_or_path)
    if not (path / "config.json").is_file():
        raise ValueError(f"unknown model {name_or_path!r}: not one of {sorted(table)} and not a model directory")
    return path


@lru_cache(maxsize=4)
def load_target(name_or_path: str = "embedded") -> VisionLanguageModel:
    return VisionLanguageModel.from_pretrained(_resolve(name_or_path, TARGETS))


@lru_cache(maxsize=8)
def _load_drafter(name: str, target_name: str) -> Drafter:
    return DRAFTERS[name](load_target(target_name))


def load_drafter(name: str, target_name: str = "embedded") -> Drafter | None:
    if name == NO_DRAFTER:
        return None
    if name not in DRAFTERS:
        raise ValueError(f"unknown drafter {name!r}; choose from {[NO_DRAFTER, *DRAFTERS]}")
    try:
        return _load_drafter(name, target_name)
    except OSError as exc:  # transformers' message for a missing directory talks about hub repo ids
        raise ValueError(f"the {name!r} drafter has no trained weights here ({exc.__class__.__name__})") from None
