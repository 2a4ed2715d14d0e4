"""Memory of the REAP tab: what the server holds after visiting several pruning ratios of the embedded MoE.

    python scripts/reap_memory.py [--ratios 0.125,0.25,0.375,0.5,0.625,0.75] [--json PATH]

In a fresh process with an empty score cache, it loads the lab as the app does, then for each ratio does what one
slider release does (view, curve, subspace, samples: core/reap/lab.py). It reports resident memory (VmRSS, and the
peak VmHWM) before the model, with it loaded, and after the visits, and the models alive and their weights (each
storage once, so a tied weight counts once) in units of the loaded model's.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ["SPECULUM_CACHE"] = tempfile.mkdtemp(prefix="speculum-memory-")  # scores and quality computed, not read
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from transformers import PreTrainedModel  # noqa: E402

from core.reap.lab import Lab  # noqa: E402


def status_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise KeyError(field)


def model_weights() -> tuple[int, int]:
    """(models alive, bytes of their weights): every PreTrainedModel in the process, each storage counted once."""
    seen, total, models = set(), 0, 0
    for obj in gc.get_objects():
        if isinstance(obj, PreTrainedModel):
            models += 1
            for tensor in [*obj.parameters(), *obj.buffers()]:
                storage = tensor.untyped_storage()
                if storage.data_ptr() not in seen:
                    seen.add(storage.data_ptr())
                    total += storage.nbytes()
    return models, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ratios", default="0.125,0.25,0.375,0.5,0.625,0.75")
    parser.add_argument("--calib", default="mixed")
    parser.add_argument("--method", default="reap")
    parser.add_argument("--json")
    args = parser.parse_args()
    torch.set_num_threads(1)
    before = status_mb("VmRSS")
    lab = Lab("embedded")
    gc.collect()
    loaded, (models_loaded, model_bytes) = status_mb("VmRSS"), model_weights()
    for ratio in map(float, args.ratios.split(",")):
        lab.view(args.calib, args.method, ratio)
        lab.curve(args.calib)
        lab.subspace(args.calib, args.method, ratio)
        lab.samples(args.calib, args.method, ratio)
    gc.collect()
    after, peak, (models_after, weights_after) = status_mb("VmRSS"), status_mb("VmHWM"), model_weights()
    out = {
        "ratios": args.ratios, "calibration": args.calib, "method": args.method,
        "model_weights_mb": round(model_bytes / 2**20, 2),
        "rss_mb": {"before_model": round(before, 1), "model_loaded": round(loaded, 1), "after_visits": round(after, 1),
                   "peak": round(peak, 1)},
        "model_loaded_over_before_mb": round(loaded - before, 1),
        "peak_growth_over_model_loaded": round((peak - before) / (loaded - before), 3),
        "peak_over_rss_model_loaded": round(peak / loaded, 3),
        "models_alive": {"model_loaded": models_loaded, "after_visits": models_after},
        "weights_alive_over_model": round(weights_after / model_bytes, 3),
    }
    print(json.dumps(out, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
