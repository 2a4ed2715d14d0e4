"""`python -m core export eagle3`: an EAGLE-3 checkpoint of either format rewritten in the other (or the same) one,
for the serving engine that loads it (core/drafters/eagle3/formats.py holds the formats themselves).

    python -m core export eagle3 --weights assets/models/eagle3 --format specforge --out runs/eagle3-sglang
    python -m core export eagle3 --weights runs/eagle3 --format speculators --target embedded --out runs/eagle3-vllm

Apart from formats.py because it loads the target through the registry, and the registry loads the drafter, which
reads checkpoints with formats.py.
"""

from __future__ import annotations

import json
from pathlib import Path

from core.drafters.eagle3.formats import load_model, save_specforge, save_speculators
from core.models.cards import write_card
from core.models.loading import in_repo
from core.models.presets import vlm_preset
from core.models.registry import load_target


def _verifier_layers(conf: dict) -> int:
    """The decoder layers of the target a speculators config names, when it is a local model directory."""
    name = ((conf.get("speculators_config") or {}).get("verifier") or {}).get("name_or_path") or ""
    for folder in (Path(name), in_repo(name)):
        if (folder / "config.json").is_file():
            verifier = json.loads((folder / "config.json").read_text())
            return (verifier.get("text_config") or verifier)["num_hidden_layers"]
    raise ValueError("give the target (--target): the checkpoint's verifier is not a local model directory")


def run(args) -> None:
    target, verifier_name = None, None
    if args.target:
        target, verifier_name = load_target(args.target), vlm_preset(args.target).target
    model = load_model(args.weights, target)
    conf = json.loads((Path(args.weights) / "config.json").read_text())
    if args.format == "speculators":
        verifier = (conf.get("speculators_config") or {}).get("verifier") or {}
        name = verifier_name or verifier.get("name_or_path")
        if not name:
            raise ValueError("give the target (--target): a speculators checkpoint names its verifier")
        save_speculators(model, args.out, name,
                         target.model.config.architectures if target else verifier.get("architectures"))
    else:
        save_specforge(model, args.out, target.text_config.num_hidden_layers if target else _verifier_layers(conf))
    write_card(args.out, source=args.weights)
    print(f"wrote a {args.format} EAGLE-3 checkpoint and its model card to {args.out}")
