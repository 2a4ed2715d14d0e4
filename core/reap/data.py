"""Text domains of the embedded MoE: where each comes from, its train/held-out split, and token windows.

Three domains that ship with Python, so everything runs offline:
  code   Python standard-library source files (PSF licence)
  prose  English docstrings of the same modules, extracted with `ast`
  math   generated additions and subtractions, "37+45=82"
Files (and arithmetic problems) are split by a hash of their name, so held-out text is never trained on.
A calibration set is a domain name, "mixed" (all three), or a path to a text file.

    python -m core.reap.data        # prints per-domain sizes and a sample of each
"""

from __future__ import annotations

import ast
import hashlib
import random
import sys
from functools import lru_cache
from pathlib import Path

import torch

DOMAINS = ("code", "prose", "math")
SPLITS = ("train", "heldout")
CALIBRATIONS = DOMAINS + ("mixed",)
STDLIB = Path(sys.prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"


def _split_of(name: str) -> str:
    # One name in ten is held out; a hash keeps the split stable across machines and runs.
    return "heldout" if int(hashlib.md5(name.encode()).hexdigest(), 16) % 10 == 0 else "train"


@lru_cache(maxsize=1)
def _stdlib_files() -> tuple[tuple[str, str], ...]:
    out = []
    for path in sorted(STDLIB.glob("*.py")):
        try:
            out.append((path.name, path.read_text(encoding="utf-8")))
        except (UnicodeDecodeError, OSError):
            continue  # a few files are latin-1 or unreadable; the rest is plenty
    return tuple(out)


def _docstrings(source: str) -> list[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    nodes = (n for n in ast.walk(tree) if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)))
    docs = (ast.get_docstring(n) for n in nodes)
    # Short docstrings are mostly "Return x." fragments; longer ones are real sentences.
    return [d for d in docs if d and len(d) >= 120]


def _math_problems(split: str) -> list[str]:
    problems = []
    for a in range(100):
        for b in range(100):
            for op in "+-":
                if op == "-" and b > a:
                    continue
                text = f"{a}{op}{b}="
                if _split_of(text) == split:
                    problems.append(f"{text}{a + b if op == '+' else a - b}")
    return problems


@lru_cache(maxsize=None)
def texts(domain: str, split: str) -> tuple[str, ...]:
    """The documents of one domain and split."""
    if domain not in DOMAINS:
        raise ValueError(f"unknown domain {domain!r}; expected one of {DOMAINS}")
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
    if domain == "math":
        problems = _math_problems(split)
        random.Random(split).shuffle(problems)
        # Documents of 16 problems, one per line: the model learns the format and the sums.
        return tuple("\n".join(problems[i:i + 16]) for i in range(0, len(problems), 16))
    files = [(name, src) for name, src in _stdlib_files() if _split_of(name) == split]
    if domain == "code":
        return tuple(src for _, src in files)
    return tuple(doc for _, src in files for doc in _docstrings(src))


def token_stream(tokenizer, docs: list[str] | tuple[str, ...]) -> torch.Tensor:
    """All documents tokenised and joined by the end-of-text token."""
    eos = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    ids: list[int] = []
    for doc in docs:
        ids.extend(tokenizer(doc)["input_ids"])
        ids.append(eos)
    return torch.tensor(ids)


@lru_cache(maxsize=32)
def _stream(tokenizer, domain: str, split: str) -> torch.Tensor:
    return token_stream(tokenizer, texts(domain, split))


def windows(tokenizer, source: str, split: str, num_tokens: int, seq_len: int, seed: int = 0) -> torch.Tensor:
    """[n, seq_len] token windows (n = num_tokens // seq_len) drawn from a domain, "mixed", or a text file."""
    if num_tokens < seq_len:
        raise ValueError(f"--tokens ({num_tokens}) must be at least --seq-len ({seq_len})")
    n = num_tokens // seq_len
    if source == "mixed":
        parts = [windows(tokenizer, d, split, (n // len(DOMAINS) + 1) * seq_len, seq_len, seed) for d in DOMAINS]
        mixed = torch.cat(parts)
        return mixed[torch.randperm(len(mixed), generator=torch.Generator().manual_seed(seed))][:n]
    if source in DOMAINS:
        stream = _stream(tokenizer, source, split)
    elif Path(source).is_file():
        stream = token_stream(tokenizer, [Path(source).read_text(encoding="utf-8", errors="replace")])
    else:
        raise ValueError(f"calibration {source!r} is neither a domain {CALIBRATIONS} nor an existing text file")
    if len(stream) < seq_len + 1:
        raise ValueError(f"{source!r} has {len(stream)} tokens, fewer than one window of {seq_len}")
    starts = torch.randint(0, len(stream) - seq_len, (n,), generator=torch.Generator().manual_seed(seed))
    return torch.stack([stream[s:s + seq_len] for s in starts.tolist()])


if __name__ == "__main__":
    for d in DOMAINS:
        tr, ho = texts(d, "train"), texts(d, "heldout")
        print(f"{d}: {len(tr)} train docs ({sum(map(len, tr)) / 1e6:.2f} MB), {len(ho)} held-out; sample: {ho[0][:80]!r}")
