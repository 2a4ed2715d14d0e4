"""vLLM serves what the engine computes: greedy tokens with no drafter and with EAGLE-3 on twelve requests (world
samples of the four families, whole photographs, crops, 4:3 and 1:3), EAGLE-3's acceptance per position within
0.05 of the engine's at the same γ (with the drafter-slot fix every server process runs, core/serve/drafter_slots.py),
the embedded MoE pruned 50 % by REAP, tensor parallelism 2; the race's vLLM lanes (given by URL, or started on demand)
and a server that dies while its lane streams.

Each configuration starts one real vLLM server (core/serve/server.py) for the module and stops it. Skipped where vLLM
is not installed (`pip install -e ".[serve]"`, docs/serving.md).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import signal
import socket
import subprocess
import sys

import httpx
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from core.__main__ import cli
from core.decoding.engine import SpeculativeEngine
from core.models.registry import load_drafter, load_target
from core.serve import lanes
from core.serve.client import VllmClient, image_side
from core.serve.drafter_slots import slots_by_index
from core.serve.requests import serve_requests
from core.serve.server import BOOT, ServeConfig, VllmServer, environment, free_port
from ui import race_tab

pytestmark = pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                                reason='vLLM is not installed (pip install -e ".[serve]", docs/serving.md)')

GAMMA, NEW = 4, 64
REQUESTS = serve_requests(12)


def _serve(cfg: ServeConfig):
    with VllmServer(cfg) as server:
        print(f"vLLM ({cfg.drafter}, tp {cfg.tensor_parallel_size}) started in {server.start_seconds:.0f}s")
        client = VllmClient(server.url, cfg.name, image_side(cfg.model_dir()))
        yield server, client
        client.close()


@pytest.fixture(scope="module")
def plain():
    yield from _serve(ServeConfig(drafter="none", port=free_port()))


@pytest.fixture(scope="module")
def eagle3():
    yield from _serve(ServeConfig(drafter="eagle3", gamma=GAMMA, port=free_port()))


@pytest.fixture(scope="module")
def engine():
    return SpeculativeEngine(load_target("embedded"))


@pytest.fixture(scope="module")
def engine_ar(engine):
    return [engine.generate(r.image, r.prompt, max_new_tokens=NEW) for r in REQUESTS]


def test_plain_vllm_gives_the_engines_greedy_tokens(plain, engine_ar):
    _, client = plain
    mismatches = [(r.name, done.text, gen.text) for r, gen in zip(REQUESTS, engine_ar)
                  if (done := client.complete(r.image, r.prompt, NEW)).token_ids != gen.token_ids]
    assert not mismatches


def test_the_square_is_what_makes_them_agree(plain, engine_ar):
    """The 4:3 and 1:3 crops sent as they are: vLLM's processor keeps their aspect ratio (another grid of visual
    tokens), so it answers something else than for the square the client sends."""
    _, client = plain
    raw = VllmClient(client.url, client.model, image_side=None)
    for name in ("4:3 crop", "1:3 crop"):
        i = next(i for i, r in enumerate(REQUESTS) if r.name == name)
        squared = client.complete(REQUESTS[i].image, REQUESTS[i].prompt, NEW)
        assert squared.token_ids == engine_ar[i].token_ids
        body = raw._body(REQUESTS[i].image, REQUESTS[i].prompt, 1)
        as_is = raw.http.post(f"{raw.url}/v1/chat/completions", json=body).json()
        square = client.http.post(f"{client.url}/v1/chat/completions",
                                  json=client._body(REQUESTS[i].image, REQUESTS[i].prompt, 1)).json()
        assert as_is["prompt_token_ids"] != square["prompt_token_ids"]  # another grid: other placeholders
    raw.close()


@pytest.fixture(scope="module")
def eagle3_runs(eagle3, engine):
    """The twelve requests through vLLM with EAGLE-3 (and its spec-decode counters over them) and through the engine
    with the same drafter at the same γ."""
    _, client = eagle3
    drafter = load_drafter("eagle3")
    before = client.spec_metrics()
    served = [client.complete(r.image, r.prompt, NEW) for r in REQUESTS]
    metrics = client.spec_metrics() - before
    ours = [engine.generate(r.image, r.prompt, drafter, gamma=GAMMA, max_new_tokens=NEW) for r in REQUESTS]
    return served, metrics, ours


def test_eagle3_in_vllm_gives_the_engines_greedy_tokens(eagle3_runs, engine_ar):
    served, _, ours = eagle3_runs
    assert [s.token_ids for s in served] == [g.token_ids for g in engine_ar]
    assert [g.token_ids for g in ours] == [g.token_ids for g in engine_ar]


def test_eagle3_acceptance_per_position_in_vllm_is_the_engines(eagle3_runs):
    _, vllm, ours = eagle3_runs
    # vLLM's definition on both sides: drafting steps whose first i+1 drafts were accepted, over all drafting steps
    rounds = [r for g in ours for r in g.rounds if r.drafted]
    engine_positions = [sum(r.accepted > i for r in rounds) / len(rounds) for i in range(GAMMA)]
    print("acceptance per position: vLLM", [round(a, 3) for a in vllm.position_acceptance],
          "engine", [round(a, 3) for a in engine_positions])
    assert len(vllm.position_acceptance) == GAMMA
    assert all(abs(a - b) <= 0.05 for a, b in zip(vllm.position_acceptance, engine_positions))


def test_a_draft_steps_slot_comes_from_its_sequence_index_through_the_block_table():
    """Two requests, blocks of 4: the next token of one sits at index 5 (its second block, block 3: slot 13), the
    other's is past the model's length (the padding slot)."""
    block_table = torch.tensor([[7, 3, 9], [2, 8, 1]], dtype=torch.int32)
    slots = slots_by_index(torch.tensor([5, 12], dtype=torch.int32), block_table, block_size=4, max_model_len=12)
    assert slots.tolist() == [3 * 4 + 1, -1]  # vLLM's PADDING_SLOT_ID


def test_every_process_vllms_server_starts_imports_the_fixed_proposer():
    """The boot folder on PYTHONPATH, as the server's processes get it: vLLM's proposer, once imported, drafts with
    the fix (core/serve/drafter_slots.py), and importing the boot alone does not import vLLM."""
    probe = ("import sys; assert 'vllm' not in sys.modules; import vllm.v1.spec_decode.llm_base_proposer as m; "
             "print(m.SpecDecodeBaseProposer._update_positions_dependent_metadata.__module__)")
    env = environment(ServeConfig(drafter="none"))
    assert env["PYTHONPATH"].startswith(str(BOOT))
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] == "core.serve.drafter_slots"


PHOTOGRAPH = next(r for r in REQUESTS if r.name.startswith("photograph"))


def test_the_race_streams_vllm_lanes_beside_the_engines(plain, eagle3, monkeypatch):
    """SPECULUM_VLLM_URL names the module's two servers: both lanes give AR's tokens, and the EAGLE-3 lane reads γ
    and its acceptance from vLLM's own counters."""
    monkeypatch.setenv(lanes.URL_VARIABLE, f"{plain[0].url},{eagle3[0].url}/")
    *_, (board, verdict, summary, *_) = race_tab.run_race(PHOTOGRAPH.image, PHOTOGRAPH.prompt, ["eagle3"], GAMMA, NEW,
                                                           "chain", [lanes.PLAIN, lanes.EAGLE3])
    assert verdict.startswith("**Lossless:** all 3 lanes produced exactly AR's")
    rows = {row[0]: row for row in summary}
    assert rows[lanes.PLAIN][6] == rows[lanes.EAGLE3][6] == "yes"
    assert rows[lanes.PLAIN][3] == 1.0 and rows[lanes.EAGLE3][3] > 1.5  # τ
    assert f"γ {GAMMA}: " in board and "(vLLM's counters)" in board


def test_a_lane_starts_its_server_on_demand_and_one_that_dies_ends_only_its_lane(monkeypatch):
    targets = lanes.ServedTargets()
    monkeypatch.setattr(race_tab, "SERVED", targets)
    monkeypatch.delenv(lanes.URL_VARIABLE, raising=False)
    try:
        for board, verdict, summary, *_ in race_tab.run_race(PHOTOGRAPH.image, PHOTOGRAPH.prompt, ["eagle3"], GAMMA,
                                                             NEW, "chain", [lanes.PLAIN]):
            server = targets.started.get(lanes.PLAIN)
            if "chunk 1:" in board and server.alive():  # its first tokens arrived: kill it mid-answer
                os.killpg(server.process.pid, signal.SIGKILL)
    finally:
        targets.stop()
    assert "stopped answering after" in board
    assert [row[0] for row in summary] == ["AR", "eagle3", lanes.PLAIN]  # the cut lane keeps what it had streamed
    assert verdict.startswith("**Lossless:** the eagle3 lane") and f"{lanes.PLAIN} stopped early" in verdict


@pytest.fixture(scope="module")
def pruned_moe(tmp_path_factory):
    scores, out = tmp_path_factory.mktemp("scores"), tmp_path_factory.mktemp("moe") / "reap50"
    cli(["reap", "score", "--calib", "mixed", "--tokens", "1024", "--out", str(scores)])
    cli(["reap", "prune", "--scores", str(scores), "--method", "reap", "--ratio", "0.5", "--out", str(out)])
    return out


MOE_PROMPTS = ["def fibonacci(n):", "The capital of", "import numpy as np\n", "2 + 3 * 4 =", "Once upon a time",
               "for i in range(10):", "The square root of 16 is", "class Stack:\n    def __init__(self):"]


def test_vllm_serves_a_reap_pruned_moe_with_transformers_tokens(pruned_moe):
    tokenizer = AutoTokenizer.from_pretrained(pruned_moe)
    model = AutoModelForCausalLM.from_pretrained(pruned_moe, dtype=torch.float32).eval()
    cfg = ServeConfig(model=str(pruned_moe), port=free_port())
    with VllmServer(cfg) as server:
        for prompt in MOE_PROMPTS:
            ids = tokenizer(prompt).input_ids
            with torch.no_grad():
                out = model.generate(torch.tensor([ids]), max_new_tokens=24, do_sample=False)
            expected = out[0, len(ids):].tolist()
            body = {"model": cfg.name, "prompt": ids, "max_tokens": 24, "temperature": 0.0, "return_token_ids": True}
            got = httpx.post(f"{server.url}/v1/completions", json=body, timeout=120).json()["choices"][0]["token_ids"]
            assert got == expected, prompt


def test_tensor_parallel_2_gives_the_same_tokens(engine_ar):
    cfg = ServeConfig(drafter="none", tensor_parallel_size=2, port=free_port())
    for server, client in _serve(cfg):
        served = [client.complete(r.image, r.prompt, NEW).token_ids for r in REQUESTS[:6]]
        assert served == [g.token_ids for g in engine_ar[:6]]


def test_the_serve_command_prints_a_curl_that_works_and_kill_stops_vllm():
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "core", "serve", "--drafter", "none", "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        url_line, curl = proc.stdout.readline(), proc.stdout.readline().strip()
        assert f"http://127.0.0.1:{port}/v1" in url_line
        answer = json.loads(subprocess.run(shlex.split(curl), capture_output=True, text=True, timeout=60).stdout)
        assert answer["choices"][0]["message"]["content"]
    finally:
        proc.terminate()
        proc.wait(60)
    with socket.socket() as s:  # vLLM, in a session of its own, was stopped with it: the port is free again
        s.bind(("127.0.0.1", port))
