"""onyx.AutogradSession: forward and backward of a tiny Gemm model against numpy math, with
numpy arrays and torch tensors as arguments (viewed, not copied), buffers' state updates, and
errors."""
import gc

import numpy as np
import pytest

import onyx

W = np.array([[1.0, -2.0, 0.5], [0.25, 1.0, -1.0]], dtype=np.float32)
B = np.array([0.5, -0.5], dtype=np.float32)


@pytest.fixture
def session(gemm_model_bytes):
    return onyx.AutogradSession(gemm_model_bytes, parameters=["W", "b"], buffers=[], threads=1)


def test_names_and_initializers(session):
    assert session.input_names == ["x"]
    assert session.output_names == ["y"]
    assert session.parameter_names == ["W", "b"]
    assert session.buffer_names == []
    assert session.missing_gradients() == []
    np.testing.assert_array_equal(session.initializer("W").numpy(), W)
    np.testing.assert_array_equal(np.asarray(session.initializer("b")), B)


def test_forward_and_backward_match_numpy(session, rng):
    x = rng.standard_normal((4, 3)).astype(np.float32)
    w, b = W.copy(), B.copy()
    outputs, saved, updates = session.forward([x], [w, b], [], training=True, need_grad=True)
    assert saved is not None and updates == []
    (y,) = outputs
    assert isinstance(y, onyx.Tensor)
    np.testing.assert_allclose(y.numpy(), x @ w.T + b, rtol=1e-6, atol=1e-6)

    dy = rng.standard_normal((4, 2)).astype(np.float32)
    input_grads, param_grads = session.backward(saved, [dy])
    (dx,) = input_grads
    dw, db = param_grads
    np.testing.assert_allclose(dx.numpy(), dy @ w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dw.numpy(), dy.T @ x, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(db.numpy(), dy.sum(0), rtol=1e-5, atol=1e-6)


def test_parameters_are_read_where_the_caller_keeps_them(session):
    """The caller's optimizer updates its arrays in place; the next forward sees the change
    because onyx views the arrays instead of copying them."""
    x = np.ones((1, 3), dtype=np.float32)
    w, b = W.copy(), B.copy()
    (y0,), _, _ = session.forward([x], [w, b], [], training=False, need_grad=False)
    w -= 1.0
    (y1,), _, _ = session.forward([x], [w, b], [], training=False, need_grad=False)
    np.testing.assert_allclose(y1.numpy(), y0.numpy() - 3.0, rtol=1e-6)


def test_no_grad_forward_keeps_nothing_and_none_grads_are_zeros(session):
    x = np.ones((2, 3), dtype=np.float32)
    _, saved, _ = session.forward([x], [W, B], [], training=False, need_grad=False)
    assert saved is None
    _, saved, _ = session.forward([x], [W, B], [], training=True, need_grad=True, seed=3)
    input_grads, param_grads = session.backward(saved, [None])
    for g in input_grads + param_grads:
        assert g is None or not np.any(g.numpy())


def test_saved_keeps_the_callers_tensors_alive(session):
    x = np.ones((2, 3), dtype=np.float32)
    w, b = W.copy(), B.copy()
    _, saved, _ = session.forward([x], [w, b], [], training=True, need_grad=True)
    del x, w, b
    gc.collect()
    _, (dw, db) = session.backward(saved, [np.ones((2, 2), dtype=np.float32)])
    np.testing.assert_allclose(dw.numpy(), np.full((2, 3), 2.0))
    np.testing.assert_allclose(db.numpy(), [2.0, 2.0])


def test_torch_tensors_in_and_out(session):
    torch = pytest.importorskip("torch")
    x = torch.randn(5, 3)
    w = torch.nn.Parameter(torch.from_numpy(W.copy()))
    b = torch.nn.Parameter(torch.from_numpy(B.copy()))
    (y,), saved, _ = session.forward([x], [w, b], [], training=True, need_grad=True)
    y_torch = torch.from_dlpack(y)
    torch.testing.assert_close(y_torch, x @ w.detach().T + b.detach())
    dy = torch.randn(5, 2)
    (dx,), (dw, db) = session.backward(saved, [dy])
    torch.testing.assert_close(torch.from_dlpack(dx), dy @ w.detach())
    torch.testing.assert_close(torch.from_dlpack(dw), dy.T @ x)
    torch.testing.assert_close(torch.from_dlpack(db), dy.sum(0))


def test_batchnorm_buffers_come_back_as_state_updates(rng):
    from onnx import TensorProto, helper, numpy_helper
    c = 3
    init = {"scale": np.ones(c, np.float32), "bias": np.zeros(c, np.float32),
            "mean": np.zeros(c, np.float32), "var": np.ones(c, np.float32)}
    graph = helper.make_graph(
        [helper.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["y"],
                          momentum=0.9)], "bn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", c])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", c])],
        [numpy_helper.from_array(v, k) for k, v in init.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    model.ir_version = 8
    s = onyx.AutogradSession(model.SerializeToString(), parameters=["scale", "bias"],
                             buffers=["mean", "var"], threads=1)
    x = rng.standard_normal((16, c)).astype(np.float32) * 2 + 1
    (y,), _, updates = s.forward([x], [init["scale"], init["bias"]], [init["mean"], init["var"]],
                                 training=True, need_grad=True)
    np.testing.assert_allclose(y.numpy(), (x - x.mean(0)) / np.sqrt(x.var(0) + 1e-5), atol=1e-4)
    new = dict(updates)
    assert sorted(new) == ["mean", "var"]
    np.testing.assert_allclose(new["mean"].numpy(), 0.1 * x.mean(0), rtol=1e-4, atol=1e-5)
    _, _, eval_updates = s.forward([x], [init["scale"], init["bias"]],
                                   [init["mean"], init["var"]], training=False, need_grad=False)
    assert eval_updates == []


def test_bad_arguments_raise_onyx_error(session, gemm_model_bytes):
    x = np.ones((2, 3), dtype=np.float32)
    with pytest.raises(onyx.Error):
        session.forward([x], [W], [], training=False, need_grad=False)  # one parameter short
    with pytest.raises(onyx.Error):
        session.forward([x.astype(np.float64)], [W, B], [], training=False, need_grad=False)
    with pytest.raises(onyx.Error):
        session.forward([np.ones((2, 4), np.float32)], [W, B], [], training=False, need_grad=False)
    with pytest.raises(onyx.Error, match="nope"):
        onyx.AutogradSession(gemm_model_bytes, parameters=["nope"], buffers=[])
    with pytest.raises(TypeError):
        session.forward([[1.0, 2.0, 3.0]], [W, B], [], training=False, need_grad=False)
    (y,), _, _ = session.forward([x], [W, B], [], training=False, need_grad=False)
    np.testing.assert_allclose(y.numpy(), x @ W.T + B, rtol=1e-6)
