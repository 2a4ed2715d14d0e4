"""Which models the app offers: the embedded target, hub presets (listed, disabled with a reason), and every
drafter in core.registry, with errors a user can act on when one cannot be loaded.

    python -m ui.models        # prints the model and drafter choices as the app will show them
"""

from __future__ import annotations

import os

from core.embedded import EMBEDDED_PATHS
from core.registry import DRAFTERS, NO_DRAFTER, load_target

EMBEDDED = "embedded"
HUB_PRESETS = ("Qwen/Qwen2.5-VL-3B-Instruct", "Qwen/Qwen2.5-VL-7B-Instruct")
DRAFTER_NOTES = {
    NO_DRAFTER: "plain decoding (AR)",
    "text": "text-only Qwen2 drafter",
    "massv-phase1": "MASSV, projector alignment only",
    "massv": "MASSV (text drafter + projector on the target's vision features)",
    "dream": "DREAM (cross-attention adapter on the target's features, 75 % of visual tokens)",
}


def hub_unavailable_reason() -> str:
    """Why hub presets are listed but disabled. No network probe: core.registry cannot load hub models yet, so
    reaching the hub would change nothing."""
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes"):
        return "HF_HUB_OFFLINE is set on this server"
    return "core.registry loads only the embedded target and local model directories for now"


def model_choices() -> list[tuple[str, str]]:
    reason = hub_unavailable_reason()
    return [("embedded (Qwen2.5-VL architecture, 7.8M params)", EMBEDDED)] + [
        (f"{repo} (disabled: {reason})", repo) for repo in HUB_PRESETS
    ]


def has_weights(drafter: str) -> bool:
    """False only for an embedded drafter whose directory is not there yet (still being trained)."""
    path = EMBEDDED_PATHS.get(drafter)
    return path is None or any(path.glob("*.safetensors"))


def drafter_choices() -> list[tuple[str, str]]:
    return [
        (f"{name}: {DRAFTER_NOTES.get(name, name)}" + ("" if has_weights(name) else " (no weights yet)"), name)
        for name in (NO_DRAFTER, *DRAFTERS)
    ]


def default_drafter() -> str:
    return next((name for name in ("massv", "text") if name in DRAFTERS and has_weights(name)), NO_DRAFTER)


def target(name: str):
    if name in HUB_PRESETS:
        raise ValueError(f"{name} is disabled: {hub_unavailable_reason()}.")
    return load_target(name)


if __name__ == "__main__":
    print("models:", *model_choices(), sep="\n  ")
    print("drafters:", *drafter_choices(), sep="\n  ")
