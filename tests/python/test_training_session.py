"""onyx.TrainingSession on the torch-exported MLP of tests/data: torch's loss trajectory,
training lowers the loss, checkpoints resume bit-identically, the exported model runs in
InferenceSession (and ONNX Runtime), parameters can be read and written, errors are onyx.Error."""
import json

import numpy as np
import pytest

import onyx
from conftest import TORCH_DATA

MLP = TORCH_DATA / "mlp"


@pytest.fixture(scope="module")
def data():
    return np.load(MLP / "x.npy"), np.load(MLP / "labels.npy")  # [10, 8, 16], [10, 8]


def batch(data, i):
    xs, ys = data
    return {"x": xs[i % len(xs)], "labels": ys[i % len(ys)]}


def torch_sgd_session():
    """The optimizer torch used for losses.json (SGD, momentum, every parameter decayed)."""
    ref = json.loads((MLP / "losses.json").read_text())
    c = ref["sgd"]["config"]
    ts = onyx.TrainingSession(str(MLP / "model.onnx"), loss="softmax_cross_entropy",
                              optimizer="sgd", lr=c["lr"], momentum=c["momentum"],
                              nesterov=c["nesterov"], weight_decay=c["weight_decay"],
                              decay_1d=True, threads=1)
    return ts, ref["sgd"]["losses"]


def test_losses_follow_torchs_trajectory(data):
    ts, want = torch_sgd_session()
    assert sorted(ts.parameter_names) == ["fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight"]
    assert ts.batch_inputs == ["x", "labels"]
    for step in range(20):
        got = ts.train_step(batch(data, step))
        assert abs(got - want[step]) <= 1e-4 * want[step], step
    assert ts.step == 20


def test_training_lowers_the_loss_and_reports_steps(data):
    ts = onyx.TrainingSession(MLP / "model.onnx", optimizer="adamw", lr=1e-2, threads=1,
                              schedule="cosine", warmup_steps=5, total_steps=60)
    before = np.mean([ts.eval_step(batch(data, i))["loss"] for i in range(10)])
    for step in range(60):
        info = ts.train_step_detailed(batch(data, step))
        assert info["stepped"] and info["lr"] > 0 and np.isfinite(info["grad_norm"])
    after = np.mean([ts.eval_step(batch(data, i))["loss"] for i in range(10)])
    assert after < 0.5 * before
    assert ts.step == 60
    assert ts.learning_rate == pytest.approx(0.0, abs=1e-9)  # the end of the cosine decay


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_trains_and_reports_the_loss_scale(data, precision):
    ts = onyx.TrainingSession(MLP / "model.onnx", optimizer="adamw", lr=1e-2, threads=1,
                              precision=precision, init_loss_scale=1024.0)
    before = np.mean([ts.eval_step(batch(data, i))["loss"] for i in range(10)])
    for step in range(60):
        info = ts.train_step_detailed(batch(data, step))
        assert info["loss_scale"] == (1024.0 if precision == "fp16" else 0.0)
        assert info["stepped"] and not info["skipped"]
    after = np.mean([ts.eval_step(batch(data, i))["loss"] for i in range(10)])
    assert after < 0.5 * before
    assert ts.parameter("fc1.weight").dtype == np.float32  # master weights stay float32


def test_checkpoint_round_trip_resumes_identically(data, tmp_path):
    ts = onyx.TrainingSession(str(MLP / "model.onnx"), optimizer="adam", lr=3e-3, threads=1)
    for step in range(5):
        ts.train_step(batch(data, step))
    ckpt = str(tmp_path / "step5.onyx")
    ts.save_checkpoint(ckpt)
    first = [ts.train_step(batch(data, step)) for step in range(5, 10)]
    weights = ts.parameter("fc1.weight").copy()

    resumed = onyx.TrainingSession(str(MLP / "model.onnx"), optimizer="adam", lr=3e-3, threads=1)
    resumed.load_checkpoint(ckpt)
    assert resumed.step == 5
    second = [resumed.train_step(batch(data, step)) for step in range(5, 10)]
    assert first == second
    np.testing.assert_array_equal(resumed.parameter("fc1.weight"), weights)


def test_export_runs_in_inference_session_and_onnxruntime(data, tmp_path):
    ts = onyx.TrainingSession(str(MLP / "model.onnx"), optimizer="sgd", lr=0.05, threads=1)
    for step in range(10):
        ts.train_step(batch(data, step))
    x = data[0][3]
    want = ts.predict({"x": x})["logits"]
    path = str(tmp_path / "trained.onnx")
    ts.export_inference_model(path)
    (got,) = onyx.InferenceSession(path).run(None, {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    (from_bytes,) = onyx.InferenceSession(ts.export_inference_model()).run(None, {"x": x})
    np.testing.assert_array_equal(from_bytes, got)
    ort = pytest.importorskip("onnxruntime")
    (theirs,) = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(theirs, want, rtol=1e-5, atol=1e-5)


def test_parameters_are_live_views_and_can_be_set(data):
    ts = onyx.TrainingSession(str(MLP / "model.onnx"), optimizer="sgd", lr=0.1, threads=1)
    w = ts.parameter("fc2.weight")
    assert w.shape == (5, 32) and w.dtype == np.float32
    start = w.copy()
    ts.train_step(batch(data, 0))
    assert not np.array_equal(w, start)  # the view follows the training
    ts.set_parameter("fc2.weight", np.zeros((5, 32), dtype=np.float32))
    ts.set_parameter("fc2.bias", np.arange(5, dtype=np.float32))
    logits = ts.predict({"x": data[0][0]})["logits"]
    np.testing.assert_array_equal(logits, np.tile(np.arange(5, dtype=np.float32), (8, 1)))
    with pytest.raises(onyx.Error, match="fc2.weight"):
        ts.set_parameter("fc2.weight", np.zeros((4, 32), dtype=np.float32))
    with pytest.raises(onyx.Error, match="nope"):
        ts.parameter("nope")


def test_freeze_trainable_and_param_groups(data):
    frozen = onyx.TrainingSession(str(MLP / "model.onnx"), optimizer="sgd", lr=0.1, threads=1,
                                  freeze=["^fc1\\."])
    assert sorted(frozen.parameter_names) == ["fc2.bias", "fc2.weight"]
    only = onyx.TrainingSession(str(MLP / "model.onnx"), optimizer="sgd", lr=0.1, threads=1,
                                trainable=["fc1.weight"])
    assert only.parameter_names == ["fc1.weight"]
    # lr 0 for fc1 through a group: fc1 stays, fc2 moves.
    grouped = onyx.TrainingSession(str(MLP / "model.onnx"), optimizer="sgd", lr=0.1, threads=1,
                                   param_groups=[{"match": "^fc1\\.", "lr": 0.0}])
    fc1, fc2 = grouped.parameter("fc1.weight").copy(), grouped.parameter("fc2.weight").copy()
    grouped.train_step(batch(data, 0))
    np.testing.assert_array_equal(grouped.parameter("fc1.weight"), fc1)
    assert not np.array_equal(grouped.parameter("fc2.weight"), fc2)


def test_accumulation_and_clipping(data):
    ts = onyx.TrainingSession(str(MLP / "model.onnx"), optimizer="sgd", lr=0.1, threads=1,
                              accumulation_steps=2, clip_norm=0.5)
    first = ts.train_step_detailed(batch(data, 0))
    second = ts.train_step_detailed(batch(data, 1))
    assert not first["stepped"] and second["stepped"] and ts.step == 1


def test_bad_configs_and_batches_raise_onyx_error(data, tmp_path):
    path = str(MLP / "model.onnx")
    with pytest.raises(onyx.Error, match="rmsprop"):
        onyx.TrainingSession(path, optimizer="rmsprop")
    with pytest.raises(onyx.Error, match="hinge"):
        onyx.TrainingSession(path, loss="hinge")
    with pytest.raises(onyx.Error, match="nothing_matches_this"):
        onyx.TrainingSession(path, freeze=["nothing_matches_this"])
    with pytest.raises(onyx.Error):
        onyx.TrainingSession(str(tmp_path / "missing.onnx"))
    with pytest.raises(TypeError):
        onyx.TrainingSession(path, param_groups=["fc1"])
    ts = onyx.TrainingSession(path, optimizer="sgd", lr=0.1, threads=1)
    with pytest.raises(onyx.Error, match="labels"):
        ts.train_step({"x": data[0][0]})
    with pytest.raises(onyx.Error, match="float"):
        ts.train_step({"x": data[0][0].astype(np.float64), "labels": data[1][0]})
    with pytest.raises(onyx.Error):
        ts.load_checkpoint(str(tmp_path / "missing.onyx"))
    assert ts.step == 0  # nothing above changed the session
    assert np.isfinite(ts.train_step(batch(data, 0)))
