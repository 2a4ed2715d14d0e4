"""Command-line wiring of REAP: `register(subparsers)` adds `reap {score,prune,merge}` and `bench-reap`.

    python -m core reap score --model M --calib code --out /tmp/scores
    python -m core reap prune --model M --scores /tmp/scores --method reap --ratio 0.5 --out /tmp/pruned
        [--scope global] [--protect-super-experts 4]
    python -m core reap merge --model M --scores /tmp/scores --method hc-smoe --ratio 0.5 --out /tmp/merged
    python -m core bench-reap --ratios 0.25,0.5 --json assets/results/reap_bench.json

(`python -m core train moe` trains the embedded MoE: core/reap/train_moe.py.)
"""

from __future__ import annotations

import argparse

from core.reap.embedded_moe import MOE_PATH


def _lazy(module: str):
    # Import on use: `python -m core --help` should not pay for scipy and the models.
    def call(args):
        import importlib

        importlib.import_module(f"core.reap.{module}").run(args)

    return call


def register(subparsers: argparse._SubParsersAction) -> None:
    reap = subparsers.add_parser("reap", help="REAP expert pruning of MoE models: score, prune, merge")
    sub = reap.add_subparsers(dest="reap_command", required=True)

    score = sub.add_parser("score", help="observe routing on calibration text, write DIR/scores.json")
    score.add_argument("--model", default=str(MOE_PATH), help="HF directory or hub name of a MoE causal LM")
    score.add_argument("--calib", default="mixed", help="code, prose, math, mixed, a path to a text file, or a "
                                                         "weighted mixture of those such as code:0.5,math:0.5")
    score.add_argument("--tokens", type=int, help="calibration tokens (default 8192)")
    score.add_argument("--seq-len", dest="seq_len", type=int, help="tokens per window (default 128)")
    score.add_argument("--layerwise", help="a device such as cuda: keep the model in CPU memory and score it one "
                                            "decoder layer at a time there (for models larger than the GPU)")
    score.add_argument("--out", required=True)
    score.set_defaults(func=_lazy("scores"))

    for name, methods, module in (
        ("prune", ("reap", "ean", "frequency", "weighted_frequency", "random"), "prune"),
        ("merge", ("hc-smoe", "m-smoe"), "merge"),
    ):
        p = sub.add_parser(name, help=f"{name} experts from cached scores, write an HF directory")
        p.add_argument("--model", help="the scored model (default: the one recorded in scores.json)")
        p.add_argument("--scores", required=True, help="directory written by `reap score`")
        p.add_argument("--method", required=True, choices=methods)
        p.add_argument("--ratio", type=float, required=True, help="fraction of experts removed per layer, in [0, 1)")
        p.add_argument("--out", required=True)
        p.set_defaults(func=_lazy(module))
        if name == "prune":
            p.add_argument("--scope", default="layer", choices=("layer", "global"),
                           help="layer: the same count removed in every layer; global: one ranking across layers "
                                "(score over its layer's mean), each layer keeping at least top-k")
            p.add_argument("--protect-super-experts", dest="protect", type=int, default=0, metavar="K",
                           help="never remove the K experts with the largest max activation in the model")

    bench = subparsers.add_parser("bench-reap", help="quality and timing of REAP vs baselines on the embedded MoE")
    bench.add_argument("--model")
    bench.add_argument("--calib")
    bench.add_argument("--ratios")
    bench.add_argument("--methods")
    bench.add_argument("--tokens", type=int)
    bench.add_argument("--protect", type=int, help="super experts kept in the protection rows (default 4; 0: none)")
    bench.add_argument("--mixture", help="the weighted calibration row (default code:0.5,math:0.5)")
    bench.add_argument("--json")
    bench.set_defaults(func=_lazy("bench"))
