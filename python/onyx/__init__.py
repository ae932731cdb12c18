"""onyx: run and train ONNX models.

    onyx.InferenceSession   ONNX Runtime's InferenceSession interface (import onyx as ort)
    onyx.TrainingSession    train a model: loss, backward and a fused optimizer built in
    onyx.AutogradSession    a model as a differentiable function for other autograd engines
    onyx.Tensor             onyx's tensor; numpy(), __array__ and __dlpack__ share its memory
    onyx.from_dlpack(x)     an onyx.Tensor viewing a numpy array, torch tensor, ...
    onyx.Error              what every onyx failure raises (a RuntimeError)
    onyx.torch              torch integration, imported on first use (needs torch)
"""

import importlib

from ._onyx import AutogradSaved, AutogradSession, Error, Tensor, TrainingSession, from_dlpack
from .inference import (
    GraphOptimizationLevel,
    InferenceSession,
    ModelMetadata,
    NodeArg,
    RunOptions,
    SessionOptions,
    get_available_providers,
    get_device,
)

# Errors print as onyx.Error, the name users catch.
Error.__module__ = "onyx"

__version__ = "0.1.0"


def __getattr__(name):
    # onyx.torch imports torch, which onyx itself does not need: load it on first access only.
    if name == "torch":
        return importlib.import_module(".torch", __name__)
    raise AttributeError(f"module 'onyx' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + ["torch"])
