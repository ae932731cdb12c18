"""Shared fixtures for the onyx Python package tests.

ctest runs these with PYTHONPATH=<build>/python and ONYX_REQUIRE_EXTENSION=1, where a package
that fails to import is an error; run by hand without the package, the tests skip.
"""
import os
import pathlib

import numpy as np
import pytest

if os.environ.get("ONYX_REQUIRE_EXTENSION"):
    import onyx  # noqa: F401  (fails loudly)
else:
    pytest.importorskip("onyx._onyx", reason="the onyx extension is not built or not on PYTHONPATH")

REPO = pathlib.Path(__file__).resolve().parents[2]
TORCH_DATA = REPO / "tests" / "data" / "torch"


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture(scope="session")
def gemm_model_bytes():
    """y = x @ W^T + b (Gemm, transB) with x [batch, 3], W [2, 3], b [2]: small enough to
    check by hand, with the weights as initializers."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    w = np.array([[1.0, -2.0, 0.5], [0.25, 1.0, -1.0]], dtype=np.float32)
    b = np.array([0.5, -0.5], dtype=np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "W", "b"], ["y"], transB=1, name="fc")],
        "gemm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="onyx-tests")
    model.ir_version = 8
    return model.SerializeToString()
