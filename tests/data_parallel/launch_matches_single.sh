#!/usr/bin/env bash
# The command-line data-parallel path against one process: `onyx launch -n 2 -- onyx train
# --batch 8` must train a dropout-free MLP as `onyx train --batch 16` does (each global batch
# is the same 16 samples, the gradients' mean over ranks is the mean over the 16), so after
# 128 AdamW steps the exported weights agree within 1e-4 relative (float sums in another order
# only; by hand: 1.4e-6 after 132 steps).
#   launch_matches_single.sh ONYX PYTHON TRAIN_DIR
set -euo pipefail
ONYX=$(readlink -f "$1"); PYTHON=$2; DATA=$(readlink -f "$3")
WORK=$(mktemp -d); trap 'rm -rf "$WORK"' EXIT
fail() { echo "launch_matches_single: $*"; exit 1; }

# The MLP of tools/gen_train_models.py without its Dropout, and the first 256 digits (16
# global batches of 16, none partial: data-parallel runs drop an epoch's partial batch).
"$PYTHON" - "$DATA" "$WORK" <<'PY'
import sys, numpy as np, onnx
from onnx import helper, numpy_helper, TensorProto
data, work = sys.argv[1], sys.argv[2]
rng = np.random.default_rng(0)
def linear(name, n_in, n_out):
    bound = 1 / np.sqrt(n_in)
    return [numpy_helper.from_array(rng.uniform(-bound, bound, s).astype(np.float32), f"{name}.{p}")
            for p, s in (("weight", (n_out, n_in)), ("bias", (n_out,)))]
nodes = [helper.make_node("Gemm", ["x", "fc1.weight", "fc1.bias"], ["h"], transB=1),
         helper.make_node("Relu", ["h"], ["a"]),
         helper.make_node("Gemm", ["a", "fc2.weight", "fc2.bias"], ["logits"], transB=1)]
graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 64])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])],
                          linear("fc1", 64, 32) + linear("fc2", 32, 10))
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
onnx.save(model, f"{work}/mlp.onnx")
import os
os.makedirs(f"{work}/train")
for f in ("x.npy", "labels.npy"):
    np.save(f"{work}/train/{f}", np.load(f"{data}/{f}")[:256])
PY

export OMP_NUM_THREADS=1
common=(--data "$WORK/train" --epochs 8 --lr 0.003 --threads 1 --no-progress)
"$ONYX" train "$WORK/mlp.onnx" "${common[@]}" --batch 16 --export "$WORK/single.onnx" \
  > "$WORK/single.log" 2>&1 || fail "single process failed: $(cat "$WORK/single.log")"
"$ONYX" launch -n 2 -- onyx train "$WORK/mlp.onnx" "${common[@]}" --batch 8 \
  --export "$WORK/dp.onnx" > "$WORK/dp.log" 2>&1 || fail "2 ranks failed: $(cat "$WORK/dp.log")"
grep -q "rank 1/2" "$WORK/dp.log" || fail "the launch did not run 2 ranks: $(cat "$WORK/dp.log")"

"$PYTHON" - "$WORK/single.onnx" "$WORK/dp.onnx" "$WORK/mlp.onnx" <<'PY'
import sys, numpy as np, onnx
from onnx import numpy_helper
single, dp, start = ({t.name: numpy_helper.to_array(t) for t in onnx.load(p).graph.initializer}
                     for p in sys.argv[1:4])
worst = 0.0
for name, w in single.items():
    rel = float(np.abs(dp[name] - w).max() / np.abs(w).max())
    moved = float(np.abs(w - start[name]).max() / np.abs(start[name]).max())
    print(f"launch_matches_single: {name}: relative difference {rel:.2e} (training moved it {moved:.2e})")
    if moved < 1e-2:
        sys.exit(f"launch_matches_single: FAIL: {name} barely trained; the comparison would prove nothing")
    worst = max(worst, rel)
if worst > 1e-4:
    sys.exit(f"launch_matches_single: FAIL: 2 ranks x --batch 8 differ from --batch 16 by {worst:.2e} > 1e-4")
print(f"launch_matches_single: PASS (largest relative difference {worst:.2e})")
PY
