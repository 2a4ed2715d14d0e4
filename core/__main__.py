"""Command line: python -m core <command> ...   (python -m core --help lists the commands)."""

from __future__ import annotations

import argparse

from core.embedded import EMBEDDED_PATHS


def _train(args) -> None:
    if args.what == "target":
        from core.train_target import run
    else:
        from core.train_drafter import run
    run(args)


def _eval_target(args) -> None:
    from core.evaluate import run

    run(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m core", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    train = sub.add_parser("train", help="train an embedded model")
    train.add_argument("what", choices=["target", "text-drafter"])
    train.add_argument("--steps", type=int)
    train.add_argument("--batch", type=int)
    train.add_argument("--lr", type=float)
    train.add_argument("--seed", type=int)
    train.add_argument("--out")
    train.set_defaults(func=_train)

    ev = sub.add_parser("eval-target", help="exact match of the target on held-out world samples")
    ev.add_argument("--model", default=str(EMBEDDED_PATHS["target"]))
    ev.add_argument("--n", type=int, default=200)
    ev.add_argument("--json")
    ev.set_defaults(func=_eval_target)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main()
