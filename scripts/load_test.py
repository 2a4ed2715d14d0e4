"""Load test: the app (ui.app.launch, in a subprocess on a free port) under N concurrent gradio_client clients, each
sending R requests that cycle through generation (the spec tab's endpoint), the drafter race and REAP pruning (the
slider's endpoint), each client with its own image, prompt, drafter and ratio.

Every client first sends its three requests alone (the warm-up); under load each answer must equal that client's
own warm-up answer (no state bleeds between sessions) and no request may fail. The server's resident memory is
read from /proc (Linux) after the warm-up, every half second during the load, and at the end.

    nice -n 19 python scripts/load_test.py                                  # 8 clients x 20 requests, 5 rounds
    nice -n 19 python scripts/load_test.py --clients 4 --requests 6 --json runs/load_test.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from gradio_client import Client, handle_file

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.models.registry import DRAFTERS  # noqa: E402
from core.world import scenes  # noqa: E402

KINDS = ("generate", "race", "reap")
METHODS = ("reap", "ean", "frequency", "hc-smoe")


@dataclass
class LoadConfig:
    clients: int = 8
    requests: int = 20  # per client, cycling through KINDS
    max_new_tokens: int = 16
    calibration: str = "mixed"  # the one the app scores first, so its cache is usually warm
    rounds: int = 5  # the load, repeated: memory after each round shows whether it levels off


@dataclass
class Report:
    config: dict
    requests: int = 0
    failures: list[str] = field(default_factory=list)
    mismatches: list[str] = field(default_factory=list)  # an answer that is not the client's own
    seconds: dict = field(default_factory=dict)  # per kind: median / max latency under load
    rss_mb: dict = field(default_factory=dict)
    wall_s: float = 0.0


class Session:
    """One client: its own image, prompt, drafter, seed and ratio, so its answers differ from the others'."""

    def __init__(self, url: str, index: int, cfg: LoadConfig, image_dir: Path):
        sample = scenes.sample("heldout", 100 + index)
        self.image = image_dir / f"client{index}.png"
        sample.image.save(self.image)
        self.prompt = sample.prompt
        self.drafter = list(DRAFTERS)[index % len(DRAFTERS)]
        self.seed = index
        self.ratio = (index % 7 + 1) / 16  # 1..7 of the embedded MoE's 16 experts
        self.method = METHODS[index % len(METHODS)]
        self.cfg = cfg
        self.client = Client(url, verbose=False)
        self.expected: dict[str, object] = {}

    def ask(self, kind: str):
        """The part of the answer that must not depend on what other clients do (no timings)."""
        if kind == "generate":
            job = self.client.submit(handle_file(self.image), self.prompt, "embedded", self.drafter, 4, 0.0, 1.0,
                                     self.seed, self.cfg.max_new_tokens, api_name="/generate")
            job.result()
            return [out[4] for out in job.outputs() if isinstance(out[4], str)][-1]  # the output text
        if kind == "race":
            _, verdict, summary, *_ = self.client.predict(handle_file(self.image), self.prompt, [self.drafter], 4,
                                                      self.cfg.max_new_tokens, api_name="/race")
            return verdict, [[row[0], row[2], row[-1]] for row in summary["data"]]  # lane, target forwards, same
        job = self.client.submit("embedded", self.cfg.calibration, self.method, self.ratio, "layer", 0,
                                 api_name="/reap")
        job.result()
        return [out[2] for out in job.outputs() if isinstance(out[2], dict) and "data" in out[2]][-1]["data"]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def start_server(url_file: Path) -> tuple[subprocess.Popen, str]:
    """The app in its own process (so its memory is its own), on the first free port Gradio finds; and its URL,
    which the app writes to `url_file` once it serves."""
    code = ("import sys; from pathlib import Path; from ui.app import launch; "
            "demo = launch(server_name='127.0.0.1', prevent_thread_lock=True, quiet=True); "
            "Path(sys.argv[1]).write_text(demo.local_url); demo.block_thread()")
    server = subprocess.Popen([sys.executable, "-c", code, str(url_file)], cwd=ROOT)
    while not (url_file.is_file() and url_file.read_text()):
        if server.poll() is not None:
            raise SystemExit(f"the app exited with status {server.returncode}")
        time.sleep(1)
    return server, url_file.read_text()


def run(cfg: LoadConfig, work_dir: Path) -> Report:
    report = Report(asdict(cfg))
    server, url = start_server(work_dir / "url")
    try:
        sessions = [Session(url, i, cfg, work_dir) for i in range(cfg.clients)]
        for s in sessions:  # alone: the answers each client must get again under load
            s.expected = {kind: s.ask(kind) for kind in KINDS}
        report.rss_mb["after_warmup"] = round(rss_mb(server.pid), 1)

        samples, done = [], threading.Event()

        def sample_rss():
            while not done.wait(0.5):
                samples.append(rss_mb(server.pid))

        latencies: dict[str, list[float]] = {kind: [] for kind in KINDS}

        def client_loop(s: Session):
            for r in range(cfg.requests):
                kind = KINDS[(r + s.seed) % len(KINDS)]
                start = time.perf_counter()
                try:
                    answer = s.ask(kind)
                except Exception as exc:  # any failure is a finding: count it, keep going
                    report.failures.append(f"client {s.seed} {kind}: {type(exc).__name__}: {exc}")
                    continue
                latencies[kind].append(time.perf_counter() - start)
                if answer != s.expected[kind]:
                    report.mismatches.append(f"client {s.seed} {kind}: {str(answer)[:200]!r}")

        sampler = threading.Thread(target=sample_rss, daemon=True)
        sampler.start()
        start = time.perf_counter()
        ends = []  # memory after each round: once the caches are full, later rounds must not grow it
        for _ in range(cfg.rounds):
            with ThreadPoolExecutor(cfg.clients) as pool:
                list(pool.map(client_loop, sessions))
            ends.append(round(rss_mb(server.pid), 1))
        report.wall_s = round(time.perf_counter() - start, 1)
        done.set()
        report.requests = cfg.clients * cfg.requests * cfg.rounds
        report.rss_mb |= {"peak_under_load": round(max(samples, default=0.0), 1), "end_of_each_round": ends}
        report.seconds = {kind: {"median": round(statistics.median(v), 2), "max": round(max(v), 2)}
                          for kind, v in latencies.items() if v}
    finally:
        server.terminate()
        server.wait(30)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=LoadConfig.clients)
    parser.add_argument("--requests", type=int, default=LoadConfig.requests, help="per client")
    parser.add_argument("--max-new-tokens", type=int, default=LoadConfig.max_new_tokens)
    parser.add_argument("--rounds", type=int, default=LoadConfig.rounds, help="the whole load, repeated on one server")
    parser.add_argument("--json", help="write the report here too")
    args = parser.parse_args()
    cfg = LoadConfig(args.clients, args.requests, args.max_new_tokens, rounds=args.rounds)
    with tempfile.TemporaryDirectory() as tmp:
        report = run(cfg, Path(tmp))
    text = json.dumps(asdict(report), indent=1)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(text)
    print(text)
    sys.exit(1 if report.failures or report.mismatches else 0)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # for the server, which inherits it: clients and server share the CPUs
    main()
