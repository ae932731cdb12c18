"""TORCH_LIBRARY(onyx) from Python and TorchScript: libonyx_torch.so (interop/) loaded with
torch.ops.load_library registers torch.classes.onyx.Model and torch.ops.onyx.run, which a
scripted function calls like any torch op; results equal onyx.InferenceSession's, and the op
is differentiable through the dispatcher."""
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import onyx  # noqa: E402

LIB = os.environ.get("ONYX_TORCH_LIBRARY", "")
MLP = os.path.join(os.path.dirname(__file__), "..", "data", "torch", "mlp", "model.onnx")

pytestmark = pytest.mark.skipif(not LIB or not os.path.exists(LIB),
                                reason="libonyx_torch.so not built (ONYX_TORCH_LIBRARY unset)")


@pytest.fixture(scope="module")
def model():
    torch.ops.load_library(LIB)
    return torch.classes.onyx.Model(MLP)


def reference(x):
    sess = onyx.InferenceSession(MLP)
    return sess.run(None, {sess.get_inputs()[0].name: x.numpy()})[0]


def test_op_runs_the_model(model):
    x = torch.randn(4, *np.load(os.path.join(os.path.dirname(MLP), "x.npy")).shape[2:])
    (y,) = torch.ops.onyx.run(model, [x])
    np.testing.assert_allclose(y.detach().numpy(), reference(x), rtol=1e-5, atol=1e-6)


def test_torchscript_function_calls_the_op(model):
    @torch.jit.script
    def logits(m: torch.classes.onyx.Model, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.onyx.run(m, [x])[0].softmax(-1)

    x = torch.randn(3, *np.load(os.path.join(os.path.dirname(MLP), "x.npy")).shape[2:])
    want = torch.from_numpy(reference(x)).softmax(-1)
    np.testing.assert_allclose(logits(model, x).detach().numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    assert "onyx::run" in str(logits.graph)


def test_op_is_differentiable_in_its_inputs(model):
    x = torch.randn(2, *np.load(os.path.join(os.path.dirname(MLP), "x.npy")).shape[2:],
                    requires_grad=True)
    (y,) = torch.ops.onyx.run(model, [x])
    y.sum().backward()
    assert x.grad is not None and x.grad.shape == x.shape
    assert float(x.grad.abs().sum()) > 0


def test_bad_input_is_a_clear_error(model):
    with pytest.raises(RuntimeError, match="float"):
        torch.ops.onyx.run(model, [torch.zeros(2, 3, dtype=torch.int64)])
