"""Faults: a client that cancels or drops mid-stream frees its work at once; a model that fails to load is a message
and the app keeps serving; a crash while writing a pruned checkpoint leaves nothing half-written; REAP's score
cache is keyed by the model's weights and the calibration tokens, so a stale entry is never served. The app is
launched in-process by the `app_url` fixture, so the tests can see its state (ui.spec_tab.DECODING).

    nice -n 19 env OMP_NUM_THREADS=1 python -m pytest -q tests/test_faults.py
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import replace

import httpx
import pytest
from gradio_client import handle_file
from gradio_client.exceptions import AppError

from core.models import registry
from core.models.embedded import EMBEDDED_PATHS
from core.models.presets import VLM_PRESETS, DrafterSource
from core.reap.checkpoint import atomic_save
from core.reap.lab import Lab, LabConfig
from core.reap.quality import QualityConfig
from core.reap.scores import ScoreConfig
from ui import models, spec_tab

LONG = 256  # tokens, at PER_FORWARD_S each (see `slow_endless`): minutes, far longer than any wait below
PER_FORWARD_S = 0.5
SMALL_LAB = LabConfig(score=ScoreConfig(tokens=512, sample_tokens=32), live_quality=QualityConfig(ppl_windows=1, task_items=2),
                      curve_ratios=(0.5,), subspace_tokens=256, sample_tokens=4)


def _generate(client, path, prompt, max_new, drafter="none"):
    return client.submit(handle_file(path), prompt, "embedded", drafter, 4, 0.0, 1.0, 0, max_new, api_name="/generate")


def _wait(condition, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def slow_endless(monkeypatch):
    """The app's target never ends a sequence by itself and waits PER_FORWARD_S before each forward, so a request
    for LONG tokens would decode for minutes: a stream that stops within seconds was stopped by the test."""
    target = models.target("embedded")
    forward = target.model.forward

    def slow_forward(*args, **kwargs):
        time.sleep(PER_FORWARD_S)
        return forward(*args, **kwargs)

    monkeypatch.setattr(target, "eos_token_ids", set())
    monkeypatch.setattr(target.model, "forward", slow_forward)


def _short_request_is_served(client, world_png) -> float:
    start = time.perf_counter()
    _generate(client, *world_png, max_new=4).result(timeout=120)
    return time.perf_counter() - start


def test_cancelled_stream_stops_and_the_next_request_is_served(client, world_png, slow_endless):
    job = _generate(client, *world_png, max_new=LONG)
    assert _wait(lambda: len(job.outputs()) >= 3, 120), "the stream started"
    assert spec_tab.DECODING, "the request is decoding"
    job.cancel()
    assert _wait(lambda: not spec_tab.DECODING, 30), "cancelling closed the generator"
    assert _short_request_is_served(client, world_png) < 60  # one decode at a time: it would queue behind the other


def test_dropped_connection_stops_the_stream(app_url, world_png, slow_endless):
    body = json.dumps({"data": [None, world_png[1], "embedded", "none", 4, 0.0, 1.0, 0, LONG, 0.75, "chain", 4, 16, 0]})
    with httpx.Client(base_url=app_url, timeout=120) as http:
        event_id = http.post("gradio_api/call/generate", content=body,
                             headers={"content-type": "application/json"}).json()["event_id"]
        with http.stream("GET", f"gradio_api/call/generate/{event_id}") as stream:
            for line in stream.iter_lines():  # until the first round has arrived
                if line.startswith("data:") and spec_tab.DECODING:
                    break
            else:
                pytest.fail("the stream ended before it was dropped")
    # the connection is closed here, mid-stream
    assert _wait(lambda: not spec_tab.DECODING, 60), "the server noticed and closed the generator"


def test_corrupt_drafter_is_a_message_in_the_race_and_the_app_keeps_serving(client, world_png, tmp_path, monkeypatch):
    broken = tmp_path / "text"
    shutil.copytree(EMBEDDED_PATHS["text"], broken)
    for weights in broken.glob("*.safetensors"):
        weights.write_bytes(weights.read_bytes()[:1000])  # cut off mid-file
    monkeypatch.setitem(registry.DRAFTERS, "text", DrafterSource("text", str(broken)))
    registry._load_drafter.cache_clear()
    board, verdict, summary, *_ = client.predict(handle_file(world_png[0]), world_png[1], ["text"], 4, 8, api_name="/race")
    assert "cannot load the &#x27;text&#x27; drafter" in board
    assert [row[0] for row in summary["data"]] == ["AR"] and verdict.startswith("Only AR ran")
    monkeypatch.undo()
    assert _short_request_is_served(client, world_png) < 60


def test_broken_target_is_a_message_and_the_app_keeps_serving(client, world_png, tmp_path, monkeypatch):
    broken = tmp_path / "target"
    shutil.copytree(EMBEDDED_PATHS["target"], broken)
    for weights in broken.glob("*.safetensors"):
        weights.write_bytes(b"\0" * 64)
    monkeypatch.setitem(VLM_PRESETS, "embedded", replace(VLM_PRESETS["embedded"], target=str(broken)))
    registry.load_target.cache_clear()
    try:
        with pytest.raises(AppError, match="cannot load"):
            _generate(client, *world_png, max_new=4).result(timeout=120)
    finally:
        monkeypatch.undo()
        registry.load_target.cache_clear()
        registry._load_drafter.cache_clear()  # drafters hold the target they were loaded with
    assert _short_request_is_served(client, world_png) < 120


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    return Lab("embedded", replace(SMALL_LAB, cache_dir=tmp_path_factory.mktemp("reap-cache")))


def test_a_crash_while_writing_a_checkpoint_leaves_nothing(lab, tmp_path):
    def crash(tmp):
        lab.model.save_pretrained(tmp)  # a real checkpoint, then the disk "fills up"
        raise OSError("No space left on device")

    with pytest.raises(OSError, match="No space"):
        atomic_save(tmp_path / "pruned", crash)
    assert list(tmp_path.iterdir()) == []

    atomic_save(tmp_path / "pruned", lambda tmp: (tmp / "config.json").write_text("{}"))  # a finished earlier write
    with pytest.raises(OSError, match="No space"):
        atomic_save(tmp_path / "pruned", crash)
    assert [p.name for p in tmp_path.iterdir()] == ["pruned"] and [p.name for p in (tmp_path / "pruned").iterdir()] == ["config.json"]


def test_a_crash_while_exporting_leaves_no_zip(lab, tmp_path, monkeypatch):
    def full_disk(*args, **kwargs):
        raise OSError("No space left on device")

    monkeypatch.setattr(shutil, "make_archive", full_disk)
    with pytest.raises(OSError, match="No space"):
        lab.export("math", "reap", 0.5, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_score_cache_is_keyed_by_the_calibration_tokens(lab, tmp_path):
    """tests/test_reap_lab.py covers other weights and another domain; here the same domain with other tokens (a
    larger set, another seed) must not reuse the scores either, while the same ones must."""
    first = lab.scores("math").directory
    again = Lab("embedded", lab.cfg).scores("math").directory
    more = Lab("embedded", replace(lab.cfg, score=replace(lab.cfg.score, tokens=1024))).scores("math").directory
    seed = Lab("embedded", replace(lab.cfg, score=replace(lab.cfg.score, seed=1))).scores("math").directory
    assert again == first and len({first, more, seed}) == 3
    assert json.loads((more / "scores.json").read_text())["num_tokens"] == 1024
