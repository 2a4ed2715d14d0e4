"""The embedded MoE language model: a toy-size Qwen3-MoE (16 experts, top-2) and its byte-level BPE tokenizer.

Trained by `python -m core train moe` (core/reap/train_moe.py) on the domains of core/reap/data.py and shipped
in assets/models/moe/ as a normal HF directory, so REAP can be shown end to end with no hub access.

    python -m core.reap.embedded_moe     # builds a fresh one, prints its parameter count and tokens/s
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import PreTrainedTokenizerFast, Qwen3MoeConfig, Qwen3MoeForCausalLM

from core.models.tokenizer import byte_level_bpe
from core.reap import data

MOE_PATH = Path(__file__).resolve().parents[2] / "assets" / "models" / "moe"


@dataclass
class MoeSize:
    vocab: int = 2048
    hidden: int = 128
    layers: int = 4
    heads: int = 4
    kv_heads: int = 2
    experts: int = 16
    top_k: int = 2
    expert_intermediate: int = 128


def train_tokenizer(vocab_size: int = 2048) -> PreTrainedTokenizerFast:
    """Byte-level BPE over the training split of every domain."""
    texts = [t for d in data.DOMAINS for t in data.texts(d, "train")]
    bpe = byte_level_bpe(texts, vocab_size, ["<|endoftext|>"])
    return PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|endoftext|>", pad_token="<|endoftext|>")


def new_moe(tokenizer, size: MoeSize = MoeSize()) -> Qwen3MoeForCausalLM:
    config = Qwen3MoeConfig(
        vocab_size=len(tokenizer),
        hidden_size=size.hidden,
        num_hidden_layers=size.layers,
        num_attention_heads=size.heads,
        num_key_value_heads=size.kv_heads,
        head_dim=size.hidden // size.heads,
        intermediate_size=size.expert_intermediate * size.top_k,  # unused: every layer is sparse
        moe_intermediate_size=size.expert_intermediate,
        num_experts=size.experts,
        num_experts_per_tok=size.top_k,
        norm_topk_prob=True,
        decoder_sparse_step=1,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        router_aux_loss_coef=0.01,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return Qwen3MoeForCausalLM(config)


if __name__ == "__main__":
    torch.set_num_threads(1)
    tok = train_tokenizer()
    model = new_moe(tok).eval()
    x = torch.randint(0, len(tok), (8, 128))
    with torch.no_grad():
        model(input_ids=x)
        t0 = time.perf_counter()
        model(input_ids=x)
    seconds = time.perf_counter() - t0
    print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.2f}M params, {x.numel() / seconds:.0f} tokens/s")
