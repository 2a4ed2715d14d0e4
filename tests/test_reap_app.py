"""The REAP tab through the app's public API (gradio_client), the app launched in-process by the `app_url` fixture:
the slider endpoint returns heatmaps and quality for several ratios and marks exactly the experts core removes,
merging says where experts went, and the downloaded checkpoint loads with plain transformers (bad input:
tests/test_bad_inputs.py).

    python -m pytest -q tests/test_reap_app.py
"""

from __future__ import annotations

import json
import shutil

from transformers import AutoModelForCausalLM

from core.reap import data
from core.reap.lab import lab_for

OUTPUTS = ("summary", "heatmap", "quality", "curve", "subspace", "samples")


def _reap(client, ratio=0.5, method="reap", calibration="mixed", scope="layer", protect=0) -> dict:
    """Each output's last value: the endpoint sends heatmaps and quality first, the rest after (skipped outputs
    arrive as update dicts)."""
    job = client.submit("embedded", calibration, method, ratio, scope, protect, api_name="/reap")
    events = list(job)
    job.result()  # raises the app's error, if there was one
    out = {}
    for event in events:
        for name, value in zip(OUTPUTS, event):
            if not (isinstance(value, dict) and value.get("__type__") == "update"):
                out[name] = value
    assert len(events) == 2 and set(out) == set(OUTPUTS)
    return out


def _figure(plot: dict) -> dict:
    return json.loads(plot["plot"])


def _marks(figure: dict) -> set[tuple[int, int]]:
    """(layer, expert) of every crossed-out expert on the saliency map (the first marker trace)."""
    trace = next(t for t in figure["data"] if t["type"] == "scatter")
    return set(zip(trace["y"], trace["x"]))


def test_slider_endpoint_shows_heatmaps_and_quality_for_several_ratios(client):
    lab = lab_for("embedded")  # the app's own Lab (same process), so this is what the app computed from
    marks = {}
    for ratio in (0.25, 0.5, 0.75):
        out = _reap(client, ratio)
        view = lab.view("mixed", "reap", ratio)
        heat = _figure(out["heatmap"])
        maps = [t for t in heat["data"] if t["type"] == "heatmap"]
        assert len(maps) == 2 and all(len(m["z"]) == 4 and len(m["z"][0]) == 16 for m in maps)
        assert maps[1]["z"] == view.frequency
        marks[ratio] = _marks(heat)
        assert marks[ratio] == {(layer, j) for layer, keep in enumerate(view.kept) for j in range(16) if j not in keep}
        assert len(marks[ratio]) == 4 * int(16 * ratio)
        rows = {row[0]: row for row in out["quality"]["data"]}
        assert sorted(rows) == sorted(data.DOMAINS)
        ppl = [view.baseline["math"]["ppl"], view.quality["math"]["ppl"]]
        assert [rows["math"][1], rows["math"][2]] == [f"{x:.3g}" for x in ppl]  # 3 significant figures
        assert f"ratio {ratio:.1%}: {int(16 * ratio)} of 16 experts per layer removed" in out["summary"]
        curve = _figure(out["curve"])
        assert {s["x0"] for s in curve["layout"]["shapes"]} == {ratio}  # the current ratio is marked
        assert {t["name"] for t in curve["data"]} >= {"reap", "ean", "frequency", "random", "hc-smoe", "m-smoe"}
        assert [row[0] for row in out["samples"]["data"]] == list(data.DOMAINS)
        assert {t["name"] for t in _figure(out["subspace"])["data"]} == {"original", "pruned (reap)", "merged (hc-smoe)"}
    assert marks[0.25] < marks[0.5] < marks[0.75]  # one ranking: a larger ratio removes a superset


def test_merging_marks_where_each_expert_went(client):
    out = _reap(client, 0.5, "m-smoe")
    view = lab_for("embedded").view("mixed", "m-smoe", 0.5)
    trace = next(t for t in _figure(out["heatmap"])["data"] if t["type"] == "scatter")
    assert trace["name"] == "merged away"
    assert {(y, x, text) for x, y, text in zip(trace["x"], trace["y"], trace["text"])} == {
        (layer, j, f"merged into expert {into}") for layer, merged in enumerate(view.merged_into) for j, into in merged.items()
    }
    assert "merged away" in out["summary"]


def test_download_is_a_zip_of_a_loadable_checkpoint(client, tmp_path):
    path = client.predict("embedded", "mixed", "reap", 0.75, "layer", 0, api_name="/reap_export")
    assert path.endswith(".zip")
    shutil.unpack_archive(path, tmp_path)
    (folder,) = tmp_path.iterdir()
    model = AutoModelForCausalLM.from_pretrained(folder)
    assert model.config.num_experts == 4
    assert (folder / "recipe.yaml").is_file() and (folder / "tokenizer.json").is_file()


def test_inspector_endpoint_and_quality_counts(client):
    view_html, rows = client.predict("embedded", "mixed", "reap", 0.5, "layer", 0, 2, 14, api_name="/reap_inspect")
    e = lab_for("embedded").inspect("mixed", "reap", 0.5, 2, 14)
    assert "Layer 2, expert 14" in view_html and e.fate in view_html and f"{e.saliency:.4g}" in view_html
    assert [row[1] for row in rows["data"]] == [t["count"] for t in e.top_tokens]
    out = _reap(client, 0.5)
    view = lab_for("embedded").view("mixed", "reap", 0.5)
    n = view.quality_items
    for row in out["quality"]["data"]:
        base, pruned = view.baseline[row[0]], view.quality[row[0]]
        assert row[1:3] == [f"{base['ppl']:.3g}", f"{pruned['ppl']:.3g}"]
        assert row[4:] == [f"{round(base['acc'] * n)} / {n}", f"{round(pruned['acc'] * n)} / {n}"]
