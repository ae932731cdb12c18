#!/usr/bin/env bash
# Installs PyTorch from PyPI into a Python environment for CPU use, when it does not import yet:
#   scripts/install_torch.sh [PYTHON]        # default .venv/bin/python
# The PyPI wheel depends on several GB of CUDA packages; a CPU run needs only the wheel, its
# pure-Python dependencies and the few CUDA libraries libtorch links against that a machine
# may lack. Used by scripts/setup.sh (onyx.torch, interop/ and their tests need torch) and the
# benchmarks. ONYX_TORCH_SPEC pins a version (e.g. "torch==2.15.0").
set -euo pipefail
PY=${1:-${ONYX_PYTHON:-.venv/bin/python}}
SPEC=${ONYX_TORCH_SPEC:-torch}
torch_ok() { "$PY" -c "import torch; torch.randn(2, 2) @ torch.randn(2, 2)" 2>/dev/null; }
torch_ok && exit 0
echo "install_torch: installing PyTorch (CPU use) into $PY's environment" >&2
"$PY" -m pip install -q --no-deps "$SPEC"
"$PY" -m pip install -q filelock typing-extensions sympy networkx jinja2 fsspec
torch_ok || "$PY" -m pip install -q --no-deps nvidia-cufile nvidia-cusparselt-cu13 \
  nvidia-nvshmem-cu13 nvidia-nccl-cu13
torch_ok || "$PY" -m pip install -q "$SPEC"  # the full dependency set, as a last resort
torch_ok || { echo "install_torch: PyTorch does not import; see '$PY -c \"import torch\"'" >&2; exit 1; }
