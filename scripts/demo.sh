#!/usr/bin/env bash
# The main job, end to end: set up, generate the example models, run the transformer
# encoder and the CNN through the `onyx` command line, and check the outputs against an
# independent numpy reference.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD=${ONYX_BUILD_DIR:-build}
PY=${ONYX_VENV:-.venv}/bin/python
exec "$PY" scripts/demo.py --onyx "$BUILD/launcher/onyx"
