#!/usr/bin/env bash
# The target's vision tower trained on a lent GPU machine (the `device` tool's): a bare box that cannot reach Debian's
# archive and takes back at most 16 MB a file, so the photographs and fonts travel as one archive and the trained
# tower comes back in 15 MB pieces. Everything else is `python -m core train tower` (core/training/tower.py).
#
# Here, once (the archive, about 15 MB, beside the repository's 37 MB: under the 64 MiB a call carries):
#     python -m core.world.image_sources --export runs/sources && tar -cJf runs/sources.tar.xz -C runs sources
# The device call, carry ["runs/sources.tar.xz"] (SECONDS: the training's time budget, its evaluations included):
#     bash scripts/device_tower.sh SECONDS --init assets/models/target --batch 96 ...   # any `train tower` flags
# Back here, the checkpoint from the call's files (files_at):
#     cat FILES_AT/tower.tar.* | tar -xf - -C runs      # runs/tower, then `train target --init runs/tower ...`
set -euo pipefail
seconds=$1
shift
tar -xJf runs/sources.tar.xz -C /tmp
export SPECULUM_IMAGE_SOURCES=/tmp/sources PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null || echo "no GPU: training on the CPU"
# Drawing the images is the CPU's work: every core but one draws.
python3 -m core train tower --seconds "$seconds" --workers $(($(nproc) - 1)) --out /tmp/tower "$@" 2>&1 |
  tee "$OUT/train.log" | { grep -v "^tower step" || true; }   # the whole log comes back in train.log
tar -cf - -C /tmp tower | split -b 15M - "$OUT/tower.tar."
ls -la "$OUT"
