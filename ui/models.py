"""Which models the app offers: the presets of core/models/presets.py (a hub preset is listed and, when it cannot load
here, disabled with the reason) and the chosen target's drafters, with errors a user can act on.

    python -m ui.models        # prints the model and drafter choices as the app will show them
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from core.models.presets import (
    EMBEDDED,  # noqa: F401  (the tabs read models.EMBEDDED)
    MOE_PRESETS,
    VLM_PRESETS,
    Availability,
    availability,
    hub_reachable,
)
from core.models.registry import DRAFTERS, NO_DRAFTER, load_target

DRAFTER_NOTES = {NO_DRAFTER: "plain decoding (AR)"} | {name: source.note for name, source in DRAFTERS.items()}


@lru_cache(maxsize=1)
def _hub_reachable() -> bool:
    return hub_reachable()  # probed once per server: a Space's network does not come and go


def _availability(name: str, table: dict) -> Availability:
    preset = table[name]
    return availability(name, preset.model, preset.hub, preset.load.cache_dir, preset.hub and _hub_reachable())


def _choices(table: dict) -> list[tuple[str, str]]:
    out = []
    for name, preset in table.items():
        a = _availability(name, table)
        label = f"{name} ({preset.note})" if a.usable else f"{name} (disabled: {a.reason})"
        out.append((label, name))
    return out


def model_choices() -> list[tuple[str, str]]:
    return _choices(VLM_PRESETS)


def moe_choices() -> list[tuple[str, str]]:
    return _choices(MOE_PRESETS)


def check_offered(name: str, table: dict, kind: str = "model") -> None:
    """Only what the app lists may load from the UI (no directory paths from visitors), and only if usable."""
    if name not in table:
        raise ValueError(f"unknown {kind} {name!r}; choose one of {list(table)}")
    a = _availability(name, table)
    if not a.usable:
        raise ValueError(f"{name} is disabled: {a.reason}.")


def has_weights(drafter: str) -> bool:
    """False only for an embedded drafter whose directory is not there yet (still being trained)."""
    source = DRAFTERS.get(drafter)
    return source is None or any(Path(source.weights).glob("*.safetensors"))


def drafter_choices() -> list[tuple[str, str]]:
    return [
        (f"{name}: {DRAFTER_NOTES.get(name, name)}" + ("" if has_weights(name) else " (no weights yet)"), name)
        for name in (NO_DRAFTER, *DRAFTERS)
    ]


def default_drafter() -> str:
    return next((name for name in ("massv", "text") if name in DRAFTERS and has_weights(name)), NO_DRAFTER)


def target(name: str):
    check_offered(name, VLM_PRESETS)
    return load_target(name)


if __name__ == "__main__":
    print("models:", *model_choices(), sep="\n  ")
    print("MoE models:", *moe_choices(), sep="\n  ")
    print("drafters:", *drafter_choices(), sep="\n  ")
