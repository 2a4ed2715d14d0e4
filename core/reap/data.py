"""Text domains of the embedded MoE: where each comes from, its train/held-out split, token windows, and
calibration mixtures.

Three domains, the same bytes on every machine, venv, conda env and Docker image:
  code   the 168 top-level modules of CPython 3.11.7's standard library (`Lib/*.py`), shipped as
         assets/corpus/cpython-3.11.7-lib.zip (PSF License 2.0, assets/corpus/LICENSE-PSF.txt); the archive's
         SHA-256 is checked on first use
  prose  English docstrings of the same modules, extracted with `ast`
  math   generated additions and subtractions, "37+45=82"
Files (and arithmetic problems) are split by a hash of their name, so held-out text is never trained on.

A calibration set is a domain, "mixed" (all three, equal shares), a path to a text file, or a weighted mixture of
those, "code:0.5,math:0.5": each part gives its share of the windows (largest remainder), then they are shuffled.

    python -m core.reap.data                     # prints per-domain sizes and a sample of each
    python -m core.reap.data snapshot LIB_DIR    # rebuilds the archive from a CPython source tree's Lib/
"""

from __future__ import annotations

import ast
import hashlib
import random
import sys
import zipfile
from functools import lru_cache
from pathlib import Path

import torch

DOMAINS = ("code", "prose", "math")
SPLITS = ("train", "heldout")
CALIBRATIONS = DOMAINS + ("mixed",)
CORPUS = Path(__file__).resolve().parents[2] / "assets" / "corpus" / "cpython-3.11.7-lib.zip"
CORPUS_SHA256 = "aa69c33dfba7ed5e627432214884704ccfe1868dd6984aea47efc46204c84c75"
_ZIP_TIME = (2023, 12, 4, 0, 0, 0)  # CPython 3.11.7's release date: members carry it, so the archive is reproducible


def _split_of(name: str) -> str:
    # One name in ten is held out; a hash keeps the split stable across machines and runs.
    return "heldout" if int(hashlib.md5(name.encode()).hexdigest(), 16) % 10 == 0 else "train"


def snapshot(lib_dir: str | Path, out: Path = CORPUS) -> str:
    """Write the code domain's archive from a directory of Python modules; returns its SHA-256."""
    sources = []
    for path in sorted(Path(lib_dir).glob("*.py")):
        try:
            sources.append((path.name, path.read_bytes().decode("utf-8")))
        except UnicodeDecodeError:
            continue  # the corpus is UTF-8 text
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w") as archive:
        for name, text in sources:
            member = zipfile.ZipInfo(name, date_time=_ZIP_TIME)
            member.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(member, text.encode("utf-8"), compresslevel=9)
    return hashlib.sha256(out.read_bytes()).hexdigest()


@lru_cache(maxsize=1)
def _stdlib_files() -> tuple[tuple[str, str], ...]:
    if not CORPUS.is_file():
        raise FileNotFoundError(f"the code corpus {CORPUS} is missing; it ships with the repository")
    digest = hashlib.sha256(CORPUS.read_bytes()).hexdigest()
    if digest != CORPUS_SHA256:
        raise ValueError(f"{CORPUS.name} has SHA-256 {digest}, expected {CORPUS_SHA256}: the corpus was changed")
    with zipfile.ZipFile(CORPUS) as archive:
        return tuple((name, archive.read(name).decode("utf-8")) for name in sorted(archive.namelist()))


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


def mixture(source: str, files: bool = True) -> dict[str, float]:
    """A calibration source as {part: share}, shares summing to 1; a part is a domain or (`files`) a text file.

    "code" -> {"code": 1.0}; "mixed" -> a third of each domain; "code:3,math:1" -> {"code": 0.75, "math": 0.25}.
    """
    if source == "mixed":
        return {d: 1 / len(DOMAINS) for d in DOMAINS}
    if ":" not in source:
        parts = {source: 1.0}
    else:
        parts = {}
        for item in source.split(","):
            name, sep, weight = item.strip().rpartition(":")
            try:
                share = float(weight)
            except ValueError:
                share = float("nan")
            if not sep or not name or not share > 0 or share == float("inf") or name in parts:
                raise ValueError(f"calibration mixture {source!r}: each part must be NAME:WEIGHT with a positive "
                                 f"weight and a name used once, e.g. code:0.5,math:0.5")
            parts[name] = share
    for name in parts:
        if name not in DOMAINS and not (files and Path(name).is_file()):
            raise ValueError(f"calibration {name!r} is not a domain {CALIBRATIONS}" + " nor an existing text file" * files)
    total = sum(parts.values())
    return {name: share / total for name, share in parts.items()}


def _counts(shares: dict[str, float], n: int) -> dict[str, int]:
    """n windows split by share, rounding by largest remainder so they add up to n."""
    exact = {name: share * n for name, share in shares.items()}
    counts = {name: int(x) for name, x in exact.items()}
    for name in sorted(exact, key=lambda k: counts[k] - exact[k])[: n - sum(counts.values())]:
        counts[name] += 1
    return counts


def _part_windows(tokenizer, part: str, split: str, n: int, seq_len: int, seed: int) -> torch.Tensor:
    if part in DOMAINS:
        stream = _stream(tokenizer, part, split)
    else:
        stream = token_stream(tokenizer, [Path(part).read_text(encoding="utf-8", errors="replace")])
    if len(stream) < seq_len + 1:
        raise ValueError(f"{part!r} has {len(stream)} tokens, fewer than one window of {seq_len}")
    starts = torch.randint(0, len(stream) - seq_len, (n,), generator=torch.Generator().manual_seed(seed))
    return torch.stack([stream[s:s + seq_len] for s in starts.tolist()]) if n else torch.zeros(0, seq_len, dtype=torch.long)


def labelled_windows(tokenizer, source: str, split: str, num_tokens: int, seq_len: int,
                     seed: int = 0) -> tuple[torch.Tensor, list[str]]:
    """`windows`, and the part of the mixture (domain or file) each window was drawn from."""
    if num_tokens < seq_len:
        raise ValueError(f"--tokens ({num_tokens}) must be at least --seq-len ({seq_len})")
    counts = _counts(mixture(source), num_tokens // seq_len)
    parts = [_part_windows(tokenizer, part, split, k, seq_len, seed) for part, k in counts.items()]
    labels = [part for part, k in counts.items() for _ in range(k)]
    if len(parts) == 1:
        return parts[0], labels
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))
    return torch.cat(parts)[order], [labels[i] for i in order.tolist()]


def windows(tokenizer, source: str, split: str, num_tokens: int, seq_len: int, seed: int = 0) -> torch.Tensor:
    """[n, seq_len] token windows (n = num_tokens // seq_len) drawn from a calibration source (see `mixture`)."""
    return labelled_windows(tokenizer, source, split, num_tokens, seq_len, seed)[0]


if __name__ == "__main__":
    if sys.argv[1:2] == ["snapshot"]:
        print(f"{snapshot(sys.argv[2])}  {CORPUS}")
    else:
        for d in DOMAINS:
            tr, ho = texts(d, "train"), texts(d, "heldout")
            print(f"{d}: {len(tr)} train docs ({sum(map(len, tr)) / 1e6:.2f} MB), {len(ho)} held-out; "
                  f"sample: {ho[0][:80]!r}")
