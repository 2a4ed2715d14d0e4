"""Command line: python -m core <command> ...   (python -m core --help lists the commands)."""

from __future__ import annotations

import argparse

from safetensors import SafetensorError

from core.models.embedded import EMBEDDED_PATHS
from core.reap.cli import register as register_reap
from core.training.cli import register as register_training


def _export(args) -> None:
    from core.drafters.eagle3.export import run

    run(args)


def _eval_target(args) -> None:
    from core.bench.evaluate import run

    run(args)


def _generate(args) -> None:
    from core.decoding.generate import run

    run(args)


def _bench_spec(args) -> None:
    from core.bench.spec import run

    run(args)


def _describe(args) -> None:
    from core.world.describe import run

    run(args)


def _serve(args) -> None:
    from core.serve.server import run

    run(args)


def _bench_serve(args) -> None:
    from core.serve.bench import run

    run(args)


def _bench_gpu(args) -> None:
    from core.bench.gpu import run

    run(args)


def _add_decoding_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="embedded", help="'embedded' or a local model directory")
    p.add_argument("--gamma", type=int, default=4, help="draft length per round (at most)")
    p.add_argument("--min-draft-prob", dest="min_draft_prob", type=float, default=0.0,
                   help="a chain stops after a draft its drafter gives less than this probability, and a tree "
                        "expands no such node (0 = always gamma deep)")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0, help="0 disables top-k")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-new-tokens", type=int, default=64)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m core", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    register_training(sub)

    export = sub.add_parser("export", help="write a drafter in a serving engine's format (eagle3: speculators for "
                                           "vLLM, specforge for SGLang)")
    export.add_argument("what", choices=["eagle3"])
    export.add_argument("--weights", default=str(EMBEDDED_PATHS["eagle3"]),
                        help="the drafter's directory (either format)")
    export.add_argument("--format", required=True, choices=["speculators", "specforge"])
    export.add_argument("--target", help="the target whose embeddings a SpecForge checkpoint carries (default: the "
                                         "verifier the checkpoint names)")
    export.add_argument("--out", required=True)
    export.set_defaults(func=_export)

    ev = sub.add_parser("eval-target", help="the target's accuracy: world samples, or your images (--images)")
    ev.add_argument("--model", default=str(EMBEDDED_PATHS["target"]))
    ev.add_argument("--n", type=int, default=200)
    ev.add_argument("--images", help="a folder of images (optional metadata.jsonl: file_name, prompt, answer): scored "
                                     "against their answers, else against what their pixels say")
    ev.add_argument("--prompt", help="with --images: ask every image this")
    ev.add_argument("--photos", type=int, help="N held-out images beyond the world of each part (generated, "
                                                "photographs), scored against their pixels' answers")
    ev.add_argument("--sources", type=int, help="N held-out images of every source beyond the world, each asked to "
                                                 "read and to describe: text presence, no-text precision, inventions")
    ev.add_argument("--wordings", type=int, help="N held-out images of every source, each asked wordings never trained "
                                                  "on and the trained ones: do the answers agree?")
    ev.add_argument("--source-list", dest="source_list", help="with --sources or --wordings: only these, e.g. "
                                                               "text,document")
    ev.add_argument("--json")
    ev.set_defaults(func=_eval_target)

    gen = sub.add_parser("generate", help="generate for one image and prompt, optionally with a drafter")
    gen.add_argument("--image", help="image file (omit for a text-only prompt)")
    gen.add_argument("--prompt", required=True)
    gen.add_argument("--drafter", default="none",
                     help="none, text, massv-phase1, massv, dream, eagle3; options after a colon: tree=4x32 (any "
                          "drafter), dream:keep=0.5, eagle3:weights=DIR (a speculators or SpecForge checkpoint)")
    gen.add_argument("--json", action="store_true", help="print one JSON object")
    _add_decoding_options(gen)
    gen.set_defaults(func=_generate)

    desc = sub.add_parser("describe", help="what an image's pixels say: colour layout, region and main colours")
    desc.add_argument("image")
    desc.add_argument("--json", action="store_true", help="print one JSON object {question: answer}")
    desc.set_defaults(func=_describe)

    bench = sub.add_parser("bench-spec", help="tau / acceptance / speedup of drafters on held-out world samples")
    bench.add_argument("--drafters", default="text",
                       help="comma-separated drafters; a drafter's options follow a colon: text,dream:keep=0.5,tree=4x32")
    bench.add_argument("--n", type=int, default=40)
    bench.add_argument("--tasks", help="comma-separated task families (default: all)")
    bench.add_argument("--repeats", type=int, default=1,
                       help="run each generation this many times and time its fastest (filters machine noise)")
    bench.add_argument("--images", help="your own images instead of world samples: a folder, optionally with a "
                                        "metadata.jsonl (file_name, prompt); the first --n of them")
    bench.add_argument("--prompt", help="with --images: ask every image this")
    bench.add_argument("--json", help="write the report here too")
    _add_decoding_options(bench)
    bench.set_defaults(func=_bench_spec)

    gpu = sub.add_parser("bench-gpu", help="eager vs fast path step latency, verify cost, S(tau) bound vs achieved")
    gpu.add_argument("--sizes", default="real", choices=["real", "tiny"],
                     help="real: 7B-class target + 0.5B-class drafter (a GPU); tiny: a CPU smoke run")
    gpu.add_argument("--embedded-n", dest="embedded_n", type=int, default=12,
                     help="held-out samples for the embedded models' tau and speedup (0 skips them)")
    gpu.add_argument("--json", help="write the report here too")
    gpu.set_defaults(func=_bench_gpu)

    serve = sub.add_parser("serve", help="vLLM's OpenAI-compatible server for the target (with its EAGLE-3 drafter) or a "
                                         "REAP-pruned MoE (install: docs/serving.md)")
    serve.add_argument("--target", default="embedded", help="'embedded' or a model directory")
    serve.add_argument("--drafter", default="eagle3", help="eagle3 or none (vLLM serves EAGLE-3 drafters only)")
    serve.add_argument("--weights", help="an EAGLE-3 checkpoint, speculators or SpecForge (default: the target's eagle3)")
    serve.add_argument("--model", help="serve this MoE causal LM directory instead (`reap prune --out DIR`)")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--tensor-parallel-size", dest="tensor_parallel_size", type=int, default=1)
    serve.add_argument("--gamma", type=int, default=4, help="speculative tokens per step")
    serve.add_argument("--compile", action="store_true", help="vLLM's torch.compile (slower start)")
    serve.set_defaults(func=_serve)

    bs = sub.add_parser("bench-serve", help="vLLM plain and EAGLE-3 at several concurrencies, and the engine, on the "
                                            "same requests")
    bs.add_argument("--concurrency", default="1,4,16", help="comma-separated concurrent requests")
    bs.add_argument("--n", type=int, help="requests: world samples and photographs, half each (default: 4x the "
                                          "largest concurrency, so its batch stays full until the last requests)")
    bs.add_argument("--max-new-tokens", dest="max_new_tokens", type=int, default=64)
    bs.add_argument("--gamma", type=int, default=4)
    bs.add_argument("--port", type=int, default=8400)
    bs.add_argument("--json", help="write the report here too")
    bs.set_defaults(func=_bench_serve)

    register_reap(sub)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    args.func(args)


def cli(argv: list[str] | None = None) -> None:
    """main() as a program: bad input (ValueError) or a file that cannot be read (a missing or corrupt checkpoint)
    exits with status 1 and one line, not a traceback."""
    try:
        main(argv)
    except (ValueError, OSError, SafetensorError) as exc:
        message = str(exc).strip() or type(exc).__name__
        raise SystemExit(f"error: {message.splitlines()[0]}") from None


if __name__ == "__main__":
    cli()
