"""Security: uploads are capped in size (the pixel cap: tests/test_bad_inputs.py); no path a visitor sends reaches
the disk (models and drafters only from the offered lists, REAP checkpoints only under the server's own temporary
directory); repository code runs only if the operator sets SPECULUM_TRUST_REMOTE_CODE=1; weights load from
safetensors only, never pickle; on a public Space (SPACE_ID set) only presets load unless SPECULUM_ALLOW_ANY_MODEL=1.

    nice -n 19 env OMP_NUM_THREADS=1 python -m pytest -q tests/test_security.py
"""

from __future__ import annotations

import shutil
import time

import httpx
import pytest
import torch
from gradio_client import handle_file
from gradio_client.exceptions import AppError
from transformers import AutoModelForCausalLM

from core.models import presets, registry
from core.models.embedded import EMBEDDED_PATHS
from core.models.loading import LoadOptions, presets_only
from core.reap.embedded_moe import MOE_PATH
from core.reap.lab import Lab
from ui import app, models, reap_tab


def test_uploads_over_the_cap_are_refused(app_url, tmp_path):
    big = tmp_path / "big.png"
    big.write_bytes(b"\0" * (int(app.MAX_UPLOAD.removesuffix("mb")) * 1024 * 1024 + 1))
    with httpx.Client(base_url=app_url, timeout=120) as http, big.open("rb") as f:
        response = http.post("gradio_api/upload", files={"files": ("big.png", f, "image/png")})
    assert response.status_code == 413 and "exceeded maximum allowed size" in response.text


@pytest.mark.parametrize("field, value", [
    ("model", str(EMBEDDED_PATHS["target"])),  # a real model directory, but not one the app offers
    ("drafter", f"text:weights={EMBEDDED_PATHS['text']}"),
])
def test_the_app_loads_only_the_models_it_offers(client, world_png, field, value):
    args = {"model": "embedded", "drafter": "none"} | {field: value}
    with pytest.raises(AppError, match="not in the list of choices"):
        client.predict(handle_file(world_png[0]), world_png[1], args["model"], args["drafter"], 4, 0.0, 1.0, 0, 4,
                       api_name="/generate")


def test_the_tabs_check_the_offered_list_behind_gradio():
    with pytest.raises(ValueError, match="unknown model"):
        models.target(str(EMBEDDED_PATHS["target"]))


@pytest.mark.parametrize("args, refusal", [
    ((str(MOE_PATH), "mixed", "reap", 0.5), "not in the list of choices"),
    # Calibration is free text (weighted mixtures), so core refuses what is not a domain, files included.
    (("embedded", "/tmp/speculum-calibration.txt", "reap", 0.5), "unknown calibration '/tmp/speculum-calibration.txt'"),
    (("embedded", "code:0.5,/etc/hostname:0.5", "reap", 0.5), "'/etc/hostname' is not a domain"),
    (("embedded", "mixed", "../../reap", 0.5), "not in the list of choices"),
])
def test_reap_export_takes_no_paths(client, args, refusal):
    with pytest.raises(AppError, match=refusal):
        client.predict(*args, "layer", 0, api_name="/reap_export")


def test_reap_export_is_written_under_the_servers_temp_dir_with_a_name_it_chose(client):
    start = time.time()
    client.predict("embedded", "mixed", "frequency", 0.25, "layer", 0, api_name="/reap_export")
    written = reap_tab.EXPORT_DIR / "moe-frequency-12experts-mixed.zip"
    assert written.stat().st_mtime >= start - 1


def test_remote_code_runs_only_when_the_operator_allows_it(monkeypatch):
    monkeypatch.delenv("SPECULUM_TRUST_REMOTE_CODE", raising=False)
    assert LoadOptions().kwargs()["trust_remote_code"] is False and LoadOptions().file_kwargs()["trust_remote_code"] is False
    monkeypatch.setenv("SPECULUM_TRUST_REMOTE_CODE", "1")
    assert LoadOptions().kwargs()["trust_remote_code"] is True


def test_pickled_weights_are_never_loaded(tmp_path):
    """A drafter directory holding only pytorch_model.bin (pickle can run code when loaded) is refused."""
    pickled = tmp_path / "text"
    shutil.copytree(EMBEDDED_PATHS["text"], pickled)
    for weights in pickled.glob("*.safetensors"):
        weights.unlink()
    torch.save(AutoModelForCausalLM.from_pretrained(EMBEDDED_PATHS["text"]).state_dict(), pickled / "pytorch_model.bin")
    with pytest.raises(ValueError, match="no trained weights"):
        registry.load_drafter(f"text:weights={pickled}")


@pytest.fixture
def public_space(monkeypatch):
    monkeypatch.setenv("SPACE_ID", "someone/speculum")
    monkeypatch.delenv("SPECULUM_ALLOW_ANY_MODEL", raising=False)
    registry.load_target.cache_clear()
    yield
    registry.load_target.cache_clear()


def test_a_public_space_loads_only_presets(public_space, monkeypatch):
    assert presets_only()
    for load in (lambda: presets.vlm_preset(str(EMBEDDED_PATHS["target"])),
                 lambda: presets.moe_preset(str(MOE_PATH)),
                 lambda: registry.load_drafter(f"text:weights={EMBEDDED_PATHS['text']}"),
                 lambda: Lab(str(MOE_PATH))):
        with pytest.raises(ValueError, match="only (from )?its presets"):
            load()
    assert presets.vlm_preset("embedded") is presets.VLM_PRESETS["embedded"]  # the presets themselves still load

    monkeypatch.setenv("SPECULUM_ALLOW_ANY_MODEL", "1")
    assert not presets_only()
    assert presets.vlm_preset(str(EMBEDDED_PATHS["target"])).target == str(EMBEDDED_PATHS["target"])
