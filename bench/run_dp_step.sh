#!/usr/bin/env bash
# Data-parallel step time: one process (2 threads, global batch) next to 2 ranks (1 thread
# each, half the batch each) with the gradient allreduce overlapped with backward (small
# buckets) and not overlapped (one bucket after backward). Digits MLP and CNN, medians of
# the per-step times `onyx train --metrics` records on rank 0.
#   bench/run_dp_step.sh [BATCH_PER_RANK]
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
median_ms() {  # median_ms METRICS SAMPLES_PER_STEP: median ms per optimizer step
  "$PY" - "$1" "$2" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"step"' in l]
ms = [1000 * int(sys.argv[2]) / r["samples_per_s"] for r in rows if r.get("type") == "step"]
print(f"{statistics.median(ms[2:]):.2f}")
PY
}
echo "| model | setup | global batch | median ms/step | vs 1 process |"
echo "|---|---|---|---|---|"
for model in mlp cnn; do
  data=$DIR/train
  [ "$model" = cnn ] && [ -d "$DIR/train_img" ] && data=$DIR/train_img
  common=(--data "$data" --epochs 2 --no-progress --shuffle --seed 1 --lr 0.001)
  "$ONYX" train "$DIR/digits_$model.onnx" "${common[@]}" --batch $((2 * B)) --threads 2 \
    --metrics "$DIR/m1.jsonl" --export "$DIR/out1.onnx" >/dev/null
  one=$(median_ms "$DIR/m1.jsonl" $((2 * B)))
  echo "| $model | 1 process x 2 threads | $((2 * B)) | $one | 1.00 |"
  for mode in overlap no-overlap; do
    if [ $mode = overlap ]; then buckets=(--first-bucket-kb 4 --bucket-kb 16);
    else buckets=(--first-bucket-kb 1000000 --bucket-kb 1000000); fi
    OMP_NUM_THREADS=1 "$ONYX" launch -n 2 -- onyx train "$DIR/digits_$model.onnx" "${common[@]}" \
      --batch "$B" --threads 1 "${buckets[@]}" --metrics "$DIR/m2.jsonl" \
      --export "$DIR/out2.onnx" >/dev/null
    two=$(median_ms "$DIR/m2.jsonl" "$B")
    ratio=$("$PY" -c "print(f'{$two / $one:.2f}')")
    echo "| $model | 2 ranks x 1 thread, $mode | $((2 * B)) | $two | $ratio |"
  done
done
