"""The embedded models' tokenizer: byte-level BPE trained offline on the world's text plus general prose.

It carries Qwen2.5-VL's special tokens (chat markers and the vision placeholders) and a Qwen-style chat
template, so the embedded target, every drafter and the hub models go through the same prompt code.

    python -m core.models.tokenizer /tmp/tok     # trains and saves one, prints a tokenised sample
"""

from __future__ import annotations

import inspect
import sys

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from core.world import scenes

SPECIAL_TOKENS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>",
    "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>",
]

# Qwen's template, trimmed to what the embedded world needs (no default system prompt: it would cost every
# sample ~20 tokens). Hub models bring their own template; this one only has to render the same messages.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def general_text() -> list[str]:
    """Docstrings of the standard library: real English that ships with Python (PSF licence)."""
    texts = []
    for name in ("os", "json", "random", "string", "collections", "functools", "itertools", "pathlib", "re",
                 "textwrap", "statistics", "fractions", "argparse", "logging", "typing"):
        module = __import__(name)
        for _, obj in inspect.getmembers(module):
            doc = inspect.getdoc(obj)
            if doc:
                texts.append(doc)
    return texts


def world_text(n: int = 6000) -> list[str]:
    return [f"{s.prompt}\n{s.answer}" for s in scenes.samples("train", n)]


def byte_level_bpe(texts: list[str], vocab_size: int, special_tokens: list[str]) -> Tokenizer:
    """Byte-level BPE with digits split one by one, as Qwen's tokenizers do: numbers (read off images, or summed)
    then map digit by digit."""
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=special_tokens,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(texts, trainer=trainer)
    return bpe


def train_tokenizer(vocab_size: int = 2048) -> PreTrainedTokenizerFast:
    bpe = byte_level_bpe(world_text() + general_text(), vocab_size, SPECIAL_TOKENS)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=SPECIAL_TOKENS[1:],
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


if __name__ == "__main__":
    tok = train_tokenizer()
    tok.save_pretrained(sys.argv[1] if len(sys.argv) > 1 else "/tmp/tok")
    s = scenes.sample("train", 0)
    ids = tok(s.answer)["input_ids"]
    print(len(tok), len(ids), tok.convert_ids_to_tokens(ids))
