"""REAP's own options and what a real install needs: super-expert protection, the global (non-uniform) ranking,
weighted calibration mixtures, one shipped corpus whatever the interpreter, merges and masks that leave the loaded
model as it was, uneven checkpoints that reload, statistics as safetensors, a cheap weights fingerprint.

    OMP_NUM_THREADS=1 python -m pytest -q tests/test_reap_options.py
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import shutil
import sys

import pytest
import torch
import yaml
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast

from core.models.loading import LoadOptions, save_bf16
from core.reap import cli, data
from core.reap.checkpoint import LAYER_EXPERTS, load_model, recipe_for, save_reduced, weights_fingerprint
from core.reap.embedded_moe import MOE_PATH
from core.reap.merge import expert_groups, merge_experts, merged_view
from core.reap.prune import Selection, experts_to_keep, super_experts
from core.reap.scores import ScoreConfig, load_scores, save_scores, score
from core.reap.tiny import tiny_model
from core.reap.view import reduce_in_place, reduced_view, reduction_for

IDS = torch.randint(0, 128, (4, 24), generator=torch.Generator().manual_seed(3))


def test_super_experts_are_the_largest_max_activations_in_the_whole_model():
    peaks = [[1.0, 9.0, 2.0, 3.0], [50.0, 1.0, 1.0, 8.0]]
    assert super_experts(peaks, 0) == [[], []]
    assert super_experts(peaks, 2) == [[1], [0]]
    assert super_experts(peaks, 3) == [[1], [0, 3]]
    with pytest.raises(ValueError, match="cannot protect 9 super experts: the model has 8 routed experts"):
        super_experts(peaks, 9)


def test_protected_experts_are_kept_whatever_they_score():
    scores = [[0.1, 5.0, 4.0, 3.0, 2.0, 1.0]]
    assert experts_to_keep(scores, 0.5, 2) == [[1, 2, 3]]
    assert experts_to_keep(scores, 0.5, 2, protected=[[0]]) == [[0, 1, 2]]
    with pytest.raises(ValueError, match="layer 0 has 4 protected experts, more than the 3 it keeps"):
        experts_to_keep(scores, 0.5, 2, protected=[[0, 3, 4, 5]])
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="whole number >= 0"):
            Selection(protect=bad)
    with pytest.raises(ValueError, match="scope must be one of"):
        Selection("everywhere")


def test_global_ranking_removes_the_same_total_by_score_relative_to_the_layer():
    # Layer 1's scores are ten times layer 0's; relative to their layer's mean, layer 0 has the clear losers.
    scores = [[1.0, 1.0, 0.1, 0.1], [10.0, 9.0, 8.0, 7.0]]
    assert experts_to_keep(scores, 0.5, 1) == [[0, 1], [0, 1]]
    kept = experts_to_keep(scores, 0.5, 1, scope="global")
    assert kept == [[0, 1], [0, 1]]  # the same total (4), here the same split
    uneven = [[1.0, 0.2, 0.1, 0.1], [10.0, 10.0, 10.0, 10.0]]
    kept = experts_to_keep(uneven, 0.5, 1, scope="global")
    assert kept == [[0], [1, 2, 3]] and sum(map(len, kept)) == 4
    assert experts_to_keep(uneven, 0.5, 2, scope="global") == [[0, 1], [2, 3]]  # never fewer than top-k in a layer
    assert experts_to_keep(uneven, 0.5, 1, protected=[[3], []], scope="global") == [[0, 3], [2, 3]]  # never removed
    with pytest.raises(ValueError, match="global ranking needs plain top-k routing"):
        experts_to_keep([[1.0] * 8], 0.5, 2, groups=2, scope="global")


def test_calibration_mixtures_draw_each_part_by_its_share(tmp_path):
    assert data.mixture("code") == {"code": 1.0}
    assert data.mixture("mixed") == {d: pytest.approx(1 / 3) for d in data.DOMAINS}
    assert data.mixture("code:3,math:1") == {"code": 0.75, "math": 0.25}
    for bad in ("code:0", "code:x", "code:1,code:2", ":1", "code:inf"):
        with pytest.raises(ValueError, match="each part must be NAME:WEIGHT"):
            data.mixture(bad)
    with pytest.raises(ValueError, match="'poetry' is not a domain"):
        data.mixture("code:1,poetry:1")
    letters, digits = tmp_path / "letters.txt", tmp_path / "digits.txt"
    letters.write_text("abc def ghi jkl " * 400)
    digits.write_text("1 2 3 4 5 6 7 8 9 " * 400)
    with pytest.raises(ValueError, match="is not a domain .* nor an existing text file"):
        data.mixture("code:1,nowhere.txt:1")
    tokenizer = PreTrainedTokenizerFast.from_pretrained(MOE_PATH)
    stream = {p: set(data.token_stream(tokenizer, [p.read_text()]).tolist()) for p in (letters, digits)}
    windows = data.windows(tokenizer, f"{letters}:3,{digits}:1", "train", 8 * 16, 16)
    origin = [next(p for p, ids in stream.items() if set(w.tolist()) <= ids) for w in windows]
    assert origin.count(letters) == 6 and origin.count(digits) == 2  # every part, by its share
    assert origin != sorted(origin, key=str)  # shuffled together
    assert data._counts({"a": 1 / 3, "b": 1 / 3, "c": 1 / 3}, 10) in ({"a": 4, "b": 3, "c": 3}, {"a": 3, "b": 4, "c": 3},
                                                                     {"a": 3, "b": 3, "c": 4})


def test_files_are_refused_where_only_domains_may_be_named(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("some text " * 100)
    assert data.mixture(f"{text}:1") == {str(text): 1.0}
    with pytest.raises(ValueError, match="is not a domain"):
        data.mixture(f"{text}:1", files=False)


def test_the_corpus_is_the_shipped_snapshot_whatever_the_interpreter(monkeypatch, tmp_path):
    before = {(d, s): data.texts(d, s) for d in data.DOMAINS for s in data.SPLITS}
    assert len(before["code", "train"]) == 155 and len(before["code", "heldout"]) == 13
    assert hashlib.sha256(data.CORPUS.read_bytes()).hexdigest() == data.CORPUS_SHA256
    # A virtual environment's prefix holds no standard library: the corpus must not care.
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    data._stdlib_files.cache_clear(), data.texts.cache_clear()
    try:
        assert {(d, s): data.texts(d, s) for d in data.DOMAINS for s in data.SPLITS} == before
        tampered = tmp_path / "lib.zip"
        tampered.write_bytes(data.CORPUS.read_bytes()[:-1] + b"!")
        monkeypatch.setattr(data, "CORPUS", tampered)
        data._stdlib_files.cache_clear(), data.texts.cache_clear()
        with pytest.raises(ValueError, match="the corpus was changed"):
            data.texts("code", "train")
    finally:
        data._stdlib_files.cache_clear(), data.texts.cache_clear()


def test_the_snapshot_rebuilds_byte_for_byte(tmp_path):
    lib = tmp_path / "Lib"
    lib.mkdir()
    with __import__("zipfile").ZipFile(data.CORPUS) as archive:
        archive.extractall(lib)
    assert data.snapshot(lib, tmp_path / "again.zip") == data.CORPUS_SHA256


@pytest.fixture(scope="module")
def scored():
    model = tiny_model("qwen3_moe")
    result, cache = score(model, IDS, ScoreConfig(sample_tokens=32))
    return model, {"model": "tiny", "calibration": "ids"} | result, cache


def _logits(model):
    with torch.no_grad():
        return model(input_ids=IDS).logits


@pytest.mark.parametrize("method, selection", [
    ("reap", Selection()), ("reap", Selection("global")), ("ean", Selection(protect=3)),
    ("reap", Selection("global", 2)), ("hc-smoe", Selection()), ("m-smoe", Selection()),
])
def test_views_equal_the_reduced_checkpoint_and_leave_the_model_as_it_was(scored, method, selection, tmp_path):
    model, scores, cache = scored
    before = copy.deepcopy(model.state_dict())
    reference = _logits(model)
    reduction = reduction_for(model, scores, cache, method, 0.5, selection)
    with reduced_view(model, cache, reduction):
        inside = _logits(model)
    reduced = copy.deepcopy(model)
    reduce_in_place(reduced, cache, reduction)
    torch.testing.assert_close(inside, _logits(reduced), rtol=1e-5, atol=1e-5)
    assert not torch.allclose(inside, reference)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # put back exactly
    torch.testing.assert_close(_logits(model), reference, rtol=0, atol=0)
    if selection.protect:
        protected = super_experts(cache["max_activation"], selection.protect)
        assert all(set(p) <= set(k) for p, k in zip(protected, reduction.kept))

    tokenizer = PreTrainedTokenizerFast.from_pretrained(MOE_PATH)  # any tokenizer: the directory needs one
    save_reduced(reduced, tokenizer, tmp_path / "out", recipe_for(scores, method, 0.5, reduction.kept))
    counts = [len(k) for k in reduction.kept]
    config = AutoConfig.from_pretrained(tmp_path / "out")
    assert config.num_experts == max(counts) and getattr(config, LAYER_EXPERTS, None) == (counts if len(set(counts)) > 1
                                                                                            else None)
    reloaded, _ = load_model(str(tmp_path / "out"))
    torch.testing.assert_close(_logits(reloaded), inside, rtol=1e-5, atol=1e-5)


def test_global_ranking_keeps_different_counts_and_merging_refuses_the_options(scored):
    model, scores, cache = scored
    kept = reduction_for(model, scores, cache, "reap", 0.5, Selection("global")).kept
    assert sum(map(len, kept)) == 2 * 4 and all(len(k) >= 2 for k in kept)
    with pytest.raises(ValueError, match="apply to the pruning criteria"):
        reduction_for(model, scores, cache, "hc-smoe", 0.5, Selection(protect=1))


def test_merged_view_is_merge_experts_without_a_copy():
    model = tiny_model("mixtral")
    _, cache = score(model, IDS, ScoreConfig(sample_tokens=32))
    groups = expert_groups("hc-smoe", cache, 0.5, 2)
    merged = copy.deepcopy(model)
    merge_experts(merged, groups, cache["count"])
    with merged_view(model, groups, cache["count"]) as kept:
        torch.testing.assert_close(_logits(model), _logits(merged), rtol=1e-5, atol=1e-5)
        assert [len(k) for k in kept] == [4, 4]
    assert not torch.allclose(_logits(model), _logits(merged))


def test_prune_cli_global_and_protected_writes_a_checkpoint_that_reloads(tmp_path):
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers(dest="command", required=True))

    def run(*argv):
        args = parser.parse_args(argv)
        args.func(args)

    run("reap", "score", "--calib", "code:0.5,math:0.5", "--tokens", "1024", "--out", str(tmp_path / "scores"))
    assert sorted(p.name for p in (tmp_path / "scores").iterdir()) == ["scores.json", "stats.safetensors"]
    run("reap", "prune", "--scores", str(tmp_path / "scores"), "--method", "reap", "--ratio", "0.5", "--scope", "global",
        "--protect-super-experts", "3", "--out", str(tmp_path / "out"))
    recipe = yaml.safe_load((tmp_path / "out" / "recipe.yaml").read_text())
    assert recipe["scope"] == "global" and recipe["protected_super_experts"] == 3
    assert recipe["calibration"] == "code:0.5,math:0.5" and sum(recipe["experts_after"]) == 4 * 8
    _, cache = load_scores(tmp_path / "scores")
    for (layer, keep), guard in zip(recipe["kept_experts"].items(), super_experts(cache["max_activation"], 3)):
        assert set(guard) <= set(keep)
    model, _ = load_model(str(tmp_path / "out"), dtype="auto")
    assert model.dtype == torch.bfloat16 and model.config.layer_experts == recipe["experts_after"]
    assert "loads with Speculum" in (tmp_path / "out" / "README.md").read_text()


def test_statistics_are_safetensors_and_old_pickles_are_refused(scored, tmp_path):
    _, scores, cache = scored
    save_scores(tmp_path / "s", scores, cache)
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == ["scores.json", "stats.safetensors"]
    _, loaded = load_scores(tmp_path / "s")
    assert set(loaded) == set(cache) and all(torch.equal(loaded[k], cache[k]) for k in cache)
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "scores.json").write_text(json.dumps(scores))
    torch.save(cache, tmp_path / "old" / "stats.pt")
    with pytest.raises(ValueError, match="has no stats.safetensors"):
        load_scores(tmp_path / "old")


def test_fingerprint_reads_file_hashes_not_tensors(tmp_path):
    shutil.copytree(MOE_PATH, tmp_path / "a")
    memo = tmp_path / "memo.json"
    first = weights_fingerprint(str(tmp_path / "a"), LoadOptions(), memo)
    assert weights_fingerprint(str(MOE_PATH), LoadOptions(), memo) == first  # same bytes, another place
    assert weights_fingerprint(str(tmp_path / "a"), LoadOptions(dtype="bfloat16"), memo) != first
    assert len(json.loads(memo.read_text())) == 2  # each file hashed once, then remembered
    weights = tmp_path / "a" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1] + b" ")
    assert weights_fingerprint(str(tmp_path / "a"), LoadOptions(), memo) != first
    # A hub cache names each blob by its SHA-256: the name is used, the file is not read.
    (tmp_path / "hub").mkdir()
    blob = tmp_path / ("0" * 64)
    blob.write_bytes(b"not even safetensors")
    (tmp_path / "hub" / "model.safetensors").symlink_to(blob)
    shutil.copy(MOE_PATH / "config.json", tmp_path / "hub" / "config.json")
    hub = weights_fingerprint(str(tmp_path / "hub"), LoadOptions(), memo)
    blob.write_bytes(b"changed, but the name says what it is")
    assert weights_fingerprint(str(tmp_path / "hub"), LoadOptions(), memo) == hub


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_saving_in_bf16_keeps_the_models_dtype(dtype, tmp_path):
    model = tiny_model("qwen3_moe").to(dtype)
    save_bf16(model, tmp_path)
    assert model.dtype == dtype
    assert AutoModelForCausalLM.from_pretrained(tmp_path, dtype="auto").dtype == torch.bfloat16
