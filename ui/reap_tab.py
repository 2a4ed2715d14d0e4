"""Tab "REAP pruning": score a MoE's experts on a calibration set (a domain or a weighted mixture) once, then prune
(or merge) any share of them, per layer or by one global ranking, optionally protecting the super experts, and see
which experts go, what it costs per domain, how every method compares across ratios, the experts' output subspace
and a generation before and after; download the result. Every number comes from core/reap/lab.py.

Moving the ratio slider recomputes on release from cached scores: the heatmaps and quality arrive first, then the
curve, subspace and samples.
"""

from __future__ import annotations

import html
import tempfile
from pathlib import Path

import gradio as gr

from core.models.presets import EMBEDDED, MOE_PRESETS
from core.reap import data
from core.reap.lab import ALL_METHODS, LabConfig, lab_for
from core.reap.prune import Selection
from core.reap.results import ExpertView, PruneView, Sample, model_info
from ui import models
from ui.inputs import user_errors, whole
from ui.reap_charts import curve_figure, heatmaps, placeholder, subspace_figure

TITLE = "REAP pruning"
METHOD_LABELS = {
    "reap": "REAP (router-weighted expert activation)",
    "ean": "EAN (expert activation norm)",
    "frequency": "frequency (tokens routed)",
    "weighted_frequency": "weighted frequency (sum of gates)",
    "random": "random (sanity baseline)",
    "hc-smoe": "HC-SMoE (merge: clusters of expert outputs)",
    "m-smoe": "M-SMoE (merge into the most used experts)",
}
CALIBRATION_LABELS = {"mixed": "mixed (all three)", "code": "code", "prose": "prose", "math": "math",
                      "code:0.5,math:0.5": "code + math, half each"}
SCOPE_LABELS = {"layer": "the same count in every layer", "global": "one ranking across layers (non-uniform)"}
QUALITY_HEADERS = ["domain", "perplexity unpruned", "perplexity pruned", "Δ perplexity", "accuracy unpruned",
                   "accuracy pruned"]
SAMPLE_HEADERS = ["domain", "prompt (its end)", "unpruned", "pruned"]
TOKEN_HEADERS = ["token", "times routed here", "occurrences in context"]
# A click on either heatmap picks that cell's layer and expert for the inspector (the inputs then fire `change`).
CLICK_TO_INSPECT = """() => { setTimeout(() => {
  const plot = document.querySelector('#reap-heatmap .js-plotly-plot');
  if (!plot || plot.speculumClick) return;
  plot.speculumClick = true;
  const put = (id, value) => {
    const input = document.querySelector(`#${id} input`);
    Object.getOwnPropertyDescriptor(HTMLInputElement.prototype, 'value').set.call(input, value);
    input.dispatchEvent(new Event('input', {bubbles: true}));
    input.dispatchEvent(new Event('blur', {bubbles: true}));
  };
  plot.on('plotly_click', event => {
    const point = event.points[0];
    put('reap-inspect-layer', point.y);
    put('reap-inspect-expert', point.x);
  });
}, 200); }"""
PROMPT_TAIL = 60
EXPORT_DIR = Path(tempfile.gettempdir()) / "speculum-reap"  # Gradio serves files from the system temp dir
INTRO = ("Scores are computed once per model and calibration set (seconds, with progress) and cached on disk; "
         "the slider then re-prunes from them. Quality is measured on a small held-out set per domain.")


def _summary(view: PruneView) -> str:
    gone = "merged away" if any(view.merged_into) else "removed"
    timing = "from the cache" if view.quality_cached else "measured"
    if view.scope == "global":
        counts = ", ".join(str(len(k)) for k in view.kept)
        removal = (f"{view.removed} of {view.experts} experts per layer {gone} on average by one ranking across "
                   f"layers (kept per layer: {counts})")
    else:
        removal = f"{view.removed} of {view.experts} experts per layer {gone}, {view.experts - view.removed} left"
    protected = sum(map(len, view.protected))
    guard = f"; {protected} super experts protected" if protected else ""
    return (f"**{METHOD_LABELS[view.method]}**, ratio {view.ratio:.1%}: {removal} (top-{view.top_k}){guard}; "
            f"calibration *{view.calibration}*. Quality {timing}, {view.seconds:.2f} s in all.")


def _selection(scope, protect) -> Selection:
    """The app's two selection inputs as core's Selection (a whole-number float from the API counts as whole)."""
    if isinstance(protect, float) and protect.is_integer():
        protect = int(protect)
    return Selection(scope, protect)


def _quality_rows(view: PruneView) -> list[list]:
    """Perplexity to 3 significant figures, accuracy as the count of items it is (5 / 12, not 0.4167)."""
    n = view.quality_items
    solved = lambda acc: f"{round(acc * n)} / {n}"  # noqa: E731
    return [[d, f"{base['ppl']:.3g}", f"{view.quality[d]['ppl']:.3g}", f"{view.quality[d]['ppl'] / base['ppl'] - 1:+.1%}",
             solved(base["acc"]), solved(view.quality[d]["acc"])] for d, base in view.baseline.items()]


def _inspector_html(e: ExpertView) -> str:
    shares = ", ".join(f"{part} {share:.0%}" for part, share in e.domain_share.items())
    return (f"<div class='inspect-head'><b>Layer {e.layer}, expert {e.expert}</b> ({html.escape(e.layer_name)}): "
            f"<span class='inspect-fate'>{html.escape(e.fate)}</span> by {html.escape(METHOD_LABELS[e.method])}</div>"
            "<div class='stats'>" + "".join(
                f"<div class='stat'><div class='stat-value'>{value}</div><div class='stat-label'>{label}</div></div>"
                for label, value in ((f"saliency ({e.saliency_method})", f"{e.saliency:.4g}"),
                                     ("REAP score", f"{e.reap:.4g}"), ("routing frequency", f"{e.frequency:.1%}"),
                                     ("mean gate", f"{e.mean_gate:.3f}"), ("max activation", f"{e.max_activation:.4g}")))
            + f"</div><div class='inspect-shares'>Its routed calibration tokens: {html.escape(shares)}</div>")


def _visible(text: str) -> str:
    """Whitespace tokens written out, so a newline or a space is seen, not a blank cell."""
    return text.replace("\n", "⏎").replace("\t", "⇥") if text.strip() else repr(text)[1:-1].replace(" ", "␣")


def _token_rows(e: ExpertView) -> list[list]:
    return [[_visible(t["token"]), t["count"], "  ·  ".join(c.replace("\n", "⏎") for c in t["contexts"])]
            for t in e.top_tokens]


def _sample_rows(samples: list[Sample]) -> list[list]:
    return [[s.domain, "…" + s.prompt[-PROMPT_TAIL:], s.unpruned, s.pruned] for s in samples]


def explore(model, calibration, method, ratio, scope, protect, progress=gr.Progress()):
    with user_errors():
        models.check_offered(model, MOE_PRESETS, "MoE model")
        selection = _selection(scope, protect)
        progress(0, desc="loading the model")
        lab = lab_for(model)

        step = lambda fraction, desc: progress(fraction, desc=desc)  # noqa: E731  (core's progress callback)
        view = lab.view(calibration, method, ratio, step, selection)
        yield _summary(view), heatmaps(view), _quality_rows(view), gr.skip(), gr.skip(), gr.skip()
        curve = curve_figure(lab.curve(calibration, step), view.method, view.ratio)
        subspace = subspace_figure(lab.subspace(calibration, method, ratio, selection))
        samples = lab.samples(calibration, method, ratio, selection)
        yield gr.skip(), gr.skip(), gr.skip(), curve, subspace, _sample_rows(samples)


def inspect_expert(model, calibration, method, ratio, scope, protect, layer, expert):
    with user_errors():
        models.check_offered(model, MOE_PRESETS, "MoE model")
        e = lab_for(model).inspect(calibration, method, ratio, whole(layer, "layer"), whole(expert, "expert"),
                                   _selection(scope, protect))
        return _inspector_html(e), _token_rows(e)


def export(model, calibration, method, ratio, scope, protect, progress=gr.Progress()):
    with user_errors():
        models.check_offered(model, MOE_PRESETS, "MoE model")
        selection = _selection(scope, protect)
        progress(0, desc="writing the checkpoint")
        return str(lab_for(model).export(calibration, method, ratio, EXPORT_DIR, selection))


def _ratio_slider(model: str) -> dict:
    """The slider's range and step for a model: whole experts, never fewer left than its top-k."""
    info = model_info(model)
    return dict(maximum=info.max_ratio, step=1 / info.experts,
                info=f"share of each layer's {info.experts} experts removed; recomputes on release")


def resize_ratio(model):
    with user_errors():
        models.check_offered(model, MOE_PRESETS, "MoE model")
        return gr.Slider(**_ratio_slider(model))


def build() -> None:
    with gr.Row():
        with gr.Column(scale=1, min_width=300):
            model = gr.Dropdown(models.moe_choices(), value=EMBEDDED, label="MoE model",
                                info="hub presets load when the hub (or a local copy) is reachable; see About")
            calibration = gr.Dropdown([(label, c) for c, label in CALIBRATION_LABELS.items()], value="mixed",
                                      allow_custom_value=True, label="Calibration data", elem_id="reap-calibration",
                                      info=f"a domain ({', '.join(data.DOMAINS)}), all three, or a weighted mixture "
                                           "you type, e.g. code:0.7,prose:0.3")
            method = gr.Dropdown([(METHOD_LABELS[m], m) for m in ALL_METHODS], value="reap", label="Method")
            ratio = gr.Slider(0, value=0.5, label="Pruning ratio", elem_id="reap-ratio", **_ratio_slider(EMBEDDED))
            scope = gr.Radio([(label, s) for s, label in SCOPE_LABELS.items()], value="layer", label="Experts removed",
                             elem_id="reap-scope", info="pruning criteria only; merging keeps the same count per layer")
            protect = gr.Number(0, minimum=0, precision=0, label="Protect super experts", elem_id="reap-protect",
                                info="never remove the K experts with the largest max activation (pruning only)")
            run = gr.Button("Score & prune", variant="primary")
            summary = gr.Markdown(INTRO, elem_id="reap-summary")
        with gr.Column(scale=3):
            heatmap = gr.Plot(placeholder("Score & prune, or release the slider: the experts appear here"),
                              label="Experts", elem_id="reap-heatmap")
            live = LabConfig().live_quality
            quality = gr.Dataframe(headers=QUALITY_HEADERS, interactive=False, elem_id="reap-quality",
                                   label=f"Quality at this ratio ({live.ppl_windows} held-out windows and "
                                         f"{live.task_items} task items per domain)")
            with gr.Group(elem_id="reap-inspector"):
                info = model_info(EMBEDDED)
                with gr.Row():
                    layer = gr.Number(0, precision=0, minimum=0, label="Inspect: layer", elem_id="reap-inspect-layer")
                    expert = gr.Number(0, precision=0, minimum=0, label="expert (or click the heatmap)",
                                       elem_id="reap-inspect-expert")
                inspector = gr.HTML(f"<div class='replay-empty'>Pick a layer (0-{info.layers - 1}) and an expert "
                                    f"(0-{info.experts - 1}), or click one on the heatmap.</div>",
                                    elem_id="reap-inspector-view")
                routed = gr.Dataframe(headers=TOKEN_HEADERS, interactive=False, wrap=True, elem_id="reap-inspector-tokens",
                                      label="Tokens routed to it most (in context, «token»)")
            curve = gr.Plot(label="Quality vs ratio, every method", elem_id="reap-curve")
    subspace = gr.Plot(label="Expert output subspace: original vs pruned vs merged", elem_id="reap-subspace")
    samples = gr.Dataframe(headers=SAMPLE_HEADERS, interactive=False, wrap=True, label="Greedy generation, before and after",
                           elem_id="reap-samples")
    with gr.Accordion("Download the pruned checkpoint", open=False):
        build_zip = gr.Button("Build .zip of the HF directory")
        checkpoint = gr.File(label="Pruned checkpoint (loads with AutoModelForCausalLM.from_pretrained)",
                             elem_id="reap-file")
    settings = [model, calibration, method, ratio, scope, protect]
    gr.on([run.click, ratio.release, method.change, calibration.change, scope.change, protect.change], explore, settings,
          [summary, heatmap, quality, curve, subspace, samples], api_name="reap", concurrency_id="reap",
          trigger_mode="always_last", show_progress_on=[heatmap]
          ).then(inspect_expert, [*settings, layer, expert], [inspector, routed], api_visibility="private")
    gr.on([layer.change, expert.change], inspect_expert, [*settings, layer, expert], [inspector, routed],
          api_name="reap_inspect", concurrency_id="reap", trigger_mode="always_last")
    heatmap.change(None, js=CLICK_TO_INSPECT)
    model.change(resize_ratio, model, ratio, api_visibility="private")
    build_zip.click(export, settings, checkpoint, api_name="reap_export", concurrency_id="reap")
