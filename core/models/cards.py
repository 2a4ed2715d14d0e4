"""Hugging Face model cards: `model_card(directory)` reads a model directory (its config, training_log.json or
training_runs.json, recipe.yaml) and the benchmarks under assets/results/, and returns a `huggingface_hub.ModelCard`:
YAML metadata (license, library_name, pipeline_tag, architectures, tags), then what the model is, how it was
trained, its evaluation figures, its input contract and its limitations, so the directory can be pushed to the hub
as it stands. Every figure is read from the JSON that holds it, and each table names that file.

    python -m core.models.cards        # regenerates every assets/models/*/README.md

`python -m core export eagle3 --out OUT` and `python -m core reap prune|merge --out OUT` write one into OUT too;
tests/test_cards.py checks that every shipped card is what this module writes now.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import MISSING, dataclass, fields, replace
from functools import lru_cache
from pathlib import Path

import yaml
from huggingface_hub import ModelCard, ModelCardData

from core.models.loading import REPO, recorded, recorded_path

MODELS = REPO / "assets" / "models"
RESULTS = REPO / "assets" / "results"
CARD_FILE = "README.md"
LICENSE = "apache-2.0"
NO_FIGURE = "–"
# The speculative benchmarks every shipped drafter has a column in, and what each ran on.
DRAFTER_BENCHES = ("bench_forms_world.json", "bench_forms_photos.json", "bench_forms_views.json")
BENCHED_DRAFTERS = {"text-drafter": "text", "massv": "massv", "dream": "dream", "eagle3": "eagle3"}  # dir: column
# The held-out evaluations of the target beyond its world: eval_target_photos.json's parts, then two folders.
TARGET_IMAGE_EVALS = ("eval_target_heldout_photos.json", "eval_target_heldout_views.json",
                      "eval_target_heldout_wallpapers.json")


@dataclass(frozen=True)
class Kind:
    """What a model directory holds, and what the hub should know of it."""

    name: str  # the drafter kind the registry loads it as (text, massv, dream, eagle3), or target / moe
    title: str
    library_name: str  # what loads it
    pipeline_tag: str
    tags: tuple[str, ...]
    summary: str
    train: str = ""  # `python -m core train WHAT`; empty: not trained by this project's trainers


KINDS = {
    "target": Kind(
        "target", "Speculum's embedded target", "transformers", "image-text-to-text",
        ("vision-language-model", "speculative-decoding", "tiny"),
        "A toy-size vision-language model of the Qwen2.5-VL architecture, trained from scratch on a procedural "
        "world of small square scenes (core/world/scenes.py) and on images beyond it (photo-like images, rendered text, "
        "photograph crops, collages: core/world/photos.py). It is the target the embedded drafters speed up, so that "
        "every code path of Speculum runs offline, on a CPU, in seconds. These are not Qwen's weights.", "target"),
    "text": Kind(
        "text", "Speculum's text-only drafter", "transformers", "text-generation",
        ("draft-model", "speculative-decoding", "tiny"),
        "A one-layer Qwen2 language model with the target's tokenizer that drafts tokens for the embedded target from "
        "the text alone (it never sees the image), trained on the ground-truth answers of the training mix.",
        "text-drafter"),
    "massv": Kind(
        "massv", "Speculum's MASSV drafter", "transformers", "text-generation",
        ("draft-model", "speculative-decoding", "massv", "multimodal", "tiny"),
        "A MASSV drafter (arXiv 2505.10526): the text drafter plus a projector (`projector.safetensors`, an MLP) that "
        "feeds it the target's own visual features, so it drafts with the image in view at no second vision "
        "encoder. `config.json` and `model.safetensors` are the Qwen2 language model transformers loads; the "
        "projector loads with Speculum (`core/drafters/massv.py`).", "massv"),
    "dream": Kind(
        "dream", "Speculum's DREAM drafter", "speculum", "text-generation",
        ("draft-model", "speculative-decoding", "dream", "multimodal", "tiny"),
        "A DREAM drafter: a cross-attention adapter at the target's width over the target's own hidden states "
        "(an intermediate layer and the last), with the target's embeddings and the rows of its LM head for a "
        "small draft vocabulary, reading only part of the visual tokens. `adapter.safetensors` and "
        "`dream_config.json` load with Speculum (`core/drafters/dream/`), which lends it the target's head.", "dream"),
    "eagle3": Kind(
        "eagle3", "Speculum's EAGLE-3 drafter", "speculators", "text-generation",
        ("draft-model", "speculative-decoding", "eagle3", "speculators", "vllm", "tiny"),
        "An EAGLE-3 drafter in vLLM's speculators format (`speculators_model_type: eagle3`): one Llama decoder "
        "layer over a fusion (`fc`) of the target's low, middle and high hidden states, its LM head over a small "
        "draft vocabulary (`d2t` / `t2d`), and the target's token embeddings.", "eagle3"),
    "eagle3-specforge": Kind(
        "eagle3", "An EAGLE-3 drafter in SpecForge's format", "sglang", "text-generation",
        ("draft-model", "speculative-decoding", "eagle3", "specforge", "sglang", "tiny"),
        "An EAGLE-3 drafter in SpecForge's / SGLang's format (`LlamaForCausalLMEagle3`, a flat Llama config with "
        "`draft_vocab_size` and `target_hidden_size`, weights `midlayer.*`): one Llama decoder layer over a fusion of "
        "the target's low, middle and high hidden states."),
    "moe": Kind(
        "moe", "Speculum's embedded MoE", "transformers", "text-generation",
        ("moe", "reap", "expert-pruning", "tiny"),
        "A toy-size Qwen3-MoE language model trained from scratch on three synthetic domains (code, prose, math: "
        "core/reap/data.py), the model the REAP tab and `python -m core reap` prune and merge experts of.", "moe"),
    "moe-reduced": Kind(
        "moe-reduced", "A MoE with experts removed", "transformers", "text-generation", ("moe", "reap", "expert-pruning"),
        "A mixture-of-experts language model with some of its routed experts removed (pruned or merged) by "
        "Speculum's REAP tools (core/reap/)."),
}


def kind_of(directory: Path) -> Kind:
    """Tells a model directory's kind from its files."""
    config = _json(directory / "config.json") or {}
    if (directory / "recipe.yaml").is_file():
        kind = "moe-reduced"
    elif config.get("speculators_model_type") == "eagle3":
        kind = "eagle3"
    elif any("Eagle3" in name for name in config.get("architectures", [])):
        kind = "eagle3-specforge"
    elif (directory / "dream_config.json").is_file():
        kind = "dream"
    elif (directory / "massv_config.json").is_file():
        kind = "massv"
    else:
        kind = {"qwen2_5_vl": "target", "qwen2": "text", "qwen3_moe": "moe"}.get(config.get("model_type"))
    if kind is None:
        raise ValueError(f"{directory}: not a model directory this project writes (no card for it)")
    if kind == "moe-reduced" and config.get("layer_experts"):
        return replace(KINDS[kind], library_name="speculum")  # uneven layers: only Speculum's load_model reads it
    return KINDS[kind]


def model_card(directory: str | Path, name: str = "", source: str | Path | None = None) -> ModelCard:
    """The card of the model in `directory`. `name`: how the card names it (its title, and the path its loading
    snippets read), default the directory as `recorded_path` names it; `source`: the directory it was exported
    from, whose training logs tell how it was trained and whose benchmarks it shares."""
    directory = Path(directory)
    kind, logs = kind_of(directory), Path(source) if source else directory
    trained_as = kind_of(logs).train if (logs / "config.json").is_file() else kind.train
    name = name or recorded_path(directory.resolve())
    config = _json(directory / "config.json") or {}
    data = ModelCardData(license=LICENSE, library_name=kind.library_name, pipeline_tag=kind.pipeline_tag,
                         tags=sorted({"speculum", *kind.tags, *filter(None, [config.get("model_type")])}),
                         architectures=config.get("architectures") or _adapter_architecture(directory))
    sections = {
        "What it is": kind.summary + _facts(directory, config) + _size(directory),
        "How to use it": _usage(kind, name, directory),
        "How it was trained": _training(kind, trained_as, logs, directory, source),
        "Evaluation": _evaluation(kind, logs),
        "Input contract": _input_contract(kind, config),
        "Limitations": _limitations(kind, config),
    }
    body = "\n\n".join(f"## {title}\n\n{text}" for title, text in sections.items() if text)
    return ModelCard(f"---\n{data.to_yaml()}\n---\n\n# {Path(name).name}: {kind.title}\n\n{body}\n")


def _adapter_architecture(directory: Path) -> list[str] | None:
    """A DREAM directory has no config.json: its architecture is the adapter class that reads dream_config.json."""
    if not (directory / "dream_config.json").is_file():
        return None
    from core.drafters.dream.adapter import DreamAdapter

    return [DreamAdapter.__name__]


def write_card(directory: str | Path, name: str = "", source: str | Path | None = None) -> Path:
    path = Path(directory) / CARD_FILE
    model_card(directory, name, source).save(path)
    return path


def shipped_model_dirs() -> list[Path]:
    return sorted(p for p in MODELS.iterdir() if p.is_dir())


# --- sections


def _facts(directory: Path, config: dict) -> str:
    """What a drafter's own config says of it: MASSV's phase, DREAM's and EAGLE-3's draft vocabulary and inputs."""
    massv = _json(directory / "massv_config.json") or {}
    if massv:
        return {1: " This is phase 1: the projector alone aligned on ground-truth answers, the language model frozen.",
                2: " This is phase 2: language model and projector trained on the target's own answers."}[massv["phase"]]
    dream = (_json(directory / "dream_config.json") or {}).get("adapter")
    if dream:
        return (f" Draft vocabulary: {dream['draft_vocab']} tokens; visual tokens kept: {dream['keep_ratio']:.0%}; "
                f"intermediate layer: `{dream['intermediate_layer']}` (dream_config.json).")
    if "draft_vocab_size" in config:
        layers = config.get("eagle_aux_hidden_state_layer_ids") or \
            [i + 1 for i in (config.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids", [])]
        read = f"; the target's hidden states entering layers {', '.join(map(str, layers))}" if layers else ""
        return f" Draft vocabulary: {config['draft_vocab_size']} tokens{read}."
    return ""


def _size(directory: Path) -> str:
    weights = sorted(directory.glob("*.safetensors"))
    megabytes = sum(p.stat().st_size for p in weights) / 1e6
    return f"\n\nWeights: {', '.join(f'`{p.name}`' for p in weights)}, {megabytes:.1f} MB."


def _usage(kind: Kind, path: str, directory: Path) -> str:
    if kind.name == "target":
        side = _json(directory / "config.json")["image_side"]
        return ("```python\nfrom core.models.vlm import VisionLanguageModel\n\n"
                f'vlm = VisionLanguageModel.from_pretrained("{path}")   # squares every image (input contract)\n```\n\n'
                f"`Qwen2_5_VLForConditionalGeneration.from_pretrained` loads it too; give it {side}x{side} images then.")
    if kind.name in ("moe", "moe-reduced"):
        if kind.library_name == "speculum":
            return ("Each layer keeps its own number of experts, which a stock transformers config cannot express, "
                    "so it loads with Speculum:\n\n```python\nfrom core.reap.checkpoint import load_model\n\n"
                    f'model, tokenizer = load_model("{path}")\n```')
        return ("```python\nfrom transformers import AutoModelForCausalLM, AutoTokenizer\n\n"
                f'model = AutoModelForCausalLM.from_pretrained("{path}")\n'
                f'tokenizer = AutoTokenizer.from_pretrained("{path}")\n```')
    if kind.library_name == "sglang":
        return (f"SGLang serves it as the target's EAGLE-3 drafter (`--speculative-algorithm EAGLE3 "
                f"--speculative-draft-model-path {path}`); Speculum reads it too, as below.\n\n" + _engine_usage(path))
    serve = ""
    if kind.library_name == "speculators":
        config = _json(directory / "config.json")
        tokens = config["speculators_config"]["proposal_methods"][0]["speculative_tokens"]
        serve = (f"vLLM serves it beside its target: `--speculative-config '{{\"method\": \"eagle3\", \"model\": "
                 f"\"{path}\", \"num_speculative_tokens\": {tokens}}}'`.\n\n")
    return serve + _engine_usage(path, kind.name)


def _engine_usage(path: str, drafter: str = "eagle3") -> str:
    return ("Speculative decoding with the embedded target (lossless: the target checks every drafted token):\n\n"
            "```python\nfrom core.decoding.engine import SpeculativeEngine\n"
            "from core.models.registry import load_drafter, load_target\n\n"
            'engine = SpeculativeEngine(load_target("embedded"))\n'
            f'drafter = load_drafter("{drafter}:weights={path}")\n'
            'result = engine.generate(image, "Describe the image.", drafter, gamma=8)\n```')


def _training(kind: Kind, trained_as: str, logs: Path, directory: Path, source: str | Path | None) -> str:
    if (directory / "recipe.yaml").is_file():
        return _reduction(yaml.safe_load((directory / "recipe.yaml").read_text()))
    exported = ""
    if source is not None:
        layout = "specforge" if kind.library_name == "sglang" else "speculators"
        exported = (f"Exported from `{recorded_path(source)}` by `python -m core export eagle3 --weights "
                    f"{recorded_path(source)} --format {layout}` (the same weights).\n\n")
    if (logs / "training_runs.json").is_file():
        return exported + _target_runs(_json(logs / "training_runs.json"))
    log = _json(logs / "training_log.json")
    if log is None or not trained_as:
        return exported.strip()
    seconds = log["log"][-1]["seconds"] if log.get("log") else None
    steps = log["config"].get("steps")
    lines = [f"```\n{train_command(trained_as, log['config'])}\n```",
             f"{steps} steps in {_minutes(seconds)} (training_log.json: the full config and every logged step's "
             "losses)."]
    if "extraction_seconds" in log:
        lines.append(f"Of that, {_minutes(log['extraction_seconds'])} extracting the target's features of its answers.")
    data = log.get("data") or log["config"].get("mix")
    if data:
        lines.append(f"Data: `{data}` (core/world/mix.py), {_distillation(log, logs)}")
    if "final" in log:
        final = ", ".join(f"{d} perplexity {v['ppl']:.2f}, accuracy {v['acc']:.2f}" for d, v in log["final"].items())
        lines.append(f"Held-out at the end ({log['chance_ppl']} is a uniform guess's perplexity): {final}.")
    return exported + "\n\n".join(lines)


def _distillation(log: dict, directory: Path) -> str:
    distilled = log.get("distillation") or (_json(directory / "dream_config.json") or {}).get("distillation") or \
        ((_json(directory / "config.json") or {}).get("speculum") or {}).get("distillation")
    if not distilled:
        return "the ground-truth answers."
    how = "greedy" if not distilled["temperature"] else f"sampled at temperature {distilled['temperature']}"
    made, shipped = distilled["target_fingerprint"], _shipped_target_fingerprint()
    then = "" if made == shipped else (
        f" as it was then (weights fingerprint `{made}`; the shipped target's is `{shipped}`, from later runs, which "
        "the target's training_runs.json lists; this drafter was not retrained for them, and its figures below are "
        "measured with the shipped target)")
    return (f"the target's own {how} answers to {distilled['prompts']} training prompts, up to "
            f"{distilled['max_new_tokens']} tokens (self-distillation; they agree with the ground truth on "
            f"{_f(distilled['agreement_with_ground_truth'])} of them), from `{distilled['target']}`{then}.")


@lru_cache(maxsize=1)
def _shipped_target_fingerprint() -> str:
    from core.models.vlm import VisionLanguageModel
    from core.training.self_distill import fingerprint

    return fingerprint(VisionLanguageModel.from_pretrained(MODELS / "target"))


def train_command(what: str, config: dict) -> str:
    """`python -m core train WHAT` with every option whose recorded value differs from its default now, so the
    command reproduces the run (options the command line has no flag for stay in training_log.json)."""
    from core.training.cli import register

    parser, defaults = argparse.ArgumentParser(), _train_defaults(what)
    register(parser.add_subparsers())
    words = ["python", "-m", "core", "train", what]
    for key, value in config.items():
        if key not in defaults or recorded(defaults[key]) == value or value in (None, "", False):
            continue
        option = ["--" + key.replace("_", "-")] + ([] if value is True else [str(value)])
        if not parser.parse_known_args(["train", what, *option])[1]:
            words += option
    return " ".join(words)


def _train_defaults(what: str) -> dict:
    from core.reap.train_moe import MoeTrainConfig
    from core.training.dream import DreamTrainConfig
    from core.training.eagle3 import Eagle3TrainConfig
    from core.training.massv import MassvTrainConfig
    from core.training.target import TargetTrainConfig
    from core.training.text_drafter import DrafterTrainConfig

    config = {"target": TargetTrainConfig, "text-drafter": DrafterTrainConfig, "massv": MassvTrainConfig,
              "dream": DreamTrainConfig, "eagle3": Eagle3TrainConfig, "moe": MoeTrainConfig}[what]
    return {f.name: f.default for f in fields(config) if f.default is not MISSING}


def _target_runs(runs: dict) -> str:
    rows = [f"| {r['run']} | `{r['command']}` | {_minutes(r.get('seconds'))} |" for r in runs["runs"]]
    total = sum(r.get("seconds") or 0 for r in runs["runs"])
    return (f"{runs['note']}\n\n| run | command | time |\n|---|---|---|\n" + "\n".join(rows) +
            f"\n\n{len(runs['runs'])} runs, {_minutes(total)} in all (training_runs.json: each run's config and "
            "evaluations; training_log.json: the last training run's full log).")


def _reduction(recipe: dict) -> str:
    after = recipe["experts_after"]
    counts = f"{min(after)}-{max(after)} experts per layer (a global ranking)" if isinstance(after, list) else \
        f"{after} experts per layer"
    protected = f", {recipe['protected_super_experts']} super experts protected" \
        if recipe.get("protected_super_experts") else ""
    verb = "merge" if recipe.get("merged_groups") is not None else "prune"
    return (f"`{recipe['source_model']}` with {recipe['ratio']:.0%} of its routed experts removed by "
            f"**{recipe['method']}** (`python -m core reap {verb} --method {recipe['method']} --ratio "
            f"{recipe['ratio']}`), calibrated on `{recipe['calibration']}` ({recipe['calibration_tokens']} tokens): "
            f"{recipe['experts_before']} -> {counts}, top-k {recipe['top_k']} unchanged{protected}. The experts each "
            "layer keeps are listed in `recipe.yaml`.")


def _evaluation(kind: Kind, directory: Path) -> str:
    if directory.resolve().parent != MODELS:  # the benchmarks measured the shipped models, and what is exported of them
        return ""
    if kind.name == "target":
        return _target_evaluation()
    if kind.name == "moe":
        return _moe_evaluation()
    column = BENCHED_DRAFTERS.get(directory.name)
    if column is None:
        return ("Not benchmarked on its own: it is the starting point of the shipped MASSV drafter "
                "(`assets/models/massv`, its phase 2).")
    benches = [(file, _json(RESULTS / file)) for file in DRAFTER_BENCHES]
    rows = []
    for file, bench in benches:
        entry, cfg = bench["drafters"][column], bench["config"]
        images = f"`{cfg['images']}`, “{cfg['prompt']}”" if cfg["images"] else f"{cfg['n']} held-out world scenes"
        settings = f"γ {cfg['gamma']}, {cfg['max_new_tokens']} new tokens" + (
            f", min draft prob {cfg['min_draft_prob']}" if cfg["min_draft_prob"] else "")
        rows.append(f"| {images} | {settings} | {_f(entry['tau'])} | {_f(entry['acceptance_rate'])} | {_f(entry['speedup'])}x | "
                    f"{entry['lossless_mismatches']} | `assets/results/{file}` |")
    cfg = benches[0][1]["config"]
    return (f"Speculative decoding with the embedded target, greedy, fastest of {cfg['repeats']} repeats, on "
            f"{cfg['torch_threads']} CPU threads (`python -m core bench-spec`). τ: tokens per target forward; "
            "speedup: plain decoding's wall time over this drafter's on the same requests.\n\n"
            "| images | settings | τ | acceptance | speedup | outputs unlike plain decoding | from |\n"
            "|---|---|---|---|---|---|---|\n"
            + "\n".join(rows))


def _target_evaluation() -> str:
    world = _json(RESULTS / "eval_target.json")
    families = ", ".join(f"{task} {_f(v)}" for task, v in world["per_task"].items())
    beyond = _json(RESULTS / "eval_target_photos.json")
    rows = [f"| {part}, {r['images']} held-out | {_f(r['exact_match'])} | {_f(r['region_agreement'])} | "
            f"{_f(r['header_exact'])} | {_f(r['text_exact'])} | {_f(r['no_text_precision'])} | "
            "`assets/results/eval_target_photos.json` |" for part, r in beyond.items() if isinstance(r, dict)]
    for file in TARGET_IMAGE_EVALS:
        r = _json(RESULTS / file)
        rows.append(f"| `{r['source'].removeprefix('data-dir:')}`, {r['images']} images, “{r['rows'][0]['prompt']}” | "
                    f"{_f(r['exact_match'])} | {_f(r['region_agreement'])} | {_f(r['header_exact'])} | "
                    f"{_f(r['text_exact'])} | {_f(r['no_text_precision'])} | `assets/results/{file}` |")
    sources = _json(RESULTS / "eval_target_sources.json")
    never = [f"| {name} | {_f(r['text_presence_recall'])} | {_f(r['no_text_precision'])} | {_f(r['invented_rate'])} |"
             for name, r in [*sources["per_source"].items(), ("overall", sources["overall"])] if "images" in r]
    return (f"Held-out world scenes (`python -m core eval-target --n {world['n']}`, "
            f"`assets/results/eval_target.json`): exact match **{_f(world['exact_match'], 3)}**; {families}.\n\n"
            f"Never inventing (`python -m core eval-target --sources {sources['n_per_source']}`, "
            "`assets/results/eval_target_sources.json`: that many held-out images of every source, each asked to read "
            "and to describe): text presence recall (an image with text not answered “There is no text.”), no-text "
            "precision, and the share of answers that invent (words it did not read, no text where there is some, a "
            "world caption for an image that is not a world scene).\n\n"
            "| source | text presence recall | no-text precision | invented |\n|---|---|---|---|\n"
            + "\n".join(never) + "\n\n"
            "Beyond the world (`python -m core eval-target --photos N` and `--images DIR`): exact match of the whole "
            "answer, region agreement (share of a layout's nine regions named right), header exact (its first "
            "sentence: tone and main colours), rendered text read exactly, and no-text precision (“There is no "
            "text.” where there is none).\n\n"
            "| images | exact | region agreement | header exact | text exact | no-text precision | from |\n"
            "|---|---|---|---|---|---|---|\n" + "\n".join(rows))


def _moe_evaluation() -> str:
    bench = _json(RESULTS / "reap_bench.json")
    domains = list(bench["baseline"])
    head = " | ".join(f"{d} ppl / acc" for d in domains)
    seen, rows = set(), [f"| unpruned | 0 | " + " | ".join(_quality(bench["baseline"][d]) for d in domains) + " |"]
    for r in bench["results"]:
        key = (r["method"], r["ratio"])
        if r["calibration"] == bench["calibration"] and not r.get("protect") and key not in seen:
            seen.add(key)
            rows.append(f"| {r['method']} | {r['ratio']:.0%} | " +
                        " | ".join(_quality(r["quality"][d]) for d in domains) + " |")
    return (f"Held-out perplexity and next-token accuracy per domain, experts removed per layer after scoring on "
            f"`{bench['calibration']}` calibration text (`python -m core bench-reap`, "
            "`assets/results/reap_bench.json`):\n\n"
            f"| method | removed | {head} |\n|---|---|" + "---|" * len(domains) + "\n" + "\n".join(rows))


def _quality(q: dict) -> str:
    return f"{q['ppl']:.2f} / {q['acc']:.2f}"


def _input_contract(kind: Kind, config: dict) -> str:
    if kind.name == "target":
        vision = config["vision_config"]
        side = config["image_side"]
        tokens = side // (vision["patch_size"] * vision["spatial_merge_size"])
        return (f"Every image, whatever its size and aspect ratio, is seen as a {side}x{side} square: "
                f"`image_side: {side}` in `config.json`, and `VisionLanguageModel.pixels` (core/models/vlm.py) resizes "
                f"each image to it (box filter) before the processor. Its {tokens}x{tokens} merged visual tokens "
                f"({vision['patch_size']}-pixel patches, merged {vision['spatial_merge_size']}x"
                f"{vision['spatial_merge_size']}) are then the {tokens}x{tokens} regions a colour layout names. A plain "
                "transformers processor keeps the aspect ratio instead; resize the image yourself first. Prompts go "
                "through its chat template (`chat_template.jinja`).")
    if kind.name == "moe":
        return (f"Text only, with its own {config['vocab_size']}-token tokenizer; it learned the three domains in the "
                "forms core/reap/data.py writes them.")
    if kind.name == "moe-reduced":
        return ("Its source model's: the same tokenizer and top-k routing, over fewer experts (the router's rows of "
                "the removed ones are cut with them).")
    reads = {"text": "the prompt's text only", "massv": "the prompt and the target's visual features of the image",
             "dream": "the target's hidden states (an intermediate layer and the last) of the request",
             "eagle3": "the target's low, middle and high hidden states of the request"}[kind.name]
    return (f"A drafter of the embedded target (`assets/models/target`): it shares its tokenizer and reads {reads}, "
            "so it drafts for that target only. The target verifies every drafted token, so a drafter changes how "
            "fast an answer comes, never the answer.")


def _limitations(kind: Kind, config: dict) -> str:
    toy = ("Toy-size, trained on a CPU for what this project measures: it knows nothing outside its "
           "training data and is no general model.")
    if kind.name == "moe-reduced":
        return ("What its source model cannot do, and more: quality falls as the ratio of removed experts rises, most "
                "on what the calibration text did not cover. Measure it on your own tasks before use "
                "(`python -m core bench-reap` on the embedded MoE; the REAP tab).")
    if kind.name != "target":
        return toy
    from core.world import photos, scenes  # the tasks it learned, named where they are defined

    beyond = _json(RESULTS / "eval_target_photos.json")["generated"]
    world = _json(RESULTS / "eval_target.json")["per_task"]
    sources = _json(RESULTS / "eval_target_sources.json")
    return "\n".join([
        f"- {toy}",
        f"- It answers only the prompts it learned: on world scenes the {' / '.join(scenes.TASKS)} questions; on any "
        f"image the {', '.join(photos.TASKS)} questions in their paraphrases (core/world/photos.py), typed in lower "
        "or upper case or without the closing mark. Other prompts get no reliable answer.",
        "- A question the pixels cannot answer (what animal, where, how many people) gets “I can only describe "
        "colours and layout: ...” and the layout.",
        "- It does not read text outside its procedural world: asked to, it answers “There is text here, but I "
        "cannot read it.” or “There is no text.”. It tells dense text on a light page (documents, screenshots) "
        "from a page without any, but misses some lines of text on a busy photograph or a sign and then says "
        f"there is none (text presence recall {_f(sources['overall']['text_presence_recall'])} over all sources), "
        "and says there is text in some images without any, digital artworks most (no-text precision "
        f"{_f(sources['overall']['no_text_precision'])} over all sources: "
        "`assets/results/eval_target_sources.json`). The world's OCR (one character per "
        f"{config['vision_config']['patch_size']}-pixel patch) reads {_f(world['ocr'])} of held-out world scenes "
        "(`assets/results/eval_target.json`).",
        f"- A layout's first sentence (tone and main colours) is its weakest part: header exact "
        f"{_f(beyond['header_exact'])} on generated images, where the nine regions agree at "
        f"{_f(beyond['region_agreement'])}.",
    ])


# --- helpers


def _json(path: Path):
    return json.loads(path.read_text()) if path.is_file() else None


def _f(value, decimals: int = 2) -> str:
    return NO_FIGURE if value is None else f"{value:.{decimals}f}"


def _minutes(seconds) -> str:
    return NO_FIGURE if seconds is None else f"{round(seconds / 60)} min"


def main() -> None:
    argparse.ArgumentParser(prog="python -m core.models.cards", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    for directory in shipped_model_dirs():
        print(recorded_path(write_card(directory)))


if __name__ == "__main__":
    main()
