"""A checkpoint whose weights are a weighted mean of two checkpoints of one architecture.

Not part of the app: the shipped target, run 71, is run 60 and run 70 averaged by it (RUNk: run k's output
directory).

    python scripts/soup.py --a RUN60 --b RUN70 --weight 0.7 --out runs/target-71
    python scripts/soup.py --a assets/models/massv --b runs/massv-71 --weight 0.7 --out runs/massv-soup70

Every tensor of every `*.safetensors` file (a target's `model.safetensors`; a MASSV drafter's language model and its
`projector.safetensors`) is (1 - weight) x a's + weight x b's, computed in float32 and stored in b's dtype; the other
files (config, tokenizer, logs) are b's. Two targets that share a language model and differ in their towers (a
`train target --freeze-language` run and its start) give a tower between the two, at no training cost; a drafter
and its continuation on a new target's answers, a drafter between the two.
"""
from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from safetensors.torch import load_file, save_file


def soup(a: Path, b: Path, weight: float, out: Path) -> None:
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"--weight must be in [0, 1], got {weight}")
    files, files_of_a = (sorted(p.name for p in d.glob("*.safetensors")) for d in (b, a))
    if not files or files != files_of_a:
        raise ValueError(f"{a} and {b} hold different weight files: {files_of_a} against {files}")
    pairs = {name: (load_file(a / name), load_file(b / name)) for name in files}
    for name, (first, second) in pairs.items():
        if first.keys() != second.keys():
            raise ValueError(f"{a / name} and {b / name} hold different tensors: "
                             f"{sorted(first.keys() ^ second.keys())[:5]}")
    shutil.copytree(b, out)
    for name, (first, second) in pairs.items():
        mixed = {key: ((1 - weight) * first[key].float() + weight * tensor.float()).to(tensor.dtype)
                 for key, tensor in second.items()}
        save_file(mixed, out / name, metadata={"format": "pt"})


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
