"""onyx.Tensor and onyx.from_dlpack: memory shared with numpy and torch without copies, both
ways, for every dtype both sides know; lifetimes; strided and bad inputs."""
import gc
import sys

import numpy as np
import pytest

import onyx

NUMPY_DTYPES = [np.float16, np.float32, np.float64, np.int8, np.int16, np.int32, np.int64,
                np.uint8, np.uint16, np.uint32, np.uint64, np.bool_]


def ptr(array):
    return array.__array_interface__["data"][0]


def sample(dtype, shape=(2, 3)):
    n = int(np.prod(shape))
    if dtype == np.bool_:
        return (np.arange(n) % 2 == 0).reshape(shape)
    return np.arange(n).astype(dtype).reshape(shape)


def one(dtype):
    return np.array(True if dtype == np.bool_ else 7).astype(dtype)


def test_error_is_a_runtime_error():
    assert issubclass(onyx.Error, RuntimeError)


@pytest.mark.parametrize("dtype", NUMPY_DTYPES, ids=lambda d: np.dtype(d).name)
def test_numpy_to_onyx_is_a_view(dtype):
    a = sample(dtype)
    t = onyx.from_dlpack(a)
    assert t.shape == (2, 3)
    assert t.dtype == np.dtype(dtype)
    view = t.numpy()
    assert ptr(view) == ptr(a)
    a[1, 2] = one(dtype)  # numpy -> onyx
    assert view[1, 2] == one(dtype)
    view[0, 1] = one(dtype)  # onyx -> numpy
    assert a[0, 1] == one(dtype)
    np.testing.assert_array_equal(np.asarray(t), a)


@pytest.mark.parametrize("dtype", NUMPY_DTYPES, ids=lambda d: np.dtype(d).name)
def test_onyx_to_numpy_from_dlpack_is_a_view(dtype):
    t = onyx.from_dlpack(sample(dtype))
    b = np.from_dlpack(t)  # through onyx.Tensor.__dlpack__
    assert ptr(b) == ptr(t.numpy())
    assert b.dtype == np.dtype(dtype)
    b[0, 0] = one(dtype)
    assert t.numpy()[0, 0] == one(dtype)


def test_array_protocol_is_a_view_unless_a_copy_is_asked_for():
    t = onyx.from_dlpack(sample(np.float32))
    assert ptr(np.asarray(t)) == ptr(t.numpy())
    copied = np.array(t, copy=True)
    assert ptr(copied) != ptr(t.numpy())
    np.testing.assert_array_equal(copied, t.numpy())
    np.testing.assert_array_equal(np.asarray(t, dtype=np.float64), t.numpy().astype(np.float64))


def test_dlpack_copy_and_device_arguments():
    t = onyx.from_dlpack(sample(np.float32))
    assert t.__dlpack_device__() == (1, 0)
    c = np.from_dlpack(t, copy=True)
    assert ptr(c) != ptr(t.numpy())
    with pytest.raises(BufferError):
        t.__dlpack__(dl_device=(2, 0))


def test_scalars_and_empty_tensors():
    s = onyx.from_dlpack(np.array(3.5, dtype=np.float32))
    assert s.shape == () and s.numpy() == 3.5
    e = onyx.from_dlpack(np.zeros((0, 4), dtype=np.int64))
    assert e.shape == (0, 4) and e.numpy().shape == (0, 4)


def test_numpy_array_outlives_the_onyx_tensor():
    t = onyx.from_dlpack(sample(np.float64))
    view = t.numpy()
    del t
    gc.collect()
    assert view.sum() == 15.0


def test_onyx_tensor_keeps_the_numpy_array_alive_and_releases_it_once():
    a = sample(np.float32)
    before = sys.getrefcount(a)
    t = onyx.from_dlpack(a)
    assert sys.getrefcount(a) > before  # numpy's DLPack export holds the array
    view = t.numpy()
    del t
    gc.collect()
    assert sys.getrefcount(a) > before  # the numpy view of the onyx storage still does
    del view
    gc.collect()
    assert sys.getrefcount(a) == before  # the producer's deleter ran, exactly once


def test_strided_arrays_are_refused_unless_a_copy_is_asked_for():
    a = sample(np.float32, (3, 4))
    with pytest.raises(onyx.Error, match=r"shape \[4, 3\] has strides \[1, 4\]"):
        onyx.from_dlpack(a.T)
    c = onyx.from_dlpack(a.T, copy_if_strided=True)
    np.testing.assert_array_equal(c.numpy(), a.T)
    assert ptr(c.numpy()) != ptr(a)
    sliced = onyx.from_dlpack(a[:, ::2], copy_if_strided=True)
    np.testing.assert_array_equal(sliced.numpy(), a[:, ::2])


def test_bad_inputs_raise_and_leave_the_interpreter_usable():
    with pytest.raises(TypeError, match="__dlpack__"):
        onyx.from_dlpack([1.0, 2.0])
    with pytest.raises(onyx.Error, match=r"unsupported DLPack dtype \(code 5, bits 64"):
        onyx.from_dlpack(np.zeros(3, dtype=np.complex64))
    t = onyx.from_dlpack(np.ones(2, dtype=np.float32))
    assert t.numpy().sum() == 2.0


def test_repr_and_attributes():
    t = onyx.from_dlpack(sample(np.int32, (2, 3, 4)))
    assert repr(t) == "onyx.Tensor(int32, shape=[2, 3, 4])"
    assert t.ndim == 3 and t.size == 24


# torch, where it is installed ------------------------------------------------------------

TORCH_DTYPES = ["float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64",
                "uint8", "uint16", "uint32", "uint64", "bool"]


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


def torch_sample(torch, name):
    dtype = getattr(torch, name)
    if name == "bool":
        return torch.arange(6).reshape(2, 3) % 2 == 0
    return torch.arange(6, dtype=torch.int64).reshape(2, 3).to(dtype)


@pytest.mark.parametrize("name", TORCH_DTYPES)
def test_torch_to_onyx_and_back_share_memory(torch, name):
    x = torch_sample(torch, name)
    t = onyx.from_dlpack(x)
    assert t.shape == (2, 3)
    back = torch.from_dlpack(t)
    assert back.dtype == x.dtype
    assert back.data_ptr() == x.data_ptr()
    value = torch.tensor(True if name == "bool" else 5).to(x.dtype)
    x[1, 1] = value  # torch -> onyx -> torch
    assert back[1, 1] == value
    back[0, 2] = value
    assert x[0, 2] == value


@pytest.mark.parametrize("name", [n for n in TORCH_DTYPES if n not in ("bfloat16",)])
def test_onyx_numpy_view_of_a_torch_tensor(torch, name):
    x = torch_sample(torch, name)
    view = onyx.from_dlpack(x).numpy()
    assert ptr(view) == x.data_ptr()
    np.testing.assert_array_equal(view, x.numpy())


def test_bfloat16_numpy_view_through_ml_dtypes(torch):
    pytest.importorskip("ml_dtypes")
    x = torch.tensor([1.5, -2.0, 3.0], dtype=torch.bfloat16)
    view = onyx.from_dlpack(x).numpy()
    assert view.dtype.name == "bfloat16"
    assert ptr(view) == x.data_ptr()
    np.testing.assert_array_equal(view.astype(np.float32), [1.5, -2.0, 3.0])


def test_torch_from_onyx_tensor_made_by_numpy(torch):
    a = sample(np.float32)
    x = torch.from_dlpack(onyx.from_dlpack(a))
    assert x.data_ptr() == ptr(a)
    x += 1  # in place, through two hops
    np.testing.assert_array_equal(a, sample(np.float32) + 1)


def test_parameters_that_require_grad_are_viewed_detached(torch):
    p = torch.nn.Parameter(torch.ones(3))
    t = onyx.from_dlpack(p)
    assert ptr(t.numpy()) == p.data_ptr()


def test_torch_tensor_outlives_onyx_and_onyx_outlives_torch(torch):
    x = torch.arange(4, dtype=torch.float32)
    t = onyx.from_dlpack(x)
    del x
    gc.collect()
    assert t.numpy().tolist() == [0.0, 1.0, 2.0, 3.0]  # onyx holds torch's storage
    y = torch.from_dlpack(t)
    del t
    gc.collect()
    assert y.tolist() == [0.0, 1.0, 2.0, 3.0]  # torch holds onyx's view


def test_transposed_torch_tensor(torch):
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    with pytest.raises(onyx.Error, match="strides"):
        onyx.from_dlpack(x.t())
    np.testing.assert_array_equal(onyx.from_dlpack(x.t(), copy_if_strided=True).numpy(),
                                  x.t().numpy())
