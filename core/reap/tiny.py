"""Tiny random models of every MoE family in the adapter table (8 experts, top-2, hidden 32, two layers).

Built from config with no hub access, for the tests and for trying REAP on a real architecture in seconds.

    python -m core.reap.tiny        # builds each family and prints its sparse layers and parameter count
"""

from __future__ import annotations

import torch
import transformers
from transformers import AutoModelForCausalLM

COMMON = dict(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              head_dim=8, num_experts_per_tok=2, max_position_embeddings=128)
DEEPSEEK = dict(n_routed_experts=8, moe_intermediate_size=16, intermediate_size=64, first_k_dense_replace=1,
                n_shared_experts=1, n_group=1, topk_group=1, kv_lora_rank=16, q_lora_rank=None,
                qk_rope_head_dim=4, qk_nope_head_dim=4, v_head_dim=8, head_dim=4)
TINY = {  # DeepSeek-style families: one dense layer, then one sparse
    "qwen3_moe": ("Qwen3MoeConfig", dict(num_experts=8, moe_intermediate_size=16, norm_topk_prob=True)),
    "qwen2_moe": ("Qwen2MoeConfig", dict(num_experts=8, moe_intermediate_size=16, shared_expert_intermediate_size=32)),
    "olmoe": ("OlmoeConfig", dict(num_experts=8, intermediate_size=16)),
    "flex_olmo": ("FlexOlmoConfig", dict(num_experts=8, intermediate_size=16, pad_token_id=0, eos_token_id=0)),
    "mixtral": ("MixtralConfig", dict(num_local_experts=8, intermediate_size=16)),
    "deepseek_v2": ("DeepseekV2Config", dict(DEEPSEEK, topk_method="greedy", routed_scaling_factor=1.5)),
    "deepseek_v3": ("DeepseekV3Config", dict(DEEPSEEK, routed_scaling_factor=2.5)),
    "glm4_moe": ("Glm4MoeConfig", dict(n_routed_experts=8, moe_intermediate_size=16, intermediate_size=64,
                                      first_k_dense_replace=1, n_shared_experts=1, n_group=1, topk_group=1)),
    "dots1": ("Dots1Config", dict(n_routed_experts=8, moe_intermediate_size=16, intermediate_size=64,
                                  first_k_dense_replace=1, n_shared_experts=1, n_group=1, topk_group=1)),
    "gpt_oss": ("GptOssConfig", dict(num_local_experts=8, intermediate_size=16, layer_types=None)),
    "granitemoe": ("GraniteMoeConfig", dict(num_local_experts=8, intermediate_size=16)),
    "minimax": ("MiniMaxConfig", dict(num_local_experts=8, intermediate_size=16, layer_types=None)),
}


def tiny_model(model_type: str, **overrides):
    """A random model of one family; routers and correction biases are drawn wide so routing is decisive."""
    config_cls, extra = TINY[model_type]
    config = getattr(transformers, config_cls)(**(COMMON | extra | overrides))
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():  # default init leaves routers at zero: every token would tie
        for name, p in model.named_parameters():
            if name.endswith(("gate.weight", "router.weight")):
                p.normal_(0, 1.0)
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.normal_(0, 0.1)
    return model


if __name__ == "__main__":
    from core.reap.adapters import moe_blocks

    for name in TINY:
        m = tiny_model(name)
        print(f"{name:12s} {len(moe_blocks(m))} sparse layers, {sum(p.numel() for p in m.parameters()):,} params")
