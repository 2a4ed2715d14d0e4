"""EAGLE-3 checkpoints exported here load in the peers' own code and draft the same logits: vllm-project's
`speculators` (Eagle3DraftModel, the format vLLM serves) and SpecForge's `LlamaForCausalLMEagle3` (SGLang's), fp32 on
CPU, max abs difference <= 1e-4; and an export imports back to identical drafts.

The peers install without their dependencies (README's test command: requirements-peers.txt); their loaders run as
a user would call them (`from_pretrained`, with the CPU settings each needs: eager attention for speculators,
no torch.compile for SpecForge)."""

from __future__ import annotations

import json

import pytest
import torch

from core.drafters.eagle3.formats import load_model, read_config, save_specforge, save_speculators
from core.drafters.eagle3.model import Eagle3Config, Eagle3Model

HIDDEN, HEADS, KV_HEADS, VOCAB, DRAFT_VOCAB, TARGET_LAYERS = 64, 4, 2, 300, 100, 8


def _model(mrope_section=None, layer_ids=(1, 3, 6)) -> Eagle3Model:
    """A random EAGLE-3 drafter, every weight (norms too) random so that each one matters."""
    torch.manual_seed(0)
    cfg = Eagle3Config(hidden_size=HIDDEN, num_heads=HEADS, num_kv_heads=KV_HEADS, head_dim=HIDDEN // HEADS,
                       intermediate_size=128, target_hidden_size=HIDDEN, vocab_size=VOCAB,
                       draft_vocab_size=DRAFT_VOCAB, layer_ids=layer_ids, mrope_section=mrope_section)
    model = Eagle3Model(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3)
        for norm in (model.norm, model.layer.input_layernorm, model.layer.hidden_norm,
                     model.layer.post_attention_layernorm):
            norm.weight.uniform_(0.5, 1.5)
    model.set_draft_vocab(torch.sort(torch.randperm(VOCAB)[:DRAFT_VOCAB]).values)
    return model.eval()


def _inputs(length: int = 9):
    torch.manual_seed(1)
    return torch.randint(0, VOCAB, (1, length)), torch.randn(1, length, 3 * HIDDEN)


def _ours(model: Eagle3Model, ids, aux, positions) -> torch.Tensor:
    length = ids.shape[1]
    causal = torch.ones(length, length, dtype=torch.bool).tril()[None, None]
    with torch.no_grad():
        return model.logits(model(ids, model.fuse(aux), positions, causal))


@pytest.fixture(scope="module")
def verifier_dir(tmp_path_factory):
    """speculators' loader reads its verifier's config and head: a tiny Llama with this vocabulary and width."""
    from transformers import LlamaConfig, LlamaForCausalLM

    path = tmp_path_factory.mktemp("verifier")
    LlamaForCausalLM(LlamaConfig(hidden_size=HIDDEN, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
                                 intermediate_size=128, vocab_size=VOCAB, num_hidden_layers=TARGET_LAYERS,
                                 tie_word_embeddings=False)).save_pretrained(path)
    return path


def test_speculators_draft_model_gives_the_same_logits(tmp_path, verifier_dir):
    pytest.importorskip("speculators.models.eagle3", reason="speculators is not installed (requirements-peers.txt)")
    from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig

    model = _model()
    save_speculators(model, tmp_path, str(verifier_dir), ["LlamaForCausalLM"])
    config = Eagle3SpeculatorConfig.from_pretrained(tmp_path)
    config.transformer_layer_config._attn_implementation = "eager"  # the default flex attention needs a GPU
    peer = Eagle3DraftModel.from_pretrained(tmp_path, config=config).float().eval()
    ids, aux = _inputs()
    positions = torch.arange(ids.shape[1])[None]
    logits = []
    hook = peer.lm_head.register_forward_hook(lambda module, args, out: logits.append(out))
    with torch.no_grad():  # its forward returns argmax drafts only: the logits come from its LM head
        peer(hidden_states=aux, input_ids=ids, document_ids=torch.zeros_like(ids), position_ids=positions,
             ttt_steps=1)
    hook.remove()
    ours = _ours(model, ids, aux, positions)
    assert logits[0].shape == ours.shape == (1, ids.shape[1], DRAFT_VOCAB)
    assert (logits[0] - ours).abs().max() <= 1e-4
    torch.testing.assert_close(peer.d2t, model.d2t, rtol=0, atol=0)
    torch.testing.assert_close(peer.t2d, model.t2d, rtol=0, atol=0)


def _specforge(path):
    pytest.importorskip("specforge.modeling.draft.llama3_eagle", reason="specforge is not installed "
                                                                        "(requirements-peers.txt)")
    from specforge.modeling.draft.llama3_eagle import LlamaForCausalLMEagle3

    peer = LlamaForCausalLMEagle3.from_pretrained(path, attention_backend="sdpa").float().eval()
    peer.midlayer.self_attn._init_rope()  # transformers 5 leaves its non-persistent rotary buffers unset on load
    return peer


def _specforge_logits(peer, ids, aux, positions) -> torch.Tensor:
    """One draft step with SpecForge's own blocks, as its training loop runs each step."""
    length = ids.shape[1]
    with torch.no_grad():
        state = peer.project_hidden_states(aux)
        mask = peer.prepare_decoder_attention_mask(torch.ones(1, length, dtype=torch.bool), state, 1, length, 0)
        out = peer.backbone(input_embeds=peer.embed_input_ids(ids), hidden_states=state, cache_hidden=None,
                            attention_mask=mask, position_ids=positions, past_key_values=None)
        return peer.compute_logits(out)


@pytest.mark.parametrize("mrope", [False, True], ids=["1d-rope", "mrope"])
def test_specforge_draft_model_gives_the_same_logits(tmp_path, mrope):
    model = _model(mrope_section=(2, 3, 3) if mrope else None)
    save_specforge(model, tmp_path, TARGET_LAYERS)
    peer = _specforge(tmp_path)
    ids, aux = _inputs()
    length = ids.shape[1]
    if mrope:  # an image-like span: the rows differ, as the target's multimodal positions do
        positions = torch.stack([torch.arange(length), torch.arange(length) // 2, torch.arange(length) % 3])[:, None]
    else:
        positions = torch.arange(length)[None]
    ours = _ours(model, ids, aux, positions)
    with torch._dynamo.config.patch(disable=True):  # SpecForge compiles its norms and rotary: eager on a CPU
        theirs = _specforge_logits(peer, ids, aux, positions)
    assert theirs.shape == ours.shape
    assert (theirs - ours).abs().max() <= 1e-4
    config = json.loads((tmp_path / "config.json").read_text())
    # SpecForge numbers layers by the output it reads: 1, 3, 6 here are its 0, 2, 5 (non-default, so written).
    assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [0, 2, 5]


@pytest.mark.parametrize("layout", ["speculators", "specforge"])
def test_an_export_imports_back_to_the_same_drafter(tmp_path, layout):
    model = _model(mrope_section=(2, 3, 3))
    if layout == "speculators":
        save_speculators(model, tmp_path, "some/verifier")
    else:
        save_specforge(model, tmp_path, TARGET_LAYERS)
    loaded = load_model(tmp_path)
    assert loaded.cfg == model.cfg
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[name], tensor, rtol=0, atol=0)
    ids, aux = _inputs()
    positions = torch.arange(ids.shape[1]).expand(3, 1, -1)
    assert torch.equal(_ours(loaded, ids, aux, positions), _ours(model, ids, aux, positions))


def test_default_layers_are_not_named_in_a_specforge_export(tmp_path):
    """SGLang and vLLM disagree on how layer ids count (output vs input of a layer); their defaults are the same
    layers, so an export of a default drafter leaves them out and both engines read the right ones."""
    save_specforge(_model(layer_ids=(2, TARGET_LAYERS // 2, TARGET_LAYERS - 3)), tmp_path, TARGET_LAYERS)
    assert "eagle_config" not in json.loads((tmp_path / "config.json").read_text())
    with pytest.raises(ValueError, match="target"):
        load_model(tmp_path)  # which layers is then the target's to say
    assert read_config(tmp_path, TARGET_LAYERS)[0].layer_ids == (2, TARGET_LAYERS // 2, TARGET_LAYERS - 3)


def test_a_missing_checkpoint_is_named(tmp_path):
    with pytest.raises(ValueError, match="no EAGLE-3 checkpoint at"):
        load_model(tmp_path / "nowhere")
    with pytest.raises(ValueError, match="no config.json"):
        load_model(tmp_path)


@pytest.mark.parametrize("change, message", [
    ({"num_hidden_layers": 2}, "one Llama layer"), ({"attention_bias": True}, "attention_bias"),
    ({"rope_parameters": {"rope_type": "yarn", "factor": 4.0}}, "rotary"),
    ({"intermediate_size": 64}, "do not match the config"),
])
def test_checkpoints_this_drafter_cannot_run_are_refused(tmp_path, change, message):
    save_specforge(_model(), tmp_path, TARGET_LAYERS)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(config | change))
    with pytest.raises(ValueError, match=message):
        load_model(tmp_path)
