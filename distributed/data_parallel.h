// Data-parallel gradient reduction: gradients grouped into buckets over the flat gradient
// buffer, each bucket's allreduce started as soon as its last gradient is produced, while
// backward goes on; the optimizer step waits for all of them.
//
//   GradientBuckets buckets(comm, grads.tensor(), segments_in_production_order, {});
//   // during backward, as gradient i lands in the flat buffer:
//   buckets.mark_ready(i);
//   buckets.finish();   // waits; every rank now holds the sum over ranks
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "distributed/communicator.h"
#include "graph/tensor.h"

namespace onyx::dist {

struct BucketConfig {
  /// The first bucket is small so communication starts early; later ones are capped larger.
  int64_t first_bucket_bytes = 1 << 20;
  int64_t bucket_bytes = 25 << 20;
};

/// One gradient's slice of the flat buffer (elements).
struct GradSlice {
  int64_t offset = 0, size = 0;
};

class GradientBuckets {
 public:
  /// `flat` is the float32 gradient buffer; `slices` are in the order backward produces the
  /// gradients and tile contiguous ranges of it (each bucket is one contiguous range, reduced
  /// in place). onyx::Error when slices are not increasing or fall outside `flat`.
  GradientBuckets(Communicator& comm, Tensor flat, std::vector<GradSlice> slices, BucketConfig config);

  /// Gradient i (index into slices) holds its final local value: launches its bucket's
  /// allreduce (sum) when that was the bucket's last missing gradient.
  void mark_ready(size_t i);
  /// Launches buckets still pending (gradients never produced count as ready: their slice
  /// holds zeros or the accumulated value) and waits for all. Then resets for the next step.
  void finish();

  size_t num_buckets() const { return buckets_.size(); }
  /// Gradient index ranges per bucket, for tests and logs.
  std::vector<std::pair<size_t, size_t>> bucket_ranges() const;

 private:
  struct Bucket {
    size_t first = 0, last = 0;  // gradient indices [first, last)
    int64_t offset = 0, size = 0;
    size_t missing = 0;
    WorkHandle work;
  };
  void launch(Bucket& b);

  Communicator& comm_;
  Tensor flat_;
  std::vector<GradSlice> slices_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;
  std::vector<bool> ready_;
  size_t next_launch_ = 0;  // buckets launch in index order on every rank
};

/// 64-bit fingerprint of parameter names and shapes (equal models give equal values).
uint64_t model_fingerprint(const std::vector<std::string>& names, const std::vector<Shape>& shapes);

/// Before training: checks that every rank has the same model (names and shapes), then
/// copies rank 0's parameters (and any extra state tensors) to all ranks and verifies they
/// are bit-identical. onyx::Error naming the first rank that differs.
void synchronize_start(Communicator& comm, uint64_t fingerprint, Tensor& flat_params,
                       std::vector<Tensor*> state);

/// FNV-1a over a tensor's bytes (for "all ranks hold identical weights" checks).
uint64_t tensor_checksum(const Tensor& t);

}  // namespace onyx::dist
