"""Shared fixtures: tiny random models of the real architectures, saved and reloaded with from_pretrained."""

from __future__ import annotations

import pytest
import torch
from helpers import TINY_DRAFTER, TINY_TARGET
from transformers import Qwen2ForCausalLM

from core.drafters.dream import DreamAdapter, DreamConfig, DreamDrafter
from core.drafters.eagle3.drafter import Eagle3Drafter
from core.drafters.eagle3.model import Eagle3Config, Eagle3Model
from core.drafters.massv import MassvDrafter
from core.drafters.text import TextDrafter
from core.models.embedded import new_target, new_text_drafter, save_vlm
from core.models.tokenizer import train_tokenizer
from core.models.vlm import VisionLanguageModel


@pytest.fixture(scope="session")
def tokenizer():
    return train_tokenizer()


@pytest.fixture(scope="session")
def tiny_target_dir(tmp_path_factory, tokenizer):
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("tiny-target")
    save_vlm(new_target(TINY_TARGET, tokenizer), path)
    return path


@pytest.fixture(scope="session")
def tiny_target(tiny_target_dir):
    return VisionLanguageModel.from_pretrained(tiny_target_dir)


@pytest.fixture(scope="session")
def tiny_text_drafter_dir(tmp_path_factory, tokenizer):
    torch.manual_seed(1)
    path = tmp_path_factory.mktemp("tiny-drafter")
    new_text_drafter(tokenizer, TINY_DRAFTER).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_text_drafter(tiny_text_drafter_dir):
    return TextDrafter.from_pretrained(tiny_text_drafter_dir)


@pytest.fixture(scope="session")
def twin_drafter(tiny_target):
    """A Qwen2 LM holding the target's own language weights: on text-only prompts it agrees with the target, so
    the engine's acceptance path (long accepted runs, bonus tokens) is exercised, not just rejections."""
    text = tiny_target.text_config
    model = Qwen2ForCausalLM(_qwen2_config(text))
    state = {k.replace("model.language_model.", "model."): v for k, v in tiny_target.model.state_dict().items()
             if k.startswith("model.language_model.") or k.startswith("lm_head.")}
    model.load_state_dict(state, strict=True)
    return TextDrafter(model, "twin")


@pytest.fixture(scope="session")
def tiny_massv(tiny_target, tiny_text_drafter):
    """MASSV on the tiny text drafter's LM, with a random projector."""
    torch.manual_seed(0)
    vision_width = tiny_target.model.config.vision_config.out_hidden_size
    return MassvDrafter.from_text_drafter(tiny_text_drafter.model, vision_width)


@pytest.fixture(scope="session")
def tiny_dream(tiny_target):
    """A random DREAM adapter for the tiny target."""
    torch.manual_seed(0)
    adapter = DreamAdapter(DreamConfig.for_target(tiny_target))
    with torch.no_grad():  # open the gates (trained adapters have them open) so cross-attention matters
        adapter.cross.attn_gate.fill_(1.0)
        adapter.cross.mlp_gate.fill_(1.0)
    return DreamDrafter(adapter, tiny_target)


@pytest.fixture(scope="session")
def tiny_eagle3(tiny_target):
    """A random EAGLE-3 drafter for the tiny target (2 layers: it reads hidden_states 0, 1, 2), over a draft
    vocabulary of half the tokens, the end-of-sequence ones included."""
    torch.manual_seed(0)
    cfg = Eagle3Config.for_target(tiny_target, draft_vocab_size=tiny_target.text_config.vocab_size // 2,
                                  layer_ids=(0, 1, 2))
    model = Eagle3Model(cfg)
    stops = sorted(tiny_target.eos_token_ids)
    others = [i for i in torch.randperm(cfg.vocab_size).tolist() if i not in stops]
    model.set_draft_vocab(torch.tensor(sorted(stops + others[: cfg.draft_vocab_size - len(stops)])))
    with torch.no_grad():
        model.embed_tokens.weight.copy_(tiny_target.model.get_input_embeddings().weight)
    return Eagle3Drafter(model, tiny_target)


def _qwen2_config(text):
    from transformers import Qwen2Config

    return Qwen2Config(
        vocab_size=text.vocab_size, hidden_size=text.hidden_size, num_hidden_layers=text.num_hidden_layers,
        num_attention_heads=text.num_attention_heads, num_key_value_heads=text.num_key_value_heads,
        intermediate_size=text.intermediate_size,
        rope_parameters={"rope_type": "default", "rope_theta": text.rope_parameters["rope_theta"]},
        tie_word_embeddings=True, rms_norm_eps=text.rms_norm_eps,
    )


@pytest.fixture(scope="session")
def app_url():
    """The Gradio app (ui/app.py) launched in-process on a free localhost port, closed after the session."""
    import socket

    from ui.app import launch

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    demo = launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    yield f"http://127.0.0.1:{port}/"
    demo.close()


@pytest.fixture(scope="session")
def client(app_url):
    """A gradio_client Client of the in-process app."""
    from gradio_client import Client

    return Client(app_url, verbose=False)


@pytest.fixture(scope="session")
def raw_call(app_url):
    """call(api, data) -> the event stream's text, over plain HTTP: gradio_client sends strict JSON, this can send
    NaN (json.dumps writes it), as any HTTP client can."""
    import json

    import httpx

    def call(api: str, data: list) -> str:
        with httpx.Client(base_url=app_url, timeout=300) as http:
            event_id = http.post(f"gradio_api/call/{api}", content=json.dumps({"data": data}),
                                 headers={"content-type": "application/json"}).json()["event_id"]
            return http.get(f"gradio_api/call/{api}/{event_id}").text

    return call


@pytest.fixture(scope="session")
def world_png(tmp_path_factory):
    """A held-out world sample saved as PNG (lossless, so the app sees exactly these pixels), and its prompt."""
    from core.world import scenes

    sample = scenes.sample("heldout", 1)
    path = tmp_path_factory.mktemp("app") / "world.png"
    sample.image.save(path)
    return path, sample.prompt
