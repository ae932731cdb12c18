#include "distributed/data_parallel.h"

#include <algorithm>
#include <cstring>

#include "graph/error.h"
#include "graph/hash.h"

namespace onyx::dist {

GradientBuckets::GradientBuckets(Communicator& comm, Tensor flat, std::vector<GradSlice> slices,
                                 BucketConfig config)
    : comm_(comm), flat_(std::move(flat)), slices_(std::move(slices)) {
  ONYX_CHECK(flat_.dtype() == DataType::Float, "[data_parallel] the gradient buffer should be float32 "
             "but is {}", dtype_name(flat_.dtype()));
  ONYX_CHECK(config.first_bucket_bytes > 0 && config.bucket_bytes > 0,
             "[data_parallel] bucket sizes should be positive ({} and {} bytes given)",
             config.first_bucket_bytes, config.bucket_bytes);
  int64_t end = 0;
  for (const auto& s : slices_) {
    ONYX_CHECK(s.offset >= end && s.size >= 0 && s.offset + s.size <= flat_.numel(),
               "[data_parallel] gradient slice [{}, {}) is out of order or outside the buffer of {} "
               "elements", s.offset, s.offset + s.size, flat_.numel());
    end = s.offset + s.size;
  }
  // Greedy packing in production order: the first bucket up to first_bucket_bytes, then
  // up to bucket_bytes. A bucket spans from its first slice to its last (padding included).
  bucket_of_.resize(slices_.size());
  size_t i = 0;
  while (i < slices_.size()) {
    int64_t cap = (buckets_.empty() ? config.first_bucket_bytes : config.bucket_bytes) / 4;
    Bucket b;
    b.first = i;
    b.offset = slices_[i].offset;
    do {
      bucket_of_[i] = buckets_.size();
      ++i;
    } while (i < slices_.size() && slices_[i].offset + slices_[i].size - b.offset <= cap);
    b.last = i;
    // The last bucket also covers the buffer's tail padding, so one allreduce touches it all.
    int64_t stop = i < slices_.size() ? slices_[i].offset : flat_.numel();
    b.size = stop - b.offset;
    b.missing = b.last - b.first;
    buckets_.push_back(b);
  }
  ready_.assign(slices_.size(), false);
}

std::vector<std::pair<size_t, size_t>> GradientBuckets::bucket_ranges() const {
  std::vector<std::pair<size_t, size_t>> r;
  for (const auto& b : buckets_) r.emplace_back(b.first, b.last);
  return r;
}

void GradientBuckets::launch(Bucket& b) {
  Tensor view(DataType::Float, {b.size}, flat_.storage(), flat_.offset() + static_cast<size_t>(b.offset) * 4);
  b.work = comm_.allreduce(view, ReduceOp::Sum);
}

void GradientBuckets::mark_ready(size_t i) {
  ONYX_CHECK(i < slices_.size(), "[data_parallel] gradient index {} is out of range ({} gradients)", i,
             slices_.size());
  if (ready_[i]) return;
  ready_[i] = true;
  --buckets_[bucket_of_[i]].missing;
  // Launch complete buckets strictly in index order so every rank issues the same sequence.
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].missing == 0) launch(buckets_[next_launch_++]);
}

void GradientBuckets::finish() {
  while (next_launch_ < buckets_.size()) launch(buckets_[next_launch_++]);
  std::exception_ptr failure;
  for (auto& b : buckets_) {
    try {
      if (b.work) b.work->wait();
    } catch (...) {
      if (!failure) failure = std::current_exception();
    }
    b.work.reset();
    b.missing = b.last - b.first;
  }
  std::fill(ready_.begin(), ready_.end(), false);
  next_launch_ = 0;
  if (failure) std::rethrow_exception(failure);
}

uint64_t model_fingerprint(const std::vector<std::string>& names, const std::vector<Shape>& shapes) {
  uint64_t h = kFnv1aOffset;
  auto mix = [&](const void* p, size_t n) { h = fnv1a(p, n, h); };
  for (size_t i = 0; i < names.size(); ++i) {
    mix(names[i].data(), names[i].size() + 1);
    for (int64_t d : shapes[i]) mix(&d, sizeof d);
    int64_t sep = -1;
    mix(&sep, sizeof sep);
  }
  return h;
}

uint64_t tensor_checksum(const Tensor& t) { return fnv1a(t.raw(), t.nbytes()); }

namespace {

/// Every rank's value of `v`, gathered.
std::vector<uint64_t> gather_u64(Communicator& comm, uint64_t v) {
  Tensor in = Tensor::from_vector<int64_t>({1}, {static_cast<int64_t>(v)});
  Tensor out = Tensor::zeros(DataType::Int64, {comm.size()});
  comm.allgather(in, out)->wait();
  std::vector<uint64_t> r;
  for (int64_t i = 0; i < comm.size(); ++i) r.push_back(static_cast<uint64_t>(out.data<int64_t>()[i]));
  return r;
}

}  // namespace

void synchronize_start(Communicator& comm, uint64_t fingerprint, Tensor& flat_params,
                       std::vector<Tensor*> state) {
  auto prints = gather_u64(comm, fingerprint);
  for (int r = 1; r < comm.size(); ++r)
    ONYX_CHECK(prints[r] == prints[0], "[data_parallel] rank {} has a different model than rank 0 (its "
               "parameter names or shapes differ); every rank must train the same model", r);
  comm.broadcast(flat_params, 0)->wait();
  for (Tensor* t : state) comm.broadcast(*t, 0)->wait();
  auto sums = gather_u64(comm, tensor_checksum(flat_params));
  for (int r = 1; r < comm.size(); ++r)
    ONYX_CHECK(sums[r] == sums[0], "[data_parallel] after the broadcast, rank {}'s parameters differ "
               "from rank 0's", r);
}

}  // namespace onyx::dist
