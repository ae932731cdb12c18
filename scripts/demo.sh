#!/usr/bin/env bash
# The main job, end to end: set up, train the digits MLP with `onyx train` (metrics,
# checkpoints, loss plot, export), run the exported model with `onyx run` on held-out images
# and check its accuracy (>= 97%), then run the example inference models against independent
# numpy references. Everything lands in out/demo/.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD=${ONYX_BUILD_DIR:-build}
PY=${ONYX_VENV:-.venv}/bin/python
exec "$PY" scripts/demo.py --onyx "$BUILD/launcher/onyx"
