"""core/reap/lab.py on the embedded MoE (small calibration and evaluation sets): what the REAP tab shows for
(calibration, method, ratio), scores cached on disk under a content key, the saved sweep used only when it matches
the model, errors a user can act on, and a zipped checkpoint that plain transformers loads.

    OMP_NUM_THREADS=1 python -m pytest -q tests/test_reap_lab.py
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import pytest
import torch
import yaml
from transformers import AutoModelForCausalLM

from core.reap import data
from core.reap.checkpoint import load_model
from core.reap.embedded_moe import MOE_PATH
from core.reap.lab import ALL_METHODS, BENCH_JSON, Lab, LabConfig
from core.reap.quality import QualityConfig
from core.reap.scores import ScoreConfig

SMALL = LabConfig(score=ScoreConfig(tokens=1024, sample_tokens=32), live_quality=QualityConfig(ppl_windows=1, task_items=4),
                  curve_ratios=(0.5,), subspace_tokens=256, sample_tokens=4)


@pytest.fixture(scope="module")
def cfg(tmp_path_factory):
    return replace(SMALL, cache_dir=tmp_path_factory.mktemp("reap-cache"))


@pytest.fixture(scope="module")
def lab(cfg):
    return Lab("embedded", cfg)


def test_view_removes_the_lowest_scoring_experts(lab):
    views = {r: lab.view("math", "reap", r) for r in (0.25, 0.5)}
    for ratio, v in views.items():
        assert v.removed == int(16 * ratio) and all(len(keep) == 16 - v.removed for keep in v.kept)
        for scores, keep in zip(v.saliency, v.kept):
            dropped = set(range(16)) - set(keep)
            assert max(scores[j] for j in dropped) <= min(scores[j] for j in keep)
        assert set(v.quality) == set(v.baseline) == set(data.DOMAINS)
        assert len(v.frequency) == len(v.layers) == 4 and all(m == {} for m in v.merged_into)
    assert views[0.25].kept != views[0.5].kept
    assert views[0.5].quality != views[0.5].baseline
    again = lab.view("math", "reap", 0.3)  # removes the same 4 experts as 0.25: served from the quality cache
    assert again.quality_cached and again.ratio == 0.25 and again.quality == views[0.25].quality


def test_merge_view_says_where_each_expert_went(lab):
    v = lab.view("math", "hc-smoe", 0.5)
    assert v.saliency_method == "reap" and v.removed == 8
    for keep, merged in zip(v.kept, v.merged_into):
        assert sorted([*keep, *merged]) == list(range(16)) and set(merged.values()) <= set(keep)


@pytest.mark.parametrize("args, message", [
    (("math", "reap", 1.0), r"ratio must be in \[0, 1\)"),
    (("math", "reap", float("nan")), "finite number"),
    (("math", "reap", 0.95), "keeps 1 of 16 experts, fewer than top-k = 2"),
    (("math", "magic", 0.5), "unknown method 'magic'"),
    (("poetry", "reap", 0.5), "unknown calibration 'poetry'"),
])
def test_bad_inputs_are_clear_errors(lab, args, message):
    with pytest.raises(ValueError, match=message):
        lab.view(*args)


def test_scores_are_cached_under_the_model_and_calibration(lab, cfg, tmp_path):
    scored = lab.scores("math")
    written = (scored.directory / "scores.json").stat().st_mtime_ns
    fresh = Lab("embedded", cfg)  # as a restarted app: finds the scores on disk
    assert fresh.scores("math").directory == scored.directory
    assert (scored.directory / "scores.json").stat().st_mtime_ns == written
    assert fresh.scores("code").directory != scored.directory

    model, tokenizer = load_model(str(MOE_PATH), dtype="auto")
    with torch.no_grad():  # "retrained": one router row changed
        model.model.layers[0].mlp.gate.weight[0] += 1.0
    model.save_pretrained(tmp_path / "moe")
    tokenizer.save_pretrained(tmp_path / "moe")
    changed = Lab(str(tmp_path / "moe"), cfg).scores("math")
    assert changed.directory != scored.directory
    assert changed.result["scores"]["reap"][0] != scored.result["scores"]["reap"][0]


def test_curve_uses_the_saved_sweep_only_when_it_matches_the_model(cfg, tmp_path):
    bench = json.loads(BENCH_JSON.read_text())
    sweep = [r | {"calibration": "math"} for r in bench["results"]
             if r["calibration"] == bench["calibration"] and r["scope"] == "layer" and not r["protect"]]
    assert len(sweep) < len([r for r in bench["results"] if r["calibration"] == bench["calibration"]])  # option rows
    bench |= {"calibration": "math", "results": sweep}  # relabelled: the test then needs no mixed-data scoring
    (tmp_path / "same.json").write_text(json.dumps(bench))
    bench["baseline"]["code"]["ppl"] *= 1.05  # as if made on another model
    (tmp_path / "other.json").write_text(json.dumps(bench))

    saved = Lab("embedded", replace(cfg, bench_json=tmp_path / "same.json")).curve("math")
    assert saved.source.startswith("same.json") and saved.baseline == json.loads(BENCH_JSON.read_text())["baseline"]
    assert [(p.method, p.ratio, p.quality) for p in saved.points] == [(r["method"], r["ratio"], r["quality"]) for r in sweep]

    lab = Lab("embedded", replace(cfg, bench_json=tmp_path / "other.json"))
    live = lab.curve("math")
    assert live.source.startswith("live evaluation")
    assert sorted(p.method for p in live.points) == sorted(ALL_METHODS) and {p.ratio for p in live.points} == {0.5}
    reap = next(p for p in live.points if p.method == "reap")
    assert reap.quality == lab.view("math", "reap", 0.5).quality and live.baseline == lab.view("math", "reap", 0).quality


def test_subspace_and_samples(lab):
    s = lab.subspace("math", "m-smoe", 0.5)
    assert (s.pruned_method, s.merged_method, s.ratio) == ("reap", "m-smoe", 0.5)
    assert len(s.layers) == 4 and set(s.spread) == {"original", "pruned", "merged"}
    for layer in s.layers:  # experts no calibration token reached are not drawn
        assert 0 < len(layer["pruned"]) <= 8 and 0 < len(layer["merged"]) <= 8 and len(layer["original"]) <= 16
    samples = lab.samples("math", "random", 0.75)
    assert [x.domain for x in samples] == list(data.DOMAINS)
    assert all(x.prompt and x.unpruned for x in samples) and any(x.pruned != x.unpruned for x in samples)


def test_export_is_a_zip_that_transformers_loads(lab, tmp_path):
    out = tmp_path / "exports"
    path = lab.export("math", "m-smoe", 0.5, out)
    assert path.parent == out and path.suffix == ".zip" and [p.name for p in out.iterdir()] == [path.name]
    shutil.unpack_archive(path, tmp_path / "unzipped")
    folder = tmp_path / "unzipped" / path.stem
    model = AutoModelForCausalLM.from_pretrained(folder)
    assert model.config.num_experts == 8 and model.dtype == torch.bfloat16
    recipe = yaml.safe_load((folder / "recipe.yaml").read_text())
    assert recipe["method"] == "m-smoe" and recipe["calibration"] == "math" and len(recipe["merged_groups"]) == 4


def test_inspecting_an_expert(lab):
    scored = lab.scores("math")
    frequency = scored.result["routing"]["frequency"][2]
    j = max(range(16), key=lambda k: frequency[k])  # an expert math tokens do reach
    e = lab.inspect("math", "reap", 0.5, 2, j)
    assert (e.layer, e.expert, e.saliency_method) == (2, j, "reap")
    assert e.saliency == e.reap == scored.result["scores"]["reap"][2][j]
    assert e.frequency == frequency[j]
    assert e.max_activation == scored.result["routing"]["max_activation"][2][j]
    assert e.domain_share == {"math": 1.0}  # a single-domain calibration
    # The counts are the router's own choices on the calibration windows, most frequent first.
    routed = {}
    with torch.no_grad():
        captured = []
        handle = lab.model.model.layers[2].mlp.gate.register_forward_hook(lambda m, i, o: captured.append(o[2]))
        lab.model(input_ids=scored.windows)
        handle.remove()
    hits = (captured[0] == j).any(-1)
    for token in scored.windows.reshape(-1)[hits].tolist():
        routed[token] = routed.get(token, 0) + 1
    best = sorted(routed.values(), reverse=True)[: len(e.top_tokens)]
    assert [t["count"] for t in e.top_tokens] == best and all("«" in c for t in e.top_tokens for c in t["contexts"])
    view = lab.view("math", "reap", 0.5)
    assert e.fate == ("kept" if j in view.kept[2] else "removed")
    merged = lab.view("math", "m-smoe", 0.5)
    away = next(j for j in range(16) if j in merged.merged_into[2])
    assert lab.inspect("math", "m-smoe", 0.5, 2, away).fate == f"merged into expert {merged.merged_into[2][away]}"
    into = merged.merged_into[2][away]
    assert lab.inspect("math", "m-smoe", 0.5, 2, into).fate.startswith("kept, and experts")


def test_inspect_shares_follow_the_mixture(lab):
    e = lab.inspect("code:0.5,math:0.5", "reap", 0.25, 0, 0)
    assert set(e.domain_share) == {"code", "math"} and abs(sum(e.domain_share.values()) - 1) < 1e-3


@pytest.mark.parametrize("layer, expert, message", [(4, 0, r"layer must be a whole number in \[0, 4\)"),
                                                    (0, 16, r"expert must be a whole number in \[0, 16\)"),
                                                    (-1, 0, "layer must be"), (0, 1.5, "expert must be")])
def test_inspecting_outside_the_model_is_a_clear_error(lab, layer, expert, message):
    with pytest.raises(ValueError, match=message):
        lab.inspect("math", "reap", 0.5, layer, expert)
