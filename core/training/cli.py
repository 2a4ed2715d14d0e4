"""Command-line wiring of training: `register(subparsers)` adds `train {target,tower,text-drafter,massv,dream,eagle3,moe}`.

    python -m core train target --init assets/models/target --mix world,photos --out runs/target
    python -m core train massv --phase 2 --out runs/massv

Apart from core/__main__.py so that a model card (core/models/cards.py) can tell which options the command takes
without importing every command.
"""

from __future__ import annotations

import argparse


def _train(args) -> None:
    if args.what == "target":
        from core.training.target import run
    elif args.what == "text-drafter":
        from core.training.text_drafter import run
    elif args.what == "moe":
        from core.reap.train_moe import run
    elif args.what == "dream":
        from core.training.dream import run
    elif args.what == "tower":
        from core.training.tower import run
    elif args.what == "eagle3":
        from core.training.eagle3 import run
    else:
        from core.training.massv import run
    run(args)


def register(subparsers: argparse._SubParsersAction) -> None:
    train = subparsers.add_parser("train", help="train an embedded model, or a drafter for your target and images")
    train.add_argument("what", choices=["target", "tower", "text-drafter", "massv", "dream", "eagle3", "moe"])
    train.add_argument("--steps", type=int)
    train.add_argument("--batch", type=int)
    train.add_argument("--lr", type=float)
    train.add_argument("--seed", type=int)
    train.add_argument("--out")
    train.add_argument("--target", help="target whose tokenizer (and outputs) a drafter trains on")
    train.add_argument("--init", help="target: continue from this checkpoint; tower: the target whose tower a new one "
                                      "learns from; dream, eagle3: from this drafter")
    train.add_argument("--vision-steps", dest="vision_steps", type=int, help="target: vision-only warm-up steps first")
    train.add_argument("--warmup", type=int, help="target: LR warmup steps")
    train.add_argument("--aux-weight", dest="aux_weight", type=float, help="target: weight of the vision probe's loss")
    train.add_argument("--probe-steps", dest="probe_steps", type=int,
                       help="target: the probe heads alone on the frozen model first (for --init without them)")
    train.add_argument("--other-forms", dest="other_forms", type=float,
                       help="target: share of prompts asked in another form (lower / upper case, no closing mark)")
    train.add_argument("--form-weights", dest="form_weights",
                       help="target: 'upper:3': that form (lower, upper, bare, lower-bare) drawn 3x as often")
    train.add_argument("--paired", type=float, help="target: share of reading / describing samples followed by their "
                       "image asked the other question")
    train.add_argument("--freeze-vision", dest="freeze_vision", action="store_true", default=None,
                       help="target: train the language model only (drafters reading the tower keep their inputs)")
    train.add_argument("--freeze-language", dest="freeze_language", action="store_true", default=None,
                       help="target: train the vision tower only, through the frozen language model's answers")
    train.add_argument("--text-weight", dest="text_weight", type=float,
                       help="target: weight of the region probe's text loss (which regions, whether any, hold text)")
    train.add_argument("--patch-text-weight", dest="patch_text_weight", type=float,
                       help="target, tower: weight of the per-patch text loss (which patches hold ink of text)")
    train.add_argument("--distill-weight", dest="distill_weight", type=float,
                       help="tower: weight of the old tower's tokens against the probes' losses")
    train.add_argument("--vision-depth", dest="vision_depth", type=int, help="tower: blocks of the new tower (default 6)")
    train.add_argument("--vision-hidden", dest="vision_hidden", type=int,
                       help="tower: channels of the new tower (default 64; heads of 16 channels)")
    train.add_argument("--continue-tower", dest="continue_tower", action="store_true", default=None,
                       help="tower: train --init's own tower on (its own size) instead of a fresh one")
    train.add_argument("--first-image", dest="first_image", type=int,
                       help="tower: skip that many images of the tower's range (the shipped tower saw the first 72000)")
    train.add_argument("--workers", type=int, help="tower: processes drawing the images ahead of the training step")
    train.add_argument("--device", help="tower: cuda or cpu (default: cuda where there is one)")
    train.add_argument("--seconds", type=float, help="tower: a time budget: training stops there, its learning rate's "
                       "cosine run over whichever of --steps and the budget ends first (a GPU lease)")
    train.add_argument("--boost", help="target: tasks drawn more often, e.g. photos/read:3 (TASK:FACTOR, comma-separated; "
                       "with --by-source also a source, @sign, or one pair, photos/read@sign)")
    train.add_argument("--by-source", dest="by_source", action="store_true", default=None,
                       help="target: weigh each photos task per image source by its running chance of a wrong answer")
    train.add_argument("--mix", help="world or world,photos: the images the target (default world), or a drafter (default "
                       "world,photos, the shipped target's), trains on (core/world/mix.py)")
    train.add_argument("--world-share", dest="world_share", type=float,
                       help="target with --mix world,photos: the share of each batch that is world scenes (default 0.5)")
    train.add_argument("--phase", type=int, help="massv: 1 = projector alignment, 2 = self-data distillation")
    train.add_argument("--text-drafter", dest="text_drafter", help="massv phase 1: the LM to start from")
    train.add_argument("--phase1", help="massv phase 2: the phase-1 checkpoint to start from")
    train.add_argument("--prompts", type=int,
                       help="massv phase 2, dream, eagle3: training prompts the target answers (your data: the first N)")
    train.add_argument("--samples-per-prompt", dest="samples_per_prompt", type=int)
    train.add_argument("--temperature", type=float, help="massv phase 2: the target's sampling temperature")
    train.add_argument("--max-new-tokens", dest="max_new_tokens", type=int,
                       help="massv phase 2, dream, eagle3: the longest response the target gives (default 128)")
    train.add_argument("--data", help="massv phase 2, dream, eagle3: a self-distillation set to reuse when it matches "
                                      "the target and settings (default: the shipped one)")
    train.add_argument("--intermediate", help="dream: entropy (default), none, or a fixed depth such as 0.5")
    train.add_argument("--mlp-size", type=int, help="dream, eagle3: hidden size of the MLPs (default: the target's)")
    train.add_argument("--draft-vocab", type=int,
                       help="dream, eagle3: propose only the N tokens the target's answers use most (default: dream "
                            "every token, eagle3 256)")
    train.add_argument("--rollout", type=int,
                       help="dream, eagle3: draft depths trained on the drafter's own predicted states (EAGLE-3's "
                            "training-time test; default dream 1, eagle3 5)")
    train.add_argument("--layers", help="eagle3: the target layers fc fuses, e.g. 2,6,9 (transformers' hidden_states "
                                        "indices; default vLLM's 2, L/2, L-3)")
    train.add_argument("--data-dir", dest="data_dir",
                       help="massv, dream, eagle3: train on your images: DIR holds them and a metadata.jsonl (file_name, "
                            "prompt, optional answer) instead of the procedural world (core/training/training_data.py)")
    train.add_argument("--hf-dataset", dest="hf_dataset", metavar="NAME[:SPLIT]",
                       help="massv, dream, eagle3: train on a datasets dataset with columns image, prompt, optional answer")
    train.set_defaults(func=_train)
