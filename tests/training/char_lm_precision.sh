#!/bin/sh
# Trains the char-LM example in float32 and in bf16 mixed precision (same seed, same windows)
# and requires both to learn (train_char_lm's own check) and the bf16 held-out loss to be
# within 2% of float32's.
#   char_lm_precision.sh TRAIN_CHAR_LM MODEL.onnx TEXT [STEPS]
set -eu
exe=$1 model=$2 text=$3 steps=${4:-300}
held_out() { sed -n 's/^held-out loss after training: \([0-9.]*\) nats.*/\1/p'; }
"$exe" "$model" "$text" "$steps" fp32 > fp32.log || { cat fp32.log; exit 1; }
cat fp32.log
"$exe" "$model" "$text" "$steps" bf16 > bf16.log || { cat bf16.log; exit 1; }
cat bf16.log
f=$(held_out < fp32.log) b=$(held_out < bf16.log)
awk -v f="$f" -v b="$b" 'BEGIN {
  d = (b - f) / f; if (d < 0) d = -d
  printf "held-out loss: float32 %s, bf16 %s: %.2f%% apart (at most 2%%)\n", f, b, 100 * d
  exit !(f > 0 && d <= 0.02) }'
