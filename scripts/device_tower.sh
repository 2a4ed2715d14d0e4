#!/usr/bin/env bash
# The target's vision tower trained on a lent GPU machine (the `device` tool's): a bare box that cannot reach Debian's
# archive and takes back at most 16 MB a file, so the photographs and fonts travel as one archive and the trained
# tower comes back in 15 MB pieces. Everything else is `python -m core train tower` (core/training/tower.py).
#
# Here, once (the archive, about 15 MB):
#     python -m core.world.image_sources --export runs/sources && tar -cJf runs/sources.tar.xz -C runs sources
# A call carries at most 64 MiB (67.1 MB); since target run 23 the repository is 71 MB (the target 49 MB: its tower's
# merger holds 17.6M of its 24.7M parameters), so the files the tower does not read leave the working tree for the
# call (51 MB stay, with the 15 MB archive) and come back after it:
#     git ls-files -z assets/models assets/corpus docs tests | grep -zv '^assets/models/target/' | xargs -0 rm
# The device call, carry ["runs/sources.tar.xz"] (SECONDS: the training's time budget, its evaluations included):
#     bash scripts/device_tower.sh SECONDS --init assets/models/target --continue-tower --first-image 100000 ...
#   (any flags, e.g. --batch 96; the shipped tower saw the first 72 000 images of its range: it goes on past them)
# Back here, the files again and the checkpoint from the call's files (files_at):
#     git checkout -- assets docs tests
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
