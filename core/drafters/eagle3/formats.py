"""EAGLE-3 checkpoints in the two formats serving engines load, both read and written here.

  speculators  vllm-project's format (what `vllm serve --speculative-config '{"method": "eagle3", ...}'` loads, and
               the one this project saves its own drafters in): config.json with `speculators_model_type: eagle3`,
               the decoder layer's config under `transformer_layer_config`, weights `layers.0.*`.
  specforge    SpecForge's / SGLang's (`LlamaForCausalLMEagle3`; vLLM loads it too): a flat Llama config with
               `draft_vocab_size` and `target_hidden_size`, weights `midlayer.*`.

Both hold `fc`, `norm`, `lm_head`, `embed_tokens`, `d2t` and `t2d`. Layer ids differ by convention: speculators /
vLLM name the decoder layer whose *input* is captured (= transformers' `hidden_states[k]`, as here), SpecForge /
SGLang the layer whose *output* is (k - 1); the default low / middle / high layers are the same layers in both,
so a SpecForge export names its layers only when they are not the default. Multimodal rotary positions
(`mrope_section`) are written where each engine reads them. What this drafter cannot run (more than one layer,
biases, the norm_before_fc / fc_norm / norm_output variants) is refused on import with the reason.

    model = load_model("assets/models/eagle3", target); save_specforge(model, "runs/eagle3-sglang", 12)

The command that converts a checkpoint (`python -m core export eagle3`) is core/drafters/eagle3/export.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from core.drafters.eagle3.model import Eagle3Config, Eagle3Model, default_layer_ids
from core.models.loading import is_repo_id, repo_relative
from core.models.vlm import VisionLanguageModel

FORMATS = ("speculators", "specforge")
LAYER = {"speculators": "layers.0.", "specforge": "midlayer."}


def peer_state(model: Eagle3Model, layout: str, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
    """The model's weights under a format's names, fused projections split as Llama's."""
    cfg, prefix, layer = model.cfg, LAYER[layout], model.layer
    q, k, v = layer.qkv.weight.split([cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim,
                                      cfg.num_kv_heads * cfg.head_dim])
    gate, up = layer.gate_up.weight.chunk(2)
    weights = {
        "embed_tokens.weight": model.embed_tokens.weight, "fc.weight": model.fc.weight,
        "norm.weight": model.norm.weight, "lm_head.weight": model.lm_head.weight,
        prefix + "self_attn.q_proj.weight": q, prefix + "self_attn.k_proj.weight": k,
        prefix + "self_attn.v_proj.weight": v, prefix + "self_attn.o_proj.weight": layer.o.weight,
        prefix + "mlp.gate_proj.weight": gate, prefix + "mlp.up_proj.weight": up,
        prefix + "mlp.down_proj.weight": layer.down.weight,
        prefix + "input_layernorm.weight": layer.input_layernorm.weight,
        prefix + "hidden_norm.weight": layer.hidden_norm.weight,
        prefix + "post_attention_layernorm.weight": layer.post_attention_layernorm.weight,
    }
    out = {name: w.detach().to(dtype or w.dtype).contiguous() for name, w in weights.items()}
    return out | {"d2t": model.d2t.detach().clone(), "t2d": model.t2d.detach().clone()}


def _layer_config(cfg: Eagle3Config, max_positions: int) -> dict:
    return {
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": cfg.hidden_size,
        "num_attention_heads": cfg.num_heads, "num_key_value_heads": cfg.num_kv_heads, "head_dim": cfg.head_dim,
        "intermediate_size": cfg.intermediate_size, "num_hidden_layers": 1, "vocab_size": cfg.vocab_size,
        "rms_norm_eps": cfg.rms_norm_eps, "hidden_act": "silu", "attention_bias": False, "mlp_bias": False,
        "max_position_embeddings": max_positions, "tie_word_embeddings": False,
    }


def _verifier_name(verifier: str) -> str:
    """The verifier as engines load it (speculators reads its weights from here): a local directory relative to the
    repository when inside it, so a committed config names no machine's path; a hub id as given."""
    return repo_relative(verifier) if Path(verifier).is_dir() else verifier


def save_speculators(model: Eagle3Model, out: str | Path, verifier: str, architectures: list[str] | None = None,
                     speculative_tokens: int = 4, max_positions: int = 4096, dtype: torch.dtype | None = None,
                     metadata: dict | None = None) -> None:
    cfg, out = model.cfg, Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rope = {"rope_type": "default", "rope_theta": cfg.rope_theta}
    if cfg.mrope_section is not None:  # vLLM then rotates the drafter by the target's multimodal positions
        rope["mrope_section"] = list(cfg.mrope_section)
    config = {
        "architectures": ["Eagle3DraftModel"], "speculators_model_type": "eagle3", "speculators_version": "0.9.0",
        "draft_vocab_size": cfg.draft_vocab_size, "target_hidden_size": cfg.target_hidden_size,
        "eagle_aux_hidden_state_layer_ids": list(cfg.layer_ids),
        "norm_before_residual": cfg.norm_before_residual,  # explicit: vLLM's default when absent is True
        "norm_before_fc": False, "fc_norm": False, "norm_output": False, "embed_requires_grad": False,
        "transformer_layer_config": _layer_config(cfg, max_positions) | {"rope_parameters": rope},
        "speculators_config": {
            "algorithm": "eagle3", "default_proposal_method": "greedy",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": speculative_tokens,
                                  "accept_tolerance": 0.0, "verifier_accept_k": 1}],
            "verifier": {"name_or_path": _verifier_name(verifier),
                         "architectures": architectures or ["Qwen2_5_VLForConditionalGeneration"]},
        },
    }
    if metadata:
        config["speculum"] = metadata
    save_file(peer_state(model, "speculators", dtype), out / "model.safetensors")
    (out / "config.json").write_text(json.dumps(config, indent=1))


def save_specforge(model: Eagle3Model, out: str | Path, target_layers: int, max_positions: int = 4096,
                   dtype: torch.dtype | None = None) -> None:
    """`target_layers`: the target's decoder layers, to tell whether the drafter reads the default ones."""
    cfg, out = model.cfg, Path(out)
    if cfg.norm_before_residual:
        raise ValueError("SpecForge's drafter has no norm_before_residual: export this one as speculators")
    out.mkdir(parents=True, exist_ok=True)
    config = _layer_config(cfg, max_positions) | {
        "architectures": ["LlamaForCausalLMEagle3"], "draft_vocab_size": cfg.draft_vocab_size,
        "target_hidden_size": cfg.target_hidden_size, "rope_theta": cfg.rope_theta, "pretraining_tp": 1,
    }
    if cfg.mrope_section is not None:  # SpecForge reads rope_parameters; older SGLang the legacy rope_scaling
        section = list(cfg.mrope_section)
        config["rope_parameters"] = {"rope_type": "mrope", "mrope_section": section, "rope_theta": cfg.rope_theta}
        config["rope_scaling"] = {"type": "mrope", "mrope_section": section}
    else:
        config["rope_parameters"] = {"rope_type": "default", "rope_theta": cfg.rope_theta}
    if cfg.layer_ids != default_layer_ids(target_layers):
        config["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": [i - 1 for i in cfg.layer_ids]}
    save_file(peer_state(model, "specforge", dtype), out / "model.safetensors")
    (out / "config.json").write_text(json.dumps(config, indent=1))


def _rope(conf: dict) -> tuple[float, list[int] | None]:
    rope = conf.get("rope_parameters") or conf.get("rope_scaling") or {}
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind not in ("default", "mrope"):
        raise ValueError(f"this EAGLE-3 drafter runs default or multimodal rotary positions, not {kind!r}")
    return float(rope.get("rope_theta", conf.get("rope_theta", 10000.0))), rope.get("mrope_section")


def _refuse(conf: dict, layers: dict) -> None:
    unsupported = [key for key in ("norm_before_fc", "fc_norm", "norm_output", "attention_bias", "mlp_bias")
                   if conf.get(key) or layers.get(key)]
    if layers.get("num_hidden_layers", 1) != 1 or layers.get("model_type", "llama") != "llama" or unsupported:
        raise ValueError(f"this EAGLE-3 drafter is one Llama layer without biases or extra norms; the checkpoint has "
                         f"{layers.get('num_hidden_layers', 1)} {layers.get('model_type', 'llama')} layers"
                         + (f" and {', '.join(unsupported)}" if unsupported else ""))


def read_config(path: Path, target_layers: int | None) -> tuple[Eagle3Config, str]:
    """A checkpoint's config in either format, and which format it is."""
    file = path / "config.json"
    if not file.is_file():
        raise ValueError(f"{path} holds no EAGLE-3 checkpoint (no config.json)")
    conf = json.loads(file.read_text())
    if conf.get("speculators_model_type") == "eagle3":
        layout, layers = "speculators", conf["transformer_layer_config"]
        ids = conf.get("eagle_aux_hidden_state_layer_ids")
        before_residual = conf.get("norm_before_residual", True)  # vLLM's reading of a missing key
    elif any("Eagle3" in name for name in conf.get("architectures", [])):
        layout, layers = "specforge", conf
        ids = (conf.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
        ids = None if ids is None else [i + 1 for i in ids]  # SpecForge names the layer whose output it reads
        before_residual = conf.get("norm_before_residual", False)
    else:
        raise ValueError(f"{file} is neither a speculators nor a SpecForge EAGLE-3 config")
    _refuse(conf, layers)
    if ids is None:
        if target_layers is None:
            raise ValueError(f"{path} does not name its target layers: give the target (--target)")
        ids = default_layer_ids(target_layers)
    theta, section = _rope(layers)
    hidden = layers["hidden_size"]
    cfg = Eagle3Config(
        hidden_size=hidden, num_heads=layers["num_attention_heads"],
        num_kv_heads=layers.get("num_key_value_heads", layers["num_attention_heads"]),
        head_dim=layers.get("head_dim") or hidden // layers["num_attention_heads"],
        intermediate_size=layers["intermediate_size"], target_hidden_size=conf.get("target_hidden_size") or hidden,
        vocab_size=layers["vocab_size"], draft_vocab_size=conf.get("draft_vocab_size") or layers["vocab_size"],
        layer_ids=tuple(ids), rms_norm_eps=layers.get("rms_norm_eps", 1e-6), rope_theta=theta,
        mrope_section=section, norm_before_residual=before_residual)
    return cfg, layout


def load_model(path: str | Path, target: VisionLanguageModel | None = None, cache_dir: str | None = None) -> Eagle3Model:
    """An EAGLE-3 checkpoint of either format, a local directory or a hub repo id. Without `embed_tokens` it takes
    the target's embeddings, as vLLM does."""
    path = Path(path)
    if not path.is_dir():
        if not is_repo_id(str(path)):
            raise ValueError(f"no EAGLE-3 checkpoint at {path}: not a directory, nor a hub repo id (owner/name)")
        from huggingface_hub import snapshot_download

        path = Path(snapshot_download(str(path), allow_patterns=["*.json", "*.safetensors"], cache_dir=cache_dir))
    layers = None if target is None else target.text_config.num_hidden_layers
    cfg, layout = read_config(path, layers)
    state = {}
    for file in sorted(path.glob("*.safetensors")):
        state |= load_file(file)
    prefix = LAYER[layout]
    layer = {name.removeprefix(prefix): w for name, w in state.items() if name.startswith(prefix)}
    try:
        own = {
            "fc.weight": state["fc.weight"], "norm.weight": state["norm.weight"], "lm_head.weight": state["lm_head.weight"],
            "layer.qkv.weight": torch.cat([layer[f"self_attn.{p}_proj.weight"] for p in "qkv"]),
            "layer.o.weight": layer["self_attn.o_proj.weight"],
            "layer.gate_up.weight": torch.cat([layer["mlp.gate_proj.weight"], layer["mlp.up_proj.weight"]]),
            "layer.down.weight": layer["mlp.down_proj.weight"],
            **{f"layer.{n}.weight": layer[f"{n}.weight"]
               for n in ("input_layernorm", "hidden_norm", "post_attention_layernorm")},
        }
    except KeyError as exc:
        raise ValueError(f"{path} is not a complete {layout} EAGLE-3 checkpoint: no {exc.args[0]}") from None
    if "embed_tokens.weight" in state:
        own["embed_tokens.weight"] = state["embed_tokens.weight"]
    elif target is not None:
        own["embed_tokens.weight"] = target.model.get_input_embeddings().weight.detach()
    else:
        raise ValueError(f"{path} carries no token embeddings: give the target (--target) whose embeddings it uses")
    model = Eagle3Model(cfg)
    dtype = own["fc.weight"].dtype
    d2t = state.get("d2t", torch.zeros(cfg.draft_vocab_size, dtype=torch.long)).long()
    try:  # the draft vocabulary from d2t alone (t2d follows from it), the rest as stored
        model.load_state_dict({k: v.to(dtype) for k, v in own.items()} | {"d2t": model.d2t, "t2d": model.t2d})
        model.set_draft_vocab(torch.arange(len(d2t)) + d2t)
    except RuntimeError as exc:  # shapes that disagree with its own config
        raise ValueError(f"{path}: the weights do not match the config: {str(exc).splitlines()[-1].strip()}") from None
    return model.to(dtype)


def check_fits(cfg: Eagle3Config, text) -> None:
    """A clear error when a drafter was made for another target (`text`: the target's text config, so a server can
    check a drafter before any model loads)."""
    problems = []
    if cfg.target_hidden_size != text.hidden_size:
        problems.append(f"it reads {cfg.target_hidden_size}-wide states, the target's are {text.hidden_size}")
    if cfg.vocab_size != text.vocab_size:
        problems.append(f"its vocabulary has {cfg.vocab_size} tokens, the target's {text.vocab_size}")
    if cfg.hidden_size != text.hidden_size:
        problems.append(f"its embeddings are {cfg.hidden_size} wide, the target's {text.hidden_size}")
    if not all(0 <= i <= text.num_hidden_layers for i in cfg.layer_ids):
        problems.append(f"it reads layers {list(cfg.layer_ids)}, the target has {text.num_hidden_layers}")
    if problems:
        raise ValueError("this EAGLE-3 drafter does not fit the target: " + "; ".join(problems))
