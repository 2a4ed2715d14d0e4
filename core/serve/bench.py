"""Serving throughput: vLLM plain and with EAGLE-3 at several concurrencies, and the engine one request at a time,
on the same requests (world samples and photographs, core/serve/requests.py), greedy, in one table.

    python -m core bench-serve --concurrency 1,4,16 --json assets/results/bench_serve.json

Per row: output tokens/s (all requests' tokens over the wall time of the batch), mean and p90 latency of a request,
and how many outputs differ from the engine's AR tokens (0: lossless). At concurrency c a new request starts as soon
as one ends; with no more requests than c, the batch would only shrink, and the row would measure its slowest
request. So there are 4x the largest concurrency by default (64 for 1,4,16). Each server is started once (core/serve/
server.py), warmed with one request, then runs every concurrency; the goals are ratios of rows of this one run.
"""

from __future__ import annotations

import json
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from core.decoding.engine import SpeculativeEngine
from core.models.registry import load_drafter, load_target
from core.serve.client import VllmClient, image_side
from core.serve.requests import serve_requests
from core.serve.server import ServeConfig, VllmServer


@dataclass
class Row:
    system: str  # "vLLM" or "engine"
    drafter: str  # "none" or "eagle3"
    concurrency: int
    requests: int
    tokens: int
    seconds: float
    tokens_per_s: float
    mean_latency_s: float
    p90_latency_s: float
    mismatches: int  # outputs that differ from the engine's AR tokens


def _row(system: str, drafter: str, concurrency: int, outputs: list[list[int]], latencies: list[float],
         seconds: float, reference: list[list[int]]) -> Row:
    tokens = sum(map(len, outputs))
    p90 = statistics.quantiles(latencies, n=10)[-1] if len(latencies) > 1 else latencies[0]
    return Row(system, drafter, concurrency, len(outputs), tokens, round(seconds, 3), round(tokens / seconds, 1),
               round(statistics.mean(latencies), 3), round(p90, 3),
               sum(out != ref for out, ref in zip(outputs, reference)))


def bench_engine(requests, drafter_name: str, gamma: int, new: int) -> tuple[list[list[int]], list[float]]:
    engine = SpeculativeEngine(load_target("embedded"))
    drafter = load_drafter(drafter_name)
    engine.generate(requests[0].image, requests[0].prompt, drafter, gamma=gamma, max_new_tokens=new)  # warm-up
    runs = [engine.generate(r.image, r.prompt, drafter, gamma=gamma, max_new_tokens=new) for r in requests]
    return [g.token_ids for g in runs], [g.seconds for g in runs]


def bench_vllm(cfg: ServeConfig, requests, concurrencies: list[int], new: int, reference) -> list[Row]:
    rows = []
    with VllmServer(cfg) as server:
        client = VllmClient(server.url, cfg.name, image_side(cfg.model_dir()))
        client.complete(requests[0].image, requests[0].prompt, new)  # warm-up
        for c in concurrencies:
            start = time.perf_counter()
            with ThreadPoolExecutor(c) as pool:
                done = list(pool.map(lambda r: client.complete(r.image, r.prompt, new), requests))
            seconds = time.perf_counter() - start
            rows.append(_row("vLLM", cfg.drafter, c, [d.token_ids for d in done], [d.seconds for d in done], seconds,
                             reference))
        client.close()
    return rows


def goals(rows: list[Row]) -> dict[str, float]:
    at = {(r.system, r.drafter, r.concurrency): r.tokens_per_s for r in rows}
    top = max(r.concurrency for r in rows if r.system == "vLLM")
    return {
        "vllm_eagle3_over_plain_at_1": round(at["vLLM", "eagle3", 1] / at["vLLM", "none", 1], 2),
        f"vllm_plain_{top}_over_1": round(at["vLLM", "none", top] / at["vLLM", "none", 1], 2),
        f"vllm_eagle3_{top}_over_1": round(at["vLLM", "eagle3", top] / at["vLLM", "eagle3", 1], 2),
        "engine_eagle3_over_vllm_eagle3_at_1": round(at["engine", "eagle3", 1] / at["vLLM", "eagle3", 1], 2),
    }


def run(args) -> None:
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    if 1 not in concurrencies:
        raise ValueError("--concurrency must include 1 (the goals compare against one request at a time)")
    requests = serve_requests(max(args.n or 4 * max(concurrencies), max(concurrencies)))
    reference, ar_latency = bench_engine(requests, "none", args.gamma, args.max_new_tokens)
    rows = [_row("engine", "none", 1, reference, ar_latency, sum(ar_latency), reference)]
    eagle, latency = bench_engine(requests, "eagle3", args.gamma, args.max_new_tokens)
    rows.append(_row("engine", "eagle3", 1, eagle, latency, sum(latency), reference))
    for drafter in ("none", "eagle3"):
        cfg = ServeConfig(drafter=drafter, gamma=args.gamma, port=args.port)
        rows += bench_vllm(cfg, requests, concurrencies, args.max_new_tokens, reference)
    report = {"command": f"python -m core bench-serve --concurrency {args.concurrency} --n {len(requests)} "
                         f"--max-new-tokens {args.max_new_tokens} --gamma {args.gamma}",
              "requests": [r.name for r in requests], "rows": [asdict(r) for r in rows], "goals": goals(rows)}
    print(f"{'system':8} {'drafter':8} {'conc':>4} {'tok/s':>8} {'mean s':>7} {'p90 s':>7} {'mismatch':>8}")
    for r in rows:
        print(f"{r.system:8} {r.drafter:8} {r.concurrency:>4} {r.tokens_per_s:>8.1f} {r.mean_latency_s:>7.3f} "
              f"{r.p90_latency_s:>7.3f} {r.mismatches:>8}")
    print(json.dumps(report["goals"]))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=1))
