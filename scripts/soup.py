"""A checkpoint whose weights are a weighted mean of two checkpoints of one architecture.

Not part of the app: the shipped target, run 60, is run 25 and run 50 averaged by it (RUNk: run k's output
directory).

    python scripts/soup.py --a RUN25 --b RUN50 --weight 0.4 --out runs/target-60

Every tensor of the result is (1 - weight) x a's + weight x b's, computed in float32 and stored in b's dtype; the other
files (config, tokenizer, logs) are b's. Two targets that share a language model and differ in their towers (a
`train target --freeze-language` run and its start) give a tower between the two, at no training cost.
"""
from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from safetensors.torch import load_file, save_file

WEIGHTS = "model.safetensors"


def soup(a: Path, b: Path, weight: float, out: Path) -> None:
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"--weight must be in [0, 1], got {weight}")
    first, second = load_file(a / WEIGHTS), load_file(b / WEIGHTS)
    if first.keys() != second.keys():
        raise ValueError(f"{a} and {b} hold different tensors: {sorted(first.keys() ^ second.keys())[:5]}")
    shutil.copytree(b, out)
    mixed = {name: ((1 - weight) * first[name].float() + weight * tensor.float()).to(tensor.dtype)
             for name, tensor in second.items()}
    save_file(mixed, out / WEIGHTS, metadata={"format": "pt"})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", type=Path, required=True)
    parser.add_argument("--b", type=Path, required=True)
    parser.add_argument("--weight", type=float, required=True, help="b's share")
    parser.add_argument("--out", type=Path, required=True, help="a new directory")
    args = parser.parse_args()
    soup(args.a, args.b, args.weight, args.out)


if __name__ == "__main__":
    main()
