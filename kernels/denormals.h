// Denormal floats as zero while a session runs: x86's FTZ (results that would be denormal are
// written as zero) and DAZ (denormal operands are read as zero), per thread in MXCSR.
//
// Why: on Intel CPUs every arithmetic operation with a denormal operand or result takes a
// microcode assist, ~100x its normal time. A language model's logits gradient at the start of
// training is mostly such values (softmax of logits hundreds apart), and the products reading
// it ran 100-200x slower: a torch-exported GPT-2-style model's training step took 15.4 s
// instead of 0.91 s on an Intel Xeon (bench/README.md). TensorFlow and XLA flush denormals on
// CPUs by default for the same reason; ONNX Runtime has it as an option.
#pragma once

namespace onyx {

/// Sets FTZ and DAZ on the calling thread and on the OpenMP threads a team of `threads` runs
/// on (oneDNN's and parallel_for's workers), and gives each thread its own previous mode back
/// when destroyed. Scopes nest. Nothing when `on` is false or the CPU is not x86.
class FlushDenormals {
 public:
  FlushDenormals(bool on, int threads);
  ~FlushDenormals();
  FlushDenormals(const FlushDenormals&) = delete;
  FlushDenormals& operator=(const FlushDenormals&) = delete;

  /// True when the calling thread reads and writes denormals as zero now.
  static bool active_here();

 private:
  bool on_;
  int threads_;
};

}  // namespace onyx
