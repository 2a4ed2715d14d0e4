"""REAP: router-weighted expert activation pruning of MoE LLMs (arXiv 2510.13999), with its baselines.

  adapters.py      per-family differences (config key, router name, routing rule), one table
  observer.py      routing and routed-expert output norms recorded from the normal forward
  scores.py        reap / ean / frequency / weighted_frequency / random, cached per calibration
  prune.py         choose and slice experts, save atomically; live router mask for previews
  merge.py         HC-SMoE and M-SMoE merging baselines
  quality.py       per-domain perplexity and exact-match tasks
  subspace.py      PCA of experts' mean routed outputs: original vs pruned vs merged
  bench.py         the methods x ratios x domains benchmark
  lab.py           what the app's REAP tab shows for (model, calibration, method, ratio), cached
  data.py, embedded_moe.py, train_moe.py   the embedded Qwen3-MoE, its data and training
  tiny.py          tiny random models of every supported family
  cli.py           `python -m core reap ...` and `python -m core bench-reap`
"""
