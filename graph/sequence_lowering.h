// Tensor sequences that only exist to be indexed: the dynamo exporter (unoptimized) writes
// torch.split / chunk / unbind as SplitToSequence read by SequenceAt with constant
// positions. Autodiff has no gradient for a sequence; each read piece is a Slice (or a
// Gather for unbind's squeezed pieces), which has one.
#pragma once

#include "graph/ir.h"

namespace onyx {

/// In `g` (main graph only), replaces every SplitToSequence whose readers are all SequenceAt
/// with a known constant position (and SequenceLength, when the piece count is known) by one
/// Slice or Gather per read, then drops the sequence nodes. Sequences read any other way, or
/// listed as graph outputs, and positions that need an unknown dim (a negative position with a
/// scalar split over a dim shape inference could not fix) are left as they are. Expects shape
/// inference to have run. Returns how many SplitToSequence nodes were lowered.
int lower_indexed_sequences(Graph& g);

}  // namespace onyx
