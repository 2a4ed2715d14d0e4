"""Models by name, in one place: the embedded default and the hub presets (VLM targets with their drafters, MoE
models for REAP), each with its load options (core/models/loading.py), and whether a hub preset can load here.

    python -m core.models.presets            # lists the presets, whether each can load here, and why not

A name that is not a preset is a local directory holding a Hugging Face model, unless the server runs as a
public Space, where only presets load (core/models/loading.py has the operator's switches).

MASSV projectors and DREAM adapters for hub targets are not on the hub: `python -m core train massv|dream
--target REPO --out DIR` makes them, and they are found under $SPECULUM_WEIGHTS/<preset short name>/<drafter>.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from core.models.embedded import EMBEDDED_PATHS
from core.models.loading import LoadOptions, env_flag, presets_only
from core.reap.embedded_moe import MOE_PATH

EMBEDDED = "embedded"


def trained_weights(short_name: str, drafter: str) -> Path:
    return Path(os.environ.get("SPECULUM_WEIGHTS", "weights")) / short_name / drafter


@dataclass(frozen=True)
class DrafterSource:
    kind: str  # a loader in core.models.registry.DRAFTER_KINDS: "text", "massv", "dream" or "eagle3"
    weights: str  # a local directory or a hub repo id
    note: str = ""


@dataclass(frozen=True)
class VLMPreset:
    target: str  # a local directory or a hub repo id
    drafters: dict[str, DrafterSource]
    load: LoadOptions = LoadOptions()
    note: str = ""
    hub: bool = True  # False: ships with the app

    @property
    def model(self) -> str:  # what MoEPreset calls it, so availability reads either kind alike
        return self.target

    def with_load(self, load: LoadOptions) -> VLMPreset:
        return replace(self, load=load)


@dataclass(frozen=True)
class MoEPreset:
    model: str
    load: LoadOptions = LoadOptions()
    note: str = ""
    hub: bool = True


GPU_BF16 = LoadOptions(dtype="bfloat16", device_map="auto")
LOCAL_DEVICE = LoadOptions(device_map="cuda" if torch.cuda.is_available() else None)  # the embedded models: float32


def _hub_vlm(repo: str, short: str, text_drafter: str, note: str, eagle3: str = "") -> VLMPreset:
    eagle3_note = (f"published EAGLE-3 drafter {eagle3}" if eagle3 else
                   f"EAGLE-3 (train: python -m core train eagle3 --target {repo} --out {trained_weights(short, 'eagle3')})")
    return VLMPreset(repo, {
        "text": DrafterSource("text", text_drafter, f"{text_drafter}, never sees the image"),
        "massv": DrafterSource("massv", str(trained_weights(short, "massv")),
                               f"{text_drafter} + projector (train: python -m core train massv --target {repo} "
                               f"--out {trained_weights(short, 'massv')})"),
        "dream": DrafterSource("dream", str(trained_weights(short, "dream")),
                               f"adapter at the target's width (train: python -m core train dream --target {repo} "
                               f"--out {trained_weights(short, 'dream')})"),
        "eagle3": DrafterSource("eagle3", eagle3 or str(trained_weights(short, "eagle3")), eagle3_note),
    }, GPU_BF16, note)


VLM_PRESETS: dict[str, VLMPreset] = {
    EMBEDDED: VLMPreset(str(EMBEDDED_PATHS["target"]), {
        "text": DrafterSource("text", str(EMBEDDED_PATHS["text"]), "text-only Qwen2 drafter"),
        "massv-phase1": DrafterSource("massv", str(EMBEDDED_PATHS["massv-phase1"]), "MASSV, projector alignment only"),
        "massv": DrafterSource("massv", str(EMBEDDED_PATHS["massv"]),
                               "MASSV (text drafter + projector on the target's vision features)"),
        "dream": DrafterSource("dream", str(EMBEDDED_PATHS["dream"]),
                               "DREAM (cross-attention adapter on the target's features, 75 % of visual tokens)"),
        "eagle3": DrafterSource("eagle3", str(EMBEDDED_PATHS["eagle3"]),
                                "EAGLE-3 (one layer over the target's low, middle and high states; vLLM / SGLang format)"),
    }, LOCAL_DEVICE, note="Qwen2.5-VL architecture, 7.8M params, trained on the synthetic world", hub=False),
    "Qwen/Qwen2.5-VL-3B-Instruct": _hub_vlm("Qwen/Qwen2.5-VL-3B-Instruct", "qwen2.5-vl-3b",
                                            "Qwen/Qwen2.5-0.5B-Instruct", "one GPU, ~8 GB in bf16"),
    "Qwen/Qwen2.5-VL-7B-Instruct": _hub_vlm("Qwen/Qwen2.5-VL-7B-Instruct", "qwen2.5-vl-7b",
                                            "Qwen/Qwen2.5-1.5B-Instruct", "one GPU, ~17 GB in bf16 (MASSV's pair)",
                                            eagle3="Rayzl/qwen2.5-vl-7b-eagle3-sgl"),
}

MOE_PRESETS: dict[str, MoEPreset] = {
    EMBEDDED: MoEPreset(str(MOE_PATH), note="Qwen3-MoE architecture, 16 experts, top-2, trained on code/prose/math",
                        hub=False),
    "allenai/OLMoE-1B-7B-0924": MoEPreset("allenai/OLMoE-1B-7B-0924", GPU_BF16, "64 experts, top-8, ~14 GB"),
    "Qwen/Qwen1.5-MoE-A2.7B": MoEPreset("Qwen/Qwen1.5-MoE-A2.7B", GPU_BF16, "60 experts + shared, top-4, ~29 GB"),
    "Qwen/Qwen3-30B-A3B": MoEPreset("Qwen/Qwen3-30B-A3B", GPU_BF16, "128 experts, top-8, ~61 GB (REAP's model)"),
    "mistralai/Mixtral-8x7B-v0.1": MoEPreset("mistralai/Mixtral-8x7B-v0.1", GPU_BF16,
                                             "8 experts, top-2, ~93 GB: offloads on one GPU"),
}


def _local(name: str, kind: str, table: dict) -> str:
    if presets_only():
        raise ValueError(f"unknown {kind} {name!r}: this server loads only its presets {sorted(table)} "
                         "(the operator can set SPECULUM_ALLOW_ANY_MODEL=1)")
    if not (Path(name) / "config.json").is_file():
        raise ValueError(f"unknown {kind} {name!r}: not one of {sorted(table)} and not a model directory")
    return name


def vlm_preset(name: str) -> VLMPreset:
    """A preset by name, or a local model directory with the embedded drafters' kinds but no weights found yet."""
    if name in VLM_PRESETS:
        return VLM_PRESETS[name]
    return VLMPreset(_local(name, "model", VLM_PRESETS), {}, note="local directory", hub=False)


def moe_preset(name: str) -> MoEPreset:
    if name in MOE_PRESETS:
        return MOE_PRESETS[name]
    return MoEPreset(_local(name, "MoE model", MOE_PRESETS), note="local directory", hub=False)


@dataclass
class Availability:
    name: str
    usable: bool
    reason: str = ""


def hub_offline() -> bool:
    return env_flag("HF_HUB_OFFLINE")


def cached(repo: str, cache_dir: str | None = None) -> bool:
    """Whether a hub model's config is already in the local Hugging Face cache (then it loads offline)."""
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(repo, "config.json", cache_dir=cache_dir), str)


def hub_reachable(timeout: float = 2.0) -> bool:
    """One HEAD request to the hub; False when offline mode is set or it does not answer within `timeout`."""
    if hub_offline():
        return False
    import httpx
    from huggingface_hub import constants

    try:
        return httpx.head(constants.ENDPOINT, timeout=timeout).status_code < 500
    except httpx.HTTPError:
        return False


def availability(name: str, model: str, hub: bool, cache_dir: str | None, reachable: bool) -> Availability:
    if not hub or cached(model, cache_dir) or reachable:
        return Availability(name, True)
    why = "HF_HUB_OFFLINE is set on this server" if hub_offline() else "the Hugging Face hub cannot be reached"
    return Availability(name, False, f"{why} and {model} is not in the local cache")


if __name__ == "__main__":
    import argparse

    argparse.ArgumentParser(prog="python -m core.models.presets",
                            description="List the presets, whether each can load here, and why not.").parse_args()
    reachable = hub_reachable()
    for title, table in (("VLM targets", VLM_PRESETS), ("MoE models", MOE_PRESETS)):
        print(title)
        for name, preset in table.items():
            a = availability(name, preset.model, preset.hub, preset.load.cache_dir, reachable)
            print(f"  {name:34s} {'ok' if a.usable else 'disabled: ' + a.reason}  ({preset.note})")
            for drafter, source in getattr(preset, "drafters", {}).items():
                print(f"      drafter {drafter:13s} {source.weights}")
