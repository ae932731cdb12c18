// Model bytes -> load (protobuf, validation, shape inference) -> Session (optimizer passes,
// kernel creation, memory plan) -> one run with random feeds of the declared types.
// Seeds: the conformance corpus's model.onnx files (scripts/fuzz.sh collects them).
#include <chrono>
#include <cstdint>
#include <limits>

#include "fuzz_common.h"
#include "inference/session.h"
#include "launcher/feeds.h"

namespace {

// Inputs a run may be fed: a model may declare any fixed size, but making up gigabytes of
// random feed is the harness's cost, not a finding.
constexpr int64_t kMaxFeedElements = int64_t{1} << 20;

bool feedable(const onyx::Session& s) {
  for (onyx::IoInfo in : s.inputs()) {
    // A sequence or optional input is fed elements of its element type.
    while (in.type.inner && in.type.kind != onyx::ValueType::Kind::Tensor) {
      onyx::ValueType inner = *in.type.inner;
      in.type = std::move(inner);
    }
    if (!in.type.shape) continue;
    int64_t n = 1;
    for (int64_t d : onyx::cli::concrete_shape(in, {}, 2)) {
      if (d < 0 || (d > 0 && n > kMaxFeedElements / d)) return false;
      n *= d;
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  onyx::SessionOptions options;
  options.intra_op_threads = 1;
  options.log_level = "off";
  // The last byte picks the optimization level, so fused and unfused kernels both see input.
  if (size > 0) options.opt_level = static_cast<onyx::OptLevel>(data[size - 1] % 4);
  try {
    onyx::Session session = onyx::Session::from_bytes(data, size, options);
    if (!feedable(session)) return 0;
    onyx::NamedValues feeds = onyx::cli::make_feeds(session, {}, /*random=*/true, {}, /*batch=*/2,
                                                    /*seed=*/size);
    // A model may legitimately never finish (a Loop whose condition stays true): the run is
    // cancelled well before libFuzzer's 30 s timeout, which would report it as a hang.
    onyx::RunOptions ro;
    ro.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    session.run_values(feeds, {}, ro);
  } catch (const onyx::Error&) {
  }
  return 0;
}
