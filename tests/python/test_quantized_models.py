"""int8 models as users make them for CPUs, against onnxruntime: ONNX Runtime's quantized
com.microsoft ops one by one (onyx rewrites them into DequantizeLinear -> float op ->
QuantizeLinear), QLinearConv, and whole models through onnxruntime.quantization's
quantize_dynamic and quantize_static (QDQ and QOperator formats).

Integer outputs may differ from ORT's integer kernels by one step where a value lies on a
rounding boundary (the float computation is rounded once more or less); the tests allow that
step and require nearly all values to be equal."""
import functools

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyx

ort = pytest.importorskip("onnxruntime")
quantization = pytest.importorskip("onnxruntime.quantization")

MS = "com.microsoft"


def sessions(model):
    data = model.SerializeToString()
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    oso = onyx.SessionOptions()
    oso.intra_op_num_threads = 1
    return (onyx.InferenceSession(data, oso, providers=["CPUExecutionProvider"]),
            ort.InferenceSession(data, so, providers=["CPUExecutionProvider"]))


@functools.lru_cache(maxsize=None)
def ort_uint8_int8_products_exact():
    """Whether ORT's uint8 x int8 integer products are exact on this CPU. With VNNI they are;
    on AVX2 alone MLAS adds each pair of products in int16 with saturation (vpmaddubsw): 255 *
    127 twice gives 32767, not 64770. Where they are not, the uint8 x int8 cases below compare
    onyx with an exact reference instead (numpy, or onnx's reference evaluator)."""
    k = 64
    graph = helper.make_graph([helper.make_node("MatMulInteger", ["a", "b"], ["y"])], "probe",
                              [vi("a", TensorProto.UINT8, [1, k]), vi("b", TensorProto.INT8, [k, 1])],
                              [vi("y", TensorProto.INT32, None)])
    model = helper.make_model(graph, ir_version=9, opset_imports=[helper.make_opsetid("", 17)])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    y = sess.run(None, {"a": np.full((1, k), 255, np.uint8), "b": np.full((k, 1), 127, np.int8)})[0]
    return int(y[0, 0]) == 255 * 127 * k


class ReferenceRunner:
    """onnx's reference evaluator behind InferenceSession.run's signature (standard ops only)."""

    def __init__(self, model):
        from onnx.reference import ReferenceEvaluator
        self.evaluator = ReferenceEvaluator(model)

    def run(self, names, feeds):
        return self.evaluator.run(names, feeds)


def expect_within_one_step(got, want, min_equal=0.9):
    assert got.dtype == want.dtype and got.shape == want.shape
    d = np.abs(got.astype(np.int64) - want.astype(np.int64))
    assert d.max() <= 1, f"largest difference {d.max()} steps"
    assert np.mean(d == 0) >= min_equal, f"only {np.mean(d == 0):.3f} of the values equal"


def const(name, value, dtype):
    return numpy_helper.from_array(np.asarray(value, dtype=dtype), name)


def u8_model(nodes, inputs, outputs, inits):
    graph = helper.make_graph(nodes, "q", inputs, outputs, inits)
    return helper.make_model(graph, ir_version=9, opset_imports=[helper.make_opsetid("", 17),
                                                                 helper.make_opsetid(MS, 1)])


def vi(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


SCALES = [const("sa", 0.05, np.float32), const("za", 120, np.uint8),
          const("sb", 0.03, np.float32), const("zb", 131, np.uint8),
          const("sy", 0.07, np.float32), const("zy", 125, np.uint8)]

# (op, attributes, input names after the tensors, shape): two-input binary ops read (a, b).
UNARY = [("QLinearSigmoid", {}), ("QLinearLeakyRelu", {"alpha": 0.1}),
         ("QLinearGlobalAveragePool", {"channels_last": 0}),
         ("QLinearAveragePool", {"kernel_shape": [2, 2], "strides": [2, 2]}),
         ("QLinearSoftmax", {"axis": -1, "opset": 13})]


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
def test_binary_contrib_ops_equal_onnxruntime(op, rng=np.random.default_rng(1)):
    node = helper.make_node(op, ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"], ["y"], domain=MS)
    m = u8_model([node], [vi("a", TensorProto.UINT8, [2, 3, 8]), vi("b", TensorProto.UINT8, [3, 8])],
                 [vi("y", TensorProto.UINT8, None)], SCALES)
    feeds = {"a": rng.integers(0, 256, (2, 3, 8), dtype=np.uint8),
             "b": rng.integers(0, 256, (3, 8), dtype=np.uint8)}
    mine, theirs = sessions(m)
    expect_within_one_step(mine.run(None, feeds)[0], theirs.run(None, feeds)[0])


@pytest.mark.parametrize("op,attrs", UNARY, ids=[u[0] for u in UNARY])
def test_unary_contrib_ops_equal_onnxruntime(op, attrs, rng=np.random.default_rng(2)):
    node = helper.make_node(op, ["a", "sa", "za", "sy", "zy"], ["y"], domain=MS, **attrs)
    m = u8_model([node], [vi("a", TensorProto.UINT8, [2, 4, 12, 12])], [vi("y", TensorProto.UINT8, None)],
                 SCALES)
    feeds = {"a": rng.integers(0, 256, (2, 4, 12, 12), dtype=np.uint8)}
    mine, theirs = sessions(m)
    expect_within_one_step(mine.run(None, feeds)[0], theirs.run(None, feeds)[0])


def test_qlinear_concat_equals_onnxruntime(rng=np.random.default_rng(3)):
    node = helper.make_node("QLinearConcat", ["sy", "zy", "a", "sa", "za", "b", "sb", "zb"], ["y"],
                            domain=MS, axis=1)
    m = u8_model([node], [vi("a", TensorProto.UINT8, [2, 3, 4]), vi("b", TensorProto.UINT8, [2, 5, 4])],
                 [vi("y", TensorProto.UINT8, None)], SCALES)
    feeds = {"a": rng.integers(0, 256, (2, 3, 4), dtype=np.uint8),
             "b": rng.integers(0, 256, (2, 5, 4), dtype=np.uint8)}
    mine, theirs = sessions(m)
    expect_within_one_step(mine.run(None, feeds)[0], theirs.run(None, feeds)[0])


@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("quantized_output", [False, True])
def test_qgemm_equals_onnxruntime(per_channel, quantized_output, rng=np.random.default_rng(4)):
    K, N = 24, 10
    b = rng.integers(-128, 128, (N, K), dtype=np.int8)
    bs = np.full(N, 0.02, np.float32) * (1 + np.arange(N) % 3) if per_channel else np.float32(0.02)
    bz = np.zeros(N if per_channel else (), np.int8)
    inits = SCALES + [numpy_helper.from_array(b, "B"), const("bs2", bs, np.float32),
                      const("bz2", bz, np.int8), const("C", rng.integers(-500, 500, N), np.int32)]
    ins = ["a", "sa", "za", "B", "bs2", "bz2", "C"] + (["sy", "zy"] if quantized_output else [])
    node = helper.make_node("QGemm", ins, ["y"], domain=MS, transB=1, alpha=1.0)
    m = u8_model([node], [vi("a", TensorProto.UINT8, [16, K])],
                 [vi("y", TensorProto.UINT8 if quantized_output else TensorProto.FLOAT, None)], inits)
    feeds = {"a": rng.integers(0, 256, (16, K), dtype=np.uint8)}
    mine, theirs = sessions(m)
    got = mine.run(None, feeds)[0]
    if ort_uint8_int8_products_exact():
        want = theirs.run(None, feeds)[0]
    else:  # the definition: ((a - za) x (B - bz)^T + C) sa bs, the sums exact in int64
        scale = np.float64(0.05) * np.asarray(bs, np.float64)
        acc = (feeds["a"].astype(np.int64) - 120) @ (b.astype(np.int64) - bz.astype(np.int64).reshape(-1, 1)).T
        acc += numpy_helper.to_array(inits[-1]).astype(np.int64)
        want = (acc * scale).astype(np.float32)
        if quantized_output:
            want = np.clip(np.rint(want.astype(np.float64) / 0.07) + 125, 0, 255).astype(np.uint8)
    if quantized_output:
        expect_within_one_step(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("signed_x", [False, True])
def test_qlinear_conv_equals_onnxruntime(signed_x, rng=np.random.default_rng(5)):
    xdt, lo, hi = (np.int8, -128, 128) if signed_x else (np.uint8, 0, 256)
    w = rng.integers(-128, 128, (8, 4, 3, 3), dtype=np.int8)
    inits = [const("xs", 0.04, np.float32), const("xz", 3 if signed_x else 128, xdt),
             numpy_helper.from_array(w, "w"), const("ws", np.linspace(0.01, 0.02, 8), np.float32),
             const("wz", np.zeros(8), np.int8), const("ys", 0.5, np.float32),
             const("yz", -2 if signed_x else 100, xdt), const("bias", rng.integers(-2000, 2000, 8), np.int32)]
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "bias"], ["y"],
                            pads=[1, 1, 1, 1], strides=[2, 2])
    dt = TensorProto.INT8 if signed_x else TensorProto.UINT8
    m = u8_model([node], [vi("x", dt, [2, 4, 9, 9])], [vi("y", dt, None)], inits)
    feeds = {"x": rng.integers(lo, hi, (2, 4, 9, 9)).astype(xdt)}
    mine, theirs = sessions(m)
    if not ort_uint8_int8_products_exact():
        theirs = ReferenceRunner(m)  # QLinearConv is a standard op: onnx's evaluator runs it
    expect_within_one_step(mine.run(None, feeds)[0], theirs.run(None, feeds)[0])


def float_cnn(rng):
    """Conv -> Relu -> MaxPool -> Conv -> Add (residual) -> GlobalAveragePool -> Flatten ->
    Gemm -> Softmax: the layers int8 CNNs are made of."""
    def w(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c2", "p1"], ["s"]),
             helper.make_node("GlobalAveragePool", ["s"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "w3", "b3"], ["z"], transB=1),
             helper.make_node("Softmax", ["z"], ["y"], axis=-1)]
    inits = [w("w1", 8, 3, 3, 3), w("b1", 8), w("w2", 8, 8, 3, 3), w("b2", 8), w("w3", 5, 8), w("b3", 5)]
    graph = helper.make_graph(nodes, "cnn", [vi("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [vi("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, ir_version=9, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("fmt", ["dynamic", "QDQ", "QOperator"])
def test_quantized_cnn_equals_onnxruntime(fmt, tmp_path, rng=np.random.default_rng(6)):
    import onnx
    src, dst = tmp_path / "float.onnx", tmp_path / "int8.onnx"
    onnx.save(float_cnn(rng), src)
    calib = [{"x": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)} for _ in range(4)]

    class Reader(quantization.CalibrationDataReader):
        def __init__(self):
            self.it = iter(calib)

        def get_next(self):
            return next(self.it, None)

    if fmt == "dynamic":
        quantization.quantize_dynamic(str(src), str(dst), weight_type=quantization.QuantType.QInt8)
    else:
        quantization.quantize_static(str(src), str(dst), Reader(),
                                     quant_format=getattr(quantization.QuantFormat, fmt),
                                     activation_type=quantization.QuantType.QUInt8,
                                     weight_type=quantization.QuantType.QInt8)
    model = onnx.load(dst)
    mine, theirs = sessions(model)
    if fmt == "dynamic" and not ort_uint8_int8_products_exact():
        # quantize_dynamic writes standard ops only (DynamicQuantizeLinear, ConvInteger,
        # MatMulInteger) with uint8 activations and int8 weights: onnx's evaluator is exact.
        theirs = ReferenceRunner(model)
    for x in calib[:2] + [{"x": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)}]:
        got, want = mine.run(None, x)[0], theirs.run(None, x)[0]
        # Softmax of dequantized logits: one quantization step of the logits moves a
        # probability by a few percent at most.
        np.testing.assert_allclose(got, want, atol=0.03)
        assert np.argmax(got) == np.argmax(want) or np.sort(want)[0, -1] - np.sort(want)[0, -2] < 0.03
