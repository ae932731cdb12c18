#!/usr/bin/env bash
# Data-parallel step time: one process (2 threads, global batch) next to 2 ranks (1 thread
# each, half the batch each) with the gradient allreduce overlapped with backward (buckets
# sent while backward runs) and not overlapped (one bucket after backward). Digits MLP and CNN
# (0.1-0.2 MB of gradients) and the training bench's ResNet-18 (47 MB) and BERT-small (114 MB,
# 62 MB of it the word embedding, whose gradient backward produces last), medians of the
# per-step times and of the exposed allreduce wait (`comm_wait_ms`) that `onyx train --metrics`
# records on rank 0; "hidden" = 1 - overlapped wait / non-overlapped wait.
#   bench/run_dp_step.sh [BATCH_PER_RANK] [MODEL...]   # models: mlp cnn resnet18 bert
#                                                      # (default all); the batch is the digits
#                                                      # models' (the others have their own)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-16}
BUILD=${ONYX_BUILD_DIR:-build}
PY=${ONYX_VENV:-.venv}/bin/python
ONYX=$BUILD/launcher/onyx
DIR=bench/models/dp
mkdir -p "$DIR"
[ -f "$DIR/digits_cnn.onnx" ] || "$PY" tools/gen_train_models.py --out "$DIR" >/dev/null
[ -d "$DIR/train" ] || "$PY" tools/prepare_digits.py --out "$DIR" >/dev/null
median() {  # median METRICS FIELD SAMPLES_PER_STEP: median over steps (first two skipped)
  "$PY" - "$1" "$2" "$3" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"step"' in l]
rows = [r for r in rows if r.get("type") == "step"][2:]
if sys.argv[2] == "ms":
    v = [1000 * int(sys.argv[3]) / r["samples_per_s"] for r in rows]
else:
    v = [r[sys.argv[2]] for r in rows]
print(f"{statistics.median(v):.2f}")
PY
}
shift $(( $# > 0 ? 1 : 0 ))
models=("$@")
[ ${#models[@]} -gt 0 ] || models=(mlp cnn resnet18 bert)
echo "| model | setup | global batch | median ms/step | vs 1 process | median allreduce wait ms | hidden |"
echo "|---|---|---|---|---|---|---|"
for model in "${models[@]}"; do
  case $model in
    bert|resnet18)
      # The training bench's models (BERT-small: 28.6 M parameters, ResNet-18 at 64x64: 11.7 M)
      # on 64 samples drawn from its batch. Their batch is static: b per rank.
      [ -f bench/models/train/$model/model.onnx ] ||
        "$PY" bench/gen_train_bench_models.py --only "$model" >/dev/null
      onnx_model=bench/models/train/$model/model.onnx
      data=$DIR/${model}_data
      [ -f "$data/labels.npy" ] || "$PY" - "bench/models/train/$model" "$data" <<'PY'
import json, os, sys
import numpy as np, onnx
from onnx import numpy_helper
src, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
meta = json.load(open(f"{src}/meta.json"))
def load(name):
    t = onnx.TensorProto()
    t.ParseFromString(open(f"{src}/{name}.pb", "rb").read())
    return numpy_helper.to_array(t)
pick = np.random.default_rng(0).integers(0, meta["batch"], 64)
for name in meta["inputs"] + [meta["labels"]]:
    np.save(f"{out}/{name}.npy", load(name)[pick])
PY
      b=$("$PY" -c "import json; print(json.load(open('bench/models/train/$model/meta.json'))['batch'])")
      epochs=$(( b / 2 > 2 ? b / 2 : 2 )) ;;  # 64 / (2 b) steps per epoch: 16 steps
    mlp|cnn)
      onnx_model=$DIR/digits_$model.onnx
      data=$DIR/train
      [ "$model" = cnn ] && [ -d "$DIR/train_img" ] && data=$DIR/train_img
      epochs=2 b=$B ;;
    *) echo "run_dp_step: unknown model $model (mlp, cnn, resnet18, bert)" >&2; exit 1 ;;
  esac
  common=(--data "$data" --epochs "$epochs" --no-progress --shuffle --seed 1 --lr 0.001)
  one=""
  if [ ! -f "bench/models/train/$model/meta.json" ]; then  # static batches: no global batch in one process
    "$ONYX" train "$onnx_model" "${common[@]}" --batch $((2 * b)) --threads 2 \
      --metrics "$DIR/m1.jsonl" --export "$DIR/out1.onnx" >/dev/null
    one=$(median "$DIR/m1.jsonl" ms $((2 * b)))
    echo "| $model | 1 process x 2 threads | $((2 * b)) | $one | 1.00 | | |"
  fi
  declare -A wait=()
  for mode in no-overlap overlap; do
    if [ $mode = overlap ]; then
      # The digits models' gradients fit one default bucket: small ones make them overlap.
      if [ -f "bench/models/train/$model/meta.json" ]; then buckets=();
      else buckets=(--first-bucket-kb 4 --bucket-kb 16); fi
    else buckets=(--first-bucket-kb 1000000 --bucket-kb 1000000); fi
    OMP_NUM_THREADS=1 "$ONYX" launch -n 2 -- onyx train "$onnx_model" "${common[@]}" \
      --batch "$b" --threads 1 ${buckets[@]+"${buckets[@]}"} --metrics "$DIR/m2.jsonl" \
      --export "$DIR/out2.onnx" >/dev/null
    two=$(median "$DIR/m2.jsonl" ms "$b")
    wait[$mode]=$(median "$DIR/m2.jsonl" comm_wait_ms 0)
    ratio=""
    [ -z "$one" ] || ratio=$("$PY" -c "print(f'{$two / $one:.2f}')")
    hidden=""
    [ $mode = overlap ] && hidden=$("$PY" -c "
n, o = ${wait[no-overlap]}, ${wait[overlap]}
print(f'{1 - o / n:.0%}' if n > 0 else '')")
    echo "| $model | 2 ranks x 1 thread, $mode | $((2 * b)) | $two | $ratio | ${wait[$mode]} | $hidden |"
  done
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
