// The denormal mode of a training step's update passes. Not an installed header: it names a
// kernels/ type, and the installed optimizer.h stays free of kernels/.
#pragma once

#include "kernels/denormals.h"

namespace onyx::optim {

/// Denormal floats read and written as zero (x86 FTZ/DAZ) on the calling thread and `threads`
/// OpenMP workers while it lives: the scope a training step opens around its update passes
/// (gradient norm and checks, unscaling, clipping, the step) when it flushes denormals in its
/// graph's runs too (TrainingConfig::flush_denormals), as torch.set_flush_denormal(True) does for
/// a whole process. Why: AdamW's moments of a language model's rarely hit rows (the LM head, the
/// token table) sink into denormals, and each operation on one takes a microcode assist; the
/// GPT-2-style export's step over 21.5 M parameters took 30-32 ms instead of 14-17 (2 threads,
/// Xeon). A moment below 1.2e-38 moves a weight by less than 1e-30 (eps is 1e-8), so flushing
/// it changes nothing a model can see.
using DenormalsAsZero = FlushDenormals;

}  // namespace onyx::optim
