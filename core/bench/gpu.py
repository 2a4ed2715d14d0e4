"""GPU benchmark: what the fast path (core/decoding/fast_path.py) buys on real-size models, and what speculation achieves.

    python -m core bench-gpu --json runs/bench_gpu.json          # one GPU, < 8 minutes
    python -m core bench-gpu --sizes tiny                        # a CPU smoke run of the same code (seconds)

Random-weight models of real sizes (a Qwen2.5-VL-7B-class target, a Qwen2.5-0.5B-class drafter) are built on the
device in bf16; random weights cost exactly what trained ones do. Reported:
- one step's latency, eager (dynamic cache) vs fast path (static cache + CUDA graphs), at a `context`-token cache,
  against the bandwidth floor (weight bytes / measured copy bandwidth);
- the target's verify cost for 1..16 tokens (what a longer draft costs);
- the bound S(τ) = τ·t_target / (t_verify(γ+1) + γ·t_draft) and the speedup achieved by the real engine at that τ:
  a scripted drafter runs the real 0.5B-class forward for its cost but proposes the target's own greedy tokens, cut
  so that the mean accepted length is the τ asked for (random weights agree with nothing, so τ must be scripted);
- the embedded models (core/bench/spec.py on the same device): τ and wall-clock speedup of each drafter;
- REAP scoring of a MoE with Qwen3-30B-A3B's layer shapes, held in CPU memory and scored one layer at a time on the
  device (`reap score --layerwise`), against the same model wholly on the device: time and agreement of the scores.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from transformers import (
    AutoTokenizer,
    Qwen2_5_VLConfig,
    Qwen2_5_VLForConditionalGeneration,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen2VLImageProcessorPil,
)

from core.decoding.engine import SpeculativeEngine
from core.decoding.fast_path import FastPath
from core.decoding.session import DraftContext, PrefillRecord
from core.drafters.base import DraftProposal
from core.drafters.text import TextDrafter
from core.models.embedded import EMBEDDED_PATHS
from core.models.vlm import VisionLanguageModel

# Text-decoder sizes of the hub models (their config.json); the vision tower keeps Qwen2.5-VL's default size.
SIZES = {
    "7b": dict(hidden_size=3584, num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
               intermediate_size=18944, vocab_size=152064),
    "0.5b": dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                 intermediate_size=4864, vocab_size=151936),
    "tiny-target": dict(hidden_size=128, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                        intermediate_size=256, vocab_size=8192),
    "tiny-drafter": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                         intermediate_size=128, vocab_size=8000),
}
PAIRS = {"real": ("7b", "0.5b"), "tiny": ("tiny-target", "tiny-drafter")}
# Qwen3-30B-A3B's layer shapes (its config.json), two layers of its 48: 1.2B parameters, 2.4 GB in bf16.
MOE_SIZES = {
    "real": dict(hidden_size=2048, num_hidden_layers=2, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
                 num_experts=128, num_experts_per_tok=8, moe_intermediate_size=768, vocab_size=151936),
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                 num_experts=16, num_experts_per_tok=2, moe_intermediate_size=32, vocab_size=1024),
}


@dataclass
class GpuBenchConfig:
    sizes: str = "real"  # "real" (7B-class + 0.5B-class) or "tiny" (a CPU smoke run)
    context: int = 1024
    gamma: int = 4
    repeats: int = 30
    verify_lengths: tuple[int, ...] = (1, 2, 4, 8, 16)
    taus: tuple[float, ...] = (2.0, 3.5, 4.5)
    new_tokens: int = 96
    embedded_n: int = 12  # 0 skips the embedded models
    reap_tokens: int = 8192  # calibration tokens of the layer-at-a-time REAP part (0 skips it)
    seed: int = 0  # the random weights: an unseeded pair can settle on ids only the target has, capping tau


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _target(size: str, tokenizer, device, dtype) -> VisionLanguageModel:
    text = dict(SIZES[size], max_position_embeddings=32768, rope_parameters={"rope_type": "default", "rope_theta":
                1e6, "mrope_section": [16, 24, 24] if size == "7b" else [4, 6, 6]})
    vision = {} if size == "7b" else dict(depth=1, hidden_size=64, intermediate_size=128, num_heads=2,
                                          out_hidden_size=SIZES[size]["hidden_size"])
    config = Qwen2_5_VLConfig(text_config=text, vision_config=vision,
                              image_token_id=tokenizer.convert_tokens_to_ids("<|image_pad|>"))
    with torch.device(device):
        model = Qwen2_5_VLForConditionalGeneration(config).to(dtype)
    # The processor of this tower's own patches (the hub's 14 pixels), not the embedded target's.
    processor = Qwen2VLImageProcessorPil(patch_size=config.vision_config.patch_size,
                                         merge_size=config.vision_config.spatial_merge_size)
    return VisionLanguageModel(model.eval(), tokenizer, processor)


def _drafter(size: str, device, dtype) -> TextDrafter:
    config = Qwen2Config(**SIZES[size], max_position_embeddings=32768, tie_word_embeddings=True)
    with torch.device(device):
        return TextDrafter(Qwen2ForCausalLM(config).to(dtype).eval(), f"{size}-class")


@torch.no_grad()
def step_ms(model, fast: FastPath, context: int, tokens: int, repeats: int) -> float:
    """Median ms of one cached forward of `tokens` tokens after a `context`-token prefix (then rolled back)."""
    device = model.device
    cache = fast.new_cache(model, context + 64)
    model(input_ids=torch.randint(100, 1000, (1, context), device=device), cache=cache, use_cache=True)
    step = fast.step(model)
    ids = torch.randint(100, 1000, (1, tokens), device=device)
    times = []
    for i in range(repeats + 3):  # the first calls compile / record the graph
        _sync(device)
        t0 = time.perf_counter()
        step(input_ids=ids, cache=cache, use_cache=True)
        _sync(device)
        if i >= 3:
            times.append((time.perf_counter() - t0) * 1000)
        cache.crop(-tokens)
    return statistics.median(times)


def bandwidth_gbs(device: torch.device) -> float:
    """Measured device memory bandwidth (read + write of a large copy), GB/s."""
    n = (1 << 30) if device.type == "cuda" else (1 << 26)
    a = torch.empty(n, dtype=torch.uint8, device=device)
    b = torch.empty_like(a)
    b.copy_(a)
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(10):
        b.copy_(a)
    _sync(device)
    return 2 * n * 10 / (time.perf_counter() - t0) / 1e9


def weight_bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


class ScriptedDrafter:
    """A real drafter's forward (its cost) proposing the target's own greedy continuation, cut so that on average
    `tau - 1` drafts are accepted per round: how a drafter of that quality would fare, on random weights."""

    feature_layers = ()
    drafts_trees = False
    assistant_model = None

    def __init__(self, inner: TextDrafter, reference: list[int], tau: float, gamma: int, seed: int = 0):
        self.inner, self.reference, self.name = inner, reference, f"scripted τ={tau}"
        self.accept_p = _accept_probability(tau, gamma)
        self.rng = torch.Generator().manual_seed(seed)

    def start(self, context: DraftContext, prefill: PrefillRecord | None = None):
        run = self.inner.start(context)
        drafter = self

        class Run:
            def propose(self, context: DraftContext, gamma: int) -> DraftProposal:
                real = run.propose(context, gamma)  # the drafter's real cost (and length: it may stop early)
                done, n = len(context.generated), len(real.tokens)
                right = drafter.reference[done:done + n]
                vocab, tokens = real.probs.shape[-1], []
                for i, token in enumerate(right + [0] * (n - len(right))):
                    keep = torch.rand(1, generator=drafter.rng).item() < drafter.accept_p
                    draftable = i < len(right) and token < vocab  # ids only the target has are never drafted
                    tokens.append(token if keep and draftable else (token + 1) % vocab)
                return DraftProposal(tokens, real.probs)

        return Run()


def _accept_probability(tau: float, gamma: int) -> float:
    """Per-draft acceptance a such that E[accepted + 1] = (1 - a^(γ+1)) / (1 - a) equals tau (bisection)."""
    if not 1.0 <= tau <= gamma + 1:
        raise ValueError(f"tau must be in [1, gamma + 1], got {tau}")
    lo, hi = 0.0, 1.0
    for _ in range(60):
        a = (lo + hi) / 2
        lo, hi = (a, hi) if sum(a**k for k in range(gamma + 1)) < tau else (lo, a)
    return (lo + hi) / 2


def _speculation(target, drafter, fast: FastPath, cfg: GpuBenchConfig) -> list[dict]:
    engine = SpeculativeEngine(target, fast)
    prompt = "Describe the image. " * 8
    engine.generate(None, prompt, None, max_new_tokens=cfg.new_tokens)  # warm-up (graphs recorded)
    plain = engine.generate(None, prompt, None, max_new_tokens=cfg.new_tokens)
    t_target = plain.seconds / plain.new_tokens
    t_verify = step_ms(target.model, fast, cfg.context, cfg.gamma + 1, cfg.repeats) / 1000
    t_draft = step_ms(drafter.model, fast, cfg.context, 1, cfg.repeats) / 1000
    rows = []
    for tau in cfg.taus:
        scripted = ScriptedDrafter(drafter, plain.token_ids, tau, cfg.gamma)
        engine.generate(None, prompt, scripted, gamma=cfg.gamma, max_new_tokens=cfg.new_tokens)  # warm-up
        spec = engine.generate(None, prompt, scripted, gamma=cfg.gamma, max_new_tokens=cfg.new_tokens)
        bound = spec.tau * t_target / (t_verify + cfg.gamma * t_draft)
        speedup = plain.seconds / spec.seconds
        rows.append({"tau_asked": tau, "tau": round(spec.tau, 3), "bound": round(bound, 3),
                     "speedup": round(speedup, 3), "of_bound": round(speedup / bound, 3),
                     "lossless": spec.token_ids == plain.token_ids})
    return rows


def _reap_layerwise(cfg: GpuBenchConfig, device: torch.device, dtype: torch.dtype) -> dict:
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    from core.reap.scores import ScoreConfig, score

    torch.manual_seed(0)
    model = Qwen3MoeForCausalLM(Qwen3MoeConfig(**MOE_SIZES[cfg.sizes])).to(dtype).eval()  # in CPU memory
    seq_len = 512 if cfg.sizes == "real" else 32
    windows = torch.randint(0, model.config.vocab_size, (max(1, cfg.reap_tokens // seq_len), seq_len))
    timed = {}
    for mode in ("layerwise", "whole"):
        if mode == "whole":
            model.to(device)
        _sync(device)
        t0 = time.perf_counter()
        result, _ = score(model, windows, ScoreConfig(layerwise=str(device) if mode == "layerwise" else ""))
        _sync(device)
        timed[mode] = (time.perf_counter() - t0, torch.tensor(result["scores"]["reap"]))
    del model
    (lw_s, lw), (whole_s, whole) = timed["layerwise"], timed["whole"]
    return {"model": "Qwen3-30B-A3B layer shapes, " + str(MOE_SIZES[cfg.sizes]["num_hidden_layers"]) + " layers",
            "tokens": windows.numel(), "layerwise_s": round(lw_s, 2), "whole_on_device_s": round(whole_s, 2),
            "reap_scores_max_rel_diff": float(((lw - whole).abs() / whole.abs().clamp(min=1e-12)).max()),
            "same_ranking": bool((lw.argsort(-1) == whole.argsort(-1)).all())}


def bench(cfg: GpuBenchConfig = GpuBenchConfig()) -> dict:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    # On CPU `auto` is eager; the smoke run still takes the static-cache code path.
    fast = FastPath.auto(device) if device.type == "cuda" else FastPath(static_cache=True)
    t0 = time.time()
    tokenizer = AutoTokenizer.from_pretrained(EMBEDDED_PATHS["target"])  # any tokenizer: prompts are a few words
    target_size, drafter_size = PAIRS[cfg.sizes]
    torch.manual_seed(cfg.seed)
    target = _target(target_size, tokenizer, device, dtype)
    drafter = _drafter(drafter_size, device, dtype)
    gbs = bandwidth_gbs(device)
    steps = {}
    for name, model in (("target", target.model), ("drafter", drafter.model)):
        eager = step_ms(model, FastPath(), cfg.context, 1, cfg.repeats)
        faster = step_ms(model, fast, cfg.context, 1, cfg.repeats)
        floor = weight_bytes(model) / (gbs * 1e9) * 1000
        steps[name] = {"size": target_size if name == "target" else drafter_size, "eager_ms": round(eager, 3),
                       "fast_ms": round(faster, 3), "floor_ms": round(floor, 3), "fast_over_floor": round(faster / floor, 2),
                       "fast_speedup": round(eager / faster, 2)}
    verify = {n: round(step_ms(target.model, fast, cfg.context, n, cfg.repeats), 3) for n in cfg.verify_lengths}
    report = {
        "config": asdict(cfg), "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "fast_path": asdict(fast), "bandwidth_gbs": round(gbs, 1), "steps": steps, "verify_ms": verify,
        "speculation": _speculation(target, drafter, fast, cfg),
    }
    del target, drafter
    if cfg.embedded_n:
        from core.bench.spec import bench as bench_spec

        spec = bench_spec(["text", "massv", "dream"], n=cfg.embedded_n, gamma=cfg.gamma)
        report["embedded"] = {"ar_tokens_per_s": round(spec["ar"]["tokens_per_s"], 1)} | {
            name: {k: entry[k] for k in ("tau", "speedup", "lossless_mismatches")}
            for name, entry in spec["drafters"].items()}
    if cfg.reap_tokens:
        report["reap_layerwise"] = _reap_layerwise(cfg, device, dtype)
    report["wall_seconds"] = round(time.time() - t0, 1)
    return report


def run(args) -> None:
    cfg = GpuBenchConfig(sizes=args.sizes, embedded_n=args.embedded_n,
                         **({"context": 128, "repeats": 5, "new_tokens": 24, "reap_tokens": 256}
                            if args.sizes == "tiny" else {}))
    report = bench(cfg)
    text = json.dumps(report, indent=1)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(text)
    print(text)
