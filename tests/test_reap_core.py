"""REAP core: scores against a brute-force reference, pruning rules, bad input, atomic saves, merging, CLI.

    OMP_NUM_THREADS=1 python -m pytest tests/test_reap_core.py -q
"""

from __future__ import annotations

import argparse
import json

import pytest
import torch
import yaml
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from core.reap import cli, prune
from core.reap.adapters import adapter_for, moe_blocks
from core.reap.checkpoint import atomic_save, slice_experts
from core.reap.merge import expert_groups, hc_smoe_groups, m_smoe_groups, merge_experts
from core.reap.prune import LiveMask, experts_to_keep
from core.reap.scores import ScoreConfig, score
from core.reap.subspace import mean_routed, subspace_view
from core.reap.tiny import tiny_model

IDS = torch.randint(0, 128, (4, 24), generator=torch.Generator().manual_seed(2))


@torch.no_grad()
def brute_force(model, ids):
    """REAP / EAN / frequency by running every expert on every token and applying the router by hand."""
    captured = []
    handles = [b.register_forward_pre_hook(lambda m, a: captured.append(a[0].reshape(-1, a[0].shape[-1])))
               for _, b in moe_blocks(model)]
    model(input_ids=ids)
    for h in handles:
        h.remove()
    out = {"reap": [], "ean": [], "frequency": [], "max_activation": []}
    for (_, block), x in zip(moe_blocks(model), captured):
        e = block.experts
        probs = torch.softmax(x @ block.gate.weight.T, -1)
        top, idx = probs.topk(2, -1)
        top = top / top.sum(-1, keepdim=True)  # the tiny Qwen3-MoE renormalises
        gate_up = torch.einsum("th,eih->eti", x, e.gate_up_proj)
        g, u = gate_up.chunk(2, -1)
        f = torch.einsum("eti,ehi->eth", torch.nn.functional.silu(g) * u, e.down_proj)  # [E, T, H]
        norms = f.norm(dim=-1)
        reap, ean, freq, peak = [], [], [], []
        for j in range(e.num_experts):
            t, slot = torch.where(idx == j)
            freq.append(len(t))
            ean.append(norms[j, t].sum().item())
            reap.append((top[t, slot] * norms[j, t]).mean().item() if len(t) else 0.0)
            peak.append(f[j, t].abs().max().item() if len(t) else 0.0)
        out["reap"].append(reap), out["ean"].append(ean), out["frequency"].append(freq)
        out["max_activation"].append(peak)
    return out


def test_scores_match_brute_force():
    model = tiny_model("qwen3_moe")
    result, cache = score(model, IDS, ScoreConfig())
    expected = brute_force(model, IDS)
    peaks = expected.pop("max_activation")
    for method in expected:
        torch.testing.assert_close(torch.tensor(result["scores"][method], dtype=torch.float64),
                                   torch.tensor(expected[method], dtype=torch.float64), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(cache["max_activation"], torch.tensor(peaks, dtype=torch.float64), rtol=1e-4, atol=1e-5)
    assert result["routing"]["max_activation"] == cache["max_activation"].tolist()
    assert result["num_tokens"] == IDS.numel()
    assert result["scores"]["random"] != score(model, IDS, ScoreConfig(seed=1))[0]["scores"]["random"]


def test_observer_records_bias_corrected_routing():
    # DeepSeek-V3 picks experts by sigmoid + correction bias: the recorded frequency must follow that choice,
    # not the top-k of raw logits (the reference code's mistake).
    model = tiny_model("deepseek_v3")
    for _, block in moe_blocks(model):
        block.gate.e_score_correction_bias.copy_(torch.tensor([5.0, 5.0] + [0.0] * 6))
    result, _ = score(model, IDS, ScoreConfig())
    freq = result["routing"]["frequency"][0]
    assert freq[0] == freq[1] == pytest.approx(0.5)


def test_grouped_routing_prunes_evenly_and_mask_matches_slice():
    model = tiny_model("deepseek_v3", n_group=2, topk_group=1)
    result, _ = score(model, IDS, ScoreConfig())
    kept = experts_to_keep(result["scores"]["reap"], 0.5, 2, groups=2)
    assert all(sum(k < 4 for k in layer) == 2 for layer in kept)
    mask = LiveMask(model)
    mask.set(kept)
    with torch.no_grad():
        masked = model(input_ids=IDS).logits
    mask.clear()
    slice_experts(model, kept)
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids=IDS).logits, masked, atol=1e-5, rtol=1e-4)


def test_keep_lowest_scores_dropped():
    assert experts_to_keep([[5, 1, 4, 2, 3, 0, 7, 6]], 0.5, 2) == [[0, 2, 6, 7]]
    assert experts_to_keep([[5, 1, 4, 2, 3, 0, 7, 6]], 0.25, 2) == [[0, 2, 3, 4, 6, 7]]


@pytest.mark.parametrize("ratio, message", [(1.0, r"\[0, 1\)"), (-0.1, r"\[0, 1\)"), (0.9, "fewer than top-k")])
def test_bad_ratios(ratio, message):
    with pytest.raises(ValueError, match=message):
        experts_to_keep([[0.0] * 8], ratio, 2)


def test_dense_model_is_rejected():
    dense = Qwen2ForCausalLM(Qwen2Config(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                         num_key_value_heads=1, intermediate_size=32))
    with pytest.raises(ValueError, match="not a supported MoE family"):
        adapter_for(dense)


def test_atomic_save_leaves_nothing_half_written(tmp_path):
    out = tmp_path / "model"
    atomic_save(out, lambda d: (d / "a.txt").write_text("old"))

    def crash(d):
        (d / "a.txt").write_text("new")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        atomic_save(out, crash)
    assert (out / "a.txt").read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["model"]  # no temp directories left behind
    atomic_save(out, lambda d: (d / "b.txt").write_text("new"))
    assert [p.name for p in out.iterdir()] == ["b.txt"]


def test_merge_groups():
    points = torch.tensor([[0.0, 0], [0.1, 0], [10, 10], [10.2, 10], [0, 0.1], [10, 10.1]], dtype=torch.float64)
    assert sorted(hc_smoe_groups(points, 2)) == [[0, 1, 4], [2, 3, 5]]
    gram = torch.eye(4, dtype=torch.float64) + torch.tensor([[0, 0, 0.9, 0], [0, 0, 0, 0.9], [0.9, 0, 0, 0], [0, 0.9, 0, 0]])
    assert sorted(m_smoe_groups(gram, torch.tensor([10.0, 9, 1, 2]), 2)) == [[0, 2], [1, 3]]


def test_merge_is_frequency_weighted_and_reloads(tmp_path):
    model = tiny_model("mixtral")
    result, cache = score(model, IDS, ScoreConfig(sample_tokens=32))
    groups = expert_groups("hc-smoe", cache, 0.5, 2)
    assert all(sorted(sum(g, [])) == list(range(8)) and len(g) == 4 for g in groups)
    before = [b.experts.down_proj.detach().clone() for _, b in moe_blocks(model)]
    kept = merge_experts(model, groups, cache["count"])
    count = cache["count"][0].double()
    group = max(groups[0], key=len)
    w = count[group] / count[group].sum()
    expected = (before[0][group].double() * w[:, None, None]).sum(0).float()
    rep = group[int(count[group].argmax())]
    torch.testing.assert_close(moe_blocks(model)[0][1].experts.down_proj[kept[0].index(rep)], expected)
    model.save_pretrained(tmp_path)
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert reloaded.config.num_local_experts == 4
    reloaded(input_ids=IDS)


def test_subspace_view_shapes():
    model = tiny_model("qwen3_moe")
    pruned = tiny_model("qwen3_moe")
    result, _ = score(model, IDS, ScoreConfig())
    slice_experts(pruned, experts_to_keep(result["scores"]["reap"], 0.5, 2))
    view = subspace_view({"original": mean_routed(model, IDS), "pruned": mean_routed(pruned, IDS)})
    assert len(view["layers"]) == 2 and len(view["layers"][0]["pruned"][0]) == 2
    assert len(view["layers"][0]["pruned"]) <= 4 < len(view["layers"][0]["original"])
    assert all(s > 0 for s in view["spread"]["original"])


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    """A tiny Qwen3-MoE with its own small tokenizer, saved like a hub model."""
    path = tmp_path_factory.mktemp("tiny-moe")
    text = path / "calib.txt"
    text.write_text("def add(a, b):\n    return a + b\n\nThe quick brown fox jumps over the lazy dog.\n" * 60)
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train([str(text)], trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                show_progress=False))
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    model = tiny_model("qwen3_moe", vocab_size=len(tok))
    model.save_pretrained(path / "model")
    tok.save_pretrained(path / "model")
    return path


def _cli(*argv):
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    args.func(args)


def test_cli_score_prune_merge(tiny_dir):
    model, scores = str(tiny_dir / "model"), str(tiny_dir / "scores")
    _cli("reap", "score", "--model", model, "--calib", str(tiny_dir / "calib.txt"), "--tokens", "256",
         "--seq-len", "32", "--out", scores)
    saved = json.loads((tiny_dir / "scores" / "scores.json").read_text())
    assert saved["num_tokens"] == 256 and saved["calibration"].endswith("calib.txt")
    assert set(saved["scores"]) == {"reap", "ean", "frequency", "weighted_frequency", "random"}
    assert len(saved["routing"]["mean_gate"]) == 2 and len(saved["routing"]["frequency"][0]) == 8

    for command, method in (("prune", "reap"), ("merge", "m-smoe")):
        out = tiny_dir / f"{method}-50"
        _cli("reap", command, "--scores", scores, "--method", method, "--ratio", "0.5", "--out", str(out))
        recipe = yaml.safe_load((out / "recipe.yaml").read_text())
        assert recipe["method"] == method and recipe["experts_after"] == 4
        assert len(recipe["kept_experts"]) == 2
        reduced = AutoModelForCausalLM.from_pretrained(out)
        assert reduced.config.num_experts == 4
        reduced(input_ids=torch.tensor([[1, 2, 3]]))

    with pytest.raises(ValueError, match="fewer than top-k"):
        _cli("reap", "prune", "--scores", scores, "--method", "reap", "--ratio", "0.9", "--out", str(tiny_dir / "x"))
    assert not (tiny_dir / "x").exists()
    with pytest.raises(ValueError, match="unknown method 'nope'"):
        prune.run(argparse.Namespace(scores=scores, method="nope", ratio=0.5, model=None, out=str(tiny_dir / "x"),
                                     scope="layer", protect=0))
    with pytest.raises(ValueError, match="unknown merge method"):
        expert_groups("nope", {"count": torch.ones(1, 8)}, 0.5, 2)
    with pytest.raises(ValueError, match="is not a domain"):
        _cli("reap", "score", "--model", model, "--calib", "no-such-domain", "--out", scores)
