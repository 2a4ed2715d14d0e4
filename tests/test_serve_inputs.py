"""`python -m core serve` refuses bad input with one line before vLLM starts, and leaves nothing running: a drafter
kind vLLM cannot serve, a drafter made for another target, a `--scope global` REAP checkpoint, the port in use, vLLM
not installed. The race's vLLM lanes say the same in their lane, and the engine's lanes still race. Runs with or
without vLLM installed."""

from __future__ import annotations

import importlib.util
import json
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.__main__ import cli
from core.models.embedded import EMBEDDED_PATHS
from core.reap.checkpoint import LAYER_EXPERTS
from core.reap.embedded_moe import MOE_PATH
from core.serve import lanes
from core.serve.server import ServeConfig, command
from core.world import scenes
from ui.race_tab import run_race


def _serve_fails(*argv: str) -> str:
    """The one line `python -m core serve ...` exits with, quickly: it never got as far as starting vLLM (which
    takes 30 s and more here, and would print its URL)."""
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "core", "serve", *argv], capture_output=True, text=True, timeout=300)
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert not result.stdout and time.perf_counter() - start < 25
    return lines[0]


@pytest.mark.parametrize("kind", ["massv", "dream"])
def test_a_drafter_vllm_cannot_serve_is_refused_with_why(kind):
    line = _serve_fails("--drafter", kind)
    assert kind in line and "eagle3" in line and "vLLM" in line


def test_a_drafter_made_for_another_target_is_refused(tiny_target_dir):
    line = _serve_fails("--target", str(tiny_target_dir), "--weights", str(EMBEDDED_PATHS["eagle3"]))
    assert "does not fit the target" in line


def test_a_global_scope_checkpoint_is_refused_naming_its_expert_counts(tmp_path):
    pruned = tmp_path / "global"
    shutil.copytree(MOE_PATH, pruned)
    config = json.loads((pruned / "config.json").read_text())
    config[LAYER_EXPERTS] = [8, 6, 10, 8]
    (pruned / "config.json").write_text(json.dumps(config))
    line = _serve_fails("--model", str(pruned))
    assert "--scope global" in line and "8, 6, 10, 8" in line


def test_the_port_in_use_is_refused():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        line = _serve_fails("--drafter", "none", "--port", str(s.getsockname()[1]))
    assert "in use" in line


def test_vllm_missing_names_the_install_command_else_the_input_passes():
    cfg = ServeConfig(drafter="none", port=0)
    if importlib.util.find_spec("vllm") is None:
        with pytest.raises(ValueError, match=r'pip install -e "\.\[serve\]"'):
            cfg.check()
    else:
        cfg.check()


def test_the_server_command_runs_the_target_as_the_engine_does():
    argv = command(ServeConfig(drafter="eagle3", gamma=5, port=8123))
    assert argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert argv[argv.index("--dtype") + 1] == "float32"  # the engine's dtype, so greedy tokens agree
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec["method"] == "eagle3" and spec["num_speculative_tokens"] == 5


def test_a_specforge_checkpoint_is_exported_once_for_vllm(tmp_path):
    sglang = tmp_path / "sglang"
    cli(["export", "eagle3", "--weights", str(EMBEDDED_PATHS["eagle3"]), "--format", "specforge", "--out", str(sglang)])
    argv = command(ServeConfig(weights=str(sglang), port=8123))
    served = Path(json.loads(argv[argv.index("--speculative-config") + 1])["model"])
    assert served != sglang and json.loads((served / "config.json").read_text())["speculators_model_type"] == "eagle3"
    again = command(ServeConfig(weights=str(sglang), port=8123))
    assert json.loads(again[again.index("--speculative-config") + 1])["model"] == str(served)


def _without_vllm(monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else find_spec(name, *a))
    monkeypatch.delenv(lanes.URL_VARIABLE, raising=False)


def test_without_vllm_the_race_lanes_say_how_to_get_them_and_the_engine_still_races(monkeypatch):
    _without_vllm(monkeypatch)
    assert "not installed" in lanes.where() and 'pip install -e ".[serve]"' in lanes.where()
    sample = scenes.sample("heldout", 1)
    *_, (board, verdict, summary, *_) = run_race(sample.image, sample.prompt, ["eagle3"], 4, 16, "chain",
                                                  [lanes.PLAIN, lanes.EAGLE3])
    assert board.count("vLLM is not installed here: pip install -e &quot;.[serve]&quot;") == 2
    assert [row[0] for row in summary] == ["AR", "eagle3"] and verdict.startswith("**Lossless:** the eagle3 lane")


def test_a_vllm_url_where_nothing_answers_is_the_lanes_error(monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv(lanes.URL_VARIABLE, f"http://127.0.0.1:{port}")
    lane = lanes.ServedTargets().lane(lanes.EAGLE3, 4)
    assert lane.done and lane.client is None
    assert lane.error == f"{lanes.URL_VARIABLE}: no vLLM server answers at http://127.0.0.1:{port} (ConnectError)"
